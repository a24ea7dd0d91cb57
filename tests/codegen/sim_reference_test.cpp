// The harness's float64 reference (emit_harness: one naive kernel per predefined op of the spec,
// the register-tiled f64 matmul) and its input generator (uniform and normal), run on the CPU
// simulator, agree with the interpreter's float64 evaluation to rounding: a wrong reference would
// fail every GPU check. Its range scan (what makes a check exempt) counts exactly the values of
// the reference that leave the f32 range.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "all_ops.h"
#include "kiln/codegen/emit.h"
#include "kiln/interp/interp.h"
#include "sim_runner.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// What the harness's device code computes in the simulator for one check.
struct SimCheck {
  std::string error;                        // build or run failure, else ""
  std::vector<std::vector<double>> inputs;  // the generated inputs, widened (as the reference sees)
  std::vector<std::vector<double>> outputs;  // the float64 reference's outputs
  double out_of_range = -1;  // values not finite in f32 (outputs, workspace, constants)
};

std::vector<double> read_doubles(const fs::path& p, size_t n) {
  std::vector<double> v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 8));
  return v;
}

// Runs the harness's device code for one check of `spec` in the simulator: the generator
// (uniform when sd is 0, else normal of std sd) for every input, the float64 reference on a
// zeroed workspace, and the range scan (range_kernel over the outputs and the whole workspace,
// plus kRefConstOutOfRange), as the harness's main() does.
SimCheck simulate_check(const KernelGraph& spec, uint64_t seed, double sd, const std::string& tag) {
  SimCheck r;
  std::string h = emit_harness(spec, spec);
  size_t a = h.find("#include <math.h>");
  size_t b = h.find("\nusing namespace kiln_harness;");
  if (a == std::string::npos || b == std::string::npos) {
    r.error = "harness markers not found";
    return r;
  }
  // The reference section, rewritten like a kernel section (launch syntax).
  std::string section = "// ==== generated kernels\n" + h.substr(a, b - a);
  std::string src = testing::simulator_source(section, spec);
  // Replace the simulator's main(): generate inputs on the "device", run the reference.
  src = src.substr(0, src.find("\nint main() {"));
  src += "\nint main() {\n";
  auto dump = [](const std::string& file, const std::string& vec) {
    return fmt::format(
        "  {{ std::FILE* f = std::fopen(\"{0}\", \"wb\"); std::fwrite({1}.data(), 8, {1}.size(), "
        "f); std::fclose(f); }}\n",
        file, vec);
  };
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const TensorDesc& t = spec.tensor(spec.inputs[i]);
    const char* ty = t.dtype == DType::F16    ? "__half"
                     : t.dtype == DType::BF16 ? "__nv_bfloat16"
                                              : "float";
    int64_t n = numel(t.shape);
    src +=
        fmt::format("  std::vector<{0}> x{1}({2});\n  std::vector<double> d{1}({2});\n", ty, i, n);
    if (sd > 0)
      src += fmt::format(
          "  kiln_sim::launch(kiln_sim::Cfg(kiln_harness::grid_for({0}), 256), [&] {{ "
          "kiln_harness::gen_normal_kernel<{1}>(x{2}.data(), {0}, kiln_rng_stream({3}ull, {2}), "
          "(float){4:a}); }});\n",
          n, ty, i, seed, sd);
    else
      src += fmt::format(
          "  kiln_sim::launch(kiln_sim::Cfg(kiln_harness::grid_for({0}), 256), [&] {{ "
          "kiln_harness::gen_kernel<{1}>(x{2}.data(), {0}, kiln_rng_stream({3}ull, {2})); }});\n",
          n, ty, i, seed);
    src += fmt::format(
        "  kiln_sim::launch(kiln_sim::Cfg(kiln_harness::grid_for({0}), 256), [&] {{ "
        "kiln_harness::widen_kernel<{1}>(x{2}.data(), d{2}.data(), {0}); }});\n",
        n, ty, i);
    src += dump(fmt::format("in{}.bin", i), fmt::format("d{}", i));
  }
  src += "  const double* ins[] = {";
  for (size_t i = 0; i < spec.inputs.size(); ++i) src += fmt::format("d{}.data(), ", i);
  src += "nullptr};\n";
  for (size_t o = 0; o < spec.outputs.size(); ++o)
    src += fmt::format("  std::vector<double> r{}({});\n", o,
                       numel(spec.tensor(spec.outputs[o]).shape));
  src += "  double* outs[] = {";
  for (size_t o = 0; o < spec.outputs.size(); ++o) src += fmt::format("r{}.data(), ", o);
  src += "nullptr};\n  std::vector<double> ws(kiln_ref_workspace_doubles() + 1);\n";
  src += "  if (kiln_ref_run(ins, outs, ws.data(), nullptr) != cudaSuccess) return 5;\n";
  src += "  std::vector<double> acc(1, 0.0);\n";
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    src += fmt::format(
        "  kiln_sim::launch(kiln_sim::Cfg(kiln_harness::grid_for((int64_t)r{0}.size()), 256), "
        "[&] {{ kiln_harness::range_kernel(r{0}.data(), (int64_t)r{0}.size(), acc.data()); }});\n",
        o);
    src += dump(fmt::format("ref{}.bin", o), fmt::format("r{}", o));
  }
  src +=
      "  { const int64_t n = (int64_t)kiln_ref_workspace_doubles(); if (n) "
      "kiln_sim::launch(kiln_sim::Cfg(kiln_harness::grid_for(n), 256), [&] { "
      "kiln_harness::range_kernel(ws.data(), n, acc.data()); }); }\n";
  src += "  acc[0] += kRefConstOutOfRange;\n";
  src += dump("oor.bin", "acc");
  src += "  return 0;\n}\n";
  fs::path d = fs::temp_directory_path() / "kiln_codegen_sim" / tag;
  fs::create_directories(d);
  std::ofstream(d / "ref.cpp") << src;
  std::string root = KILN_SOURCE_DIR;
  std::string cmd = fmt::format(
      "cd '{}' && g++ -std=c++20 -O1 -w -I'{}/runtime/cg' -I'{}/tests/codegen/sim' ref.cpp -o ref "
      "> "
      "compile.log 2>&1 && ./ref > run.log 2>&1",
      d.string(), root, root);
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream c(d / "compile.log"), rl(d / "run.log");
    std::stringstream ss;
    ss << c.rdbuf() << rl.rdbuf();
    r.error = "reference build/run failed:\n" + ss.str().substr(0, 4000);
    return r;
  }
  for (size_t i = 0; i < spec.inputs.size(); ++i)
    r.inputs.push_back(
        read_doubles(d / fmt::format("in{}.bin", i), numel(spec.tensor(spec.inputs[i]).shape)));
  for (size_t o = 0; o < spec.outputs.size(); ++o)
    r.outputs.push_back(
        read_doubles(d / fmt::format("ref{}.bin", o), numel(spec.tensor(spec.outputs[o]).shape)));
  r.out_of_range = read_doubles(d / "oor.bin", 1)[0];
  return r;
}

