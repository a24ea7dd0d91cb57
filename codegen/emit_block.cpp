// Emission of one graph-defined op as a CUDA kernel, implementing its block graph exactly as
// block_graph.h specifies, with the placement and order its BlockSchedule decided.
//
// Kernel shape: input tiles are copied into shared memory (invariant tiles once, loop tiles
// through a cp.async ring of `pipeline_stages` stages prefetched ahead), then the schedule's
// steps run: each Compute/Accumulate/Save step loops over the elements of its tile in its
// distribution (strided elements, lane groups that reduce with shuffles, or the mma.sync fragment
// layout), computes the tile's expression (inline ops, at most one matmul/reduction root) and
// stores, accumulates into registers, or writes device memory.
#include <algorithm>
#include <functional>

#include "emit_internal.h"
#include "kiln/ir/diag.h"

namespace kiln::cgen {

namespace {


class BlockEmitter {
 public:
  BlockEmitter(const KernelGraph& g, const KernelOp& kop, const KernelPlan& kp)
      : g_(g),
        kop_(kop),
        kp_(kp),
        bg_(kp.block->retiled ? *kp.block->retiled : *kop.block),
        bs_(*kp.block),
        T_(bg_.block_threads) {}

  void emit(Code& out) {
    const int S = bs_.pipeline_stages;
    // Signature.
    std::vector<std::string> params;
    for (size_t i = 0; i < bg_.inputs.size(); ++i)
      params.push_back(fmt::format("const {}* __restrict__ in{}", ctype(bg_.inputs[i].dtype), i));
    for (size_t i = 0; i < bg_.outputs.size(); ++i)
      params.push_back(fmt::format("{}* __restrict__ out{}", ctype(bg_.outputs[i].dtype), i));
    if (bs_.global_bytes_per_block > 0) params.push_back("float* __restrict__ kiln_scratch");
    out.f("// {}: block graph {} x {} threads, {} iteration(s), {} B shared memory", kp_.kernel,
          shape_str(bg_.grid), T_, bg_.num_iterations(), bs_.smem_bytes);
    out.f("constexpr int kSmem_{} = {};", kp_.kernel, bs_.smem_bytes);
    out.f("static_assert(kSmem_{} <= {}, \"{}: shared memory over the {} budget\");", kp_.kernel,
          bs_.smem_budget, kp_.kernel, target_for(g_.arch).name);
    out.open(fmt::format("__global__ void __launch_bounds__({}) {}({}) {{", T_, kp_.kernel,
                         fmt::join(params, ", ")));
    c_ = &out;
    c_->line("extern __shared__ __align__(128) unsigned char kiln_smem[];");
    c_->line("const int tid = threadIdx.x;");
    c_->line("(void)tid;");
    bool wide = false;
    for (const TilePlan& t : bs_.tiles) wide |= t.dist.kind == DistKind::Group && t.dist.group > 32;
    if (wide) c_->line("__shared__ float kiln_red[32];  // cross-warp reductions (groups > 32)");
    const char* bid[3] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};
    for (size_t d = 0; d < bg_.grid.size(); ++d) c_->f("const int g{} = {};", d, bid[d]);
    if (bs_.global_bytes_per_block > 0)
      c_->f(
          "float* const kiln_gs = kiln_scratch + (int64_t)((blockIdx.z * gridDim.y + "
          "blockIdx.y) * gridDim.x + blockIdx.x) * {};",
          bs_.global_bytes_per_block / 4);
    declare_tiles();
    declare_fused();
    declare_accumulators();
    declare_loads();
    // Pre: invariant loads, then the prologue of the loop-input ring.
    bool any_inv = false, any_loop = false;
    for (size_t i = 0; i < bg_.ops.size(); ++i)
      if (bg_.ops[i].kind == OpKind::Input) {
        if (bg_.ops[i].stage == Stage::Loop)
          any_loop = true;
        else
          any_inv = true, c_->f("load_{}();", bg_.ops[i].name);
      }
    if (any_inv) c_->line("kiln::rt::cp_async_commit();");
    const int64_t NIT = bg_.num_iterations();
    const int U = bs_.coarsen;    // iterations per stage
    const int64_t NCH = NIT / U;  // stages of the ring the loop walks
    // Issues the copies of stage `ch` (an expression) into ring slot `slot`.
    auto load_stage = [&](const std::string& ch, const std::string& slot) {
      for (size_t i = 0; i < bg_.ops.size(); ++i)
        if (bg_.ops[i].kind == OpKind::Input && bg_.ops[i].stage == Stage::Loop) {
          if (U == 1)
            c_->f("load_{}({}, {});", bg_.ops[i].name, ch, slot);
          else
            c_->f("for (int u = 0; u < {0}; ++u) load_{1}(({2}) * {0} + u, ({3}) * {0} + u);", U,
                  bg_.ops[i].name, ch, slot);
        }
    };
    if (any_loop && S >= 2) {
      c_->line("#pragma unroll");
      c_->open(fmt::format("for (int s = 0; s < {}; ++s) {{", S - 1));
      c_->open(fmt::format("if (s < {}) {{", NCH));
      load_stage("s", "s");
      c_->close();
      c_->line("kiln::rt::cp_async_commit();");
      c_->close();
    }
    bool pre_waited = false;
    for (const Step& st : bs_.steps)
      if (st.phase == Phase::Pre) {
        if (st.kind == StepKind::Barrier && !pre_waited) {
          c_->f("kiln::rt::cp_async_wait<{}>();", any_loop && S >= 2 ? S - 1 : 0);
          pre_waited = true;
        }
        emit_step(st);
      }
    // A fragments that stay in registers for the whole loop: loaded once the invariant tiles
    // have landed.
    bool any_hoisted = false;
    for (size_t i = 0; i < bg_.ops.size(); ++i)
      if (tp(i).mma.use && tp(i).mma.a_hoisted) {
        if (!any_hoisted && !pre_waited) {
          c_->f("kiln::rt::cp_async_wait<{}>();  // the invariant tiles",
                any_loop && S >= 2 ? S - 1 : 0);
          c_->line("__syncthreads();");
        }
        any_hoisted = true;
        const Distribution* d = mma_distribution(bs_, static_cast<int>(i));
        KILN_ASSERT(d, "hoisted matmul {} has no mma distribution", nm(i));
        emit_hoisted_a(static_cast<int>(i), *d);
      }
    // The loop, one ring stage (U iterations) per trip.
    c_->open(fmt::format("for (int ic = 0; ic < {}; ++ic) {{", NCH));
    if (any_loop && S >= 2) {
      c_->f("kiln::rt::cp_async_wait<{}>();", S - 2);
      c_->line("__syncthreads();");
      c_->open("{");
      c_->f("const int nx = ic + {};", S - 1);
      c_->open(fmt::format("if (nx < {}) {{", NCH));
      load_stage("nx", fmt::format("nx % {}", S));
      c_->close();
      c_->line("kiln::rt::cp_async_commit();");
      c_->close();
    } else if (any_loop) {
      c_->line("__syncthreads();");
      load_stage("ic", "0");
      c_->line("kiln::rt::cp_async_commit();");
      c_->line("kiln::rt::cp_async_wait<0>();");
      c_->line("__syncthreads();");
    } else {
      c_->line(any_inv && !pre_waited ? "kiln::rt::cp_async_wait<0>();" : "");
      c_->line("__syncthreads();");
    }
    if (U > 1) {
      // Unrolled: the iterations of a stage are independent up to their accumulators, and
      // the compiler interleaves their fragment loads and mma chains (gqa bs16: 54.9 -> 52.5 us).
      c_->line("#pragma unroll");
      c_->open(fmt::format("for (int u = 0; u < {}; ++u) {{", U));
      c_->f("const int it = ic * {} + u;", U);
    } else {
      c_->open("{");
      // The iteration number is read only by the loop indices of dims with range > 1.
      if (std::any_of(bg_.loop.begin(), bg_.loop.end(), [](int64_t r) { return r > 1; }))
        c_->line("const int it = ic;");
    }
    emit_loop_indices("it", "l");
    for (size_t i = 0; i < bg_.ops.size(); ++i) {
      const BlockOp& o = bg_.ops[i];
      if (o.kind == OpKind::Input && o.stage == Stage::Loop)
        c_->f("const {}* c_{} = s_{} + ((ic % {}) * {} + {}) * {};", ctype(bg_.inputs[o.io].dtype),
              o.name, o.name, S, U, U > 1 ? "u" : "0",
              bs_.tiles[i].bytes / dtype_bytes(bg_.inputs[o.io].dtype));
    }
    for (const Step& st : bs_.steps)
      if (st.phase == Phase::Loop) emit_step(st);
    c_->close();
    c_->close();
    c_->line("kiln::rt::cp_async_wait_all();");
    for (const auto& [a, dr] : quad_pending_) finish_quad(a, dr);
    for (const Step& st : bs_.steps)
      if (st.phase == Phase::Post) emit_step(st);
    out.close();
    out.line("");
  }

