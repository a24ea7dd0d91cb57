#!/usr/bin/env bash
# Issue 13's GPU evidence in one device call (the packed kiln of scripts/device_pack.sh in
# .devrun/pack, no Kiln build needed there):
#   1. kiln bench on example μGraphs: the harness checks uniform and std-1 normal inputs; the
#      hand-written gqa μGraph (exp(Q K^T) in f16) must fail at std 1, as the CPU float check
#      predicts, and the others pass.
#   2. kiln optimize --profile on gqa and on an attention over rms-normed Q and K
#      (tests/data/trust/rms_qk_attention.json): either a kernel that passes the GPU check on
#      both distributions ships, or nothing ships and the exit status is 1 — never a kernel that
#      failed a check.
#   scripts/gpu_trust.sh [PACK]      outputs under $OUT (else ./out/gpu_trust)
set -u
PACK=${1:-.devrun/pack}
K="$PACK/kiln"
O=${OUT:-out/gpu_trust}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$O/device.txt"
date -u | tee -a "$O/device.txt"
for c in gqa lora rmsnorm_linear add_rmsnorm; do
  echo "== bench $c"
  "$K" bench "examples/$c.mugraph.json" --spec "examples/$c.json" --repeats 5 --checks 2 >"$O/bench_$c.log" 2>&1
  echo "rc=$?"
  grep -E "^check|KILN_RESULT|exempt" "$O/bench_$c.log" | head -12
done
for s in examples/gqa.json tests/data/trust/rms_qk_attention.json; do
  n=$(basename "$s" .json)
  echo "== optimize $n"
  "$K" optimize "$s" -o "$O/opt_$n" --no-cache --profile 4 --time-limit 30 --threads 16 \
    >"$O/opt_$n.log" 2>&1
  echo "rc=$?"
  grep -vE "^\s*$" "$O/opt_$n.log" | tail -25
  ls "$O/opt_$n" 2>/dev/null
done