// Runs the harness's reference section of `spec` in the simulator on generator inputs (seed,
// uniform when sd is 0, else normal of std sd) and returns "" if the inputs are the
// interpreter's bit for bit and every output matches the interpreter within 1e-9 relative.
std::string check_reference(const KernelGraph& spec, uint64_t seed, const std::string& tag,
                            double sd = 0) {
  SimCheck r = simulate_check(spec, seed, sd, tag);
  if (!r.error.empty()) return r.error;
  std::vector<HostTensor> in = random_inputs(spec, seed, sd);
  std::string msg;
  for (size_t i = 0; i < in.size(); ++i)
    if (r.inputs[i] != std::vector<double>(in[i].data.begin(), in[i].data.end()))
      msg += fmt::format("input {}: not the interpreter's\n", i);
  std::vector<HostTensor> want = evaluate(spec, in, {Precision::F64, 0});
  for (size_t o = 0; o < want.size(); ++o) {
    HostTensor got = want[o];
    got.data.assign(r.outputs[o].begin(), r.outputs[o].end());
    double e = relative_l2_error(got, want[o]);
    if (!(e <= 1e-9)) msg += fmt::format("output {}: reference differs, relative {:.3e}\n", o, e);
  }
  return msg;
}

// Every predefined op kind the reference has a kernel for, in several dtypes.
KernelGraph refcheck_graph() {
  KernelGraphBuilder b("refcheck");
  int x = b.input("X", {3, 40}, DType::F16);
  int w = b.input("W", {40, 24}, DType::BF16);
  int z = b.input("Z", {2, 3, 5}, DType::F32);
  int v = b.input("v", {40}, DType::F16);
  Attrs c;
  c.value = 2.5;
  int k = b.op(OpKind::Constant, {}, c, "k");
  int n = b.op(OpKind::RmsNorm, {x, v}, {}, "n");
  int m = b.op(OpKind::MatMul, {n, w}, {}, "m");
  int s = b.op(OpKind::Softmax, {m}, {}, "s");
  int e = b.op(OpKind::Mul, {s, k}, {}, "e");
  Attrs d1;
  d1.dim = 1;
  int sm = b.op(OpKind::Sum, {z}, d1, "sm");
  int mx = b.op(OpKind::Max, {z}, d1, "mx");
  Attrs d0;
  d0.dim = 0;
  d0.keepdim = false;
  int mn = b.op(OpKind::Mean, {z}, d0, "mn");
  int t = b.op(OpKind::Transpose, {z}, {}, "t");
  Attrs g;
  int ge = b.op(OpKind::Gelu, {t}, g, "ge");
  Attrs sd;
  sd.dim = 1;
  int s2 = b.op(OpKind::Softmax, {z}, sd, "s2");
  int bm = b.op(OpKind::MatMul, {z, b.op(OpKind::Transpose, {z}, {}, "zt")}, {}, "bm");
  for (int o : {e, sm, mx, mn, ge, s2, bm}) b.output(o);
  return std::move(b).finish();
}

