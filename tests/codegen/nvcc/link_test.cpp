// Emitted files link into one program: `kiln emit` writes three .cu files and their C headers
// (two different examples, and one of them again under another --name), nvcc compiles each for
// sm_90a with every warning an error, and they link with a main.cpp that includes the three
// headers and calls each entry point (nothing runs): once as whole-program objects, once with
// -rdc and a device link step. Skipped when nvcc is absent.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "find_nvcc.h"
#include "kiln/ir/json_io.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using testing::find_nvcc;

// Runs `cd dir && cmd`; returns "" on success, else the command and its output.
std::string run(const fs::path& dir, const std::string& cmd, const std::string& log) {
  std::string line = fmt::format("cd '{}' && {} > '{}' 2>&1", dir.string(), cmd, log);
  if (std::system(line.c_str()) == 0) return "";
  std::ifstream in(dir / log);
  std::stringstream ss;
  ss << in.rdbuf();
  return "$ " + cmd + "\n" + ss.str().substr(0, 4000);
}

struct Emitted {
  std::string example, name;  // examples/<example>.json, emitted as kiln_<name>
};

TEST(NvccLink, EmittedFilesLinkIntoOneProgramWithAndWithoutRdc) {
  const std::string nvcc = find_nvcc();
  if (nvcc.empty()) GTEST_SKIP() << "nvcc not found";
  const auto start = std::chrono::steady_clock::now();
  // Small specs (quick to compile) whose kernels share runtime templates and kiln_cg.cuh's
  // non-template kernels: lora (GEMV matmuls), add_rmsnorm (elementwise, rms_norm), and lora
  // again under another name (the same template instances in two files).
  const std::vector<Emitted> files = {
      {"lora", "lora"}, {"add_rmsnorm", "add_rmsnorm"}, {"lora", "lora_b"}};
  const fs::path dir = fs::temp_directory_path() / "kiln_nvcc_link";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string main_cpp = "#include <cstdio>\n";
  for (const Emitted& f : files) {
    const std::string cmd =
        fmt::format("'{}/kiln' emit '{}/examples/{}.json' --name {} -o {}.cu --header {}.h",
                    KILN_BINARY_DIR, KILN_SOURCE_DIR, f.example, f.name, f.name, f.name);
    ASSERT_EQ(run(dir, cmd, f.name + ".emit.log"), "");
    main_cpp += fmt::format("#include \"{}.h\"\n", f.name);
  }
  // Every entry point, called with the argument count its header declares (nothing runs).
  main_cpp += "\nint main(int argc, char**) {\n  if (argc < 100) return 0;\n  size_t ws = 0;\n";
  main_cpp += "  cudaError_t err = cudaSuccess;\n";
  for (const Emitted& f : files) {
    KernelGraph g =
        load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/" + f.example + ".json");
    std::vector<std::string> args(g.inputs.size() + g.outputs.size() + 1, "nullptr");
    args.push_back("cudaStream_t{}");
    main_cpp += fmt::format("  ws += kiln_{}_workspace_bytes();\n", f.name);
    main_cpp += fmt::format("  if (err == cudaSuccess) err = kiln_{}({});\n", f.name,
                            fmt::join(args, ", "));
  }
  main_cpp += "  std::printf(\"%zu %d\\n\", ws, int(err));\n  return 0;\n}\n";
  std::ofstream(dir / "main.cpp") << main_cpp;

  const std::string arch = "-gencode=arch=compute_90a,code=sm_90a";
  // The build line of the files' header comments, for one target, every warning an error.
  const std::string flags = "-O3 -std=c++17 -Werror all-warnings " + arch;
  // Whole-program and -rdc objects of the three files, two compiles at a time.
  std::vector<std::string> jobs;
  for (const Emitted& f : files) {
    jobs.push_back(fmt::format("'{}' {} -c {}.cu -o {}.o", nvcc, flags, f.name, f.name));
    jobs.push_back(
        fmt::format("'{}' {} -rdc=true -c {}.cu -o {}.rdc.o", nvcc, flags, f.name, f.name));
  }
  jobs.push_back(fmt::format("'{}' {} -c main.cpp -o main.o", nvcc, flags));
  for (size_t i = 0; i < jobs.size(); i += 2) {
    auto a = std::async(std::launch::async, run, dir, jobs[i], fmt::format("job{}.log", i));
    std::string rb = i + 1 < jobs.size() ? run(dir, jobs[i + 1], fmt::format("job{}.log", i + 1))
                                         : std::string();
    std::string ra = a.get();
    EXPECT_EQ(ra, "");
    EXPECT_EQ(rb, "");
  }
  std::string objs, rdc_objs;
  for (const Emitted& f : files) {
    objs += " " + f.name + ".o";
    rdc_objs += " " + f.name + ".rdc.o";
  }
  EXPECT_EQ(run(dir, fmt::format("'{}' {} main.o{} -o prog", nvcc, arch, objs), "link.log"), "");
  EXPECT_EQ(run(dir, fmt::format("'{}' {} -dlink{} -o dlink.o", nvcc, arch, rdc_objs), "dlink.log"),
            "");
  EXPECT_EQ(run(dir, fmt::format("'{}' {} main.o{} dlink.o -o prog_rdc", nvcc, arch, rdc_objs),
                "link_rdc.log"),
            "");
  EXPECT_TRUE(fs::exists(dir / "prog"));
  EXPECT_TRUE(fs::exists(dir / "prog_rdc"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("emit, 7 compiles and 3 links took %.1f s\n", s);
}

}  // namespace
}  // namespace kiln
