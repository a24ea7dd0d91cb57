// The CPU-simulator driver for codegen tests (see sim_runner.h).
#include "sim_runner.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>

namespace kiln::testing {

namespace fs = std::filesystem;

std::string simulator_source(const std::string& cu, const KernelGraph& g) {
  size_t at = cu.find("// ==== generated kernels");
  std::string body = at == std::string::npos ? cu : cu.substr(at);
  std::istringstream in(body);
  std::string out, line;
  std::regex launch(R"(^(\s*)(.*?)<<<(.*)>>>\((.*)\);\s*$)");
  while (std::getline(in, line)) {
    if (line.find("extern __shared__") != std::string::npos &&
        line.find("kiln_smem") != std::string::npos) {
      out += "  unsigned char* const kiln_smem = kiln_sim::smem();\n";
      continue;
    }
    std::smatch m;
    if (std::regex_match(line, m, launch)) {
      out += fmt::format("{}kiln_sim::launch(kiln_sim::Cfg({}), [&] {{ {}({}); }});\n", m[1].str(),
                         m[3].str(), m[2].str(), m[4].str());
      continue;
    }
    out += line + "\n";
  }
  std::string src = "#define KILN_SIM 1\n#include \"kiln_sim.h\"\n#include \"kiln_cg.cuh\"\n\n";
  src += out;
  // main(): inputs from in<i>.bin (float32 values exact in their dtype), outputs to out<i>.bin.
  src += "\nint main() {\n";
  std::vector<std::string> args;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.inputs[i]);
    int64_t n = numel(t.shape);
    const char* ty = t.dtype == DType::F16    ? "__half"
                     : t.dtype == DType::BF16 ? "__nv_bfloat16"
                                              : "float";
    src += fmt::format("  kiln_sim::Buffer in{0}({1} * sizeof({2}));\n", i, n, ty);
    src += fmt::format(
        "  kiln_sim::read_input(\"in{0}.bin\", reinterpret_cast<{1}*>(in{0}.data()), {2});\n", i,
        ty, n);
    args.push_back(fmt::format("in{}.data()", i));
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.outputs[i]);
    int64_t n = numel(t.shape);
    const char* ty = t.dtype == DType::F16    ? "__half"
                     : t.dtype == DType::BF16 ? "__nv_bfloat16"
                                              : "float";
    src += fmt::format("  kiln_sim::Buffer out{0}({1} * sizeof({2}));\n", i, n, ty);
    src += fmt::format("  std::memset(out{0}.data(), 0xff, {1} * sizeof({2}));\n", i, n, ty);
    args.push_back(fmt::format("out{}.data()", i));
  }
  src += fmt::format("  const size_t wsb = kiln_{}_workspace_bytes();\n", g.name);
  src += "  kiln_sim::Buffer ws(wsb);\n  std::memset(ws.data(), 0xff, wsb);\n";
  args.push_back("wsb ? ws.data() : nullptr");
  args.push_back("nullptr");
  src += fmt::format("  if (kiln_{}({}) != cudaSuccess) kiln_sim::fail(\"launch error\");\n",
                     g.name, fmt::join(args, ", "));
  for (size_t i = 0; i < g.inputs.size(); ++i)
    src += fmt::format("  in{0}.check(\"input {0}\");\n", i);
  src += "  ws.check(\"the workspace\");\n";
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.outputs[i]);
    const char* ty = t.dtype == DType::F16    ? "__half"
                     : t.dtype == DType::BF16 ? "__nv_bfloat16"
                                              : "float";
    src += fmt::format("  out{0}.check(\"output {0}\");\n", i);
    src += fmt::format(
        "  kiln_sim::write_output(\"out{0}.bin\", reinterpret_cast<const {1}*>(out{0}.data()), "
        "{2});\n",
        i, ty, numel(t.shape));
  }
  src += "  return 0;\n}\n";
  return src;
}

static std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

SimRun run_in_simulator(const KernelGraph& g, const std::vector<HostTensor>& inputs,
                        const std::string& dir, const std::string& tag, Arch arch, bool lowerings) {
  SimRun r;
  fs::path d = fs::path(dir) / tag;
  fs::create_directories(d);
  EmitOptions eo;
  eo.arch = arch;
  eo.include_listing = false;
  eo.lowerings = lowerings;
  std::string cu = emit_cuda(g, eo);
  std::ofstream(d / "kernel.cu") << cu;
  std::ofstream(d / "sim.cpp") << simulator_source(cu, g);
  std::string src = KILN_SOURCE_DIR;
  std::string cmd = fmt::format(
      "cd '{}' && g++ -std=c++20 -O1 -w -I'{}/runtime/cg' -I'{}/tests/codegen/sim' sim.cpp -o sim "
      "> compile.log 2>&1",
      d.string(), src, src);
  if (std::system(cmd.c_str()) != 0) {
    r.log = "compile failed:\n" + slurp(d / "compile.log").substr(0, 6000);
    return r;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<float> v(inputs[i].data.begin(), inputs[i].data.end());
    std::ofstream f(d / fmt::format("in{}.bin", i), std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  cmd = fmt::format("cd '{}' && ./sim > run.log 2>&1", d.string());
  if (std::system(cmd.c_str()) != 0) {
    r.log = "simulation failed:\n" + slurp(d / "run.log").substr(0, 6000);
    return r;
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.outputs[i]);
    HostTensor h{t.shape, t.dtype, {}};
    std::vector<float> v(numel(t.shape));
    std::ifstream f(d / fmt::format("out{}.bin", i), std::ios::binary);
    f.read(reinterpret_cast<char*>(v.data()), v.size() * sizeof(float));
    h.data.assign(v.begin(), v.end());
    r.outputs.push_back(std::move(h));
  }
  r.ok = true;
  return r;
}

std::string check_in_simulator(const KernelGraph& g, const KernelGraph& ref, uint64_t seed,
                               const std::string& tag, Arch arch, Precision precision,
                               bool lowerings) {
  std::vector<HostTensor> in = random_inputs(ref, seed);
  std::vector<HostTensor> want = evaluate(ref, in, {precision, 0});
  std::string dir = (fs::temp_directory_path() / "kiln_codegen_sim").string();
  SimRun run = run_in_simulator(g, in, dir, tag, arch, lowerings);
  if (!run.ok) return run.log;
  std::string msg;
  for (size_t i = 0; i < want.size(); ++i) {
    double e = relative_l2_error(run.outputs[i], want[i]);
    double tol = spec_tolerance(g.tensor(g.outputs[i]).dtype);
    if (!(e <= tol))
      msg += fmt::format("output {} ({}): relative error {:.3e} > {:.1e}\n", i,
                         g.tensor(g.outputs[i]).name, e, tol);
  }
  return msg;
}

}  // namespace kiln::testing
