// The emitter's driver: one standalone .cu per kernel graph. Predefined ops get generic kernels
// (elementwise with broadcast and 16-byte vectors, gather transposes, row/column reductions,
// softmax and rms_norm, tensor-core GEMM/GEMV or an FMA matmul); graph-defined ops get the
// kernel emit_block.cpp writes from their block graph. The launch function places every tensor
// (arguments, or the workspace for intermediates) and enqueues the kernels in graph order.
#include <algorithm>
#include <array>
#include <set>

#include "emit_internal.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/print.h"
#include "kiln/version.h"

namespace kiln {

namespace cgen {
namespace {

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

struct GraphCtx {
  const KernelGraph& g;
  const Schedule& s;
  Code kernels;
  Code launch;

  bool is_const(int t) const {
    int p = g.producer(t);
    return p >= 0 && g.ops[p].kind == OpKind::Constant;
  }
  double const_value(int t) const { return g.ops[g.producer(t)].attrs.value; }
  std::string ptr(int t) const { return fmt::format("t{}", t); }
  const char* ty(int t) const { return ctype(g.tensor(t).dtype); }
};

// [outer, R, inner] view of a reduction over `dim` of shape x.
struct RowView {
  int64_t outer = 1, R = 1, inner = 1;
};
RowView row_view(const Shape& x, int dim) {
  RowView v;
  for (int d = 0; d < static_cast<int>(x.size()); ++d) {
    if (d < dim) v.outer *= x[d];
    if (d == dim) v.R = x[d];
    if (d > dim) v.inner *= x[d];
  }
  return v;
}

void launch_check(Code& c) {
  c.line("if ((err = cudaGetLastError()) != cudaSuccess) return err;");
}

// The kernel parameters `const T* p<j>` (and launch arguments) of op's non-constant inputs j;
// constants are folded into the expressions instead. Returns the indices j it added.
std::vector<int> operand_params(GraphCtx& x, const KernelOp& op, std::vector<std::string>& params,
                                std::vector<std::string>& args) {
  std::vector<int> loaded;
  for (size_t j = 0; j < op.inputs.size(); ++j) {
    int t = op.inputs[j];
    if (x.is_const(t)) continue;
    params.push_back(fmt::format("const {}* __restrict__ p{}", x.ty(t), j));
    args.push_back(x.ptr(t));
    loaded.push_back(static_cast<int>(j));
  }
  return loaded;
}

// Loads V consecutive elements of each of op's non-constant inputs, at element offset `at` of
// p<j>, into `float a<j>[V]`, and returns the per-element operand expressions for ew_expr (a<j>[q],
// or the folded constant). V elements are 16 bytes of the inputs' dtype.
std::vector<std::string> vector_operands(GraphCtx& x, const KernelOp& op, Code& c, int V,
                                         const std::string& at) {
  std::vector<std::string> xs;
  for (size_t j = 0; j < op.inputs.size(); ++j) {
    int t = op.inputs[j];
    if (x.is_const(t)) {
      xs.push_back(flit(x.const_value(t)));
    } else {
      c.f("float a{}[{}];", j, V);
      c.f("kiln::rt::load16_f32(p{} + {}, a{});", j, at, j);
      xs.push_back(fmt::format("a{}[q]", j));
    }
  }
  return xs;
}

// Operand expression of a predefined elementwise kernel: a folded constant or a load.
void emit_elementwise(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) {
  if (kp.fused_into >= 0) return;  // a row kernel's prologue does it
  const TensorDesc& out = x.g.tensor(op.outputs[0]);
  int64_t N = numel(out.shape);
  std::vector<std::string> params, args;
  std::vector<int> loaded = operand_params(x, op, params, args);
  params.push_back(fmt::format("{}* __restrict__ y", ctype(out.dtype)));
  args.push_back(x.ptr(op.outputs[0]));
  bool vec = kp.kind == Strategy::ElementwiseVec;
  for (int j : loaded) vec &= x.g.tensor(op.inputs[j]).dtype == out.dtype;
  int V = 16 / dtype_bytes(out.dtype);
  vec &= N % V == 0;
  Code& c = x.kernels;
  c.f("// {}: {} {} ({})", kp.kernel, op_name(op.kind), shape_str(out.shape),
      vec ? "16-byte vectors" : "broadcast");
  c.open(fmt::format("__global__ void __launch_bounds__(256) {}({}) {{", kp.kernel,
                     fmt::join(params, ", ")));
  if (vec) {
    c.open(
        fmt::format("for (int64_t e = (int64_t)blockIdx.x * 256 + threadIdx.x; e < {}; e += "
                    "(int64_t)gridDim.x * 256) {{",
                    N / V));
    std::vector<std::string> xs = vector_operands(x, op, c, V, fmt::format("e * {}", V));
    c.f("float r[{}];", V);
    c.line("#pragma unroll");
    c.f("for (int q = 0; q < {}; ++q) r[q] = {};", V, ew_expr(op.kind, op.attrs, xs));
    c.f("kiln::rt::store16_f32(y + e * {}, r);", V);
    c.close();
  } else {
    c.open(
        fmt::format("for (int64_t e = (int64_t)blockIdx.x * 256 + threadIdx.x; e < {}; e += "
                    "(int64_t)gridDim.x * 256) {{",
                    N));
    std::vector<std::string> idx = unravel(c, "e", out.shape, "i", "int64_t");
    std::vector<std::string> xs;
    for (size_t j = 0; j < op.inputs.size(); ++j) {
      int t = op.inputs[j];
      if (x.is_const(t)) {
        xs.push_back(flit(x.const_value(t)));
        continue;
      }
      const Shape& s = x.g.tensor(t).shape;
      std::string off = offset_expr(bcast_index(s, out.shape, idx), strides_of(s));
      xs.push_back(fmt::format("kiln::cg::ld(p{} + {})", j, off));
    }
    c.f("y[e] = kiln::rt::from_f32<{}>({});", ctype(out.dtype), ew_expr(op.kind, op.attrs, xs));
    c.close();
  }
  c.close();
  c.line("");
  x.launch.f("{}<<<{}, 256, 0, stream>>>({});", kp.kernel, kp.grid, fmt::join(args, ", "));
  launch_check(x.launch);
}

void emit_transpose(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) {
  const TensorDesc& out = x.g.tensor(op.outputs[0]);
  const TensorDesc& in = x.g.tensor(op.inputs[0]);
  Code& c = x.kernels;
  int64_t N = numel(out.shape);
  c.f("// {}: transpose {} -> {}", kp.kernel, shape_str(in.shape), shape_str(out.shape));
  c.open(fmt::format(
      "__global__ void __launch_bounds__(256) {}(const {}* __restrict__ p0, {}* __restrict__ y) {{",
      kp.kernel, ctype(in.dtype), ctype(out.dtype)));
  c.open(
      fmt::format("for (int64_t e = (int64_t)blockIdx.x * 256 + threadIdx.x; e < {}; e += "
                  "(int64_t)gridDim.x * 256) {{",
                  N));
  std::vector<std::string> idx = unravel(c, "e", out.shape, "i", "int64_t");
  std::vector<std::string> in_idx(idx.size());
  for (size_t d = 0; d < idx.size(); ++d) in_idx[op.attrs.perm[d]] = idx[d];
  c.f("y[e] = kiln::rt::from_f32<{}>(kiln::cg::ld(p0 + {}));", ctype(out.dtype),
      offset_expr(in_idx, strides_of(in.shape)));
  c.close();
  c.close();
  c.line("");
  if (x.is_const(op.inputs[0])) KILN_ASSERT(false, "transpose of a scalar constant");
  x.launch.f("{}<<<{}, 256, 0, stream>>>({}, {});", kp.kernel, kp.grid, x.ptr(op.inputs[0]),
             x.ptr(op.outputs[0]));
  launch_check(x.launch);
}

// rms_norm with a block per row in 16-byte vectors (plan_schedule's plan_rms_rows): each thread
// holds NV chunks of V elements of the row in registers (chunk c = threadIdx.x + i * threads),
// sums their squares, reduces over the block, then scales and stores them. With an elementwise
// prologue the chunks are formed from the producer's inputs (rounded to its output dtype, as the
// spec stores it) and, if anything else reads it, stored to its output as well.
void emit_rms_rows(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) {
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
      shape_str(in.shape), kp.strategy, NV, V);
  c.open(fmt::format("__global__ void __launch_bounds__({}) {}({}) {{", T, kp.kernel,
                     fmt::join(params, ", ")));
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
  x.launch.f("{}<<<{}, {}, 0, stream>>>({});", kp.kernel, rows, T, fmt::join(args, ", "));
  launch_check(x.launch);
}

// Reductions, softmax and rms_norm share the row structure: a warp or a block per row when the
// reduced dim is innermost, else a thread per column.
void emit_rowwise(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) {
  if (kp.fused_into >= 0) return;  // its consumer's GEMV does it
  if (kp.kind == Strategy::RowPerBlockVec) return emit_rms_rows(x, op, kp);
  const OpClass cls = op_info(op.kind).cls;
  const TensorDesc& in = x.g.tensor(op.inputs[0]);
  const TensorDesc& out = x.g.tensor(op.outputs[0]);
  int dim = cls == OpClass::RmsNorm ? static_cast<int>(in.shape.size()) - 1
                                    : static_cast<int>(op.attrs.dim);
  RowView v = row_view(in.shape, dim);
  int64_t rows = v.outer * v.inner;
  bool has_w = cls == OpClass::RmsNorm && op.inputs.size() == 2;
  KILN_ASSERT(!x.is_const(op.inputs[0]), "{} of a constant", op_name(op.kind));
  Code& c = x.kernels;
  std::string params = fmt::format("const {}* __restrict__ p0, {}* __restrict__ y", ctype(in.dtype),
                                   ctype(out.dtype));
  std::string args = fmt::format("{}, {}", x.ptr(op.inputs[0]), x.ptr(op.outputs[0]));
  std::string wexpr = "1.0f";
  if (has_w) {
    int w = op.inputs[1];
    if (x.is_const(w)) {
      wexpr = flit(x.const_value(w));
    } else {
      params += fmt::format(", const {}* __restrict__ pw", x.ty(w));
      args += ", " + x.ptr(w);
      wexpr = "kiln::cg::ld(pw + k)";
    }
  }
  const char* TO = ctype(out.dtype);
  bool is_max = op.kind == OpKind::Max;
  std::string init = is_max ? "-__int_as_float(0x7f800000)" : "0.0f";
  c.f("// {}: {} over dim {} of {} ({})", kp.kernel, op_name(op.kind), dim, shape_str(in.shape),
      kp.strategy);
  int threads = kp.threads;
  c.open(
      fmt::format("__global__ void __launch_bounds__({}) {}({}) {{", threads, kp.kernel, params));
  std::string R = std::to_string(v.R);
  if (v.inner == 1) {
    bool block = kp.kind == Strategy::RowPerBlock;
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
  } else {
    // A thread per (outer, inner) column.
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
  c.close();
  c.line("");
  x.launch.f("{}<<<{}, {}, 0, stream>>>({});", kp.kernel, kp.grid, threads, args);
  launch_check(x.launch);
}

void emit_matmul(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) {
  const TensorDesc& a = x.g.tensor(op.inputs[0]);
  const TensorDesc& b = x.g.tensor(op.inputs[1]);
  const TensorDesc& out = x.g.tensor(op.outputs[0]);
  int64_t M = a.shape[a.shape.size() - 2], K = a.shape.back(), N = b.shape.back();
  // Batch dims of the output (at most 2 for rank 4), and each operand's broadcast strides.
  Shape ob(out.shape.begin(), out.shape.end() - 2);
  while (ob.size() < 2) ob.insert(ob.begin(), 1);
  auto bstrides = [&](const TensorDesc& t) {
    Shape tb(t.shape.begin(), t.shape.end() - 2);
    std::vector<int64_t> st = strides_of(t.shape);
    std::vector<int64_t> r(2, 0);
    for (size_t k = 0; k < tb.size(); ++k) {
      size_t od = k + (2 - tb.size());
      if (tb[k] != 1) r[od] = st[k];
    }
    return r;
  };
  std::vector<int64_t> as = bstrides(a), bs = bstrides(b);
  const char* TA = ctype(a.dtype);
  const char* TO = ctype(out.dtype);
  Code& L = x.launch;
  x.kernels.f("// {}: matmul [{}] x {} x {} x {} ({})", kp.kernel, ob[0] * ob[1], M, N, K,
              kp.strategy);
  x.kernels.line("");
  L.open("{");
  if (kp.kind == Strategy::Gemv) {
    int mt = static_cast<int>(cdiv(M, 8));
    // A prologue here is A = rms_norm(X) (plan_schedule fused it): read X, scale rows at the end.
    const bool rms = kp.prologue_op >= 0;
    const KernelOp* rms_op = rms ? &x.g.ops[kp.prologue_op] : nullptr;
    const int a_in = rms ? rms_op->inputs[0] : op.inputs[0];
    const std::string epi = rms ? fmt::format("kiln::rt::GemvRmsNorm{{{}, {}}}",
                                              flit(1.0 / double(K)), flit(rms_op->attrs.eps))
                                : std::string("kiln::rt::GemvIdentity()");
    // Template arguments and operands shared by both launchers; unroll and blocks per SM are
    // plan_schedule's gemv rule.
    const std::string targs =
        fmt::format("{}, {}, {}, 1, {}, {}, {}, {}, {}", TA, TO, mt, kp.gemv_warps_n,
                    kp.gemv_warps_k, kp.gemv_unroll, kp.gemv_min_blocks,
                    rms ? "kiln::rt::GemvRmsNorm" : "kiln::rt::GemvIdentity");
    const std::string operands = fmt::format(
        "{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}", x.ptr(a_in), K, x.ptr(op.inputs[1]),
        x.ptr(op.inputs[1]), N, x.ptr(op.outputs[0]), N, M, N, K, kp.splits);
    if (const std::optional<GemvTmaShape>& v = kp.gemv_tma) {
      // The TMA-streamed GEMV.
      const std::string tma_targs =
          fmt::format("{}, {}, {}, 1, {}, {}, {}, 1, {}", TA, TO, v->mt, v->bn, v->bk, v->stages,
                      rms ? "kiln::rt::GemvRmsNorm" : "kiln::rt::GemvIdentity");
      L.f("err = kiln::rt::gemv_tma_launch<{}>({}, stream, {});", tma_targs, operands, epi);
    } else if (kp.gemv_cluster) {
      L.f("err = kiln::rt::gemv_cluster_launch<{}>({}, stream, {});", targs, operands, epi);
    } else {
      if (kp.splits > 1) {
        int64_t col_blocks = cdiv(N, 64 * kp.gemv_warps_n);
        L.f("float* gw = reinterpret_cast<float*>(ws + {});", kp.scratch_offset);
        L.f("int* counters = reinterpret_cast<int*>(ws + {});",
            kp.scratch_offset + kp.scratch_bytes - col_blocks * 4);
        L.f("if ((err = cudaMemsetAsync(counters, 0, {}, stream)) != cudaSuccess) return err;",
            col_blocks * 4);
      } else {
        L.line("float* gw = nullptr;");
        L.line("int* counters = nullptr;");
      }
      L.f("err = kiln::rt::gemv_launch<{}>({}, gw, counters, stream, {});", targs, operands, epi);
    }
    L.line("if (err != cudaSuccess) return err;");
  } else if (kp.kind == Strategy::WgmmaGemm) {
    L.f("err = kiln::rt::wgmma_ws_gemm_launch<kiln::rt::WgmmaGemmWS<{}, 1, 6>, {}, "
        "kiln::rt::WgmmaEpiIdentity>({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
        "kiln::rt::WgmmaEpiIdentity(), stream);",
        TA, TO, x.ptr(op.inputs[0]), K, x.ptr(op.inputs[1]), x.ptr(op.inputs[1]), N,
        x.ptr(op.outputs[0]), N, M, N, K);
    L.line("if (err != cudaSuccess) return err;");
  } else if (kp.kind == Strategy::GemmTc64 || kp.kind == Strategy::GemmTc128) {
    bool small = kp.kind == Strategy::GemmTc64;
    std::string cfg = small ? fmt::format("kiln::rt::GemmConfig<{}, 64, 128, 32, 2, 2, 4>", TA)
                            : fmt::format("kiln::rt::GemmConfig<{}, 128, 128, 32, 2, 4, 3>", TA);
    int bm = small ? 64 : 128;
    L.f("using Cfg = {};", cfg);
    L.f("constexpr auto kern = kiln::cg::gemm_batched_kernel<Cfg, {}>;", TO);
    L.line(
        "if ((err = kiln::rt::raise_smem_limit_once<kern>(Cfg::kSmemBytes)) != cudaSuccess) "
        "return err;");
    int64_t nb = ob[0] * ob[1];
    int64_t chunk = kp.splits > 1 ? cdiv(cdiv(K, kp.splits), 32) * 32 : K;
    std::string part = kp.splits > 1
                           ? fmt::format("reinterpret_cast<float*>(ws + {})", kp.scratch_offset)
                           : "nullptr";
    L.f("kern<<<dim3({}, {}, {}), Cfg::kThreads, Cfg::kSmemBytes, stream>>>({}, {}, {}, {}, {}, "
        "{}, {}, {}, {}ll, {}ll, {}ll, {}ll, {}, {});",
        cdiv(N, 128), cdiv(M, bm), nb * kp.splits, x.ptr(op.inputs[0]), x.ptr(op.inputs[1]),
        x.ptr(op.outputs[0]), M, N, K, nb, ob[1], as[0], as[1], bs[0], bs[1], chunk, part);
    launch_check(L);
    if (kp.splits > 1) {
      int64_t count = nb * M * N;
      L.f("kiln::cg::splitk_sum_kernel<{}><<<{}, 256, 0, stream>>>({}, {}, {}, {}ll);", TO,
          std::min<int64_t>(cdiv(count, 256), 4096), part, x.ptr(op.outputs[0]), kp.splits, count);
      launch_check(L);
    }
  } else {
    KILN_ASSERT(kp.kind == Strategy::Fma, "{}: not a matmul plan ({})", kp.kernel, kp.strategy);
    L.f("kiln::cg::matmul_fma_kernel<{}, {}, {}><<<dim3({}, {}, {}), 256, 0, stream>>>({}, {}, {}, "
        "{}, {}, {}, {}, {}ll, {}ll, {}ll, {}ll);",
        TA, ctype(b.dtype), TO, cdiv(N, 32), cdiv(M, 32), ob[0] * ob[1], x.ptr(op.inputs[0]),
        x.ptr(op.inputs[1]), x.ptr(op.outputs[0]), M, N, K, ob[1], as[0], as[1], bs[0], bs[1]);
    launch_check(L);
  }
  L.close();
}

// A graph-defined op that is a GEMM with an elementwise epilogue (contraction.h): an epilogue
// functor evaluated at each output element, and a launch of the runtime's warp-specialized
// TMA + wgmma GEMM (128 x 128 x 64 tiles, 4 stages for one weight, 3 for two).
void emit_contraction(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) {
  const ContractionPlan& c = *kp.contraction;
  const BlockGraph& bg = *op.block;
  const std::string epi = "Epi_" + kp.kernel;
  Code& K = x.kernels;
  K.f("// {}: {} = epilogue(A[{}, {}] x B[{}, {}]) ({})", kp.kernel, bg.outputs[0].name, c.m, c.k,
      c.k, c.n, kp.strategy);
  K.open(fmt::format("struct {} {{", epi));
  for (size_t e = 0; e < c.epi_inputs.size(); ++e)
    K.f("const {}* e{}_ptr;", ctype(bg.inputs[c.epi_inputs[e]].dtype), e);
  if (c.gemv) {
    // The GEMV's epilogue interface (runtime/gemv.cuh): one more argument, the row's sum of
    // squares, which this functor does not ask for.
    K.line("static constexpr bool kRowSumSq = false;");
    K.open(
        "__device__ __forceinline__ float operator()(float v0, float v1, int m, int n, float) "
        "const {");
  } else {
    K.open("__device__ __forceinline__ float operator()(float v0, float v1, int m, int n) const {");
  }
  K.line("(void)v0; (void)v1; (void)m; (void)n;");
  if (!c.epi_inputs.empty()) K.f("const int64_t at = int64_t(m) * {} + n;", c.n);
  for (size_t e = 0; e < c.epi_inputs.size(); ++e)
    K.f("const float e{0} = kiln::rt::to_f32(e{0}_ptr[at]);", e);
  for (const std::string& st : c.epi_statements) K.line(st);
  K.f("return {};", c.result);
  K.close();
  K.close("};");
  K.line("");

  const int nb = static_cast<int>(c.b.size());
  const int stages = nb == 1 ? 6 : 4;  // the measured best (runtime/wgmma.cuh, WgmmaGemmWS)
  std::vector<std::string> epi_args;
  for (int e : c.epi_inputs) epi_args.push_back(x.ptr(op.inputs[e]));
  Code& L = x.launch;
  L.open("{");
  if (const std::optional<GemvTmaShape>& v = c.gemv) {
    L.f("err = kiln::rt::gemv_tma_launch<{}, {}, {}, {}, {}, {}, {}, 1, {}>({}, {}, {}, {}, {}, "
        "{}, {}, {}, {}, {}, {}, stream, {}{{{}}});",
        ctype(c.ab), ctype(c.out), v->mt, nb, v->bn, v->bk, v->stages, epi, x.ptr(op.inputs[c.a]),
        c.k, x.ptr(op.inputs[c.b[0]]), x.ptr(op.inputs[c.b[nb - 1]]), c.n, x.ptr(op.outputs[0]),
        c.n, c.m, c.n, c.k, v->splits, epi, fmt::join(epi_args, ", "));
    L.line("if (err != cudaSuccess) return err;");
    L.close();
    return;
  }
  L.f("err = kiln::rt::wgmma_ws_gemm_launch<kiln::rt::WgmmaGemmWS<{}, {}, {}>, {}, {}>({}, {}, "
      "{}, {}, {}, {}, {}, {}, {}, {}, {}{{{}}}, stream);",
      ctype(c.ab), nb, stages, ctype(c.out), epi, x.ptr(op.inputs[c.a]), c.k,
      x.ptr(op.inputs[c.b[0]]), x.ptr(op.inputs[c.b[nb - 1]]), c.n, x.ptr(op.outputs[0]), c.n, c.m,
      c.n, c.k, epi, fmt::join(epi_args, ", "));
  L.line("if (err != cudaSuccess) return err;");
  L.close();
}

// sum_g coef[g] * g over the block graph's grid indices (b0, b1, b2), as C++.
std::string affine(const std::array<int64_t, 3>& coef, int dims) {
  std::string e;
  for (int g = 0; g < dims; ++g)
    if (coef[g] != 0) e += fmt::format("{}{}ll * b{}", e.empty() ? "" : " + ", coef[g], g);
  return e.empty() ? "0" : e;
}

// A graph-defined op that is attention's two-contraction chain (attention.h): a functor with the
// box coordinates, the elementwise map, the row feeds and the savers, and a launch of the
// runtime's attention kernel on (blocks x mt / 64) CTAs of 64 rows.
void emit_attention(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) {
  const AttentionPlan& a = *kp.attention;
  const std::string fn = "AttnFn_" + kp.kernel;
  const int dims = static_cast<int>(a.grid.size());
  const int64_t sub = a.mt / 64;
  const int R = std::max(1, a.rows);
  Code& K = x.kernels;
  K.f("// {}: {}", kp.kernel, kp.strategy);
  K.open(fmt::format("struct {} {{", fn));
  K.f("static constexpr int kRows = {};", a.rows);
  for (size_t i = 0; i < a.stores.size(); ++i) K.f("{}* out{};", ctype(a.stores[i].dtype), i);
  // CTA (bx, by, bz) is sub-tile bx % sub of graph block (bx / sub, by, bz).
  auto block_index = [&]() {
    K.f("const int64_t b0 = bx / {0}, b1 = by, b2 = bz, sub = bx % {0};", sub);
    K.line("(void)b0; (void)b1; (void)b2; (void)sub;");
  };
  K.open("__device__ __forceinline__ kiln::rt::AttnCoords coords(int bx, int by, int bz) const {");
  block_index();
  K.line("kiln::rt::AttnCoords c;");
  K.f("c.a_row = int({} + sub * 64);", affine(a.q.row_coef, dims));
  K.f("c.a_col = int({});", affine(a.q.col_coef, dims));
  K.f("c.k_row = int({});", affine(a.k.row_coef, dims));
  K.f("c.k_col = int({});", affine(a.k.col_coef, dims));
  K.f("c.v_row = int({});", affine(a.v.row_coef, dims));
  K.f("c.v_col = int({});", affine(a.v.col_coef, dims));
  K.line("return c;");
  K.close();
  K.open(fmt::format("__device__ __forceinline__ float elem(float s, float (&r)[{}]) const {{", R));
  K.line("(void)r;");
  for (const std::string& st : a.elem_statements) K.line(st);
  for (int j = 0; j < a.rows; ++j) K.f("r[{}] += {};", j, a.feeds[j]);
  K.f("return {};", a.p);
  K.close();
  K.open(fmt::format(
      "__device__ __forceinline__ void store2(int bx, int by, int bz, int m, int n, float o0, "
      "float o1, const float (&r)[{}]) const {{",
      R));
  K.line("(void)r; (void)n; (void)o0; (void)o1;");
  block_index();
  K.line("const int64_t row = m + sub * 64;");
  for (size_t i = 0; i < a.stores.size(); ++i) {
    const AttentionStore& st = a.stores[i];
    if (st.row) continue;
    K.open("{");
    K.open("auto f = [&](float o) {");
    K.line("(void)o;");
    for (const std::string& l : st.statements) K.line(l);
    K.f("return {};", st.result);
    K.close("};");
    K.f("{}* p = out{} + ({} + row * {}ll + n);", ctype(st.dtype), i, affine(st.base_coef, dims),
        st.ld);
    if (st.dtype == DType::F32)
      K.line("*reinterpret_cast<float2*>(p) = make_float2(f(o0), f(o1));");
    else
      K.f("*reinterpret_cast<uint32_t*>(p) = kiln::rt::pack2<{}>(f(o0), f(o1));", ctype(st.dtype));
    K.close();
  }
  K.close();
  K.open(fmt::format(
      "__device__ __forceinline__ void store_row(int bx, int by, int bz, int m, const float "
      "(&r)[{}]) const {{",
      R));
  K.line("(void)r;");
  block_index();
  K.line("const int64_t row = m + sub * 64;");
  for (size_t i = 0; i < a.stores.size(); ++i) {
    const AttentionStore& st = a.stores[i];
    if (!st.row) continue;
    K.open("{");
    for (const std::string& l : st.statements) K.line(l);
    K.f("out{}[{} + row * {}ll] = kiln::rt::from_f32<{}>({});", i, affine(st.base_coef, dims),
        st.ld, ctype(st.dtype), st.result);
    K.close();
  }
  K.close();
  K.close("};");
  K.line("");

  std::vector<std::string> outs;
  for (const AttentionStore& st : a.stores) outs.push_back(x.ptr(op.outputs[st.io]));
  int64_t g[3] = {1, 1, 1};
  for (int d = 0; d < dims; ++d) g[d] = a.grid[d];
  auto view = [](const AttentionView& v) {
    return fmt::format("kiln::rt::AttnView{{{}ll, {}ll, {}ll}}", v.rows, v.cols, v.cols);
  };
  Code& L = x.launch;
  L.open("{");
  L.f("using Cfg = kiln::rt::AttnCfg<{}, 1, {}, {}, {}, {}, {}, {}, {}, {}>;", ctype(a.ab), a.d,
      a.dv, kp.attn_chunk, kp.attn_stages, a.k_nmajor ? "true" : "false",
      a.v_nmajor ? "true" : "false", kp.attn_min_blocks, kp.attn_key_split);
  L.f("const {} f{{{}}};", fn, fmt::join(outs, ", "));
  L.f("err = kiln::rt::attn_launch<Cfg>({}, {}, {}, {}, {}, {}, dim3({}, {}, {}), {}, f, stream);",
      x.ptr(op.inputs[a.q.io]), view(a.q), x.ptr(op.inputs[a.k.io]), view(a.k),
      x.ptr(op.inputs[a.v.io]), view(a.v), g[0] * sub, g[1], g[2], a.keys / kp.attn_chunk);
  L.line("if (err != cudaSuccess) return err;");
  L.close();
}

void emit_graph_defined(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) {
  if (kp.contraction) {
    emit_contraction(x, op, kp);
    return;
  }
  if (kp.attention) {
    emit_attention(x, op, kp);
    return;
  }
  emit_block_kernel(x.g, op, kp, x.kernels);
  const BlockGraph& bg = *op.block;
  std::vector<std::string> args;
  for (int t : op.inputs) args.push_back(x.ptr(t));
  for (int t : op.outputs) args.push_back(x.ptr(t));
  if (kp.block->global_bytes_per_block > 0)
    args.push_back(fmt::format("reinterpret_cast<float*>(ws + {})", x.s.block_scratch_offset));
  int64_t g[3] = {1, 1, 1};
  for (size_t d = 0; d < bg.grid.size(); ++d) g[d] = bg.grid[d];
  Code& L = x.launch;
  L.open("{");
  if (kp.block->smem_bytes > 48 * 1024)
    L.f("if ((err = kiln::rt::raise_smem_limit_once<{}>(kSmem_{})) != cudaSuccess) return err;",
        kp.kernel, kp.kernel);
  L.f("{}<<<dim3({}, {}, {}), {}, kSmem_{}, stream>>>({});", kp.kernel, g[0], g[1], g[2],
      bg.block_threads, kp.kernel, fmt::join(args, ", "));
  launch_check(L);
  L.close();
}

}  // namespace

void emit_graph_body(const KernelGraph& g, const Schedule& s, const std::string& name, Code& out) {
  GraphCtx x{g, s, {}, {}};
  x.launch.set_indent(1);
  for (const KernelPlan& kp : s.kernels) {
    const KernelOp& op = g.ops[kp.op];
    switch (op_info(op.kind).cls) {
      case OpClass::Constant:
        if (kp.kind == Strategy::Fill) {
          x.launch.f("kiln::cg::fill_scalar_kernel<<<1, 1, 0, stream>>>({}, {});",
                     x.ptr(op.outputs[0]), flit(op.attrs.value));
          launch_check(x.launch);
        }
        break;
      case OpClass::Binary:
      case OpClass::Unary:
        emit_elementwise(x, op, kp);
        break;
      case OpClass::Transpose:
        emit_transpose(x, op, kp);
        break;
      case OpClass::Reduce:
      case OpClass::Softmax:
      case OpClass::RmsNorm:
        emit_rowwise(x, op, kp);
        break;
      case OpClass::Matmul:
        emit_matmul(x, op, kp);
        break;
      case OpClass::GraphDefined:
        emit_graph_defined(x, op, kp);
        break;
      case OpClass::Input:
      case OpClass::Output:
      case OpClass::Accum:
      case OpClass::Fused:
        KILN_ASSERT(false, "no kernel for {}", op_name(op.kind));
    }
  }
  const std::string ns = "kiln_gen_" + name;
  out.f("namespace {} {{", ns);
  out.line("");
  out.append(x.kernels);
  out.f("}}  // namespace {}", ns);
  out.line("");
  out.f("extern \"C\" size_t kiln_{}_workspace_bytes(void) {{ return {}; }}", name,
        s.workspace_bytes);
  out.line("");
  std::vector<std::string> params;
  for (size_t i = 0; i < g.inputs.size(); ++i) params.push_back(fmt::format("const void* in{}", i));
  for (size_t i = 0; i < g.outputs.size(); ++i) params.push_back(fmt::format("void* out{}", i));
  params.push_back("void* workspace");
  params.push_back("cudaStream_t stream");
  out.open(fmt::format("extern \"C\" cudaError_t kiln_{}({}) {{", name, fmt::join(params, ", ")));
  out.f("using namespace {};", ns);
  out.line("cudaError_t err = cudaSuccess;");
  out.line("unsigned char* const ws = static_cast<unsigned char*>(workspace);");
  out.line("(void)ws;");
  // Tensor placement.
  std::set<int> placed;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    int t = g.inputs[i];
    if (placed.insert(t).second)
      out.f("const {0}* const t{1} = static_cast<const {0}*>(in{2});", x.ty(t), t, i);
  }
  std::vector<std::string> copies;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    int t = g.outputs[i];
    int64_t bytes = numel(g.tensor(t).shape) * dtype_bytes(g.tensor(t).dtype);
    if (placed.insert(t).second) {
      out.f("{0}* const t{1} = static_cast<{0}*>(out{2});", x.ty(t), t, i);
    } else {
      copies.push_back(fmt::format(
          "if ((err = cudaMemcpyAsync(out{}, t{}, {}, cudaMemcpyDeviceToDevice, stream)) != "
          "cudaSuccess) return err;",
          i, t, bytes));
    }
  }
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (s.tensor_offset[t] >= 0 && placed.insert(static_cast<int>(t)).second)
      out.f("{0}* const t{1} = reinterpret_cast<{0}*>(ws + {2});", x.ty(static_cast<int>(t)), t,
            s.tensor_offset[t]);
  out.append(x.launch);
  for (const std::string& c : copies) out.line(c);
  out.line("return cudaSuccess;");
  out.close();
}

}  // namespace cgen

