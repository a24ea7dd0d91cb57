#!/usr/bin/env bash
# On a GPU machine, after scripts/bench_suite.sh: runs compute-sanitizer (memcheck, racecheck,
# synccheck) on the kernel each spec's search shipped. For every GRAPHS/<name>.mugraph.json (the
# shipped μGraph, or the spec itself where the spec's own kernels won) it emits a harness with the
# packed kiln (`kiln emit --spec --harness`), compiles them all in parallel, then runs each tool
# on `harness --kernel-only` (one call of the kernel on fresh random inputs; no float64 reference,
# which under racecheck takes minutes for large shapes), several at a time.
#
#   scripts/sanitize_winners.sh [--kiln PATH] [--timeout S] [--jobs J] GRAPHS SPEC_DIR
# (GRAPHS from scripts/shipped_graphs.py)
#
# Prints one line per case (tool: ok | FAIL(n errors) | timeout) and writes $OUT/sanitize.tsv.
# Exit status 0 when no tool reported an error (timeouts are reported, not counted as errors).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILN=$ROOT/.devrun/pack/kiln
TIMEOUT=240
JOBS=6
while [ $# -gt 2 ]; do
  case "$1" in
    --kiln) KILN=$2; shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    --jobs) JOBS=$2; shift ;;
    *) break ;;
  esac
  shift
done
if [ $# -ne 2 ]; then
  sed -n '2,12p' "$0"
  exit 2
fi
WORK=$1
SPECS=$2
OUTDIR=${OUT:-/tmp/kiln-sanitize}
H=/tmp/kiln-sanitize-work
mkdir -p "$OUTDIR" "$H/bin" "$H/log"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
SANITIZER=${SANITIZER:-$(command -v compute-sanitizer || echo "$(dirname "$NVCC")/compute-sanitizer")}
cases=()
for g in "$WORK"/*.mugraph.json; do
  n=$(basename "$g" .mugraph.json)
  s=$SPECS/$n.json
  [ -f "$g" ] && [ -f "$s" ] || continue
  if "$KILN" emit "$g" --spec "$s" --harness "$H/harness_$n.cu" -o "$H/$n.cu" > "$H/log/emit_$n.log" 2>&1; then
    cases+=("$n")
  else
    echo "$n: emit failed: $(tail -1 "$H/log/emit_$n.log")"
  fi
done
compile_one() {
  "$NVCC" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -o "$H/bin/$1" \
    "$H/harness_$1.cu" > "$H/log/compile_$1.log" 2>&1 || echo "$1: compile failed"
}
check_one() {  # case tool
  timeout "$TIMEOUT" "$SANITIZER" --tool "$2" --error-exitcode 9 "$H/bin/$1" --kernel-only \
    > "$H/log/${2}_$1.log" 2>&1
  rc=$?
  errs=$(grep -c '========= \(Invalid\|Race\|Error\|Barrier\)' "$H/log/${2}_$1.log")
  case $rc in
    0) r=ok ;;
    124) r=timeout ;;
    *) r="FAIL($errs,rc=$rc)" ;;
  esac
  echo "$r" > "$H/log/${2}_$1.result"
}
export -f compile_one check_one
export NVCC SANITIZER H TIMEOUT
printf '%s\n' "${cases[@]}" | xargs -P "$(nproc)" -I{} bash -c 'compile_one {}'
for n in "${cases[@]}"; do for t in memcheck racecheck synccheck; do echo "$n $t"; done; done |
  xargs -P "$JOBS" -n 2 bash -c 'check_one "$0" "$1"'
fail=0
printf 'case\tmemcheck\tracecheck\tsynccheck\n' > "$OUTDIR/sanitize.tsv"
for n in "${cases[@]}"; do
  row=$n
  for t in memcheck racecheck synccheck; do
    r=$(cat "$H/log/${t}_$n.result" 2>/dev/null || echo missing)
    case $r in FAIL*|missing) fail=1 ;; esac
    row="$row\t$r"
  done
  printf "$row\n" >> "$OUTDIR/sanitize.tsv"
done
cat "$OUTDIR/sanitize.tsv"
tar -czf "$OUTDIR/sanitize_logs.tgz" -C "$H" log 2>/dev/null
exit $fail
