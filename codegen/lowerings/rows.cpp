// Reductions, softmax and rms_norm of predefined ops: a block or a warp per row when the reduced
// dim is innermost, else a thread per column; long-row rms_norm in 16-byte vectors.
#include "kiln/codegen/lowerings/rows.h"

#include <algorithm>

#include "../emit_internal.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/diag.h"

namespace kiln {

using namespace cgen;

namespace {

bool is_row_op(const KernelOp& op) {
  const OpClass c = op_info(op.kind).cls;
  return c == OpClass::Reduce || c == OpClass::Softmax || c == OpClass::RmsNorm;
}

// The reduced dim of a row op (rms_norm: the last) and the elements after it.
int reduced_dim(const KernelGraph& g, const KernelOp& op) {
  const Shape& xs = g.tensor(op.inputs[0]).shape;
  return op_info(op.kind).cls == OpClass::RmsNorm ? static_cast<int>(xs.size()) - 1
                                                  : static_cast<int>(op.attrs.dim);
}
int64_t inner_of(const KernelGraph& g, const KernelOp& op) {
  const Shape& xs = g.tensor(op.inputs[0]).shape;
  int64_t inner = 1;
  for (size_t d = reduced_dim(g, op) + 1; d < xs.size(); ++d) inner *= xs[d];
  return inner;
}

// What the row and the column kernels share: the parameters (input, output, rms_norm's weight),
// the kernel's comment and signature, and its launch. The bodies refer to these members.
struct RowEmitter {
  GraphCtx& x;
  const KernelOp& op;
  const KernelPlan& kp;
  const OpClass cls;
  const TensorDesc& in;
  const TensorDesc& out;
  const int dim;
  const RowView v;
  const int64_t rows;
  Code& c;
  std::string params, args, wexpr = "1.0f";
  const char* TO;
  const bool is_max;
  const std::string init;
  const int threads;
  const std::string R;

  RowEmitter(GraphCtx& x, const KernelOp& op, const KernelPlan& kp)
      : x(x),
        op(op),
        kp(kp),
        cls(op_info(op.kind).cls),
        in(x.g.tensor(op.inputs[0])),
        out(x.g.tensor(op.outputs[0])),
        dim(reduced_dim(x.g, op)),
        v(row_view(in.shape, dim)),
        rows(v.outer * v.inner),
        c(x.kernels),
        TO(ctype(out.dtype)),
        is_max(op.kind == OpKind::Max),
        init(is_max ? "-__int_as_float(0x7f800000)" : "0.0f"),
        threads(kp.threads),
        R(std::to_string(v.R)) {
    KILN_ASSERT(!x.is_const(op.inputs[0]), "{} of a constant", op_name(op.kind));
    params = fmt::format("const {}* __restrict__ p0, {}* __restrict__ y", ctype(in.dtype),
                         ctype(out.dtype));
    args = fmt::format("{}, {}", x.ptr(op.inputs[0]), x.ptr(op.outputs[0]));
    if (cls == OpClass::RmsNorm && op.inputs.size() == 2) {
      int w = op.inputs[1];
      if (x.is_const(w)) {
        wexpr = flit(x.const_value(w));
      } else {
        params += fmt::format(", const {}* __restrict__ pw", x.ty(w));
        args += ", " + x.ptr(w);
        wexpr = "kiln::cg::ld(pw + k)";
      }
    }
  }

  void open() {
    c.f("// {}: {} over dim {} of {} ({})", kp.kernel, op_name(op.kind), dim, shape_str(in.shape),
        kp.strategy());
    c.open(
        fmt::format("__global__ void __launch_bounds__({}) {}({}) {{", threads, kp.kernel, params));
    kernel_entry(c);
  }

  void close() {
    c.close();
    c.line("");
    emit_launch(x.launch, kp.kernel, std::to_string(kp.grid), std::to_string(threads), "0", 1,
                args);
    launch_check(x.launch);
  }

