#!/usr/bin/env bash
# Builds tests/gpu/runtime_test.cu for this machine's GPU and runs it: correctness of every
# runtime/ piece against CPU references, then GEMV timings on benchmark shapes. Needs nvcc and a
# GPU (sm_80 or newer; sm_90a by default). Usage: scripts/gpu_runtime_test.sh [build-dir]
# Env: NVCC (default nvcc on PATH, else /usr/local/cuda/bin/nvcc), KILN_GPU_ARCH (e.g. 90a, 80;
# default from nvidia-smi, else 90a), KILN_SEED, KILN_SKIP_TIMING=1.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/build/gpu}"
mkdir -p "$out"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
arch="${KILN_GPU_ARCH:-}"
if [ -z "$arch" ]; then
  cc="$( (nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null || true) | head -1 | tr -d ' .')"
  case "$cc" in
    90) arch=90a ;;
    "") arch=90a ;;
    *) arch="$cc" ;;
  esac
fi
echo "gpu_runtime_test: building for sm_$arch with $nvcc"
t0=$(date +%s)
"$nvcc" -std=c++17 -O3 -lineinfo -gencode=arch=compute_$arch,code=sm_$arch -Xptxas -v \
  -o "$out/runtime_test" "$root/tests/gpu/runtime_test.cu" >"$out/ptxas.log" 2>&1 ||
  { cat "$out/ptxas.log"; exit 1; }
echo "gpu_runtime_test: built in $(($(date +%s) - t0)) s; kernels with local memory (stack/spills):"
grep -B1 -E "^ +[1-9][0-9]* bytes stack frame" "$out/ptxas.log" | sed -n 's/.*Function properties for //p' |
  (command -v c++filt >/dev/null && c++filt || cat) | cut -c1-160 | sed 's/^/  /' || true
if command -v cuobjdump >/dev/null; then
  echo "gpu_runtime_test: SASS opcode counts (whole binary):"
  cuobjdump -sass "$out/runtime_test" | grep -oE \
    '(LDG\.E[A-Z.]*\.128[A-Z.]*|HMMA\.[0-9A-Z.]+|HGMMA[A-Z0-9.]*|LDSM[A-Z0-9.]*|LDGSTS[A-Z0-9.]*|UBLKCP[A-Z.]*|SYNCS[A-Z0-9.]*|LDL[A-Z0-9.]*|STL[A-Z0-9.]*)' |
    sort | uniq -c | sed 's/^/  /' || true
fi
"$out/runtime_test"