 private:
  const BlockOp& op(int i) const { return bg_.ops[i]; }
  const TilePlan& tp(int i) const { return bs_.tiles[i]; }
  OpClass cls(int i) const { return op_info(op(i).kind).cls; }
  const std::string& nm(int i) const { return op(i).name; }

  std::string tmp() { return fmt::format("v{}", tmp_++); }

  // ---- declarations --------------------------------------------------------------------------
  void declare_tiles() {
    for (size_t i = 0; i < bg_.ops.size(); ++i) {
      const TilePlan& t = tp(i);
      const BlockOp& o = op(i);
      if (o.kind == OpKind::Input) {
        c_->f("{}* const s_{} = reinterpret_cast<{}*>(kiln_smem + {});",
              ctype(bg_.inputs[o.io].dtype), o.name, ctype(bg_.inputs[o.io].dtype), t.offset);
        continue;
      }
      if ((t.home == TileHome::Smem || t.home == TileHome::Global) && t.offset >= 0) {
        if (t.home == TileHome::Smem)
          c_->f("float* const s_{} = reinterpret_cast<float*>(kiln_smem + {});", o.name, t.offset);
        else
          c_->f("float* const s_{} = kiln_gs + {};", o.name, t.offset / 4);
      }
      if (t.home == TileHome::Registers && t.spill) {
        if (t.spill_global)
          c_->f("float* const sp_{} = kiln_gs + {};", o.name, t.spill_offset / 4);
        else
          c_->f("float* const sp_{} = reinterpret_cast<float*>(kiln_smem + {});", o.name,
                t.spill_offset);
      }
    }
  }

  void declare_fused() {
    for (const BlockOp& o : bg_.ops) {
      if (o.kind != OpKind::Fused) continue;
      const ThreadGraph& tg = *o.thread;
      std::vector<std::string> ps;
      for (int i = 0; i < tg.num_inputs; ++i) ps.push_back(fmt::format("float a{}", i));
      c_->open(fmt::format("auto fz_{} = []({}) -> float {{", o.name, fmt::join(ps, ", ")));
      for (size_t j = 0; j < tg.ops.size(); ++j) {
        std::vector<std::string> xs;
        for (int r : tg.ops[j].inputs)
          xs.push_back(r < tg.num_inputs ? fmt::format("a{}", r)
                                         : fmt::format("t{}", r - tg.num_inputs));
        c_->f("const float t{} = {};", j, ew_expr(tg.ops[j].kind, tg.ops[j].attrs, xs));
      }
      c_->f("return t{};", tg.ops.size() - 1);
      c_->close("};");
    }
  }

  std::string reg_decl_dims(const Distribution& d) const {
    if (d.kind == DistKind::Mma) return fmt::format("[{}][{}][{}]", d.bw, d.mtw, d.ntw);
    return fmt::format("[{}]", d.slots(T_));
  }

  void declare_accumulators() {
    for (size_t i = 0; i < bg_.ops.size(); ++i) {
      const TilePlan& t = tp(i);
      if (t.home != TileHome::Registers) continue;
      const BlockOp& o = op(i);
      const Distribution& d = t.dist;
      const char* init = o.kind == OpKind::AccumMax ? "-__int_as_float(0x7f800000)" : "0.0f";
      auto decl = [&](const std::string& name, const char* value) {
        if (d.kind == DistKind::Mma) {
          c_->f("kiln::rt::FragC {}{};", name, reg_decl_dims(d));
          c_->f(
              "for (int a_ = 0; a_ < {}; ++a_) for (int b_ = 0; b_ < {}; ++b_) for (int c_ = 0; "
              "c_ < {}; ++c_) for (int r_ = 0; r_ < 4; ++r_) {}[a_][b_][c_].x[r_] = {};",
              d.bw, d.mtw, d.ntw, name, value);
        } else {
          c_->f("float {}{};", name, reg_decl_dims(d));
          c_->f("for (int a_ = 0; a_ < {}; ++a_) {}[a_] = {};", d.slots(T_), name, value);
        }
      };
      decl("acc_" + o.name, init);
      if (o.kind == OpKind::AccumRescale) decl("accm_" + o.name, "-__int_as_float(0x7f800000)");
    }
  }

  // Loop indices of iteration variable `it` as prefix0.. (only dims with range > 1).
  void emit_loop_indices(const std::string& it, const std::string& prefix) {
    int64_t inner = 1;
    for (int d = static_cast<int>(bg_.loop.size()) - 1; d >= 0; --d) {
      std::string e = inner == 1 ? it : fmt::format("({} / {})", it, inner);
      if (d > 0) e = fmt::format("{} % {}", e, bg_.loop[d]);
      c_->f("const int {}{} = {};", prefix, d, bg_.loop[d] > 1 ? e : "0");
      c_->f("(void){}{};", prefix, d);
      inner *= bg_.loop[d];
    }
  }

  // Start of the tile along tensor dim d: (g * L_d + l) * t_d.
  std::string tile_start(const std::vector<int>& imap, const std::vector<int>& fmap, int d,
                         int64_t t, const std::string& loop_prefix) const {
    std::string gi, li;
    int64_t L = 1;
    for (size_t i = 0; i < imap.size(); ++i)
      if (imap[i] == d && bg_.grid[i] > 1) gi = fmt::format("g{}", i);
    for (size_t i = 0; i < fmap.size(); ++i)
      if (fmap[i] == d) {
        L = bg_.loop[i];
        if (L > 1) li = fmt::format("{}{}", loop_prefix, i);
      }
    std::string e;
    if (!gi.empty()) e = L == 1 ? gi : fmt::format("{} * {}", gi, L);
    if (!li.empty()) e = e.empty() ? li : fmt::format("{} + {}", e, li);
    if (e.empty()) return "";
    return t == 1 ? fmt::format("(int64_t)({})", e) : fmt::format("(int64_t)({}) * {}", e, t);
  }

