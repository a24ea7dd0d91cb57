// The float check that predicts the GPU (float_model.h).
#include "kiln/search/float_model.h"

#include "kiln/codegen/lowerings.h"
#include "kiln/ir/target.h"

namespace kiln::search {

std::vector<OperandRounding> schedule_narrowings(const KernelGraph& g, const Schedule& s) {
  std::vector<OperandRounding> r;
  for (const KernelPlan& kp : s.kernels) {
    if (!kp.block || kp.op < 0 || g.ops.at(kp.op).kind != OpKind::GraphDefined) continue;
    const BlockSchedule& b = *kp.block;
    // The attention lowering's online form holds P relative to its running row max.
    const AttentionKernel* attn = kp.as<AttentionKernel>();
    const int scaled_op = attn && attn->a.online ? attn->a.pv_op : -1;
    for (size_t i = 0; i < b.tiles.size(); ++i) {
      const MmaPlan& m = b.tiles[i].mma;
      if (!m.use || !m.lossy) continue;
      for (int j = 0; j < 2; ++j)
        r.push_back(
            {kp.op, static_cast<int>(i), j, m.dtype, static_cast<int>(i) == scaled_op && j == 0});
    }
  }
  return r;
}

verifier::FloatCheckOptions gpu_float_check_options(const KernelGraph& cand, bool selections_matter,
                                                    int threads) {
  verifier::FloatCheckOptions fo;
  fo.threads = threads;
  fo.candidate_f32 = true;
  fo.operand_rounding = schedule_narrowings(cand, plan_schedule(cand, target_for(cand.arch)));
  fo.input_stds = {0.0, 1.0};
  fo.signed_inputs = selections_matter;
  return fo;
}

}  // namespace kiln::search