namespace {

std::string comment_block(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string l = text.substr(start, end - start);
    out += l.empty() ? "//\n" : "//   " + l + "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string nvcc_command(const std::string& cu_path, const std::string& out, Arch arch,
                         bool both_archs) {
  bool object = out.size() > 2 && out.substr(out.size() - 2) == ".o";
  std::string gen = arch == Arch::Sm80 ? "-gencode=arch=compute_80,code=sm_80"
                                       : "-gencode=arch=compute_90a,code=sm_90a";
  if (both_archs && object)
    gen = "-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80";
  return fmt::format("nvcc -O3 -std=c++17 {} {}{} -o {}", gen, object ? "-c " : "", cu_path, out);
}

std::string emitted_name(const KernelGraph& g, const EmitOptions& opt) {
  std::string name = opt.name.empty() ? g.name : opt.name;
  if (!is_valid_name(name))
    throw UserError(ErrorCode::Name,
                    fmt::format("invalid name \"{}\" for the emitted symbols", name),
                    "names match [A-Za-z_][A-Za-z0-9_]*");
  return name;
}

namespace {

// The .cu's file name for its header comment, and the object its build line writes.
std::string cu_file_name(const std::string& name, const EmitOptions& opt) {
  return opt.cu_file.empty() ? "kiln_" + name + ".cu" : opt.cu_file;
}
std::string object_name(const std::string& cu) {
  size_t dot = cu.rfind('.');
  return (dot == std::string::npos || dot == 0 ? cu : cu.substr(0, dot)) + ".o";
}

}  // namespace

std::string emit_cuda(const KernelGraph& g, const EmitOptions& opt) {
  Schedule s = plan_schedule(g, target_for(opt.arch), PlanOptions{opt.lowerings});
  return emit_cuda(g, s, opt);
}

std::string emit_cuda(const KernelGraph& g, const Schedule& s, const EmitOptions& opt) {
  const std::string name = emitted_name(g, opt);
  cgen::Code out;
  const std::string file = cu_file_name(name, opt);
  out.raw(fmt::format("// {}: generated by Kiln {} for {} (the file also builds for sm_80).\n",
                      file, KILN_VERSION, target_for(opt.arch).name));
  if (!opt.source.empty()) out.raw(fmt::format("// Source: {}\n", opt.source));
  out.raw(fmt::format("// Verdict: {}\n", opt.verdict.empty() ? "(none given)" : opt.verdict));
  out.raw("// Build:\n//   " + nvcc_command(file, object_name(file), opt.arch) + "\n");
  std::vector<std::string> ins, outs;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.inputs[i]);
    ins.push_back(fmt::format("{} {}{}", t.name, dtype_name(t.dtype), shape_str(t.shape)));
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.outputs[i]);
    outs.push_back(fmt::format("{} {}{}", t.name, dtype_name(t.dtype), shape_str(t.shape)));
  }
  out.raw(
      fmt::format("// ABI:\n"
                  "//   extern \"C\" size_t kiln_{0}_workspace_bytes(void);  // {1} bytes\n"
                  "//   extern \"C\" cudaError_t kiln_{0}(inputs..., outputs..., void* workspace, "
                  "cudaStream_t stream);\n"
                  "//   inputs:  {2}\n"
                  "//   outputs: {3}\n"
                  "//   Device pointers, 16-byte aligned, dense row-major. Enqueues on `stream` "
                  "only (CUDA-graph\n"
                  "//   capturable); returns the first launch error.\n",
                  name, s.workspace_bytes, fmt::join(ins, ", "), fmt::join(outs, ", ")));
  if (!opt.header_file.empty())
    out.raw(fmt::format("//   C declarations (C or C++, no nvcc needed): {}\n", opt.header_file));
  out.raw(fmt::format(
      "//   Every other symbol is in namespace kiln_gen_{0} (kernels) or kiln::lib_{0} (device\n"
      "//   library): emitted files of distinct names link into one program, with or without "
      "-rdc.\n",
      name));
  if (opt.include_listing) {
    out.raw("//\n// μGraph:\n");
    out.raw(comment_block(to_text(g)));
    out.raw("//\n// Schedule:\n");
    out.raw(comment_block(schedule_to_text(g, s)));
  }
  out.raw(
      "\n#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
      "#include <stddef.h>\n#include <stdint.h>\n\n");
  // The device library defines kiln::rt and kiln::cg; declaring both first inside an inline
  // namespace of this file's own makes every name the library defines kiln::lib_NAME::..., still
  // spelled kiln::rt:: / kiln::cg::, so two emitted files never define the same symbol (an
  // unnamed namespace would give internal linkage, but nvcc refuses extern __shared__ arrays in
  // an inline unnamed namespace).
  out.raw(fmt::format(
      "// The device library below is this file's own: kiln::lib_{0}::rt and ::cg, spelled\n"
      "// kiln::rt and kiln::cg.\n"
      "namespace kiln {{ inline namespace lib_{0} {{ namespace rt {{}} namespace cg {{}} }} }}\n\n",
      name));
  out.raw(device_library_text());
  out.raw("\n// ==== generated kernels " + std::string(70, '=') + "\n\n");
  cgen::emit_graph_body(g, s, name, out);
  return out.str();
}