  void declare_loads() {
    for (size_t i = 0; i < bg_.ops.size(); ++i) {
      const BlockOp& o = op(i);
      if (o.kind != OpKind::Input) continue;
      const TilePlan& t = tp(i);
      const TensorDesc& td = bg_.inputs[o.io];
      bool loop = o.stage == Stage::Loop;
      c_->open(fmt::format("auto load_{} = [&]({}) {{", o.name, loop ? "int it_, int st_" : ""));
      if (loop) emit_loop_indices("it_", "q");
      std::vector<int64_t> gs = strides_of(td.shape);
      std::string off;
      for (size_t d = 0; d < td.shape.size(); ++d) {
        std::string st = tile_start(o.imap, o.fmap, static_cast<int>(d), o.shape[d], "q");
        if (st.empty()) continue;
        std::string term = gs[d] == 1 ? st : fmt::format("{} * {}", st, gs[d]);
        off += off.empty() ? term : " + " + term;
      }
      if (off.empty()) off = "0";
      // Rank-4 view of the tile.
      int r = static_cast<int>(o.shape.size());
      int64_t E[4], G[3], SS[3];
      for (int k = 0; k < 4; ++k) {
        int d = k - (4 - r);
        E[k] = d >= 0 ? o.shape[d] : 1;
        if (k < 3) {
          G[k] = d >= 0 ? gs[d] : 0;
          SS[k] = d >= 0 ? t.strides[d] : 0;
        }
      }
      int64_t stage_elems = t.bytes / dtype_bytes(td.dtype);
      c_->f(
          "kiln::cg::load_tile<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}>(s_{}{}, in{} "
          "+ ({}), tid);",
          ctype(td.dtype), T_, E[0], E[1], E[2], E[3], G[0], G[1], G[2], SS[0], SS[1], SS[2],
          t.load_vec, o.name, loop ? fmt::format(" + st_ * {}", stage_elems) : "", o.io, off);
      c_->close("};");
    }
  }

  // ---- values --------------------------------------------------------------------------------
  struct Ctx {
    int root = -1;
    std::string root_val;
    std::function<std::string(int)> reg;  // slot expression of a register tile
    Code* body = nullptr;
  };

  std::string stored_read(int i, const std::vector<std::string>& idx) const {
    const BlockOp& o = op(i);
    const TilePlan& t = tp(i);
    if (o.kind == OpKind::Input) {
      std::string ptr = (o.stage == Stage::Loop ? "c_" : "s_") + o.name;
      return fmt::format("kiln::rt::to_f32({}[{}])", ptr, offset_expr(idx, t.strides));
    }
    if (t.home == TileHome::Registers)
      return fmt::format("sp_{}[{}]", o.name, offset_expr(idx, t.spill_strides));
    return fmt::format("s_{}[{}]", o.name, offset_expr(idx, t.strides));
  }

  bool is_stored(int i) const {
    const TilePlan& t = tp(i);
    return op(i).kind == OpKind::Input || t.home == TileHome::Smem || t.home == TileHome::Global ||
           (t.home == TileHome::Registers && t.spill);
  }

  std::string value(int i, const std::vector<std::string>& idx, Ctx& cx) {
    if (i == cx.root) return cx.root_val;
    if (is_stored(i)) return stored_read(i, idx);
    if (tp(i).home == TileHome::Registers) {
      KILN_ASSERT(cx.reg, "register tile {} read outside its distribution", nm(i));
      return cx.reg(i);
    }
    return compute(i, idx, cx);
  }

  std::string compute(int i, const std::vector<std::string>& idx, Ctx& cx) {
    if (i == cx.root) return cx.root_val;
    const BlockOp& o = op(i);
    std::string e;
    switch (cls(i)) {
      case OpClass::Constant:
        return flit(o.attrs.value);
      case OpClass::Unary:
      case OpClass::Binary: {
        std::vector<std::string> xs;
        for (int in : o.inputs)
          xs.push_back(value(in, bcast_index(op(in).shape, o.shape, idx), cx));
        e = ew_expr(o.kind, o.attrs, xs);
        break;
      }
      case OpClass::Fused: {
        std::vector<std::string> xs;
        for (int in : o.inputs)
          xs.push_back(value(in, bcast_index(op(in).shape, o.shape, idx), cx));
        e = fmt::format("fz_{}({})", o.name, fmt::join(xs, ", "));
        break;
      }
      case OpClass::Transpose: {
        std::vector<std::string> in_idx(idx.size());
        for (size_t d = 0; d < idx.size(); ++d) in_idx[o.attrs.perm[d]] = idx[d];
        return value(o.inputs[0], in_idx, cx);
      }
      case OpClass::Reduce: {
        KILN_ASSERT(op(o.inputs[0]).shape[o.attrs.dim] == 1, "reduction {} outside a root", o.name);
        return value(o.inputs[0], reduce_input_index(i, idx, "0"), cx);
      }
      case OpClass::Matmul:
      case OpClass::Softmax:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
      case OpClass::Input:
      case OpClass::Output:
      case OpClass::Accum:
        KILN_ASSERT(false, "cannot evaluate {} ({}) inline", o.name, op_name(o.kind));
    }
    std::string v = tmp();
    cx.body->f("const float {} = {};", v, e);
    return v;
  }

  std::vector<std::string> reduce_input_index(int i, const std::vector<std::string>& idx,
                                              const std::string& k) const {
    const BlockOp& o = op(i);
    std::vector<std::string> in = idx;
    if (o.attrs.keepdim)
      in[o.attrs.dim] = k;
    else
      in.insert(in.begin() + o.attrs.dim, k);
    return in;
  }

  // ---- steps ---------------------------------------------------------------------------------
  // What a step does with each element's value.
  using Sink =
      std::function<void(Ctx&, const std::vector<std::string>& idx, const std::string& slot)>;

  void emit_step(const Step& st) {
    switch (st.kind) {
      case StepKind::Load:
        return;
      case StepKind::Barrier:
        c_->line("__syncthreads();");
        return;
      case StepKind::Spill:
        emit_spill(st.op);
        return;
      case StepKind::Compute:
        emit_compute(st.op);
        return;
      case StepKind::Accumulate:
        emit_accumulate(st);
        return;
      case StepKind::Save:
        emit_save(st.op);
        return;
    }
  }

  void emit_compute(int top) {
    c_->f("// compute {} = {} {}", nm(top), op_name(op(top).kind), shape_str(op(top).shape));
    const TilePlan& t = tp(top);
    run_elements(top, t.dist, t.root, false,
                 [&](Ctx& cx, const std::vector<std::string>& idx, const std::string&) {
                   std::string v = compute(top, idx, cx);
                   cx.body->f("s_{}[{}] = {};", nm(top), offset_expr(idx, t.strides), v);
                 });
  }

