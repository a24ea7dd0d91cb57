#!/usr/bin/env bash
# CPU-only check of runtime/ (CTest label nvcc): compiles tests/gpu/runtime_test.cu placed after
# the amalgamated runtime text (scripts/runtime_amalgamate.sh), outside the source tree, so the
# inlined form emitted kernels use must stand alone; for sm_80 and sm_90a, warnings as errors.
# Usage: scripts/runtime_compile_check.sh [work-dir]   Env: NVCC.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/build/runtime_check}"
mkdir -p "$out"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
{
  bash "$root/scripts/runtime_amalgamate.sh"
  cat "$root/tests/gpu/runtime_test.cu"
} >"$out/runtime_test_inlined.cu"
cd "$out"
for arch in 80 90a; do
  "$nvcc" -std=c++17 -O3 -Werror all-warnings -gencode=arch=compute_$arch,code=sm_$arch \
    -Xptxas -v -c runtime_test_inlined.cu -o "runtime_test_sm$arch.o" >"ptxas_sm$arch.log" 2>&1 ||
    { cat "ptxas_sm$arch.log"; echo "runtime_compile_check: sm_$arch FAILED"; exit 1; }
  echo "runtime_compile_check: sm_$arch ok ($(grep -c 'Compiling entry' "ptxas_sm$arch.log") kernels)"
done
