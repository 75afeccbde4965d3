#!/bin/bash
# One device call: the SM clock and the L2's loaded latency beside this project's kernels on
# green contexts of 8-112 SMs (data/gpu/probe/sm_clock.py: $OUT/sm_clock.json), then Nsight
# Compute on each of its kernels once inside green contexts of 8, 32, 64 and 132 SMs (SM clock,
# cycles, instructions, stall reasons: $OUT/sm_clock_ncu_N.csv). Run from the repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
P=data/gpu/probe/sm_clock.py
L=$OUT/sm_clock.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
python3 $P --out $OUT --work-sms 8 16 32 64 96 112 >> $L 2>&1
echo "sm_clock rc=$?" >> $L
source data/gpu/runs/ncu_metrics.sh
M=$M,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.max,launch__grid_size
for n in 8 32 64 132; do
  timeout 150 ncu --clock-control none --print-units base --csv \
    --log-file $OUT/sm_clock_ncu_$n.csv --metrics $M -k regex:flash2 \
    python3 $P --once --once-sms $n >> $L 2>&1
  echo "ncu n=$n rc=$?" >> $L
done
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