  void emit_accumulate(const Step& st) {
    int top = st.op >= 0 ? st.op : st.accums[0];
    std::string names;
    for (int a : st.accums) names += " " + nm(a);
    c_->f("// accumulate{}", names);
    const Distribution& d = st.op >= 0 ? tp(st.op).dist : tp(st.accums[0]).dist;
    int root = st.op >= 0 ? tp(st.op).root : -1;
    // accum_sum(matmul) on tensor cores accumulates straight into the accumulator fragments.
    bool direct = root >= 0 && root == st.op && d.kind == DistKind::Mma && st.accums.size() == 1 &&
                  op(st.accums[0]).kind == OpKind::AccumSum;
    if (direct) {
      mma_block(root, d, "acc_" + nm(st.accums[0]), /*fresh=*/false);
      return;
    }
    if (st.op >= 0 && tp(st.op).home == TileHome::Fragment) {
      emit_fragment_chain(st.op);
      return;
    }
    run_elements(top, d, root, true,
                 [&](Ctx& cx, const std::vector<std::string>& idx, const std::string& slot) {
                   std::string v = st.op >= 0 ? compute(st.op, idx, cx)
                                              : value(op(st.accums[0]).inputs[0], idx, cx);
                   for (int a : st.accums) {
                     const BlockOp& ao = op(a);
                     std::string acc = fmt::format("acc_{}{}", ao.name, slot);
                     switch (accum_kind(ao.kind)) {
                       case AccumKind::Sum:
                         cx.body->f("{} += {};", acc, v);
                         break;
                       case AccumKind::Max:
                         cx.body->f("{0} = fmaxf({0}, {1});", acc, v);
                         break;
                       case AccumKind::Rescale: {
                         int m = ao.inputs[1];
                         std::string mv = value(m, bcast_index(op(m).shape, ao.shape, idx), cx);
                         cx.body->f("kiln::cg::rescale_update({}, accm_{}{}, {}, {});", acc,
                                    ao.name, slot, v, mv);
                         break;
                       }
                     }
                   }
                 });
  }

  // A Fragment tile p (see TileHome::Fragment): its root's fragments `fr` are computed, p is
  // evaluated in place, then each consumer runs from the registers: matmuls pack their A
  // fragments from `fr` (mma_block), row reductions sum the fragment row pieces and finish with a
  // quad shuffle (the four lanes 4g..4g+3 hold row g's columns).
  void emit_fragment_chain(int p) {
    const TilePlan& t = tp(p);
    const Distribution& d = t.dist;
    c_->f("// {} = {} {} in registers (mma fragments of {})", nm(p), op_name(op(p).kind),
          shape_str(op(p).shape), nm(t.root));
    c_->open("{");
    mma_block(t.root, d, "fr", /*fresh=*/true);
    if (p != t.root) {
      LazyDecls decls;
      std::vector<std::string> idx =
          open_fragment_loops(p, d, -1, "q", 4, "((q >> 1) << 3)", " + (q & 1)", decls);
      emit_after_decls(decls, [&] {
        Ctx cx;
        cx.body = c_;
        cx.root = t.root;
        cx.root_val = "fr[bi][i][jn].x[q]";
        std::string v = compute(p, idx, cx);
        c_->f("fr[bi][i][jn].x[q] = {};", v);
      });
      for (int k = 0; k < kFragmentScopes; ++k) c_->close();
    }
    std::vector<int> cons;
    for (size_t c = 0; c < bg_.ops.size(); ++c)
      for (int in : op(c).inputs)
        if (in == p) {
          cons.push_back(static_cast<int>(c));
          break;
        }
    for (int c : cons) {
      std::vector<int> accs;
      for (size_t a = 0; a < bg_.ops.size(); ++a)
        if (cls(a) == OpClass::Accum && op(a).inputs[0] == c) accs.push_back(static_cast<int>(a));
      if (cls(c) == OpClass::Matmul) {
        KILN_ASSERT(accs.size() == 1, "fragment matmul {} must feed one accumulator", nm(c));
        mma_block(c, tp(c).dist, "acc_" + nm(accs[0]), /*fresh=*/false);
        continue;
      }
      const Distribution& dr = tp(c).dist;
      bool is_max = op(c).kind == OpKind::Max;
      // A reduction read only by accumulators of its own kind (sum or mean into accum_sum, max
      // into accum_max) finishes its quad shuffle once, after the loop: each lane folds its own
      // columns every iteration, and sums of sums (maxima of maxima) regroup exactly. A sum of
      // per-iteration maxima does not, so mixed kinds shuffle every iteration.
      bool defer = true;
      for (size_t k = 0; k < bg_.ops.size(); ++k)
        for (int in : op(k).inputs)
          if (in == c && (cls(k) != OpClass::Accum ||
                          op(k).kind != (is_max ? OpKind::AccumMax : OpKind::AccumSum)))
            defer = false;
      if (defer)
        for (int a : accs) quad_pending_.push_back({a, dr});
      c_->f("// {} = {} of {} over its last dim, from the fragments", nm(c), op_name(op(c).kind),
            nm(p));
      open_row_half_loops(dr);
      c_->f("float rs = {};", is_max ? "-__int_as_float(0x7f800000)" : "0.0f");
      c_->line("#pragma unroll");
      c_->open(fmt::format("for (int jn = 0; jn < {}; ++jn) {{", d.ntw));
      if (is_max)
        c_->line("rs = fmaxf(rs, fmaxf(fr[bi][i][jn].x[2 * h], fr[bi][i][jn].x[2 * h + 1]));");
      else
        c_->line("rs += fr[bi][i][jn].x[2 * h] + fr[bi][i][jn].x[2 * h + 1];");
      c_->close();
      if (!defer) c_->f("rs = kiln::cg::group_{}<4>(rs);", is_max ? "max" : "sum");
      if (op(c).kind == OpKind::Mean) c_->f("rs = rs / {};", flit(double(d.n)));
      for (int a : accs) {
        std::string acc = fmt::format("acc_{}[bi][i][0].x[2 * h]", nm(a));
        if (op(a).kind == OpKind::AccumMax)
          c_->f("{0} = fmaxf({0}, rs);", acc);
        else
          c_->f("{} += rs;", acc);
      }
      for (int k = 0; k < kRowHalfScopes; ++k) c_->close();
    }
    c_->close();
  }

  void emit_save(int top) {
    const BlockOp& o = op(top);
    const TensorDesc& td = bg_.outputs[o.io];
    c_->f("// save {} -> {} {}", nm(o.inputs[0]), td.name, shape_str(td.shape));
    const TilePlan& t = tp(top);
    int R = static_cast<int>(td.shape.size());
    int r = static_cast<int>(o.shape.size());
    std::vector<int64_t> gs = strides_of(td.shape);
    // Block/iteration part of the offset.
    std::string base;
    for (int d = 0; d < R; ++d) {
      int64_t tdim = d < R - r ? 1 : o.shape[d - (R - r)];
      std::string st = tile_start(o.imap, o.fmap, d, tdim, "l");
      if (st.empty()) continue;
      std::string term = gs[d] == 1 ? st : fmt::format("{} * {}", st, gs[d]);
      base += base.empty() ? term : " + " + term;
    }
    if (base.empty()) base = "0";
    std::vector<int64_t> tile_strides(gs.end() - r, gs.end());
    c_->open("{");
    c_->f("{}* const dst = out{} + ({});", ctype(td.dtype), o.io, base);
    // 16-byte stores: V consecutive elements of the last dim per thread, when rows and offsets
    // keep every chunk aligned and no root or register tile dictates the element order.
    const int V = 16 / dtype_bytes(td.dtype);
    if (t.dist.kind == DistKind::Group && t.dist.group == 1 && t.root < 0 &&
        !reads_registers(top) && r >= 1 && o.shape.back() % V == 0 && td.shape.back() % V == 0 &&
        numel(o.shape) >= V) {
      Shape chunks = o.shape;
      chunks.back() /= V;
      const int64_t NC = numel(chunks);
      c_->line("#pragma unroll 2");
      c_->open(fmt::format("for (int o = tid; o < {}; o += {}) {{", NC, T_));
      std::vector<std::string> cidx = unravel(*c_, "o", chunks, "i");
      std::string last = cidx.back() == "0" ? "0" : cidx.back() + " * " + std::to_string(V);
      c_->f("float vv[{}];", V);
      c_->line("#pragma unroll");
      c_->open(fmt::format("for (int q = 0; q < {}; ++q) {{", V));
      std::vector<std::string> idx = cidx;
      idx.back() = last == "0" ? "q" : "(" + last + " + q)";
      Ctx cx;
      cx.body = c_;
      std::string v = value(o.inputs[0], idx, cx);
      c_->f("vv[q] = {};", v);
      c_->close();
      std::vector<std::string> base_idx = cidx;
      base_idx.back() = last;
      c_->f("kiln::rt::store16_f32(dst + {}, vv);", offset_expr(base_idx, tile_strides));
      c_->close();
      c_->close();
      return;
    }
    // Mma fragments hold two adjacent columns: one 4-byte (16-bit) or 8-byte (f32) store.
    const Distribution& d = t.dist;
    if (d.kind == DistKind::Mma && d.ks == 1 && r >= 1 && o.shape.back() == d.n && d.n % 2 == 0 &&
        td.shape.back() % 2 == 0) {
      run_mma_pairs(top, d, t.root, [&](Ctx& c0, Ctx& c1, const std::vector<std::string>& idx) {
        std::vector<std::string> idx1 = idx;
        idx1.back() = idx.back() == "0" ? "1" : "(" + idx.back() + " + 1)";
        std::string v0 = value(o.inputs[0], idx, c0);
        std::string v1 = value(o.inputs[0], idx1, c1);
        std::string at = offset_expr(idx, tile_strides);
        if (td.dtype == DType::F32)
          c_->f("*reinterpret_cast<float2*>(dst + {}) = make_float2({}, {});", at, v0, v1);
        else
          c_->f("*reinterpret_cast<uint32_t*>(dst + {}) = kiln::rt::pack2<{}>({}, {});", at,
                ctype(td.dtype), v0, v1);
      });
      c_->close();
      return;
    }
    run_elements(top, t.dist, t.root, false,
                 [&](Ctx& cx, const std::vector<std::string>& idx, const std::string&) {
                   std::string v = value(o.inputs[0], idx, cx);
                   cx.body->f("dst[{}] = kiln::rt::from_f32<{}>({});",
                              offset_expr(idx, tile_strides), ctype(td.dtype), v);
                 });
    c_->close();
  }

