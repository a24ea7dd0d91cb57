// The harness's float64 reference (emit_harness: one naive kernel per predefined op of the spec,
// the register-tiled f64 matmul) and its input generator, run on the CPU simulator, agree with
// the interpreter's float64 evaluation to rounding: a wrong reference would fail every GPU check.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "kiln/codegen/emit.h"
#include "kiln/interp/interp.h"
#include "sim_runner.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Runs the harness's reference section of `spec` in the simulator on generator inputs (seed)
// and returns "" if every output matches the interpreter within 1e-9 relative.
std::string check_reference(const KernelGraph& spec, uint64_t seed, const std::string& tag) {
  std::string h = emit_harness(spec, spec);
  size_t a = h.find("#include <math.h>");
  size_t b = h.find("\nusing namespace kiln_harness;");
  if (a == std::string::npos || b == std::string::npos) return "harness markers not found";
  KernelGraph dummy = spec;
  // The reference section, rewritten like a kernel section (launch syntax).
  std::string section = "// ==== generated kernels\n" + h.substr(a, b - a);
  std::string src = testing::simulator_source(section, spec);
  // Replace the simulator's main(): generate inputs on the "device", run the reference.
  src = src.substr(0, src.find("\nint main() {"));
  src += "\nint main() {\n";
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const TensorDesc& t = spec.tensor(spec.inputs[i]);
    const char* ty = t.dtype == DType::F16    ? "__half"
                     : t.dtype == DType::BF16 ? "__nv_bfloat16"
                                              : "float";
    int64_t n = numel(t.shape);
    src +=
        fmt::format("  std::vector<{0}> x{1}({2});\n  std::vector<double> d{1}({2});\n", ty, i, n);
    src += fmt::format(
        "  kiln_sim::launch(kiln_sim::Cfg(kiln_harness::grid_for({0}), 256), [&] {{ "
        "kiln_harness::gen_kernel<{1}>(x{2}.data(), {0}, kiln_rng_stream({3}ull, {2})); }});\n",
        n, ty, i, seed);
    src += fmt::format(
        "  kiln_sim::launch(kiln_sim::Cfg(kiln_harness::grid_for({0}), 256), [&] {{ "
        "kiln_harness::widen_kernel<{1}>(x{2}.data(), d{2}.data(), {0}); }});\n",
        n, ty, i);
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
  for (size_t o = 0; o < spec.outputs.size(); ++o)
    src += fmt::format(
        "  {{ std::FILE* f = std::fopen(\"ref{0}.bin\", \"wb\"); std::fwrite(r{0}.data(), 8, "
        "r{0}.size(), f); std::fclose(f); }}\n",
        o);
  src += "  return 0;\n}\n";
  fs::path d = fs::temp_directory_path() / "kiln_codegen_sim" / tag;
  fs::create_directories(d);
  std::ofstream(d / "ref.cpp") << src;
  std::string root = KILN_SOURCE_DIR;
  std::string cmd = fmt::format(
      "cd '{}' && g++ -std=c++20 -O1 -w -I'{}/codegen' -I'{}/tests/codegen/sim' ref.cpp -o ref > "
      "compile.log 2>&1 && ./ref > run.log 2>&1",
      d.string(), root, root);
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream c(d / "compile.log"), r(d / "run.log");
    std::stringstream ss;
    ss << c.rdbuf() << r.rdbuf();
    return "reference build/run failed:\n" + ss.str().substr(0, 4000);
  }
  std::vector<HostTensor> in = random_inputs(spec, seed);
  std::vector<HostTensor> want = evaluate(spec, in, {Precision::F64, 0});
  std::string msg;
  for (size_t o = 0; o < want.size(); ++o) {
    HostTensor got = want[o];
    std::ifstream f(d / fmt::format("ref{}.bin", o), std::ios::binary);
    f.read(reinterpret_cast<char*>(got.data.data()), got.data.size() * 8);
    double e = relative_l2_error(got, want[o]);
    if (!(e <= 1e-9)) msg += fmt::format("output {}: reference differs, relative {:.3e}\n", o, e);
  }
  return msg;
}

TEST(SimReference, HarnessReferenceMatchesInterpreter) {
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
  EXPECT_EQ(check_reference(std::move(b).finish(), 9, "refcheck"), "");
}

}  // namespace
}  // namespace kiln
