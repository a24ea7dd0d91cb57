// The GPU harness: a standalone .cu with main() that checks a candidate's emitted kernels against
// a float64 reference of the spec and times them.
//
// The reference is deliberately naive: one generic float64 kernel per predefined op of the spec
// (a thread per output element, a register-tiled matmul), so that it shares no code path with
// what it checks. Inputs come from the documented seeded generator (runtime/harness/kiln_rng.h), so
// the CPU interpreter can reproduce any failing case bit for bit.
//
// The checks alternate the generator's two distributions: check c (seed + c) draws uniform
// inputs when c is even and normal inputs of std 1 when c is odd, because the spec's range rule
// asks for both. The same rule exempts inputs on which the float64 reference itself leaves the
// f32 range (an intermediate beyond FLT_MAX or not finite): such a check is printed as exempt and
// neither passes nor fails.
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "emit_internal.h"
#include "kiln/ir/diag.h"

namespace kiln {

namespace cgen {

namespace {

// ---- the float64 reference ------------------------------------------------------------------

struct RefCtx {
  const KernelGraph& g;
  Code kernels;
  Code launch;
  std::vector<int64_t> offset;  // doubles into the reference workspace, -1 if not there
  int64_t ws = 0;               // doubles of reference workspace so far
  // Places n doubles in the reference workspace (32-aligned) and returns their offset.
  int64_t place(int64_t n) {
    const int64_t at = ws;
    ws += cdiv(n, 32) * 32;
    return at;
  }
  bool is_const(int t) const {
    int p = g.producer(t);
    return p >= 0 && g.ops[p].kind == OpKind::Constant;
  }
  double cval(int t) const { return g.ops[g.producer(t)].attrs.value; }
};

// `extra`: a further argument after the output (e.g. where the kernel keeps its sums).
void ref_launch(RefCtx& x, const std::string& kernel, int64_t work, const std::vector<int>& ins,
                int outt, const std::string& extra = "") {
  std::vector<std::string> args;
  for (int t : ins)
    if (!x.is_const(t)) args.push_back(fmt::format("t{}", t));
  args.push_back(fmt::format("t{}", outt));
  if (!extra.empty()) args.push_back(extra);
  x.launch.f("kiln_ref::{}<<<kiln_harness::grid_for({}), 256, 0, stream>>>({});", kernel, work,
             fmt::join(args, ", "));
  x.launch.line("if ((err = cudaGetLastError()) != cudaSuccess) return err;");
}

// The float64 reference of a (batched, broadcast) matmul: the harness's ref_matmul kernel.
void ref_matmul(RefCtx& x, const KernelOp& op) {
  const KernelGraph& g = x.g;
  const int y = op.outputs[0];
  const Shape& ys = g.tensor(y).shape;
  const Shape& a = g.tensor(op.inputs[0]).shape;
  const Shape& b = g.tensor(op.inputs[1]).shape;
  int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
  Shape ob(ys.begin(), ys.end() - 2);
  while (ob.size() < 2) ob.insert(ob.begin(), 1);
  auto bst = [&](const Shape& s) {
    Shape sb(s.begin(), s.end() - 2);
    std::vector<int64_t> st = strides_of(s), r(2, 0);
    for (size_t q = 0; q < sb.size(); ++q)
      if (sb[q] != 1) r[q + (2 - sb.size())] = st[q];
    return r;
  };
  std::vector<int64_t> as = bst(a), bs = bst(b);
  x.launch.f(
      "kiln_harness::ref_matmul<<<dim3({}, {}, {}), 256, 0, stream>>>(t{}, t{}, t{}, {}, {}, "
      "{}, {}, {}ll, {}ll, {}ll, {}ll);",
      cdiv(N, 64), cdiv(M, 64), ob[0] * ob[1], op.inputs[0], op.inputs[1], y, M, N, K, ob[1], as[0],
      as[1], bs[0], bs[1]);
  x.launch.line("if ((err = cudaGetLastError()) != cudaSuccess) return err;");
}

// The body of a reduction, softmax or rms_norm reference kernel, a thread per row (outer, inner)
// reading its R elements; returns the threads (rows), and where mean and rms_norm keep their
// sums (`extra`).
int64_t ref_row_body(RefCtx& x, const KernelOp& op, bool keeps_sum, std::string& extra,
                     const std::function<std::string(size_t, const std::string&)>& operand,
                     const std::string& loop) {
  const KernelGraph& g = x.g;
  const OpClass cls = op_info(op.kind).cls;
  Code& c = x.kernels;
  const Shape& s = g.tensor(op.inputs[0]).shape;
  int dim =
      cls == OpClass::RmsNorm ? static_cast<int>(s.size()) - 1 : static_cast<int>(op.attrs.dim);
  int64_t outer = 1, R = s[dim], inner = 1;
  for (int d = 0; d < dim; ++d) outer *= s[d];
  for (size_t d = dim + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t work = outer * inner;
  if (keeps_sum) extra = fmt::format("ws + {}", x.place(work));
  c.open(fmt::format(fmt::runtime(loop), work));
  c.f("const int64_t ou = e / {}, in = e % {};", inner, inner);
  c.f("const double* xp = a0 + ou * {} + in;", R * inner);
  std::string at = fmt::format("xp[(int64_t)k * {}]", inner);
  if (cls == OpClass::Reduce) {
    bool mx = op.kind == OpKind::Max;
    c.f("double acc = {};", mx ? "-INFINITY" : "0.0");
    c.f("for (int k = 0; k < {}; ++k) acc = {};", R, mx ? "fmax(acc, " + at + ")" : "acc + " + at);
    if (op.kind == OpKind::Mean) {
      c.line("q[e] = acc;");
      c.f("acc /= {}.0;", R);
    }
    c.line("y[e] = acc;");
  } else if (cls == OpClass::Softmax) {
    c.line("double m = -INFINITY, sum = 0.0;");
    c.f("for (int k = 0; k < {}; ++k) m = fmax(m, {});", R, at);
    c.f("for (int k = 0; k < {}; ++k) sum += exp({} - m);", R, at);
    c.f("for (int k = 0; k < {}; ++k) y[ou * {} + (int64_t)k * {} + in] = exp({} - m) / sum;", R,
        R * inner, inner, at);
  } else {
    c.line("double ss = 0.0;");
    c.f("for (int k = 0; k < {}; ++k) ss += {} * {};", R, at, at);
    c.line("q[e] = ss;");
    c.f("const double r = 1.0 / sqrt(ss / {}.0 + {});", R, dlit(op.attrs.eps));
    std::string w = op.inputs.size() == 2 ? operand(1, "k") : "1.0";
    c.f("for (int k = 0; k < {}; ++k) y[e * {} + k] = {} * r * {};", R, R, at, w);
  }
  c.close();
  return work;
}

// kiln_ref_run: places the inputs, outputs and workspace tensors and launches the kernels.
void write_ref_run(const RefCtx& x, Code& out) {
  const KernelGraph& g = x.g;
  const int nt = static_cast<int>(g.tensors.size());
  out.line("namespace kiln_ref {");
  out.append(x.kernels);
  out.line("}  // namespace kiln_ref");
  out.line("");
  out.f("static size_t kiln_ref_workspace_doubles() {{ return {}; }}", x.ws);
  out.open(
      "static cudaError_t kiln_ref_run(const double* const* in, double* const* out, double* ws, "
      "cudaStream_t stream) {");
  out.line("cudaError_t err = cudaSuccess;");
  out.line("(void)ws;");
  std::set<int> placed;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (placed.insert(g.inputs[i]).second)
      out.f("const double* const t{} = in[{}];", g.inputs[i], i);
  std::vector<std::string> copies;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    int t = g.outputs[i];
    if (x.is_const(t)) {
      copies.push_back(fmt::format(
          "{{ const double v = {}; if ((err = cudaMemcpyAsync(out[{}], &v, sizeof(double), "
          "cudaMemcpyHostToDevice, stream)) != cudaSuccess) return err; "
          "if ((err = cudaStreamSynchronize(stream)) != cudaSuccess) return err; }}",
          dlit(x.cval(t)), i));
      continue;
    }
    if (placed.insert(t).second)
      out.f("double* const t{} = out[{}];", t, i);
    else
      copies.push_back(
          fmt::format("if ((err = cudaMemcpyAsync(out[{}], t{}, {} * sizeof(double), "
                      "cudaMemcpyDeviceToDevice, stream)) != cudaSuccess) return err;",
                      i, t, numel(g.tensor(t).shape)));
  }
  for (int t = 0; t < nt; ++t)
    if (x.offset[t] >= 0 && placed.insert(t).second)
      out.f("double* const t{} = ws + {};", t, x.offset[t]);
  out.append(x.launch);
  for (const std::string& c : copies) out.line(c);
  out.line("return cudaSuccess;");
  out.close();
  out.line("");
}
}  // namespace

void emit_reference(const KernelGraph& g, Code& out) {
  RefCtx x{g, {}, {}, {}};
  x.launch.set_indent(1);
  const int nt = static_cast<int>(g.tensors.size());
  std::set<int> ins(g.inputs.begin(), g.inputs.end()), outs(g.outputs.begin(), g.outputs.end());
  x.offset.assign(nt, -1);
  // Every tensor of the spec but its inputs, outputs and constants lives in the workspace, so
  // the harness can see every intermediate (the range rule: ref_out_of_range).
  for (int t = 0; t < nt; ++t) {
    if (ins.count(t) || outs.count(t) || x.is_const(t)) continue;
    x.offset[t] = x.place(numel(g.tensor(t).shape));
  }
  for (size_t k = 0; k < g.ops.size(); ++k) {
    const KernelOp& op = g.ops[k];
    const OpClass cls = op_info(op.kind).cls;
    if (cls == OpClass::Constant) continue;
    KILN_ASSERT(cls != OpClass::GraphDefined, "the reference graph must be a spec");
    std::string name = fmt::format("r{}_{}", k, op.name);
    int y = op.outputs[0];
    const Shape& ys = g.tensor(y).shape;
    std::vector<std::string> params;
    for (size_t j = 0; j < op.inputs.size(); ++j)
      if (!x.is_const(op.inputs[j]))
        params.push_back(fmt::format("const double* __restrict__ a{}", j));
    params.push_back("double* __restrict__ y");
    auto operand = [&](size_t j, const std::string& off) {
      int t = op.inputs[j];
      return x.is_const(t) ? dlit(x.cval(t)) : fmt::format("a{}[{}]", j, off);
    };
    Code& c = x.kernels;
    const std::string loop =
        "for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < {}; e += "
        "(int64_t)gridDim.x * blockDim.x) {{";
    if (cls == OpClass::Matmul) {
      ref_matmul(x, op);
      continue;
    }
    // mean and rms_norm also keep the sum they accumulate (of x, of x²) in the workspace: an
    // intermediate of the float64 reference that no tensor of the spec holds.
    const bool keeps_sum = op.kind == OpKind::Mean || cls == OpClass::RmsNorm;
    if (keeps_sum) params.push_back("double* __restrict__ q");
    std::string extra;
    c.open(fmt::format("__global__ void {}({}) {{", name, fmt::join(params, ", ")));
    int64_t work = numel(ys);
    switch (cls) {
      case OpClass::Binary:
      case OpClass::Unary: {
        c.open(fmt::format(fmt::runtime(loop), work));
        std::vector<std::string> idx = unravel(c, "e", ys, "i", "int64_t");
        std::vector<std::string> xs;
        for (size_t j = 0; j < op.inputs.size(); ++j) {
          const Shape& s = g.tensor(op.inputs[j]).shape;
          xs.push_back(operand(j, offset_expr(bcast_index(s, ys, idx), strides_of(s))));
        }
        c.f("y[e] = {};", ew_expr_f64(op.kind, op.attrs, xs));
        c.close();
        break;
      }
      case OpClass::Transpose: {
        const Shape& s = g.tensor(op.inputs[0]).shape;
        c.open(fmt::format(fmt::runtime(loop), work));
        std::vector<std::string> idx = unravel(c, "e", ys, "i", "int64_t");
        std::vector<std::string> in_idx(idx.size());
        for (size_t d = 0; d < idx.size(); ++d) in_idx[op.attrs.perm[d]] = idx[d];
        c.f("y[e] = {};", operand(0, offset_expr(in_idx, strides_of(s))));
        c.close();
        break;
      }
      case OpClass::Reduce:
      case OpClass::Softmax:
      case OpClass::RmsNorm: {
        work = ref_row_body(x, op, keeps_sum, extra, operand, loop);
        break;
      }
      case OpClass::Matmul:
      case OpClass::Constant:
      case OpClass::GraphDefined:
      case OpClass::Input:
      case OpClass::Output:
      case OpClass::Accum:
      case OpClass::Fused:
        KILN_ASSERT(false, "no reference kernel for {}", op_name(op.kind));
    }
    c.close();
    c.line("");
    KILN_ASSERT(keeps_sum == !extra.empty(), "{}: where its sums go", name);
    ref_launch(x, name, work, op.inputs, y, extra);
  }
  write_ref_run(x, out);
}

}  // namespace cgen

std::string emit_harness(const KernelGraph& candidate, const KernelGraph& spec,
                         const HarnessOptions& opt) {
  // The two graphs must agree on the interface.
  auto sig = [](const KernelGraph& g, const std::vector<int>& ids) {
    std::vector<std::pair<Shape, DType>> v;
    for (int t : ids) v.push_back({g.tensor(t).shape, g.tensor(t).dtype});
    return v;
  };
  if (sig(candidate, candidate.inputs) != sig(spec, spec.inputs) ||
      sig(candidate, candidate.outputs) != sig(spec, spec.outputs))
    user_error(ErrorCode::Shape,
               "the μGraph {} and the spec {} differ in their inputs or outputs (shapes, dtypes "
               "or order)",
               candidate.name, spec.name);
  if (!spec.is_spec())
    user_error(ErrorCode::Unsupported,
               "the harness reference must be a spec (no graph-defined ops)");
  cgen::Code out;
  const std::string name = emitted_name(candidate, opt.emit);
  const std::string file = opt.file.empty() ? "harness_" + name + ".cu" : opt.file;
  const size_t dot = file.rfind('.');
  const std::string exe =
      dot == std::string::npos || dot == 0 ? file + ".out" : file.substr(0, dot);
  std::string kernel = emit_cuda(candidate, opt.emit);
  out.raw(fmt::format(
      "// Kiln GPU harness for {0}: checks kiln_{0} against a float64 reference of spec {1}, then\n"
      "// times it (CUDA-graph replays, inputs rotating over enough copies to defeat L2).\n"
      "// Build: {2}\n"
      "// Run:   ./{3} [--check-only | --no-check | --kernel-only] [--seed S] [--repeats R]\n"
      "//        [--checks C] [--input-std S] [--copies N]  (checks alternate uniform and normal\n"
      "//        std-1 inputs; --input-std S gives every check std S, 0: uniform; the timing\n"
      "//        rotates over N input sets, by default enough to stream twice the L2)\n"
      "// Prints: KILN_RESULT name={0} ok=0|1 err=MAX_REL_ERR us=MEDIAN_US ... checks=N exempt=E;\n"
      "// exit 0 ok, 1 mismatch, 2 CUDA error.\n\n",
      name, spec.name, nvcc_command(file, exe, opt.emit.arch), exe));
  out.raw(kernel);
  out.raw("\n// ==== harness " + std::string(78, '=') + "\n\n");
  out.raw("#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\n");
  out.raw(rng_text());
  out.raw("\n");
  // Per-graph constants.
  std::vector<std::string> in_numel, in_bytes, in_dtype, out_numel, out_bytes, out_dtype, out_tol,
      out_name;
  auto dcode = [](DType d) { return d == DType::F16 ? "0" : d == DType::BF16 ? "1" : "2"; };
  for (int t : candidate.inputs) {
    const TensorDesc& d = candidate.tensor(t);
    in_numel.push_back(std::to_string(numel(d.shape)) + "ll");
    in_bytes.push_back(std::to_string(numel(d.shape) * dtype_bytes(d.dtype)) + "ull");
    in_dtype.push_back(dcode(d.dtype));
  }
  for (int t : candidate.outputs) {
    const TensorDesc& d = candidate.tensor(t);
    out_numel.push_back(std::to_string(numel(d.shape)) + "ll");
    out_bytes.push_back(std::to_string(numel(d.shape) * dtype_bytes(d.dtype)) + "ull");
    out_dtype.push_back(dcode(d.dtype));
    double tol = d.dtype == DType::F32 ? 1e-4 : d.dtype == DType::F16 ? 5e-3 : 2e-2;
    out_tol.push_back(fmt::format("{}", tol));
    out_name.push_back("\"" + d.name + "\"");
  }
  // Float64 reference matmuls are slow (tens of TFLOP/s at best): big ones get two checks, and
  // every harness at least two by default, one per input distribution (uniform, normal std 1).
  double ref_flops = 0;
  for (const KernelOp& op : spec.ops)
    if (op.kind == OpKind::MatMul) {
      const Shape& a = spec.tensor(op.inputs[0]).shape;
      ref_flops += 2.0 * double(numel(spec.tensor(op.outputs[0]).shape)) * double(a.back());
    }
  const int checks = ref_flops > 5e10 ? 2 : std::max(opt.checks, 2);
  // A constant beyond the f32 range is an intermediate no input can bring back into it.
  int const_out_of_range = 0;
  for (const KernelOp& op : spec.ops)
    if (op.kind == OpKind::Constant &&
        !(std::fabs(op.attrs.value) <= double(std::numeric_limits<float>::max())))
      ++const_out_of_range;
  out.raw(fmt::format("static const char* const kName = \"{}\";\n", name));
  out.raw(harness_runtime_text());
  out.raw("\n");
  out.raw(fmt::format(
      "static const int kNumIn = {};\nstatic const int kNumOut = {};\n"
      "static const int64_t kInNumel[] = {{{}}};\nstatic const size_t kInBytes[] = {{{}}};\n"
      "static const int kInDtype[] = {{{}}};\n"
      "static const int64_t kOutNumel[] = {{{}}};\nstatic const size_t kOutBytes[] = {{{}}};\n"
      "static const int kOutDtype[] = {{{}}};\nstatic const double kOutTol[] = {{{}}};\n"
      "static const char* const kOutName[] = {{{}}};\n"
      "static const uint64_t kDefaultSeed = {}ull;\nstatic const int kDefaultRepeats = {};\n"
      "static const int kDefaultChecks = {};\nstatic const int kMinCalls = {};\n"
      "static const size_t kL2Bytes = {}ull;\nstatic const double kRefConstOutOfRange = {};\n\n",
      candidate.inputs.size(), candidate.outputs.size(), fmt::join(in_numel, ", "),
      fmt::join(in_bytes, ", "), fmt::join(in_dtype, ", "), fmt::join(out_numel, ", "),
      fmt::join(out_bytes, ", "), fmt::join(out_dtype, ", "), fmt::join(out_tol, ", "),
      fmt::join(out_name, ", "), opt.seed, opt.repeats, checks, opt.min_calls, opt.l2_bytes,
      const_out_of_range));
  // The call of the candidate with arrays of pointers.
  std::vector<std::string> args;
  for (size_t i = 0; i < candidate.inputs.size(); ++i) args.push_back(fmt::format("(i_)[{}]", i));
  for (size_t i = 0; i < candidate.outputs.size(); ++i) args.push_back(fmt::format("(o_)[{}]", i));
  out.raw(fmt::format("#define KILN_CALL(i_, o_, w_, s_) kiln_{}({}, (w_), (s_))\n", name,
                      fmt::join(args, ", ")));
  out.raw(fmt::format("#define KILN_WS_BYTES() kiln_{}_workspace_bytes()\n\n", name));
  cgen::emit_reference(spec, out);
  out.raw(harness_main_text());
  return out.str();
}

}  // namespace kiln