  void emit_spill(int a) {
    const TilePlan& t = tp(a);
    const Distribution& d = t.dist;
    c_->f("// spill {} to {}", nm(a), t.spill_global ? "the workspace" : "shared memory");
    if (d.kind == DistKind::Mma && d.ks > 1) {
      // Partial sums of the k-split warps add up in the spill buffer.
      c_->open(fmt::format("for (int o = tid; o < {}; o += {}) {{", numel(op(a).shape), T_));
      std::vector<std::string> idx = unravel(*c_, "o", op(a).shape, "z");
      c_->f("sp_{}[{}] = 0.0f;", nm(a), offset_expr(idx, t.spill_strides));
      c_->close();
      c_->line("__syncthreads();");
    }
    bool atomic = d.kind == DistKind::Mma && d.ks > 1;
    run_elements(
        a, d, -1, true, [&](Ctx& cx, const std::vector<std::string>& idx, const std::string& slot) {
          std::string dst = fmt::format("sp_{}[{}]", nm(a), offset_expr(idx, t.spill_strides));
          if (atomic)
            cx.body->f("atomicAdd(&{}, acc_{}{});", dst, nm(a), slot);
          else
            cx.body->f("{} = acc_{}{};", dst, nm(a), slot);
        });
  }

  // Loops over the elements of `top` (its shape) in distribution d, computing `root` first when
  // present, and calls sink with the element's index and register slot.
  void run_elements(int top, const Distribution& d, int root, bool uses_regs, const Sink& sink) {
    const Shape& shape = op(top).shape;
    if (d.kind == DistKind::Mma) {
      run_mma_elements(top, d, root, sink);
      return;
    }
    const int64_t N = numel(shape);
    const int G = d.group;
    const int64_t groups = T_ / G;
    const int64_t slots = cdiv(N, groups);
    // Register slots must be compile-time: unrolled slot loop; otherwise a strided loop.
    bool reads_regs = uses_regs || reads_registers(top);
    bool reduce_root = root >= 0 && cls(root) == OpClass::Reduce;
    c_->open("{");
    bool unrolled = reads_regs || G > 1;
    // The flat index o and the element's index variables are declared where something reads
    // them (a reduction root with one output, or an accumulator fed by its root, reads none).
    LazyDecls flat;
    if (unrolled) {
      if (slots <= 64) c_->line("#pragma unroll");
      c_->open(fmt::format("for (int j = 0; j < {}; ++j) {{", slots));
      flat.add("int", "o",
               fmt::format("j * {} + tid{}", groups, G > 1 ? fmt::format(" / {}", G) : ""));
    } else {
      c_->line("#pragma unroll 2");
      c_->open(fmt::format("for (int o = tid; o < {}; o += {}) {{", N, T_));
    }
    std::string valid = unrolled && slots * groups != N ? fmt::format("o < {}", N) : "";
    emit_after_decls(flat, [&] {
      Ctx cx;
      if (reads_regs)
        cx.reg = [&](int i) {
          (void)i;
          return std::string("[j]");
        };
      LazyDecls rdecls;
      std::vector<std::string> ridx;
      if (root >= 0) ridx = unravel(rdecls, "o", op(root).shape, "r");
      emit_after_decls(rdecls, [&] {
        cx.body = c_;
        if (root >= 0) {
          cx.root = root;
          cx.root_val = tmp();
          if (reduce_root)
            emit_reduce_root(root, ridx, G, valid, cx);
          else
            emit_fma_root(root, ridx, valid, cx);
        }
        std::string guard = valid;
        if (G > 1)
          guard = guard.empty() ? fmt::format("tid % {} == 0", G)
                                : fmt::format("{} && tid % {} == 0", guard, G);
        if (!guard.empty()) c_->open(fmt::format("if ({}) {{", guard));
        LazyDecls decls;
        std::vector<std::string> idx = unravel(decls, "o", shape, "i");
        emit_after_decls(decls, [&] {
          Ctx ex = cx;
          ex.body = c_;
          ex.reg = [&](int i) { return fmt::format("acc_{}[j]", nm(i)); };
          sink(ex, idx, "[j]");
        });
        if (!guard.empty()) c_->close();
      });
    });
    c_->close();
    c_->close();
  }

  // Runs emit() with its code held back, then writes the declarations of `decls` that it reads
  // and the code (see LazyDecls).
  template <class F>
  void emit_after_decls(const LazyDecls& decls, F&& emit) {
    Code body;
    Code* outer = c_;
    c_ = &body;
    emit();
    c_ = outer;
    decls.emit(*c_, body);
  }

  bool reads_registers(int top) const {
    std::vector<int> stack{top};
    std::vector<bool> seen(bg_.ops.size(), false);
    while (!stack.empty()) {
      int i = stack.back();
      stack.pop_back();
      if (seen[i]) continue;
      seen[i] = true;
      for (int in : op(i).inputs) {
        const TilePlan& t = tp(in);
        if (t.home == TileHome::Registers && !t.spill) return true;
        if (t.home == TileHome::Inline || t.home == TileHome::Root) stack.push_back(in);
      }
    }
    return false;
  }

