#!/usr/bin/env bash
# On a GPU machine: `kiln optimize --profile` on every spec given (default: examples/*.json), one
# spec at a time (so no two timings share the GPU), then optionally PyTorch's baselines in the
# same session. Kiln comes from a packed folder (scripts/device_pack.sh) so the machine needs only
# the CUDA toolkit; the table is scripts/profile_table.py's.
#
#   scripts/bench_suite.sh [--kiln PATH] [--k K] [--repeats R] [--baselines] [SPEC...]
#
# Outputs (under $OUT, else /tmp/kiln-suite): suite.tgz (every report.json and log), suite.tsv,
# torch_baselines.json.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILN=$ROOT/.devrun/pack/kiln
K=6
REPEATS=10
BASE=0
SPECS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kiln) KILN=$2; shift ;;
    --k) K=$2; shift ;;
    --repeats) REPEATS=$2; shift ;;
    --baselines) BASE=1 ;;
    *) SPECS+=("$1") ;;
  esac
  shift
done
[ ${#SPECS[@]} -eq 0 ] && SPECS=("$ROOT"/examples/*.json)
OUTDIR=${OUT:-/tmp/kiln-suite}
WORK=/tmp/kiln-suite-work
mkdir -p "$OUTDIR" "$WORK"
THREADS=$(nproc)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$WORK/device.txt"
for s in "${SPECS[@]}"; do
  case "$s" in *.mugraph.json) continue ;; esac
  n=$(basename "$s" .json)
  t0=$(date +%s.%N)
  "$KILN" optimize "$s" -o "$WORK/$n" --profile "$K" --profile-repeats "$REPEATS" \
    --threads "$THREADS" --no-cache --time-limit 60 > "$WORK/$n.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  printf '%s exit %s %.1f s: %s\n' "$n" "$rc" "$(awk "BEGIN { print $t1 - $t0 }")" \
    "$(grep -E 'kiln: best|BUG|error' "$WORK/$n.log" | head -2 | tr '\n' ' ')"
done
python3 "$ROOT/scripts/profile_table.py" "$WORK" > "$OUTDIR/suite.tsv"
(cd "$WORK" && tar -czf "$OUTDIR/suite.tgz" --exclude='*/profile/*/harness' --exclude='*.cu' \
  device.txt ./*.log ./*/report.json ./*/*.mugraph.json ./*/candidates/*.json ./*/profile/*/*.log \
  2>/dev/null)
column -t -s $'\t' "$OUTDIR/suite.tsv" 2>/dev/null || cat "$OUTDIR/suite.tsv"
if [ "$BASE" = 1 ]; then
  python3 "$ROOT/.devrun/pack/torch_baselines.py" --json "$OUTDIR/torch_baselines.json" 2>&1 |
    grep -v '^#.*compile failed' | cut -c1-150
fi
