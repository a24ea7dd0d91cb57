#!/usr/bin/env bash
# The PyTorch front end on a GPU machine (issue 22): kiln.compile and
# torch.compile(backend=kiln.backend) on the Llama MLP block of examples/torch/llama_mlp.py,
# checked against a float64 reference and timed against eager PyTorch and torch.compile.
#
# Needs the CUDA toolkit (nvcc), ninja and PyTorch 2.x with CUDA; not the kiln CLI: the kernels
# come from examples/torch/kiln_cache, written on a CPU host by
#     python3 examples/torch/llama_mlp.py --emit            # and --emit --small
# (carry that folder to this machine). A spec the cache lacks is reported with the command that
# makes its kernel, and its spec.json is copied to OUT/missing/.
#
# Usage: scripts/gpu_torch_frontend.sh [OUT]   (default out/gpu_torch_frontend, or $OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-out/gpu_torch_frontend}}
mkdir -p "$out"
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
py=${PYTHON:-python3}
{
  echo "== $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -1 || true
  command -v ninja || "$py" -c 'import ninja' || echo "no ninja: cpp_extension will fail"
} 2>&1 | tee "$out/env.txt"
status=0
for size in small llama7b; do
  flag=""; [ "$size" = small ] && flag="--small"
  echo "== llama_mlp $size" | tee "$out/llama_mlp_$size.log"
  "$py" examples/torch/llama_mlp.py $flag --json "$out/llama_mlp_$size.json" 2>&1 \
    | tee -a "$out/llama_mlp_$size.log"
  rc=${PIPESTATUS[0]}
  echo "exit $rc" | tee -a "$out/llama_mlp_$size.log"
  [ "$rc" -eq 0 ] || status=1
done
# Specs that reached the cache without a kernel (a partition Dynamo cut differently, say).
for d in examples/torch/kiln_cache/*/; do
  if [ -f "$d/spec.json" ] && [ ! -f "$d/kernel.cu" ]; then
    mkdir -p "$out/missing"
    cp "$d/spec.json" "$out/missing/$(basename "$d").json"
    echo "missing kernel: $(basename "$d") (kiln optimize $out/missing/$(basename "$d").json -o DIR; cp DIR/*.cu examples/torch/kiln_cache/$(basename "$d")/kernel.cu)"
  fi
done
exit $status
