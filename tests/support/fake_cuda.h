// A fake CUDA toolchain and GPU for CPU-only tests of profiling (search/profile.h, kiln bench,
// kiln optimize --profile).
//
// write_fake_cuda(dir, plan) writes dir/nvcc and dir/nvidia-smi (shell scripts). The fake nvcc
// "compiles" harness.cu into an executable script whose behaviour is chosen by `plan`, keyed by
// the candidate number in the harness's "// Source: candidate N (...)" header line (harnesses
// from profile_candidates) or "*" (any other harness, e.g. kiln bench):
//   "us=X"          prints a device line and KILN_RESULT ok=1 us=X, exits 0
//   "compile_fail"  nvcc itself fails with an error line
//   "mismatch"      KILN_RESULT ok=0, exits 1
//   "cuda_error"    KILN_RESULT ... error=no CUDA-capable device is detected, exits 2
//   "no_result"     prints nothing, exits 0
//   "hang"          sleeps 60 s
// The fake nvidia-smi lists one GPU when `gpu` is true, else says no devices (exit 6).
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace kiln_test {

inline void write_script(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
  chmod(p.c_str(), 0755);
}

inline void write_fake_cuda(const std::filesystem::path& dir,
                            const std::map<std::string, std::string>& plan, bool gpu = true) {
  std::filesystem::create_directories(dir);
  std::string table;
  for (const auto& [k, v] : plan) table += k + " " + v + "\n";
  std::ofstream(dir / "plan.txt") << table;
  write_script(dir / "nvcc", R"(#!/bin/sh
out=""; cu=""
while [ $# -gt 0 ]; do
  case "$1" in
    --version) echo "nvcc: fake"; echo "Cuda compilation tools, release 99.9, V99.9.1"; exit 0 ;;
    -o) out="$2"; shift ;;
    *.cu) cu="$1" ;;
  esac
  shift
done
n=$(sed -n 's|^// Source: candidate \([0-9]*\) .*|\1|p' "$cu" | head -n 1)
[ -n "$n" ] || n="*"
b=$(awk -v n="$n" '$1 == n { print $2 }' ")" +
                                 (dir / "plan.txt").string() + R"(")
[ -n "$b" ] || b=$(awk '$1 == "*" { print $2 }' ")" +
                                 (dir / "plan.txt").string() + R"(")
case "$b" in
  compile_fail) echo "$cu(1): error: fake compile failure"; exit 1 ;;
  us=*) body="echo 'device: Fake GPU (sm_90, 132 SMs, L2 50 MB)'; echo 'KILN_RESULT name=x ok=1 err=1.000e-06 $b calls=20 copies=4'; exit 0" ;;
  mismatch) body="echo 'KILN_RESULT name=x ok=0 err=3.000e-01 us=5.00 calls=20 copies=4'; exit 1" ;;
  cuda_error) body="echo 'KILN_RESULT name=x ok=0 err=inf us=nan error=no CUDA-capable device is detected'; exit 2" ;;
  no_result) body="exit 0" ;;
  hang) body="sleep 60" ;;
  *) echo "fake nvcc: no plan for candidate $n"; exit 1 ;;
esac
printf '#!/bin/sh\n%s\n' "$body" > "$out"
chmod +x "$out"
)");
  write_script(dir / "nvidia-smi", gpu ? "#!/bin/sh\necho 'GPU 0: Fake GPU (UUID: GPU-0)'\n"
                                       : "#!/bin/sh\necho 'No devices were found'\nexit 6\n");
}

}  // namespace kiln_test
