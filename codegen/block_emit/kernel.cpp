// The block emitter (block_emitter.h). The kernel skeleton: signature, declarations of tiles,
// accumulators and loads, the pipeline prologue, the loop and the post-loop steps.
#include "block_emitter.h"

namespace kiln::cgen {

void BlockEmitter::emit(Code& out) {
  open_kernel(out);
  declare_tiles();
  declare_fused();
  declare_accumulators();
  declare_loads();
  const Prologue pro = emit_prologue();
  emit_loop(pro);
  c_->line("kiln::rt::cp_async_wait_all();");
  for (const auto& [a, dr] : quad_pending_) finish_quad(a, dr);
  for (const Step& st : bs_.steps)
    if (st.phase == Phase::Post) emit_step(st);
  out.close();
  out.line("");
}

void BlockEmitter::open_kernel(Code& out) {
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
  kernel_entry(out);
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
}

void BlockEmitter::load_stage(const std::string& ch, const std::string& slot) {
  const int U = bs_.coarsen;
  for (size_t i = 0; i < bg_.ops.size(); ++i)
    if (bg_.ops[i].kind == OpKind::Input && bg_.ops[i].stage == Stage::Loop) {
      if (U == 1)
        c_->f("load_{}({}, {});", bg_.ops[i].name, ch, slot);
      else
        c_->f("for (int u = 0; u < {0}; ++u) load_{1}(({2}) * {0} + u, ({3}) * {0} + u);", U,
              bg_.ops[i].name, ch, slot);
    }
}

BlockEmitter::Prologue BlockEmitter::emit_prologue() {
  const int S = bs_.pipeline_stages;
  Prologue p;
  // Pre: invariant loads, then the prologue of the loop-input ring.
  for (size_t i = 0; i < bg_.ops.size(); ++i)
    if (bg_.ops[i].kind == OpKind::Input) {
      if (bg_.ops[i].stage == Stage::Loop)
        p.any_loop = true;
      else
        p.any_inv = true, c_->f("load_{}();", bg_.ops[i].name);
    }
  if (p.any_inv) c_->line("kiln::rt::cp_async_commit();");
  const int64_t NCH = bg_.num_iterations() / bs_.coarsen;  // stages of the ring the loop walks
  if (p.any_loop && S >= 2) {
    p.whole = NCH <= S;
    p.in_flight = p.whole ? static_cast<int>(NCH) : S - 1;
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int s = 0; s < {}; ++s) {{", p.in_flight));
    c_->open(fmt::format("if (s < {}) {{", NCH));
    load_stage("s", "s");
    c_->close();
    c_->line("kiln::rt::cp_async_commit();");
    c_->close();
  }
  for (const Step& st : bs_.steps)
    if (st.phase == Phase::Pre) {
      if (st.kind == StepKind::Barrier && !p.pre_waited) {
        c_->f("kiln::rt::cp_async_wait<{}>();", p.in_flight);
        p.pre_waited = true;
      }
      emit_step(st);
    }
  // A fragments that stay in registers for the whole loop: loaded once the invariant tiles
  // have landed.
  bool any_hoisted = false;
  for (size_t i = 0; i < bg_.ops.size(); ++i)
    if (tp(i).mma.use && tp(i).mma.a_hoisted) {
      if (!any_hoisted && !p.pre_waited) {
        c_->f("kiln::rt::cp_async_wait<{}>();  // the invariant tiles", p.in_flight);
        c_->line("__syncthreads();");
      }
      any_hoisted = true;
      const Distribution* d = mma_distribution(bs_, static_cast<int>(i));
      KILN_ASSERT(d, "hoisted matmul {} has no mma distribution", nm(i));
      emit_hoisted_a(static_cast<int>(i), *d);
    }
  return p;
}

void BlockEmitter::emit_loop(const Prologue& p) {
  const int S = bs_.pipeline_stages;
  const int U = bs_.coarsen;                     // iterations per stage
  const int64_t NCH = bg_.num_iterations() / U;  // stages of the ring the loop walks
  // The loop, one ring stage (U iterations) per trip.
  c_->open(fmt::format("for (int ic = 0; ic < {}; ++ic) {{", NCH));
  if (p.whole) {
    // Stage ic is group ic of the prologue's NCH: wait until at most the later ones are pending
    // (a switch on ic where the compiler does not unroll; unrolling it by hand made an
    // attention chain's kernels 11% slower on the H100).
    c_->f("kiln::rt::cp_async_wait_n({} - ic);", NCH - 1);
    c_->line("__syncthreads();");
  } else if (p.any_loop && S >= 2) {
    c_->f("kiln::rt::cp_async_wait<{}>();", S - 2);
    c_->line("__syncthreads();");
    c_->open("{");
    c_->f("const int nx = ic + {};", S - 1);
    c_->open(fmt::format("if (nx < {}) {{", NCH));
    load_stage("nx", fmt::format("nx % {}", S));
    c_->close();
    c_->line("kiln::rt::cp_async_commit();");
    c_->close();
  } else if (p.any_loop) {
    c_->line("__syncthreads();");
    load_stage("ic", "0");
    c_->line("kiln::rt::cp_async_commit();");
    c_->line("kiln::rt::cp_async_wait<0>();");
    c_->line("__syncthreads();");
  } else {
    c_->line(p.any_inv && !p.pre_waited ? "kiln::rt::cp_async_wait<0>();" : "");
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
}

void BlockEmitter::declare_tiles() {
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

void BlockEmitter::declare_fused() {
  for (const BlockOp& o : bg_.ops)
    if (o.kind == OpKind::Fused) fused_lambda(*c_, o);
}

void BlockEmitter::declare_accumulators() {
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

void BlockEmitter::emit_loop_indices(const std::string& it, const std::string& prefix) {
  int64_t inner = 1;
  for (int d = static_cast<int>(bg_.loop.size()) - 1; d >= 0; --d) {
    std::string e = inner == 1 ? it : fmt::format("({} / {})", it, inner);
    if (d > 0) e = fmt::format("{} % {}", e, bg_.loop[d]);
    c_->f("const int {}{} = {};", prefix, d, bg_.loop[d] > 1 ? e : "0");
    c_->f("(void){}{};", prefix, d);
    inner *= bg_.loop[d];
  }
}

std::string BlockEmitter::tile_start(const std::vector<int>& imap, const std::vector<int>& fmap,
                                     int d, int64_t t, const std::string& loop_prefix) const {
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

void BlockEmitter::declare_loads() {
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

void emit_block_kernel(const KernelGraph& g, const KernelOp& kop, const KernelPlan& kp, Code& out) {
  BlockEmitter(g, kop, kp).emit(out);
}

}  // namespace kiln::cgen
