#!/usr/bin/env bash
# Everything Kiln does on a GPU machine, in one call (the device machine has only the CUDA
# toolkit, CMake, ninja and Python with PyTorch):
#   1. runtime/ unit tests against CPU references (scripts/gpu_runtime_test.sh),
#   2. every pre-emitted harness in CASES (scripts/emit_all.sh writes them on a CPU machine):
#      compile, check against the float64 reference, time (scripts/gpu_check.sh),
#   3. optionally the PyTorch baselines in the same run, and compute-sanitizer.
#
#   scripts/gpu_session.sh CASES [--baselines] [--sanitize] [--only SUBSTR] [--skip-runtime]
#
# Logs are packed into $OUT/results.tgz (the device runner returns at most 8 files); the
# results table is printed last.
set -u
CASES=$1
shift
ARGS=()
RUNTIME=1
for a in "$@"; do
  case "$a" in
    --skip-runtime) RUNTIME=0 ;;
    *) ARGS+=("$a") ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${OUT:-/tmp/kiln-out}
RES=/tmp/kiln-results
mkdir -p "$OUTDIR" "$RES"
date -u +"session %FT%TZ" | tee "$RES/session.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$RES/session.txt"
if [ "$RUNTIME" = 1 ]; then
  bash "$ROOT/scripts/gpu_runtime_test.sh" /tmp/kiln-rt > "$RES/runtime.log" 2>&1
  echo "runtime tests: exit $?"
  grep -E 'PASS|FAIL|passed|GB/s' "$RES/runtime.log" | tail -40
fi
BASE=0
CHECK_ARGS=()
for a in "${ARGS[@]}"; do
  if [ "$a" = --baselines ]; then BASE=1; else CHECK_ARGS+=("$a"); fi
done
OUT=$RES bash "$ROOT/scripts/gpu_check.sh" "$CASES" "${CHECK_ARGS[@]}" > "$RES/check.log" 2>&1
rc=$?
# Save Kiln's results before the (long) baselines, so a time-out keeps them.
tar -C /tmp -czf "$OUTDIR/results.tgz" kiln-results
cp "$RES/results.tsv" "$OUTDIR/" 2>/dev/null
grep -E 'FAIL|mismatch' "$RES/check.log" | head -40
echo "== results (gpu_check exit $rc)"
column -t -s $'\t' "$RES/results.tsv" 2>/dev/null || cat "$RES/results.tsv"
if [ "$BASE" = 1 ]; then
  echo "== torch baselines (same machine, same session)"
  python3 "$ROOT/.devrun/torch_baselines.py" --json "$OUTDIR/torch_baselines.json" 2>&1 |
    tee "$OUTDIR/torch_baselines.txt" | grep -v '^#.*compile failed' | cut -c1-150
fi
exit $rc
