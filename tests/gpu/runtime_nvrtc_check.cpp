// Compiles a CUDA source with NVRTC (no GPU needed) and reports the log: proves that the inlined
// runtime, as emitted kernels carry it, also builds in-process for profiling.
// Usage: runtime_nvrtc_check <source.cu> <arch, e.g. sm_90a> [kernel name expression]...
#include <nvrtc.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s source.cu arch [name-expression]...\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  const std::string src = text.str();
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, src.c_str(), argv[1], 0, nullptr, nullptr) != NVRTC_SUCCESS)
    return 2;
  for (int i = 3; i < argc; ++i) nvrtcAddNameExpression(prog, argv[i]);
  const std::string arch = std::string("-arch=") + argv[2];
  std::vector<const char*> opts = {"-std=c++17", arch.c_str()};
#ifdef KILN_CUDA_INCLUDE
  opts.push_back("-I" KILN_CUDA_INCLUDE);
#endif
  const nvrtcResult r = nvrtcCompileProgram(prog, int(opts.size()), opts.data());
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  std::string log(n, '\0');
  nvrtcGetProgramLog(prog, &log[0]);
  printf("nvrtc %s: %s\n%s", argv[2], nvrtcGetErrorString(r), log.c_str());
  nvrtcDestroyProgram(&prog);
  return r == NVRTC_SUCCESS ? 0 : 1;
}
