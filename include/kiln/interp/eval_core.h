// Kernel-graph evaluation, generic over the value domain: the one traversal that the float
// interpreter (interp.h) and the finite-field verifier instantiate.
//
// A kernel graph is evaluated op by op in its (topological) order. A predefined op applies the
// op-class function of tensor_ops.h to whole device tensors, then D::round_store with the
// result tensor's dtype to every element; a graph-defined op runs its block graph through
// BlockWalker (block_walk.h), whose savers round on store. Tensors are dropped after their last
// use. An EvalPlan restricts the work to what some rows of the outputs need (partial
// evaluation, see plan_rows).
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "kiln/interp/block_walk.h"
#include "kiln/interp/interp.h"
#include "kiln/interp/tensor_ops.h"
#include "kiln/ir/deadline.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln::interp {

// What a partial evaluation computes. Every vector is indexed like KernelGraph::tensors (resp.
// ::ops); an evaluation with a plan computes at least the flagged rows of every needed tensor,
// and the unflagged rows hold unspecified values.
struct EvalPlan {
  std::vector<uint8_t> needed;               // per tensor: computed at all
  std::vector<RowMask> rows;                 // per tensor: rows needed (empty: every row)
  std::vector<std::vector<uint8_t>> blocks;  // per kernel op: grid blocks to run (empty: all)
};

// Plans the evaluation of rows[i] (row indices, see num_rows) of output g.outputs[i]; an
// output with no rows listed is not computed. Needs are propagated backwards op by op:
//   matmul       rows of A under the batch broadcast; all of B for the batches used
//   elementwise  the same rows under NumPy broadcast
//   reduce       the rows holding the reduced elements of each needed output element
//   softmax      the same rows along the last dim; whole lines along any other dim
//   rms_norm     the same rows of x; all of w
//   transpose    the rows holding each needed element
//   graph-defined  the blocks whose saved tiles meet a needed row, and every row of every input
//                  tile those blocks load in any iteration
// Throws UserError(Shape) on a row index out of range.
EvalPlan plan_rows(const KernelGraph& g, const std::vector<std::vector<int64_t>>& rows);

// Evaluates g in domain d on `inputs` (one per g.inputs, in order, shapes as in g; the caller
// has already put them into d, e.g. rounded to their dtypes) and returns g's outputs in order.
// With a plan, only what the plan asks is computed.
// `rounding` (may be empty) lists matmul operands to pass through D::round_store (interp.h's
// OperandRounding; a no-op in domains whose round_store is the identity).
// Throws DeadlinePassed before an op once `deadline` has passed (one op's work is the caller's to
// bound: the float check and the verifier size their samples by the time left).
template <ValueDomain D>
std::vector<Tensor<typename D::V>> evaluate_graph(const D& d, const KernelGraph& g,
                                                  std::vector<Tensor<typename D::V>> inputs,
                                                  const EvalPlan* plan = nullptr,
                                                  std::span<const OperandRounding> rounding = {},
                                                  const Deadline& deadline = {}) {
  using T = Tensor<typename D::V>;
  KILN_ASSERT(inputs.size() == g.inputs.size(), "{} inputs for {}", inputs.size(), g.inputs.size());
  const size_t nt = g.tensors.size();
  std::vector<T> val(nt);
  std::vector<int> last_use(nt, -1);
  std::vector<uint8_t> keep(nt, 0);
  for (int t : g.outputs) keep[t] = 1;
  for (size_t i = 0; i < g.ops.size(); ++i)
    for (int t : g.ops[i].inputs) last_use[t] = static_cast<int>(i);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.inputs[i]);
    KILN_ASSERT(inputs[i].shape == t.shape, "input {} is {}, expected {}", t.name,
                shape_str(inputs[i].shape), shape_str(t.shape));
    val[g.inputs[i]] = std::move(inputs[i]);
  }
  const Exec ex{true};
  std::vector<const T*> args;
  for (size_t oi = 0; oi < g.ops.size(); ++oi) {
    const KernelOp& op = g.ops[oi];
    bool needed = !plan;
    for (int t : op.outputs) needed |= plan && plan->needed[t];
    if (needed) {
      deadline.check();
      args.clear();
      for (int t : op.inputs) args.push_back(&val[t]);
      if (op.kind == OpKind::GraphDefined) {
        std::vector<T*> outs;
        for (int t : op.outputs) {
          val[t] = T(g.tensor(t).shape);
          outs.push_back(&val[t]);
        }
        static const std::vector<uint8_t> all;
        BlockWalker<D> walker(d, *op.block);
        for (const OperandRounding& r : rounding)
          if (r.kernel_op == static_cast<int>(oi))
            walker.round_operand(r.block_op, r.operand, r.dtype, r.row_scaled);
        walker.run(std::span<const T* const>(args), std::span<T* const>(outs),
                   plan ? plan->blocks[oi] : all, true);
      } else {
        const int t = op.outputs.at(0);
        static const RowMask all;
        T& out = val[t];
        const RowMask& rows = plan ? plan->rows[t] : all;
        apply_op(d, op.kind, op.attrs, std::span<const T* const>(args), out, ex, rows);
        KILN_ASSERT(out.shape == g.tensor(t).shape, "{}: computed {}, expected {}", op.name,
                    shape_str(out.shape), shape_str(g.tensor(t).shape));
        const DType dt = g.tensor(t).dtype;
        const int64_t cols = num_cols(out.shape);
        for_rows(ex, num_rows(out.shape), cols, rows, [&](int64_t r) {
          for (int64_t j = r * cols; j < (r + 1) * cols; ++j)
            out.data[j] = d.round_store(out.data[j], dt);
        });
      }
    }
    for (int t : op.inputs)
      if (last_use[t] == static_cast<int>(oi) && !keep[t]) val[t] = T();
  }
  // Moved out, not copied (a copy would commit every page of a partially computed tensor); a
  // tensor listed twice is copied for all but its last listing.
  std::vector<T> outs;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int t = g.outputs[i];
    if (std::find(g.outputs.begin() + static_cast<std::ptrdiff_t>(i) + 1, g.outputs.end(), t) !=
        g.outputs.end())
      outs.push_back(val[t]);
    else
      outs.push_back(std::move(val[t]));
  }
  return outs;
}

}  // namespace kiln::interp
