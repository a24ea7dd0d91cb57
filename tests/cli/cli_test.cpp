// The kiln binary as a user sees it: exit codes, error messages on stderr, nothing on stdout
// for invalid input, and the subcommands' output on the examples.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

struct KilnRun {
  int status = -1;
  std::string out, err;
};

// Runs `kiln ARGS`, capturing stdout and stderr separately.
KilnRun kiln(const std::string& args) {
  static int counter = 0;
  std::string errfile = std::string(KILN_BINARY_DIR) + "/cli_test_stderr_" +
                        std::to_string(::getpid()) + "_" + std::to_string(counter++);
  std::string cmd = std::string(KILN_BINARY_DIR) + "/kiln " + args + " 2>" + errfile;
  KilnRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(errfile);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  std::filesystem::remove(errfile);
  return r;
}

std::string example(const std::string& name) {
  return std::string(KILN_SOURCE_DIR) + "/examples/" + name;
}

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = std::string(KILN_BINARY_DIR) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, VersionAndHelp) {
  KilnRun v = kiln("--version");
  EXPECT_EQ(v.status, 0);
  EXPECT_NE(v.out.find("kiln "), std::string::npos);
  KilnRun h = kiln("--help");
  EXPECT_EQ(h.status, 0);
  EXPECT_NE(h.out.find("show"), std::string::npos);
  EXPECT_NE(h.out.find("eval"), std::string::npos);
  for (const char* sub : {"show", "eval"}) {
    KilnRun s = kiln(std::string(sub) + " --help");
    EXPECT_EQ(s.status, 0) << sub;
    EXPECT_NE(s.out.find("FILE"), std::string::npos) << sub;
  }
}

TEST(Cli, BadArgumentsExitTwo) {
  EXPECT_EQ(kiln("").status, 2);
  EXPECT_EQ(kiln("frobnicate").status, 2);
  EXPECT_EQ(kiln("show").status, 2);
  EXPECT_EQ(kiln("eval " + example("lora.json") + " --precision f16").status, 2);
}

TEST(Cli, ShowPrintsSpecsAndMugraphs) {
  KilnRun s = kiln("show " + example("rmsnorm_linear.json"));
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_NE(s.out.find("rms_norm"), std::string::npos);
  KilnRun m = kiln("show " + example("gqa.mugraph.json"));
  ASSERT_EQ(m.status, 0) << m.err;
  EXPECT_NE(m.out.find("accum_sum"), std::string::npos);
  KilnRun d = kiln("show --dot " + example("gqa.mugraph.json"));
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_EQ(d.out.rfind("digraph", 0), 0u);
}

TEST(Cli, InvalidSpecExitsTwoWithLocationAndWritesNothing) {
  std::string bad = write_temp("cli_bad_spec.json", R"({
  "name": "t",
  "inputs": [{"name": "X", "shape": [2, 8], "dtype": "f16"}],
  "nodes": [{"name": "Y", "op": "matmull", "inputs": ["X", "X"]}],
  "outputs": ["Y"]
})");
  for (const char* sub : {"show", "eval"}) {
    KilnRun r = kiln(std::string(sub) + " " + bad);
    EXPECT_EQ(r.status, 2) << sub;
    EXPECT_TRUE(r.out.empty()) << sub << ": " << r.out;
    EXPECT_NE(r.err.find("cli_bad_spec.json"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("nodes[0]"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("matmul"), std::string::npos) << r.err;
  }
  KilnRun missing = kiln("show " + std::string(KILN_BINARY_DIR) + "/no_such_file.json");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("no_such_file.json"), std::string::npos);
}

TEST(Cli, EvalIsDeterministicAndAgreesBetweenSpecAndMugraph) {
  KilnRun a = kiln("eval " + example("lora.json") + " --seed 5");
  KilnRun b = kiln("eval " + example("lora.json") + " --seed 5");
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_NE(a.out.find("checksum"), std::string::npos);
  // Same numbers both times (the first line holds the elapsed time).
  EXPECT_EQ(a.out.substr(a.out.find('\n')), b.out.substr(b.out.find('\n')));
  KilnRun c = kiln("eval " + example("lora.json") + " --seed 6");
  EXPECT_NE(a.out.substr(a.out.find('\n')), c.out.substr(c.out.find('\n')));
  KilnRun m = kiln("eval " + example("lora.mugraph.json") + " --seed 5");
  ASSERT_EQ(m.status, 0) << m.err;
  EXPECT_NE(m.out.find("[16, 4096]"), std::string::npos);
}

}  // namespace