namespace {

// A C and C++ parameter name for tensor `t` not in `used`: the tensor's name, with a trailing _
// where it is a keyword of either language, a name the header itself uses, or already taken.
std::string param_name(const std::string& t, std::set<std::string>& used) {
  static const std::set<std::string> reserved = {
      // C (to C23)
      "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
      "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
      "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
      "union", "unsigned", "void", "volatile", "while", "_Alignas", "_Alignof", "_Atomic", "_Bool",
      "_Complex", "_Generic", "_Imaginary", "_Noreturn", "_Static_assert", "_Thread_local",
      "alignas", "alignof", "bool", "constexpr", "false", "nullptr", "static_assert",
      "thread_local", "true", "typeof", "typeof_unqual",
      // C++ (to C++20)
      "and", "and_eq", "asm", "bitand", "bitor", "catch", "char8_t", "char16_t", "char32_t",
      "class", "compl", "concept", "consteval", "constinit", "const_cast", "co_await", "co_return",
      "co_yield", "decltype", "delete", "dynamic_cast", "explicit", "export", "friend", "mutable",
      "namespace", "new", "noexcept", "not", "not_eq", "operator", "or", "or_eq", "private",
      "protected", "public", "reinterpret_cast", "requires", "static_cast", "template", "this",
      "throw", "try", "typeid", "typename", "using", "virtual", "wchar_t", "xor", "xor_eq",
      // the header's own names
      "workspace", "stream", "size_t", "cudaError_t", "cudaStream_t", "NULL"};
  std::string p = t;
  if (reserved.count(p)) p += "_";
  while (!used.insert(p).second) p += "_";
  return p;
}

}  // namespace