  void emit_reduce_root(int root, const std::vector<std::string>& ridx, int G,
                        const std::string& valid, Ctx& cx) {
    const BlockOp& o = op(root);
    int in = o.inputs[0];
    int64_t K = op(in).shape[o.attrs.dim];
    bool is_max = o.kind == OpKind::Max;
    const std::string& rv = cx.root_val;
    c_->f("float {} = {};", rv, is_max ? "-__int_as_float(0x7f800000)" : "0.0f");
    if (!valid.empty())
      c_->open(fmt::format("if ({}) {{", valid));
    else
      c_->open("{");
    if (K / G <= 16)
      c_->line("#pragma unroll");
    else
      c_->line("#pragma unroll 4");
    c_->open(fmt::format("for (int k = {}; k < {}; k += {}) {{",
                         G > 1 ? fmt::format("tid % {}", G) : "0", K, G));
    Ctx inner;
    inner.body = c_;
    inner.reg = cx.reg;
    std::string v = value(in, reduce_input_index(root, ridx, "k"), inner);
    if (is_max)
      c_->f("{0} = fmaxf({0}, {1});", rv, v);
    else
      c_->f("{} += {};", rv, v);
    c_->close();
    c_->close();
    if (G > 32)
      c_->f("{0} = kiln::cg::group_reduce_wide<{1}>({0}, kiln::rt::{2}(), kiln_red);", rv, G,
            is_max ? "MaxOp" : "SumOp");
    else if (G > 1)
      c_->f("{0} = kiln::cg::group_{1}<{2}>({0});", rv, is_max ? "max" : "sum", G);
    if (o.kind == OpKind::Mean) c_->f("{0} = {0} / {1};", rv, flit(double(K)));
  }

  // Matmul operand index: batch dims broadcast from the output's, then the two matrix dims.
  // An mma fragment gathered per element through value() (an operand ldmatrix cannot read: a
  // float32 tile, an inline expression): kiln::cg::`loader`<T>(frag, lane, f) asks f for each of
  // the lane's elements (r_, c_); rows are named `rn` (= rn0 + r_), columns `cn`, zero outside
  // R x C.
  void gather_fragment(const char* loader, const char* T, const char* frag, int operand,
                       const Shape& out, const std::vector<std::string>& bidx, const char* rn,
                       const char* cn, int64_t R, int64_t C) {
    c_->open(
        fmt::format("kiln::cg::{}<{}>({}, lane, [&](int r_, int c_) -> float {{", loader, T, frag));
    c_->f("const int {0} = {0}0 + r_, {1} = {1}0 + c_;", rn, cn);
    c_->f("if ({} >= {} || {} >= {}) return 0.0f;", rn, R, cn, C);
    Ctx cx;
    cx.body = c_;
    std::string v = value(operand, matmul_operand_index(operand, out, bidx, rn, cn), cx);
    c_->f("return {};", v);
    c_->close("});");
  }

  std::vector<std::string> matmul_operand_index(int operand, const Shape& out,
                                                const std::vector<std::string>& out_batch,
                                                const std::string& r, const std::string& c) {
    const Shape& s = op(operand).shape;
    Shape sb(s.begin(), s.end() - 2);
    Shape ob(out.begin(), out.end() - 2);
    std::vector<std::string> idx = bcast_index(sb, ob, out_batch);
    idx.push_back(r);
    idx.push_back(c);
    return idx;
  }

  void emit_fma_root(int root, const std::vector<std::string>& ridx, const std::string& valid,
                     Ctx& cx) {
    const BlockOp& o = op(root);
    int a = o.inputs[0], b = o.inputs[1];
    int64_t K = op(a).shape.back();
    std::vector<std::string> ob(ridx.begin(), ridx.end() - 2);
    const std::string& m = ridx[ridx.size() - 2];
    const std::string& n = ridx.back();
    const std::string& rv = cx.root_val;
    c_->f("float {} = 0.0f;", rv);
    if (!valid.empty())
      c_->open(fmt::format("if ({}) {{", valid));
    else
      c_->open("{");
    c_->line(K <= 16 ? "#pragma unroll" : "#pragma unroll 4");
    c_->open(fmt::format("for (int k = 0; k < {}; ++k) {{", K));
    Ctx inner;
    inner.body = c_;
    std::string va = value(a, matmul_operand_index(a, o.shape, ob, m, "k"), inner);
    std::string vb = value(b, matmul_operand_index(b, o.shape, ob, "k", n), inner);
    c_->f("{0} = fmaf({1}, {2}, {0});", rv, va, vb);
    c_->close();
    c_->close();
  }

  // ---- tensor cores --------------------------------------------------------------------------
  struct MmaOperand {
    int leaf = -1;
    bool swapped = false;
  };
  MmaOperand resolve(int i) const {
    MmaOperand r;
    int cur = i;
    while (tp(cur).home == TileHome::Inline && cls(cur) == OpClass::Transpose) {
      r.swapped = !r.swapped;
      cur = op(cur).inputs[0];
    }
    r.leaf = cur;
    return r;
  }

  // Pointer to batch `bidx` (output batch index vars) of a stored 16-bit leaf.
  std::string leaf_batch_ptr(const MmaOperand& mo, const Shape& out,
                             const std::vector<std::string>& out_batch) const {
    const BlockOp& l = op(mo.leaf);
    const TilePlan& t = tp(mo.leaf);
    Shape lb(l.shape.begin(), l.shape.end() - 2);
    Shape ob(out.begin(), out.end() - 2);
    std::vector<std::string> bi = bcast_index(lb, ob, out_batch);
    std::vector<int64_t> bs(t.strides.begin(), t.strides.end() - 2);
    std::string ptr = (l.stage == Stage::Loop ? "c_" : "s_") + l.name;
    std::string off = offset_expr(bi, bs);
    return off == "0" ? ptr : fmt::format("{} + {}", ptr, off);
  }

  // A float32 stored leaf read row-major with an even pitch: the vector fragment loader applies.
  bool f32_rows(const MmaOperand& mo, int64_t K) const {
    const TilePlan& t = tp(mo.leaf);
    bool stored = t.home == TileHome::Smem || t.home == TileHome::Global ||
                  (t.home == TileHome::Registers && t.spill);
    if (mo.swapped || !stored || op(mo.leaf).kind == OpKind::Input || K % 2) return false;
    if (op(mo.leaf).shape.size() < 2) return false;
    const std::vector<int64_t>& st = t.home == TileHome::Registers ? t.spill_strides : t.strides;
    for (size_t d = 0; d + 1 < st.size(); ++d)
      if (st[d] % 2) return false;
    return true;
  }
  int64_t f32_pitch(int leaf) const {
    const TilePlan& t = tp(leaf);
    const std::vector<int64_t>& st = t.home == TileHome::Registers ? t.spill_strides : t.strides;
    return st[st.size() - 2];
  }
  std::string f32_batch_ptr(const MmaOperand& mo, const Shape& out,
                            const std::vector<std::string>& out_batch) const {
    const BlockOp& l = op(mo.leaf);
    const TilePlan& t = tp(mo.leaf);
    const std::vector<int64_t>& st = t.home == TileHome::Registers ? t.spill_strides : t.strides;
    Shape lb(l.shape.begin(), l.shape.end() - 2);
    Shape ob(out.begin(), out.end() - 2);
    std::vector<std::string> bi = bcast_index(lb, ob, out_batch);
    std::vector<int64_t> bs(st.begin(), st.end() - 2);
    std::string ptr = (t.home == TileHome::Registers ? "sp_" : "s_") + l.name;
    std::string off = offset_expr(bi, bs);
    return off == "0" ? ptr : fmt::format("{} + {}", ptr, off);
  }