  // A block (RowKernel::block) or a warp per row.
  void row_body(bool block) {
    std::string lanes = block ? std::to_string(threads) : "32";
    if (block) {
      c.line("__shared__ float scratch[32];");
      c.line("const int64_t row = blockIdx.x;");
      c.line("const int lane = threadIdx.x;");
    } else {
      c.f("const int64_t row = (int64_t)blockIdx.x * {} + (threadIdx.x >> 5);", threads / 32);
      c.line("const int lane = threadIdx.x & 31;");
      c.f("if (row >= {}) return;", rows);
    }
    c.f("const {}* xr = p0 + row * {};", ctype(in.dtype), v.R);
    auto reduce = [&](const std::string& var, bool mx) {
      if (block)
        c.f("{0} = kiln::rt::block_reduce({0}, kiln::rt::{1}(), scratch);", var,
            mx ? "MaxOp" : "SumOp");
      else
        c.f("{0} = kiln::rt::warp_reduce<32>({0}, kiln::rt::{1}());", var, mx ? "MaxOp" : "SumOp");
    };
    switch (cls) {
      case OpClass::Reduce:
        c.f("float acc = {};", init);
        c.f("for (int k = lane; k < {}; k += {}) acc = {};", R, lanes,
            is_max ? "fmaxf(acc, kiln::cg::ld(xr + k))" : "acc + kiln::cg::ld(xr + k)");
        reduce("acc", is_max);
        if (op.kind == OpKind::Mean) c.f("acc = acc / {};", flit(double(v.R)));
        c.f("if (lane == 0) y[row] = kiln::rt::from_f32<{}>(acc);", TO);
        break;
      case OpClass::Softmax:
        c.line("float m = -__int_as_float(0x7f800000);");
        c.f("for (int k = lane; k < {}; k += {}) m = fmaxf(m, kiln::cg::ld(xr + k));", R, lanes);
        reduce("m", true);
        c.line("float s = 0.0f;");
        c.f("for (int k = lane; k < {}; k += {}) s += expf(kiln::cg::ld(xr + k) - m);", R, lanes);
        reduce("s", false);
        c.line("const float inv = 1.0f / s;");
        c.f("for (int k = lane; k < {}; k += {}) y[row * {} + k] = "
            "kiln::rt::from_f32<{}>(expf(kiln::cg::ld(xr + k) - m) * inv);",
            R, lanes, v.R, TO);
        break;
      case OpClass::RmsNorm:
        c.line("float ss = 0.0f;");
        c.f("for (int k = lane; k < {}; k += {}) {{ const float t = kiln::cg::ld(xr + k); ss += t "
            "* t; }}",
            R, lanes);
        reduce("ss", false);
        c.f("const float r = 1.0f / sqrtf(ss / {} + {});", flit(double(v.R)), flit(op.attrs.eps));
        c.f("for (int k = lane; k < {}; k += {}) y[row * {} + k] = "
            "kiln::rt::from_f32<{}>(kiln::cg::ld(xr + k) * r * {});",
            R, lanes, v.R, TO, wexpr);
        break;
      case OpClass::Matmul:
      case OpClass::Transpose:
      case OpClass::Binary:
      case OpClass::Unary:
      case OpClass::Constant:
      case OpClass::GraphDefined:
      case OpClass::Input:
      case OpClass::Output:
      case OpClass::Accum:
      case OpClass::Fused:
        KILN_ASSERT(false, "not a row op");
    }
  }

