#!/usr/bin/env bash
# `make demo`: the main job on the default example. Shows the hand-written reference μGraph of
# rmsnorm_linear, evaluates it next to its spec on the same seeded inputs, and checks that they
# agree.
set -euo pipefail
BUILD=${1:-build}
KILN=$BUILD/kiln
SPEC=examples/rmsnorm_linear.json
REF=examples/rmsnorm_linear.mugraph.json

echo "== kiln show $REF"
$KILN show $REF
echo
echo "== kiln eval $SPEC (the spec, float64 reference)"
$KILN eval $SPEC --seed 7
echo
echo "== kiln eval $REF (the μGraph, float64)"
$KILN eval $REF --seed 7
echo
echo "== kiln eval $REF --precision f32 (float arithmetic, stores rounded to f16)"
$KILN eval $REF --seed 7 --precision f32
