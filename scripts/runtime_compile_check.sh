#!/usr/bin/env bash
# CPU-only check of runtime/ (CTest label nvcc): compiles tests/gpu/runtime_test.cu placed after
# the amalgamated runtime text (scripts/runtime_amalgamate.sh), outside the source tree, so the
# inlined form emitted kernels use must stand alone; for sm_80 and sm_90a, warnings as errors.
# Then, where libnvrtc is found, compiles the amalgamation plus tests/gpu/runtime_nvrtc_kernels.cu
# with NVRTC (in-process compilation, used for profiling candidates) for both targets.
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
# The two targets compile side by side (each is one long single-threaded nvcc run).
declare -A pid
for arch in 80 90a; do
  "$nvcc" -std=c++17 -O3 -Werror all-warnings -I "$root/tests/gpu" -gencode=arch=compute_$arch,code=sm_$arch \
    -Xptxas -v -c runtime_test_inlined.cu -o "runtime_test_sm$arch.o" >"ptxas_sm$arch.log" 2>&1 &
  pid[$arch]=$!
done
for arch in 80 90a; do
  wait "${pid[$arch]}" || { cat "ptxas_sm$arch.log"; echo "runtime_compile_check: sm_$arch FAILED"; exit 1; }
  echo "runtime_compile_check: sm_$arch ok ($(grep -c 'Compiling entry' "ptxas_sm$arch.log") kernels)"
done

cuda_root="$(cd "$(dirname "$nvcc")/.." && pwd)"
if ls "$cuda_root"/lib64/libnvrtc.so* >/dev/null 2>&1 || ls "$cuda_root"/lib/libnvrtc.so* >/dev/null 2>&1; then
  "$nvcc" -std=c++17 -O1 -DKILN_CUDA_INCLUDE="\"$cuda_root/include\"" -o nvrtc_check \
    "$root/tests/gpu/runtime_nvrtc_check.cpp" -lnvrtc
  {
    bash "$root/scripts/runtime_amalgamate.sh"
    cat "$root/tests/gpu/runtime_nvrtc_kernels.cu"
  } >runtime_nvrtc_kernels_inlined.cu
  export LD_LIBRARY_PATH="$cuda_root/lib64:$cuda_root/lib:${LD_LIBRARY_PATH:-}"
  for arch in sm_80 sm_90a; do
    ./nvrtc_check runtime_nvrtc_kernels_inlined.cu $arch \
      "kiln::rt::gemv_kernel<__half, __half, 2, 1, 2, 4, 2, 2, kiln::rt::GemvIdentity>" \
      "kiln::rt::gemv_kernel<__nv_bfloat16, float, 4, 2, 2, 4, 1, 2, kiln::rt::GemvSiluMul>" \
      "kiln::rt::gemv_kernel<__half, __half, 1, 1, 2, 4, 2, 2, kiln::rt::GemvRmsNorm>" \
      "kiln::rt::gemv_cluster_kernel<__half, __half, 2, 1, 2, 4, 2, 2, kiln::rt::GemvRmsNorm>" \
      "kiln::rt::gemv_cluster_kernel<__nv_bfloat16, float, 2, 2, 2, 4, 1, 2, kiln::rt::GemvSiluMul>" \
      "kiln::rt::gemv_tma_kernel<__half, __half, 4, 1, 64, 64, 8, 1, kiln::rt::GemvRmsNorm>" \
      "kiln::rt::gemv_tma_kernel<__nv_bfloat16, float, 1, 2, 128, 64, 4, 1, kiln::rt::GemvSiluMul>" \
      "kiln::rt::gemm_kernel<kiln::rt::GemmConfig<__half, 128, 128, 32, 2, 4, 3>, __half, NvrtcGemmEpi>" \
      "kiln::rt::wgmma_gemm_kernel<kiln::rt::WgmmaGemm<__half, 2, 4>, __half, NvrtcGemmEpi>" \
      "kiln::rt::wgmma_ws_gemm_kernel<kiln::rt::WgmmaGemmWS<__half, 2, 4>, __half, kiln::rt::WgmmaEpiSiluMul>" ||
      { echo "runtime_compile_check: nvrtc $arch FAILED"; exit 1; }
  done
else
  echo "runtime_compile_check: no libnvrtc next to $nvcc, NVRTC check skipped"
fi
