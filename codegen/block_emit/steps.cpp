// The block emitter (block_emitter.h). The steps: computing, accumulating, saving and spilling
// tiles element by element in their distributions, with matmul and reduction roots on CUDA cores.
#include "block_emitter.h"

namespace kiln::cgen {

std::string BlockEmitter::stored_read(int i, const std::vector<std::string>& idx) const {
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

std::string BlockEmitter::value(int i, const std::vector<std::string>& idx, Ctx& cx) {
  if (i == cx.root) return cx.root_val;
  if (is_stored(i)) return stored_read(i, idx);
  if (tp(i).home == TileHome::Registers) {
    KILN_ASSERT(cx.reg, "register tile {} read outside its distribution", nm(i));
    return cx.reg(i);
  }
  return compute(i, idx, cx);
}

std::string BlockEmitter::compute(int i, const std::vector<std::string>& idx, Ctx& cx) {
  if (i == cx.root) return cx.root_val;
  const BlockOp& o = op(i);
  std::string e;
  switch (cls(i)) {
    case OpClass::Constant:
      return flit(o.attrs.value);
    case OpClass::Unary:
    case OpClass::Binary: {
      std::vector<std::string> xs;
      for (int in : o.inputs) xs.push_back(value(in, bcast_index(op(in).shape, o.shape, idx), cx));
      e = ew_expr(o.kind, o.attrs, xs);
      break;
    }
    case OpClass::Fused: {
      std::vector<std::string> xs;
      for (int in : o.inputs) xs.push_back(value(in, bcast_index(op(in).shape, o.shape, idx), cx));
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

std::vector<std::string> BlockEmitter::reduce_input_index(int i,
                                                          const std::vector<std::string>& idx,
                                                          const std::string& k) const {
  const BlockOp& o = op(i);
  std::vector<std::string> in = idx;
  if (o.attrs.keepdim)
    in[o.attrs.dim] = k;
  else
    in.insert(in.begin() + o.attrs.dim, k);
  return in;
}

void BlockEmitter::emit_step(const Step& st) {
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

void BlockEmitter::emit_compute(int top) {
  c_->f("// compute {} = {} {}", nm(top), op_name(op(top).kind), shape_str(op(top).shape));
  const TilePlan& t = tp(top);
  run_elements(top, t.dist, t.root, false,
               [&](Ctx& cx, const std::vector<std::string>& idx, const std::string&) {
                 std::string v = compute(top, idx, cx);
                 cx.body->f("s_{}[{}] = {};", nm(top), offset_expr(idx, t.strides), v);
               });
}

void BlockEmitter::emit_accumulate(const Step& st) {
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
                       cx.body->f("kiln::cg::rescale_update({}, accm_{}{}, {}, {});", acc, ao.name,
                                  slot, v, mv);
                       break;
                     }
                   }
                 }
               });
}

void BlockEmitter::emit_save(int top) {
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
  if (t.dist.kind == DistKind::Group && t.dist.group == 1 && t.root < 0 && !reads_registers(top) &&
      r >= 1 && o.shape.back() % V == 0 && td.shape.back() % V == 0 && numel(o.shape) >= V) {
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
                 cx.body->f("dst[{}] = kiln::rt::from_f32<{}>({});", offset_expr(idx, tile_strides),
                            ctype(td.dtype), v);
               });
  c_->close();
}

