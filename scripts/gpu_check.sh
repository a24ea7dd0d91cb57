#!/usr/bin/env bash
# The one script to run on the GPU machine (CUDA toolkit, no Kiln build needed): compiles every
# pre-emitted harness in DIR (harness_*.cu, written by scripts/emit_all.sh on a CPU machine),
# runs each (correctness against the float64 reference, then CUDA-graph timing), optionally runs
# compute-sanitizer on the check, records SASS instruction counts, and prints a table last.
#
#   scripts/gpu_check.sh DIR [--sanitize] [--baselines] [--only SUBSTR] [--repeats R] [--check-only]
#
#   --sanitize    also run compute-sanitizer memcheck, racecheck and synccheck on --check-only
#                 runs of the μGraph cases (one seed; spec_* cases only with --sanitize-all).
#   --baselines   first run shared/bench/torch_baselines.py (needs PyTorch) in the same session,
#                 so that Kiln's numbers compare with torch's on the same machine.
#   --only S      only harnesses whose name contains S.
#   --check-only  correctness only (the float64 check of every harness), no timing.
# Outputs go to $OUT (if set, e.g. by the device runner) else DIR/results: per-case logs,
# sass_<case>.txt summaries and results.tsv. Exit status: 0 when every case compiled and passed.
set -u
if [ $# -lt 1 ]; then
  sed -n '2,18p' "$0"
  exit 2
fi
DIR=$(cd "$1" && pwd)
shift
SANITIZE=0
BASELINES=0
ONLY=""
REPEATS=30
CHECK_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) SANITIZE=1 ;;
    --sanitize-all) SANITIZE=2 ;;
    --baselines) BASELINES=1 ;;
    --only) ONLY="$2"; shift ;;
    --repeats) REPEATS="$2"; shift ;;
    --check-only) CHECK_ONLY=1 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_BIN=$(dirname "$NVCC")
SANITIZER=${SANITIZER:-$(command -v compute-sanitizer || echo "$CUDA_BIN/compute-sanitizer")}
CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || echo "$CUDA_BIN/cuobjdump")}
RES=${OUT:-$DIR/results}
mkdir -p "$RES" "$DIR/bin"
JOBS=$(nproc 2>/dev/null || echo 4)

echo "== gpu_check: $(date -u +%FT%TZ) nvcc: $("$NVCC" --version | tail -1)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>/dev/null | tee "$RES/gpu.txt"

if [ "$BASELINES" = 1 ]; then
  HERE=$(cd "$(dirname "$0")" && pwd)
  for b in "$HERE/../shared/bench/torch_baselines.py" "$HERE/../../shared/bench/torch_baselines.py" \
           "${KILN_BASELINES:-}"; do
    if [ -n "$b" ] && [ -f "$b" ]; then
      echo "== torch baselines ($b)"
      python3 "$b" --json "$RES/torch_baselines.json" 2>&1 | tee "$RES/torch_baselines.txt"
      break
    fi
  done
fi

cases=()
for f in "$DIR"/harness_*.cu; do
  [ -e "$f" ] || continue
  n=$(basename "$f" .cu)
  n=${n#harness_}
  if [ -n "$ONLY" ] && [[ "$n" != *"$ONLY"* ]]; then continue; fi
  cases+=("$n")
done
if [ ${#cases[@]} -eq 0 ]; then
  echo "no harness_*.cu in $DIR" >&2
  exit 2
fi

echo "== compiling ${#cases[@]} harnesses ($JOBS at a time)"
compile_one() {
  n=$1
  "$NVCC" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo \
    -o "$DIR/bin/$n" "$DIR/harness_$n.cu" > "$RES/compile_$n.log" 2>&1
  echo $? > "$RES/compile_$n.rc"
}
export -f compile_one
export NVCC DIR RES
printf '%s\n' "${cases[@]}" | xargs -P "$JOBS" -I{} bash -c 'compile_one {}'

fail=0
printf 'case\tcompiled\tok\terr\tus\tsanitizer\tsass\n' > "$RES/results.tsv"
for n in "${cases[@]}"; do
  rc=$(cat "$RES/compile_$n.rc" 2>/dev/null || echo 1)
  if [ "$rc" != 0 ]; then
    echo "-- $n: COMPILE FAILED (see compile_$n.log)"
    tail -5 "$RES/compile_$n.log"
    printf '%s\tno\t-\t-\t-\t-\t-\n' "$n" >> "$RES/results.tsv"
    fail=1
    continue
  fi
  # SASS summary: tensor-core, async-copy and vector-load instruction counts per kernel.
  sass="-"
  if [ -x "$CUOBJDUMP" ]; then
    # Opcode counts over the whole binary (SASS lines look like "/*0120*/  HMMA.16816.F32 R4, ...").
    "$CUOBJDUMP" -sass "$DIR/bin/$n" 2>/dev/null |
      grep -oE '(HGMMA|HMMA|UTMALDG|UTMASTG|LDGSTS|LDSM|LDG|STG|LDL|STL|BAR)[A-Z0-9._]*' | sort | uniq -c > "$RES/sass_$n.txt"
    count() { grep -E " $1" "$RES/sass_$n.txt" | awk '{ s += $1 } END { print s + 0 }'; }
    sass="hmma=$(count HMMA) hgmma=$(count HGMMA) tma=$(($(count UTMALDG) + $(count UTMASTG))) ldgsts=$(count LDGSTS) ldg128=$(count 'LDG[A-Z.]*\.128') ldsm=$(count LDSM) ldl/stl=$(($(count LDL) + $(count STL)))"
  fi
  echo "-- $n"
  if [ "$CHECK_ONLY" = 1 ]; then
    timeout 600 "$DIR/bin/$n" --check-only > "$RES/run_$n.log" 2>&1
  else
    timeout 600 "$DIR/bin/$n" --repeats "$REPEATS" > "$RES/run_$n.log" 2>&1
  fi
  rrc=$?
  cat "$RES/run_$n.log" | grep -v '^$' | tail -8
  line=$(grep '^KILN_RESULT' "$RES/run_$n.log" | tail -1)
  ok=$(echo "$line" | sed -n 's/.* ok=\([0-9]*\).*/\1/p')
  err=$(echo "$line" | sed -n 's/.* err=\([^ ]*\).*/\1/p')
  us=$(echo "$line" | sed -n 's/.* us=\([^ ]*\).*/\1/p')
  [ "$rrc" = 0 ] && [ "$ok" = 1 ] || fail=1
  san="-"
  if [ "$SANITIZE" != 0 ] && [ -x "$SANITIZER" ] && { [ "$SANITIZE" = 2 ] || [[ "$n" != spec_* ]]; }; then
    san=""
    for tool in memcheck racecheck synccheck; do
      timeout 900 "$SANITIZER" --tool "$tool" --error-exitcode 9 "$DIR/bin/$n" --check-only --checks 1 \
        > "$RES/sanitize_${tool}_$n.log" 2>&1
      src=$?
      errs=$(grep -c '========= \(Invalid\|Race\|Error\|Barrier\)' "$RES/sanitize_${tool}_$n.log")
      san="$san${tool}:$([ "$src" = 0 ] && echo ok || echo "FAIL($errs)") "
      [ "$src" = 0 ] || fail=1
    done
  fi
  printf '%s\tyes\t%s\t%s\t%s\t%s\t%s\n' "$n" "${ok:-0}" "${err:--}" "${us:--}" "$san" "$sass" >> "$RES/results.tsv"
done

echo
echo "== results (also $RES/results.tsv)"
column -t -s $'\t' "$RES/results.tsv" 2>/dev/null || cat "$RES/results.tsv"
exit $fail