TEST(SimReference, HarnessReferenceMatchesInterpreter) {
  EXPECT_EQ(check_reference(refcheck_graph(), 9, "refcheck"), "");
}

// Every elementwise op of the table (kiln/ir/elementwise.h): its float64 C expression in the
// harness's reference agrees with the interpreter's float semantics, on inputs of both
// generators.
TEST(SimReference, EveryElementwiseOpsReferenceMatchesInterpreter) {
  EXPECT_EQ(check_reference(testing::all_ops_spec(), 4, "all_ops_ref"), "");
  EXPECT_EQ(check_reference(testing::all_ops_spec(), 5, "all_ops_ref_normal", 1.0), "");
}

// The normal generator on the "device" gives the interpreter's inputs bit for bit (f16, bf16,
// f32), and the reference agrees on them too.
TEST(SimReference, HarnessNormalInputsMatchInterpreter) {
  EXPECT_EQ(check_reference(refcheck_graph(), 9, "refcheck_normal", 1.0), "");
  EXPECT_EQ(check_reference(refcheck_graph(), 10, "refcheck_normal3", 3.0), "");
}

int constant(KernelGraphBuilder& b, double v, const std::string& name) {
  Attrs a;
  a.value = v;
  return b.op(OpKind::Constant, {}, a, name);
}

// The range scan behind exempt checks sees every intermediate of the float64 reference: a
// tensor the spec never outputs (exp(100 x), multiplied by 0 afterwards), the sum a mean
// accumulates and the sum of squares of an rms_norm (neither held by any tensor), and constants.
// Its count is exactly what the interpreter's inputs predict, on normal and on uniform inputs.
TEST(SimReference, RangeScanCountsEveryIntermediateBeyondF32) {
  KernelGraphBuilder b("oor");
  const int R = 256;
  int x = b.input("X", {2, R}, DType::F32);
  int e =
      b.op(OpKind::Exp, {b.op(OpKind::Mul, {x, constant(b, 100, "c100")}, {}, "x100")}, {}, "e");
  int z = b.op(OpKind::Mul, {e, constant(b, 0, "c0")}, {}, "z");
  int y =
      b.op(OpKind::Mul, {b.op(OpKind::Square, {x}, {}, "x2"), constant(b, 5e36, "c5e36")}, {}, "y");
  Attrs d1;
  d1.dim = 1;
  int mean = b.op(OpKind::Mean, {y}, d1, "mean");
  int big = b.op(OpKind::Mul, {x, constant(b, 1e19, "c1e19")}, {}, "big");
  int rms = b.op(OpKind::RmsNorm, {big}, {}, "rms");
  for (int o : {z, mean, rms}) b.output(o);
  KernelGraph spec = std::move(b).finish();
  const double fmax = std::numeric_limits<float>::max();
  for (double sd : {1.0, 0.0}) {
    SimCheck r = simulate_check(spec, 3, sd, sd > 0 ? "oor_normal" : "oor_uniform");
    ASSERT_EQ(r.error, "");
    const std::vector<HostTensor> in = random_inputs(spec, 3, sd);
    const HostData& xs = in[0].data;
    double want = 0, rows_sum = 0, rows_ss = 0;
    for (int row = 0; row < 2; ++row) {
      double sum = 0, ss = 0;
      for (int k = 0; k < R; ++k) {
        const double v = xs[row * R + k];
        want += !(std::exp(v * 100) <= fmax);
        sum += v * v * 5e36;
        ss += (v * 1e19) * (v * 1e19);
      }
      rows_sum += !(std::fabs(sum) <= fmax);
      rows_ss += !(ss <= fmax);
    }
    EXPECT_EQ(r.out_of_range, want + rows_sum + rows_ss) << "sd " << sd;
    // The outputs themselves are all within the f32 range: only intermediates leave it.
    for (const std::vector<double>& out : r.outputs)
      for (double v : out) ASSERT_LE(std::fabs(v), fmax);
    if (sd > 0) {
      EXPECT_GT(want, 0);      // exp(100 x) overflows f32 for x > 0.89
      EXPECT_EQ(rows_sum, 2);  // sum of x^2 5e36 over 256 values of std 1
    } else {
      EXPECT_EQ(want, 0);  // |x| < 0.5: exp(50) is far below FLT_MAX
      EXPECT_EQ(rows_sum, 0);
    }
    EXPECT_EQ(rows_ss, 2);  // (1e19 x)^2 summed over 256 values, on either distribution
  }
  // A constant beyond f32 counts once per check, even where the output is in range.
  KernelGraphBuilder c("oorconst");
  int cx = c.input("X", {4}, DType::F32);
  c.output(c.op(OpKind::Maximum, {cx, constant(c, -1e39, "huge")}, {}, "m"));
  SimCheck rc = simulate_check(std::move(c).finish(), 1, 1.0, "oor_const");
  ASSERT_EQ(rc.error, "");
  EXPECT_EQ(rc.out_of_range, 1);
}

}  // namespace
}  // namespace kiln
