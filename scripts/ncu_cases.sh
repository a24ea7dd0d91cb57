#!/usr/bin/env bash
# On a GPU machine: Nsight Compute on the kernels of some pre-emitted harnesses (one
# `--kernel-only` call each: fresh random inputs, no reference), to say what limits a kernel.
# Sections: speed of light, occupancy, launch statistics, scheduler and warp-state statistics.
# Clocks are left alone (--clock-control none), as the timings elsewhere are taken.
#
#   scripts/ncu_cases.sh DIR CASE...      (DIR/harness_CASE.cu, from `kiln emit --harness`)
#
# Writes $OUT/ncu.tgz (ncu_CASE.txt per case; the device runner returns 8 files at most) and
# prints the main lines of each Kiln kernel (the harness's input generator is left out).
set -u
DIR=$1
shift
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
RES=/tmp/kiln-ncu
OUTDIR=${OUT:-/tmp/kiln-ncu-out}
mkdir -p "$OUTDIR"
mkdir -p "$RES" "$DIR/bin"
for n in "$@"; do
  "$NVCC" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -o "$DIR/bin/$n" \
    "$DIR/harness_$n.cu" > "$RES/compile_$n.log" 2>&1 &
done
wait
for n in "$@"; do
  "$NCU" --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section SchedulerStats --section WarpStateStats "$DIR/bin/$n" --kernel-only \
    > "$RES/ncu_$n.txt" 2>&1
  echo "== $n (ncu exit $?)"
  grep -E '^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Grid Size|Block Size|Achieved Occupancy|Theoretical Occupancy|Issued Warp Per|No Eligible|Warp Cycles Per Issued|Dynamic Shared' \
    "$RES/ncu_$n.txt" | sed 's/  */ /g' |
    awk '/, Context [0-9]/ { show = ($0 !~ /kiln_harness::/) } show' | cut -c1-110
done
tar -C "$RES" -czf "$OUTDIR/ncu.tgz" .
