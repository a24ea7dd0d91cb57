#!/usr/bin/env bash
# Fuzzes the spec reader: runs BUILD_DIR/kiln_fuzz_spec (built by `make fuzz`) for SECONDS
# (default 60), seeded with the example specs and the errors suite's files.
# Usage: scripts/fuzz.sh BUILD_DIR [SECONDS]
# The corpus grows in BUILD_DIR/fuzz/corpus across runs; a crashing input is saved under
# BUILD_DIR/fuzz/ and the script exits non-zero. Reproduce with: BUILD_DIR/kiln_fuzz_spec FILE
set -euo pipefail
build=${1:?usage: scripts/fuzz.sh BUILD_DIR [SECONDS]}
seconds=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$build/kiln_fuzz_spec"
if [ ! -x "$bin" ]; then
  echo "fuzz.sh: $bin not found; build it with 'make fuzz' (clang, -DKILN_FUZZ=ON)" >&2
  exit 1
fi
mkdir -p "$build/fuzz/corpus"
cp "$root"/examples/*.json "$root"/tests/data/spec_errors/*.json "$build/fuzz/corpus/"
# UBSan only reports by default; a report must fail the run like any other crash.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# Inputs up to 8 KiB reach every rule (and the nesting limit); -timeout catches hangs and
# -rss_limit_mb unbounded allocation.
"$bin" "$build/fuzz/corpus" -dict="$root/tests/fuzz/spec.dict" -max_total_time="$seconds" \
  -max_len=8192 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$build/fuzz/" \
  -print_final_stats=1
