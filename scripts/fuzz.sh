#!/usr/bin/env bash
# Fuzzes the readers: runs BUILD_DIR/kiln_fuzz_TARGET (built by `make fuzz`) for SECONDS
# (default 60) per target. TARGET is spec (the spec reader, seeded with the example specs and
# the errors suite's files), mugraph (the μGraph reader and its exact round trip, seeded with
# every *.mugraph.json of examples/, tests/regression/ and tests/data/, the μGraph error files,
# and tests/fuzz/mugraph_seeds: the codec tests' samples, written once, which use every op kind
# at every level and every attr) or all (default: spec, then mugraph).
# Usage: scripts/fuzz.sh BUILD_DIR [TARGET] [SECONDS]   (scripts/fuzz.sh BUILD_DIR SECONDS: all)
# Each target's corpus grows in BUILD_DIR/fuzz/TARGET/corpus across runs; a crashing input is
# saved under BUILD_DIR/fuzz/TARGET/ and the script exits non-zero. Reproduce with:
# BUILD_DIR/kiln_fuzz_TARGET FILE
set -euo pipefail
usage="usage: scripts/fuzz.sh BUILD_DIR [spec|mugraph|all] [SECONDS]"
build=${1:?$usage}
target=${2:-all}
seconds=${3:-60}
if [[ $target =~ ^[0-9]+$ ]]; then  # the old form: BUILD_DIR SECONDS
  seconds=$target
  target=all
fi
root=$(cd "$(dirname "$0")/.." && pwd)

fuzz_one() {
  local name=$1 dict=$2 max_len=$3
  shift 3
  local bin="$build/kiln_fuzz_$name" dir="$build/fuzz/$name"
  if [ ! -x "$bin" ]; then
    echo "fuzz.sh: $bin not found; build it with 'make fuzz' (clang, -DKILN_FUZZ=ON)" >&2
    exit 1
  fi
  mkdir -p "$dir/corpus"
  # Seeds are named after their directory too: examples/ and tests/regression/ share names.
  local seed
  for seed in "$@"; do
    cp "$seed" "$dir/corpus/seed_$(basename "$(dirname "$seed")")_$(basename "$seed")"
  done
  echo "fuzz.sh: $name for ${seconds}s" >&2
  # UBSan only reports by default; a report must fail the run like any other crash.
  # -timeout catches hangs and -rss_limit_mb unbounded allocation.
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    "$bin" "$dir/corpus" -dict="$root/tests/fuzz/$dict" -max_total_time="$seconds" \
    -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$dir/" \
    -print_final_stats=1
}

shopt -s nullglob
case $target in
  spec | mugraph | all) ;;
  *)
    echo "fuzz.sh: unknown target '$target'; $usage" >&2
    exit 2
    ;;
esac
# Specs up to 8 KiB reach every rule (and the nesting limit). The μGraph seeds run to 4 KiB;
# 16 KiB leaves room to grow them.
if [ "$target" = spec ] || [ "$target" = all ]; then
  fuzz_one spec spec.dict 8192 "$root"/examples/*.json "$root"/tests/data/spec_errors/*.json
fi
if [ "$target" = mugraph ] || [ "$target" = all ]; then
  fuzz_one mugraph mugraph.dict 16384 "$root"/examples/*.mugraph.json \
    "$root"/tests/regression/*.mugraph.json "$root"/tests/data/*.mugraph.json \
    "$root"/tests/data/mugraph_errors/*.json "$root"/tests/fuzz/mugraph_seeds/*.json
fi