  // A thread per (outer, inner) column.
  void column_body() {
    c.f("const int64_t col = (int64_t)blockIdx.x * {} + threadIdx.x;", threads);
    c.f("if (col >= {}) return;", rows);
    c.f("const int64_t ou = col / {}, in = col % {};", v.inner, v.inner);
    c.f("const {}* xp = p0 + ou * {} + in;", ctype(in.dtype), v.R * v.inner);
    std::string at = fmt::format("kiln::cg::ld(xp + (int64_t)k * {})", v.inner);
    switch (cls) {
      case OpClass::Reduce:
        c.f("float acc = {};", init);
        c.f("for (int k = 0; k < {}; ++k) acc = {};", R,
            is_max ? "fmaxf(acc, " + at + ")" : "acc + " + at);
        if (op.kind == OpKind::Mean) c.f("acc = acc / {};", flit(double(v.R)));
        c.f("y[col] = kiln::rt::from_f32<{}>(acc);", TO);
        break;
      case OpClass::Softmax:
        c.line("float m = -__int_as_float(0x7f800000);");
        c.f("for (int k = 0; k < {}; ++k) m = fmaxf(m, {});", R, at);
        c.line("float s = 0.0f;");
        c.f("for (int k = 0; k < {}; ++k) s += expf({} - m);", R, at);
        c.line("const float inv = 1.0f / s;");
        c.f("for (int k = 0; k < {}; ++k) y[ou * {} + (int64_t)k * {} + in] = "
            "kiln::rt::from_f32<{}>(expf({} - m) * inv);",
            R, v.R * v.inner, v.inner, TO, at);
        break;
      case OpClass::Matmul:
      case OpClass::Transpose:
      case OpClass::Binary:
      case OpClass::Unary:
      case OpClass::Constant:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
      case OpClass::Input:
      case OpClass::Output:
      case OpClass::Accum:
      case OpClass::Fused:
        KILN_ASSERT(false, "rms_norm reduces the innermost dim");
    }
  }
};

}  // namespace

std::optional<RmsRowsKernel> RmsRowsKernel::match(const PlanContext& ctx, int k, KernelPlan& kp) {
  const KernelGraph& g = ctx.g;
  const KernelOp& op = g.ops[k];
  if (op.kind != OpKind::RmsNorm) return std::nullopt;
  const TensorDesc& in = g.tensor(op.inputs[0]);
  const TensorDesc& out = g.tensor(op.outputs[0]);
  const int64_t R = in.shape.back();
  if (R < 2048) return std::nullopt;
  RmsRowsKernel p;
  p.v = 16 / dtype_bytes(in.dtype);
  if (in.dtype != out.dtype || R % p.v != 0) return std::nullopt;
  if (op.inputs.size() == 2 && !ctx.is_const(op.inputs[1]) &&
      g.tensor(op.inputs[1]).dtype != in.dtype)
    return std::nullopt;
  // At most two 16-byte chunks of the row per thread, up to 1024 threads. H100 (session 9,
  // add_rmsnorm of 16384-wide rows, µs; two chunks vs the former four): n 1 3.83 vs 5.20, n 16
  // 3.88 vs 5.31, n 256 10.19 vs 10.64, n 2048 92.3 vs 93.4.
  int threads = 32;
  while (threads < 1024 && cdiv(R / p.v, threads) > 2) threads *= 2;
  if (cdiv(R / p.v, threads) > 8) return std::nullopt;  // more than 64 floats of row per thread
  kp.threads = threads;
  kp.grid = numel(in.shape) / R;
  // The elementwise producer of the input as a prologue: a vector kernel of the same dtype and
  // shape, whose output nothing reads before this kernel.
  const int h = op.inputs[0];
  const int pr = g.producer(h);
  if (pr < 0 || !ctx.can_take_over(pr)) return p;
  const ElementwiseKernel* e = ctx.s.kernels[pr].as<ElementwiseKernel>();
  if (!e || !e->vec) return p;
  for (int t : g.ops[pr].inputs)
    if (!ctx.is_const(t) && (g.tensor(t).dtype != in.dtype || g.tensor(t).shape != in.shape))
      return p;
  for (int j = pr + 1; j < k; ++j)  // a reader before this kernel would find H unwritten
    if (std::find(g.ops[j].inputs.begin(), g.ops[j].inputs.end(), h) != g.ops[j].inputs.end())
      return p;
  p.prologue = true;
  p.stores = ctx.consumers[h] > 1 || ctx.is_output.count(h);
  kp.prologue_op = pr;
  kp.prologue_stores = p.stores;
  return p;
}

std::string RmsRowsKernel::describe() const {
  std::string s = fmt::format("row per block v{}", v);
  if (prologue)
    s += stores ? " (+ elementwise prologue, stores its output)" : " (+ elementwise prologue)";
  return s;
}

KernelCost RmsRowsKernel::cost(const CostContext& x) const {
  return predefined_kernel_cost(x);
}

// rms_norm with a block per row in 16-byte vectors (RmsRowsKernel::match): each thread
// holds NV chunks of V elements of the row in registers (chunk c = threadIdx.x + i * threads),
// sums their squares, reduces over the block, then scales and stores them. With an elementwise
// prologue the chunks are formed from the producer's inputs (rounded to its output dtype, as the
// spec stores it) and, if anything else reads it, stored to its output as well.
void RmsRowsKernel::emit(cgen::GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  const TensorDesc& in = x.g.tensor(op.inputs[0]);
  const TensorDesc& out = x.g.tensor(op.outputs[0]);
  const int64_t R = in.shape.back(), rows = numel(in.shape) / R;
  const int V = 16 / dtype_bytes(in.dtype);
  const int T = kp.threads;
  const int64_t CH = R / V;
  const int64_t NV = (CH + T - 1) / T;
  const bool prologue = kp.prologue_op >= 0;
  const bool store_h = kp.prologue_stores;
  const int h = op.inputs[0];
  const KernelOp* ep = prologue ? &x.g.ops[kp.prologue_op] : nullptr;
  std::vector<std::string> params, args;
  if (prologue) {
    operand_params(x, *ep, params, args);
    if (store_h) {
      params.push_back(fmt::format("{}* __restrict__ hout", x.ty(h)));
      args.push_back(x.ptr(h));
    }
  } else {
    params.push_back(fmt::format("const {}* __restrict__ p0", x.ty(h)));
    args.push_back(x.ptr(h));
  }
  params.push_back(fmt::format("{}* __restrict__ y", ctype(out.dtype)));
  args.push_back(x.ptr(op.outputs[0]));
  std::string wexpr = "1.0f";
  const bool has_w = op.inputs.size() == 2;
  const bool w_vec = has_w && !x.is_const(op.inputs[1]);
  if (has_w && !w_vec) wexpr = flit(x.const_value(op.inputs[1]));
  if (w_vec) {
    params.push_back(fmt::format("const {}* __restrict__ pw", x.ty(op.inputs[1])));
    args.push_back(x.ptr(op.inputs[1]));
    wexpr = "w[q]";
  }
  Code& c = x.kernels;
  c.f("// {}: rms_norm over the last dim of {} ({}; {} x {} elements per thread)", kp.kernel,
      shape_str(in.shape), kp.strategy(), NV, V);
  c.open(fmt::format("__global__ void __launch_bounds__({}) {}({}) {{", T, kp.kernel,
                     fmt::join(params, ", ")));
  kernel_entry(c);
  c.line("__shared__ float scratch[32];");
  c.f("const int64_t base = (int64_t)blockIdx.x * {};", R);
  c.f("float v[{}][{}];", NV, V);
  c.line("float ss = 0.0f;");
  c.line("#pragma unroll");
  c.f("for (int i = 0; i < {}; ++i) {{", NV);
  c.f("  const int64_t e = base + (int64_t)(threadIdx.x + i * {}) * {};", T, V);
  c.f("  if (threadIdx.x + i * {} < {}) {{", T, CH);
  if (prologue) {
    c.set_indent(c.indent() + 2);
    std::vector<std::string> xs = vector_operands(x, *ep, c, V, "e");
    c.set_indent(c.indent() - 2);
    c.line("#pragma unroll");
    c.f("    for (int q = 0; q < {}; ++q) v[i][q] = kiln::rt::to_f32(kiln::rt::from_f32<{}>({}));",
        V, x.ty(h), ew_expr(ep->kind, ep->attrs, xs));
    if (store_h) c.line("    kiln::rt::store16_f32(hout + e, v[i]);");
  } else {
    c.line("    kiln::rt::load16_f32(p0 + e, v[i]);");
  }
  c.line("#pragma unroll");
  c.f("    for (int q = 0; q < {}; ++q) ss += v[i][q] * v[i][q];", V);
  c.line("  }");
  c.line("}");
  c.line("ss = kiln::rt::block_reduce(ss, kiln::rt::SumOp(), scratch);");
  c.f("const float r = 1.0f / sqrtf(ss / {} + {});", flit(double(R)), flit(op.attrs.eps));
  c.line("#pragma unroll");
  c.f("for (int i = 0; i < {}; ++i) {{", NV);
  c.f("  const int64_t c = (int64_t)(threadIdx.x + i * {}) * {};", T, V);
  c.f("  if (threadIdx.x + i * {} < {}) {{", T, CH);
  if (w_vec) {
    c.f("    float w[{}];", V);
    c.line("    kiln::rt::load16_f32(pw + c, w);");
  }
  c.f("    float o[{}];", V);
  c.line("#pragma unroll");
  c.f("    for (int q = 0; q < {}; ++q) o[q] = v[i][q] * r * {};", V, wexpr);
  c.line("    kiln::rt::store16_f32(y + base + c, o);");
  c.line("  }");
  c.line("}");
  c.close();
  c.line("");
  emit_launch(x.launch, kp.kernel, std::to_string(rows), std::to_string(T), "0", 1,
              fmt::format("{}", fmt::join(args, ", ")));
  launch_check(x.launch);
}

std::optional<RowKernel> RowKernel::match(const PlanContext& ctx, int k, KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (!is_row_op(op) || inner_of(ctx.g, op) != 1) return std::nullopt;
  const Shape& xs = ctx.g.tensor(op.inputs[0]).shape;
  const int64_t len = xs[reduced_dim(ctx.g, op)], rows = numel(xs) / len;
  RowKernel p;
  p.block = len >= 2048;
  kp.threads = p.block ? 512 : 256;
  kp.grid = p.block ? rows : cdiv(rows, 8);
  return p;
}

std::string RowKernel::describe() const {
  return block ? "row per block" : "row per warp";
}

KernelCost RowKernel::cost(const CostContext& x) const {
  return predefined_kernel_cost(x);
}

void RowKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  RowEmitter r(x, op, kp);
  r.open();
  r.row_body(block);
  r.close();
}

std::optional<ColumnKernel> ColumnKernel::match(const PlanContext& ctx, int k, KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (!is_row_op(op) || inner_of(ctx.g, op) == 1) return std::nullopt;
  const Shape& xs = ctx.g.tensor(op.inputs[0]).shape;
  kp.threads = 256;
  kp.grid = cdiv(numel(xs) / xs[reduced_dim(ctx.g, op)], 256);
  return ColumnKernel{};
}

std::string ColumnKernel::describe() const {
  return "column per thread";
}

KernelCost ColumnKernel::cost(const CostContext& x) const {
  return predefined_kernel_cost(x);
}

void ColumnKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  RowEmitter r(x, op, kp);
  r.open();
  r.column_body();
  r.close();
}

}  // namespace kiln
