#!/usr/bin/env bash
# `make demo`: the main job on the default example, rmsnorm_linear. Shows the spec and the
# hand-written reference μGraph with their evaluations, then runs the search (`kiln optimize`),
# shows and verifies its winner, and emits the winner's standalone CUDA file.
set -euo pipefail
BUILD=${1:-build}
KILN=$BUILD/kiln
SPEC=examples/rmsnorm_linear.json
REF=examples/rmsnorm_linear.mugraph.json
OUT=$BUILD/demo

echo "== kiln show $SPEC"
$KILN show $SPEC
echo
echo "== kiln show $REF (the hand-written reference μGraph)"
$KILN show $REF
echo
echo "== kiln eval: the spec and the reference on the same seeded inputs (float64)"
$KILN eval $SPEC --seed 7
$KILN eval $REF --seed 7
echo
echo "== kiln optimize $SPEC -o $OUT"
$KILN optimize $SPEC -o $OUT --time-limit 60
echo
echo "== the winner"
$KILN show $OUT/rmsnorm_linear.mugraph.json
echo
echo "== kiln verify $SPEC $OUT/rmsnorm_linear.mugraph.json --float"
$KILN verify $SPEC $OUT/rmsnorm_linear.mugraph.json --float
echo
echo "== kiln emit (the winner as a standalone .cu, verified against the spec)"
$KILN emit $OUT/rmsnorm_linear.mugraph.json --spec $SPEC -o $OUT/kiln_rmsnorm_linear.cu \
  --harness $OUT/harness_rmsnorm_linear.cu