  // Emits the mma.sync main loop of matmul `mm` (partition d) into fragments `frag`
  // (kiln::rt::FragC [bw][mtw][ntw]); declares and zeroes them when fresh.
  void mma_block(int mm, const Distribution& d, const std::string& frag, bool fresh) {
    const BlockOp& o = op(mm);
    const MmaPlan& p = tp(mm).mma;
    int a = o.inputs[0], b = o.inputs[1];
    const Shape& out = o.shape;
    int64_t M = d.m, N = d.n, K = op(a).shape.back();
    int64_t KST = cdiv(K, 16), kstw = cdiv(KST, d.ks);
    int64_t MT = cdiv(M, 16), NT = cdiv(N, 8);
    const char* T = ctype(p.dtype);
    Shape ob(out.begin(), out.end() - 2);
    if (fresh) {
      c_->f("kiln::rt::FragC {}[{}][{}][{}];", frag, d.bw, d.mtw, d.ntw);
      c_->f(
          "for (int a_ = 0; a_ < {}; ++a_) for (int b_ = 0; b_ < {}; ++b_) for (int c_ = 0; c_ "
          "< {}; ++c_) {}[a_][b_][c_].zero();",
          d.bw, d.mtw, d.ntw, frag);
    }
    c_->f("// {} on tensor cores ({}), {}", o.name, T, d.str());
    std::vector<std::string> bidx = open_kstep_loops(d, kstw, K, ob);
    c_->f("kiln::rt::FragA fa[{}];", d.mtw);
    c_->f("kiln::rt::FragB fb[{}];", d.ntw);
    // A fragments.
    MmaOperand oa = resolve(a), obr = resolve(b);
    // The hoisted fragments belong to mma_distribution's partition; a step that ran this
    // matmul in another one (none does today) reloads A itself.
    const Distribution* hd = p.a_hoisted ? mma_distribution(bs_, mm) : nullptr;
    const bool hoisted = hd && d == *hd;
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int i = 0; i < {}; ++i) {{", d.mtw));
    c_->f("const int m0 = (wm * {} + i) * 16;", d.mtw);
    c_->open(fmt::format("if (m0 < {}) {{", M));
    if (tp(a).home == TileHome::Fragment) {
      // k step kk is n8 tiles 2kk and 2kk + 1 of the producer's C fragments `fr` (same warps,
      // same m16 tiles): C elements {0,1} / {2,3} are A rows g / g + 8.
      c_->f("const kiln::rt::FragC& c0_ = fr[bi][i][2 * kk];");
      c_->f("const kiln::rt::FragC& c1_ = fr[bi][i][2 * kk + 1];");
      c_->f("fa[i].x[0] = kiln::rt::pack2<{}>(c0_.x[0], c0_.x[1]);", T);
      c_->f("fa[i].x[1] = kiln::rt::pack2<{}>(c0_.x[2], c0_.x[3]);", T);
      c_->f("fa[i].x[2] = kiln::rt::pack2<{}>(c1_.x[0], c1_.x[1]);", T);
      c_->f("fa[i].x[3] = kiln::rt::pack2<{}>(c1_.x[2], c1_.x[3]);", T);
    } else if (hoisted) {
      c_->f("fa[i] = ha_{}[bi][kk][i];", o.name);
    } else if (p.a_ldmatrix) {
      ldmatrix_a(mm, oa, M, bidx, "fa[i]");
    } else if (f32_rows(oa, K)) {
      c_->f("kiln::cg::load_a_f32<{}, {}, {}, {}>(fa[i], {}, m0, k0, lane);", T, M, K,
            f32_pitch(oa.leaf), f32_batch_ptr(oa, out, bidx));
    } else {
      gather_fragment("load_a_fn", T, "fa[i]", a, out, bidx, "m", "k", M, K);
    }
    c_->close();
    c_->close();
    // B fragments.
    bool pairs = p.b_ldmatrix && !p.b_nk && d.ntw % 2 == 0 && N % 16 == 0;
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int jn = 0; jn < {}; jn += {}) {{", d.ntw, pairs ? 2 : 1));
    c_->f("const int n0 = (wn * {} + jn) * 8;", d.ntw);
    c_->open(fmt::format("if (n0 < {}) {{", N));
    if (p.b_ldmatrix) {
      const TilePlan& lt = tp(obr.leaf);
      int64_t pitch = lt.strides[lt.strides.size() - 2];
      std::string base = leaf_batch_ptr(obr, out, bidx);
      if (p.b_nk)
        c_->f("kiln::cg::load_b_nk1<{}>(fb[jn], {}, k0, n0, lane);", pitch, base);
      else if (pairs)
        c_->f("kiln::cg::load_b_kn2<{}>(fb[jn], fb[jn + 1], {}, k0, n0, lane);", pitch, base);
      else
        c_->f("kiln::cg::load_b_kn1<{}>(fb[jn], {}, k0, n0, lane);", pitch, base);
    } else {
      gather_fragment("load_b_fn", T, "fb[jn]", b, out, bidx, "k", "n", K, N);
    }
    c_->close();
    c_->close();
    // Products.
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int i = 0; i < {}; ++i) {{", d.mtw));
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int jn = 0; jn < {}; ++jn) {{", d.ntw));
    c_->f(
        "if ((wm * {} + i) < {} && (wn * {} + jn) < {}) kiln::rt::mma_16816<{}>({}[bi][i][jn], "
        "fa[i], fb[jn]);",
        d.mtw, MT, d.ntw, NT, T, frag);
    c_->close();
    c_->close();
    for (int k = 0; k < kKstepScopes; ++k) c_->close();  // b, bi, k0, kk, warp, block
  }

  // Opens, for the warps of partition d, the loops over a warp's k steps (kstw of 16, below K)
  // and its batch slots, down to the body of one (kk, bi) with k0 and b set: kKstepScopes
  // scopes that the caller closes. Returns the index variables of batch slot b in `ob`.
  static constexpr int kKstepScopes = 6;
  std::vector<std::string> open_kstep_loops(const Distribution& d, int64_t kstw, int64_t K,
                                            const Shape& ob) {
    c_->open("{");
    emit_warp_coords(d);
    c_->open(fmt::format("if (warp < {}) {{", d.wb * d.wm * d.wn * d.ks));
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int kk = 0; kk < {}; ++kk) {{", kstw));
    c_->f("const int k0 = (wk * {} + kk) * 16;", kstw);
    c_->open(fmt::format("if (k0 < {}) {{", K));
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int bi = 0; bi < {}; ++bi) {{", d.bw));
    c_->f("const int b = wb * {} + bi;", d.bw);
    c_->open(fmt::format("if (b < {}) {{", d.batch));
    std::vector<std::string> bidx = unravel(*c_, "b", ob, "bb");
    return bidx;
  }

  // ldmatrix of the A fragment of matmul `mm` at (m0, k0) into `dst`, from its stored leaf.
  void ldmatrix_a(int mm, const MmaOperand& oa, int64_t M, const std::vector<std::string>& bidx,
                  const std::string& dst) {
    const TilePlan& lt = tp(oa.leaf);
    int64_t pitch = lt.strides[lt.strides.size() - 2];
    std::string base = leaf_batch_ptr(oa, op(mm).shape, bidx);
    if (tp(mm).mma.a_trans)
      c_->f("kiln::cg::load_a_cols<{}>({}, {}, m0, k0, lane);", pitch, dst, base);
    else
      c_->f("kiln::cg::load_a_rows<{}, {}>({}, {}, m0, k0, lane);", M, pitch, dst, base);
  }

  // Declares ha_<mm> and loads it (the invariant tile must be in shared memory and visible).
  void emit_hoisted_a(int mm, const Distribution& d) {
    const BlockOp& o = op(mm);
    MmaOperand oa = resolve(o.inputs[0]);
    int64_t M = d.m, K = op(o.inputs[0]).shape.back();
    int64_t kstw = cdiv(cdiv(K, 16), d.ks);
    Shape ob(o.shape.begin(), o.shape.end() - 2);
    c_->f("// {}'s A fragments: {} is loop-invariant, loaded once into registers", o.name,
          nm(oa.leaf));
    c_->f("kiln::rt::FragA ha_{}[{}][{}][{}];", o.name, d.bw, kstw, d.mtw);
    std::vector<std::string> bidx = open_kstep_loops(d, kstw, K, ob);
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int i = 0; i < {}; ++i) {{", d.mtw));
    c_->f("const int m0 = (wm * {} + i) * 16;", d.mtw);
    c_->open(fmt::format("if (m0 < {}) {{", M));
    ldmatrix_a(mm, oa, M, bidx, fmt::format("ha_{}[bi][kk][i]", o.name));
    for (int k = 0; k < kKstepScopes + 2; ++k) c_->close();
  }

  // The quad shuffle a fragment-row reduction deferred to after the loop (emit_fragment_chain):
  // the four lanes of a row combine their accumulators, so every lane holds the row's value.
  void finish_quad(int a, const Distribution& dr) {
    bool is_max = op(a).kind == OpKind::AccumMax;
    c_->f("// {}: the quad {} its fragment rows deferred from the loop", nm(a),
          is_max ? "maximum of" : "sum of");
    open_row_half_loops(dr);
    c_->f("acc_{0}[bi][i][0].x[2 * h] = kiln::cg::group_{1}<4>(acc_{0}[bi][i][0].x[2 * h]);", nm(a),
          is_max ? "max" : "sum");
    for (int k = 0; k < kRowHalfScopes; ++k) c_->close();
  }

  // Opens, for the warps of a row-reduction partition dr (n = 1), the loops over its batch
  // slots, m16 tiles and the two row halves h of a fragment (rows g and g + 8): kRowHalfScopes
  // scopes that the caller closes.
  static constexpr int kRowHalfScopes = 5;
  void open_row_half_loops(const Distribution& dr) {
    c_->open("{");
    emit_warp_coords(dr);
    c_->open(fmt::format("if (warp < {}) {{", dr.wb * dr.wm));
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int bi = 0; bi < {}; ++bi) {{", dr.bw));
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int i = 0; i < {}; ++i) {{", dr.mtw));
    c_->line("#pragma unroll");
    c_->open("for (int h = 0; h < 2; ++h) {");
  }

  void emit_warp_coords(const Distribution& d) {
    c_->line("const int warp = tid >> 5, lane = tid & 31;");
    c_->line("(void)lane;");
    c_->f("const int wk = warp % {};", d.ks);
    c_->f("const int wn = (warp / {}) % {};", d.ks, d.wn);
    c_->f("const int wm = (warp / {}) % {};", d.ks * d.wn, d.wm);
    c_->f("const int wb = warp / {};", d.ks * d.wn * d.wm);
    c_->line("(void)wk; (void)wn; (void)wm; (void)wb;");
  }

  // Opens the loops over a warp's mma fragments, `inner` being the innermost loop variable over
  // `inner_count` values, and the bounds check of the element at (b, row, col) that `col_expr`
  // and `row_expr` compute; leaves `o` (flat index) and the unravelled `idx` in `lazy` for the
  // caller to declare where its code reads them (emit_after_decls). Closes nothing: the caller
  // closes kFragmentScopes scopes.
  static constexpr int kFragmentScopes = 7;
  std::vector<std::string> open_fragment_loops(int top, const Distribution& d, int root,
                                               const char* inner, int inner_count,
                                               const std::string& row_expr,
                                               const std::string& col_expr, LazyDecls& lazy) {
    c_->open("{");
    if (root >= 0) mma_block(root, d, "fr", /*fresh=*/true);
    emit_warp_coords(d);
    c_->open(fmt::format("if (warp < {}) {{", d.wb * d.wm * d.wn * d.ks));
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int bi = 0; bi < {}; ++bi) {{", d.bw));
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int i = 0; i < {}; ++i) {{", d.mtw));
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int jn = 0; jn < {}; ++jn) {{", d.ntw));
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int {0} = 0; {0} < {1}; ++{0}) {{", inner, inner_count));
    c_->f("const int b = wb * {} + bi;", d.bw);
    c_->f("const int row = (wm * {} + i) * 16 + (lane >> 2) + {};", d.mtw, row_expr);
    c_->f("const int col = (wn * {} + jn) * 8 + ((lane & 3) << 1){};", d.ntw, col_expr);
    c_->open(fmt::format("if (b < {} && row < {} && col < {}) {{", d.batch, d.m, d.n));
    lazy.add("int", "o", fmt::format("(b * {} + row) * {} + col", d.m, d.n));
    return unravel(lazy, "o", op(top).shape, "i");
  }

  void run_mma_elements(int top, const Distribution& d, int root, const Sink& sink) {
    LazyDecls decls;
    std::vector<std::string> idx =
        open_fragment_loops(top, d, root, "q", 4, "((q >> 1) << 3)", " + (q & 1)", decls);
    emit_after_decls(decls, [&] {
      Ctx cx;
      cx.body = c_;
      if (root >= 0) {
        cx.root = root;
        cx.root_val = "fr[bi][i][jn].x[q]";
      }
      cx.reg = [&](int i) { return fmt::format("acc_{}[bi][i][jn].x[q]", nm(i)); };
      sink(cx, idx, "[bi][i][jn].x[q]");
    });
    for (int k = 0; k < kFragmentScopes; ++k) c_->close();
  }

  // The Mma distribution two adjacent columns at a time (fragment elements 2h and 2h + 1), for
  // paired 4- or 8-byte stores. sink gets one context per column and the first column's index.
  using PairSink = std::function<void(Ctx&, Ctx&, const std::vector<std::string>&)>;
  void run_mma_pairs(int top, const Distribution& d, int root, const PairSink& sink) {
    LazyDecls decls;
    std::vector<std::string> idx = open_fragment_loops(top, d, root, "h", 2, "(h << 3)", "", decls);
    emit_after_decls(decls, [&] {
      Ctx c0, c1;
      c0.body = c1.body = c_;
      if (root >= 0) {
        c0.root = c1.root = root;
        c0.root_val = "fr[bi][i][jn].x[2 * h]";
        c1.root_val = "fr[bi][i][jn].x[2 * h + 1]";
      }
      c0.reg = [&](int r) { return fmt::format("acc_{}[bi][i][jn].x[2 * h]", nm(r)); };
      c1.reg = [&](int r) { return fmt::format("acc_{}[bi][i][jn].x[2 * h + 1]", nm(r)); };
      sink(c0, c1, idx);
    });
    for (int k = 0; k < kFragmentScopes; ++k) c_->close();
  }

  const KernelGraph& g_;
  const KernelOp& kop_;
  const KernelPlan& kp_;
  const BlockGraph& bg_;
  const BlockSchedule& bs_;
  int T_;
  Code* c_ = nullptr;
  int tmp_ = 0;
  // Accumulators of fragment-row reductions whose quad shuffle runs after the loop.
  std::vector<std::pair<int, Distribution>> quad_pending_;
};

}  // namespace

void emit_block_kernel(const KernelGraph& g, const KernelOp& kop, const KernelPlan& kp, Code& out) {
  BlockEmitter(g, kop, kp).emit(out);
}

}  // namespace kiln::cgen