std::string emit_header(const KernelGraph& g, const EmitOptions& opt) {
  Schedule s = plan_schedule(g, target_for(opt.arch), PlanOptions{opt.lowerings});
  return emit_header(g, s, opt);
}

std::string emit_header(const KernelGraph& g, const Schedule& s, const EmitOptions& opt) {
  const std::string name = emitted_name(g, opt);
  const std::string cu = cu_file_name(name, opt);
  const std::string self = opt.header_file.empty() ? "kiln_" + name + ".h" : opt.header_file;
  const std::string guard = "KILN_" + name + "_H";
  const std::string m = "KILN_" + name + "_";
  cgen::Code h;
  h.raw(fmt::format(
      "/* {0}: C declarations of {1}, generated by Kiln {2} for {3}.\n"
      " * Source: {4}\n"
      " *\n"
      " * Build: {5}\n"
      " * then link the object with the CUDA runtime (libcudart), and include this header from C\n"
      " * or C++ (only the CUDA toolkit's include directory is needed). Emitted files of distinct\n"
      " * names (kiln emit --name) link into one program, with or without -rdc.\n"
      " *\n"
      " * kiln_{6}() only enqueues work on `stream` (it is CUDA-graph capturable) and returns the\n"
      " * first launch error. Every pointer is a device pointer, aligned to KILN_{6}_ALIGNMENT\n"
      " * bytes, to a dense row-major tensor of the dtype and shape given below (f16: IEEE half,\n"
      " * bf16: bfloat16, f32: float). `workspace` holds kiln_{6}_workspace_bytes() bytes ({7} for "
      "this\n"
      " * schedule; null is allowed when that is 0) and belongs to the call until `stream` "
      "reaches\n"
      " * its end.\n"
      " */\n"
      "#ifndef {8}\n#define {8}\n\n#include <stddef.h>\n#include <cuda_runtime.h>\n\n",
      self, cu, KILN_VERSION, target_for(opt.arch).name,
      opt.source.empty() ? "(not given)" : opt.source, nvcc_command(cu, object_name(cu), opt.arch),
      name, s.workspace_bytes, guard));
  h.f("#define {}ALIGNMENT 16 /* bytes, every pointer argument */", m);
  h.f("#define {}NUM_INPUTS {}", m, g.inputs.size());
  h.f("#define {}NUM_OUTPUTS {}", m, g.outputs.size());
  h.line("");
  // Per tensor (once, though it may be both an input and an output).
  std::set<int> described;
  auto describe = [&](int t, const std::string& role) {
    const TensorDesc& d = g.tensor(t);
    h.f("/* {}: {}, {} {} */", role, d.name, dtype_name(d.dtype), shape_str(d.shape));
    if (!described.insert(t).second) return;
    const int64_t n = numel(d.shape);
    h.f("#define {}{}_DTYPE \"{}\"", m, d.name, dtype_name(d.dtype));
    h.f("#define {}{}_RANK {}", m, d.name, d.shape.size());
    if (!d.shape.empty()) h.f("#define {}{}_SHAPE {{{}}}", m, d.name, fmt::join(d.shape, ", "));
    h.f("#define {}{}_NUMEL {}", m, d.name, n);
    h.f("#define {}{}_BYTES {}", m, d.name, n * dtype_bytes(d.dtype));
  };
  for (size_t i = 0; i < g.inputs.size(); ++i) describe(g.inputs[i], fmt::format("input {}", i));
  for (size_t i = 0; i < g.outputs.size(); ++i) describe(g.outputs[i], fmt::format("output {}", i));
  h.line("");
  // One parameter a line, with what it points to.
  std::set<std::string> used;
  std::vector<std::pair<std::string, std::string>> params;
  auto param = [&](int t, const char* type, const std::string& role) {
    const TensorDesc& d = g.tensor(t);
    params.push_back({fmt::format("{} {}", type, param_name(d.name, used)),
                      fmt::format("{}: {} {}", role, dtype_name(d.dtype), shape_str(d.shape))});
  };
  for (size_t i = 0; i < g.inputs.size(); ++i)
    param(g.inputs[i], "const void*", fmt::format("input {}", i));
  for (size_t i = 0; i < g.outputs.size(); ++i)
    param(g.outputs[i], "void*", fmt::format("output {}", i));
  params.push_back({"void* workspace", fmt::format("kiln_{}_workspace_bytes() bytes", name)});
  params.push_back({"cudaStream_t stream", ""});
  size_t width = 0;
  for (const auto& p : params) width = std::max(width, p.first.size() + 1);
  h.line("#ifdef __cplusplus\nextern \"C\" {\n#endif\n");
  h.f("/* Bytes of device memory kiln_{}() needs as its workspace. */", name);
  h.f("size_t kiln_{}_workspace_bytes(void);", name);
  h.line("");
  h.f("/* Enqueues {} on `stream`: inputs, then outputs, in graph order. */", name);
  h.f("cudaError_t kiln_{}(", name);
  for (size_t i = 0; i < params.size(); ++i) {
    const bool last = i + 1 == params.size();
    const std::string decl = params[i].first + (last ? ");" : ",");
    if (params[i].second.empty())
      h.f("    {}", decl);
    else
      h.f("    {:<{}} /* {} */", decl, width, params[i].second);
  }
  h.line("\n#ifdef __cplusplus\n}  /* extern \"C\" */\n#endif\n");
  h.f("#endif /* {} */", guard);
  return h.str();
}

}  // namespace kiln