void BlockEmitter::emit_spill(int a) {
  const TilePlan& t = tp(a);
  const Distribution& d = t.dist;
  c_->f("// spill {} to {}", nm(a), t.spill_global ? "the workspace" : "shared memory");
  // Every element of this thread's fragments into the buffer: assigned, added, or atomically added.
  enum class How { Set, Add, Atomic };
  auto spill = [&](How how) {
    run_elements(a, d, -1, true,
                 [&](Ctx& cx, const std::vector<std::string>& idx, const std::string& slot) {
                   const std::string dst =
                       fmt::format("sp_{}[{}]", nm(a), offset_expr(idx, t.spill_strides));
                   if (how == How::Atomic)
                     cx.body->f("atomicAdd(&{}, acc_{}{});", dst, nm(a), slot);
                   else
                     cx.body->f("{} {}= acc_{}{};", dst, how == How::Add ? "+" : "", nm(a), slot);
                 });
  };
  if (d.kind != DistKind::Mma || d.ks == 1) {
    spill(How::Set);
  } else if (d.ks <= 4) {
    // The k-split warps' partial sums: warps of k slice r (wk = warp % ks, emit_warp_coords)
    // add theirs in round r, a barrier between rounds, each element written by one warp per
    // round. Plain stores in a fixed order: deterministic, and no compare-and-swap loops
    // (shared-memory float atomics are CAS loops on sm_90: 22% of a lora kernel's stall
    // samples, 4 warps on the same 256 floats; 6.9 -> 5.4 us). With more slices the rounds'
    // barriers cost more than the contention (8 slices: lowrank 9.2 -> 9.6 us).
    for (int r = 0; r < d.ks; ++r) {
      if (r > 0) c_->line("__syncthreads();");
      c_->open(fmt::format("if ((tid >> 5) % {} == {}) {{", d.ks, r));
      spill(r == 0 ? How::Set : How::Add);
      c_->close();
    }
  } else {
    // Many slices add atomically into the zeroed buffer.
    c_->open(fmt::format("for (int o = tid; o < {}; o += {}) {{", numel(op(a).shape), T_));
    std::vector<std::string> idx = unravel(*c_, "o", op(a).shape, "z");
    c_->f("sp_{}[{}] = 0.0f;", nm(a), offset_expr(idx, t.spill_strides));
    c_->close();
    c_->line("__syncthreads();");
    spill(How::Atomic);
  }
}

void BlockEmitter::run_elements(int top, const Distribution& d, int root, bool uses_regs,
                                const Sink& sink) {
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
          emit_fma_root(root, ridx, G, valid, cx);
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

bool BlockEmitter::reads_registers(int top) const {
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

void BlockEmitter::emit_reduce_root(int root, const std::vector<std::string>& ridx, int G,
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

std::vector<std::string> BlockEmitter::matmul_operand_index(
    int operand, const Shape& out, const std::vector<std::string>& out_batch, const std::string& r,
    const std::string& c) {
  const Shape& s = op(operand).shape;
  Shape sb(s.begin(), s.end() - 2);
  Shape ob(out.begin(), out.end() - 2);
  std::vector<std::string> idx = bcast_index(sb, ob, out_batch);
  idx.push_back(r);
  idx.push_back(c);
  return idx;
}

// A matmul element by FMAs: over the whole of K in one thread (G = 1), or split over a group of G
// lanes (k = lane, lane + G, ...) that sums through shuffles afterwards, outside the `valid`
// branch as emit_reduce_root does (the lanes of a group share one element, so a group is
// uniformly valid or not).
void BlockEmitter::emit_fma_root(int root, const std::vector<std::string>& ridx, int G,
                                 const std::string& valid, Ctx& cx) {
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
  c_->line(K / G <= 16 ? "#pragma unroll" : "#pragma unroll 4");
  c_->open(fmt::format("for (int k = {}; k < {}; k += {}) {{",
                       G > 1 ? fmt::format("tid % {}", G) : "0", K, G));
  Ctx inner;
  inner.body = c_;
  std::string va = value(a, matmul_operand_index(a, o.shape, ob, m, "k"), inner);
  std::string vb = value(b, matmul_operand_index(b, o.shape, ob, "k", n), inner);
  c_->f("{0} = fmaf({1}, {2}, {0});", rv, va, vb);
  c_->close();
  c_->close();
  if (G > 32)
    c_->f("{0} = kiln::cg::group_reduce_wide<{1}>({0}, kiln::rt::SumOp(), kiln_red);", rv, G);
  else if (G > 1)
    c_->f("{0} = kiln::cg::group_sum<{1}>({0});", rv, G);
}

}  // namespace kiln::cgen
