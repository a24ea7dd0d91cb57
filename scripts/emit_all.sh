#!/usr/bin/env bash
# Emits the GPU harnesses that scripts/gpu_check.sh runs, on a CPU machine with Kiln built.
#
#   scripts/emit_all.sh [OUTDIR] [--build DIR] [--search] [--only SUBSTR] [--target sm_90a|sm_80]
#
# For every spec examples/NAME.json it writes, into OUTDIR (default gpu_cases/):
#   harness_spec_NAME.cu   the spec itself (Kiln's generic predefined-op kernels)
#   harness_NAME.cu        the hand-written μGraph examples/NAME.mugraph.json, when there is one
#   harness_opt_NAME.cu    with --search: the μGraph `kiln optimize` finds (needs BUILD/kiln)
# each checked against the spec's float64 reference. Then copy OUTDIR to the GPU machine and run
#   scripts/gpu_check.sh OUTDIR [--sanitize] [--baselines]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=gpu_cases
BUILD=""
SEARCH=0
ONLY=""
TARGET=sm_90a
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift ;;
    --search) SEARCH=1 ;;
    --only) ONLY="$2"; shift ;;
    --target) TARGET="$2"; shift ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) OUTDIR="$1" ;;
  esac
  shift
done
# The emitter front end: `kiln emit` when the CLI has it, else the codegen tool.
find_bin() {
  for d in $BUILD "$ROOT/build" "$ROOT/build-codegen" "$ROOT/build-lead"; do
    [ -n "$d" ] && [ -x "$d/$1" ] && { echo "$d/$1"; return; }
  done
}
KILN=$(find_bin kiln || true)
TOOL=$(find_bin tests/kiln_codegen_tool || true)
emit() {  # emit GRAPH SPEC OUT.cu
  if [ -n "$KILN" ] && "$KILN" emit --help 2>/dev/null | grep -q -- --harness; then
    "$KILN" emit "$1" --spec "$2" --target "$TARGET" --harness "$3"
  elif [ -n "$TOOL" ]; then
    "$TOOL" "$1" --spec "$2" --target "$TARGET" --harness "$3"
  else
    echo "emit_all: build kiln_codegen_tool first (cmake --build build --target kiln_codegen_tool)" >&2
    exit 1
  fi
}
mkdir -p "$OUTDIR"
n=0
for spec in "$ROOT"/examples/*.json; do
  case "$spec" in *.mugraph.json) continue ;; esac
  name=$(basename "$spec" .json)
  if [ -n "$ONLY" ] && [[ "$name" != *"$ONLY"* ]]; then continue; fi
  emit "$spec" "$spec" "$OUTDIR/harness_spec_$name.cu" && n=$((n + 1))
  if [ -f "$ROOT/examples/$name.mugraph.json" ]; then
    emit "$ROOT/examples/$name.mugraph.json" "$spec" "$OUTDIR/harness_$name.cu" && n=$((n + 1))
  fi
  if [ "$SEARCH" = 1 ] && [ -n "$KILN" ]; then
    sdir="$OUTDIR/search_$name"
    if "$KILN" optimize "$spec" -o "$sdir" > "$sdir.log" 2>&1 && [ -f "$sdir/$name.mugraph.json" ]; then
      emit "$sdir/$name.mugraph.json" "$spec" "$OUTDIR/harness_opt_$name.cu" && n=$((n + 1))
    else
      echo "emit_all: search failed for $name (see $sdir.log)" >&2
    fi
  fi
done
echo "emit_all: $n harnesses in $OUTDIR"
echo "next, on the GPU machine: scripts/gpu_check.sh $OUTDIR [--sanitize] [--baselines]"
