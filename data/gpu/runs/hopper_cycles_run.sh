#!/bin/bash
# One device call: every non-persistent build of the Hopper forward at every validation shape,
# each launched alone under Nsight Compute (data/gpu/probe/hopper_cycles.py): its duration and
# SM clock, so its cycles ($OUT/hopper_cycles_ncu.csv, $OUT/hopper_cycles_launches.json).
# Run from the repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/hopper_cycles.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max
timeout 500 ncu --clock-control none --print-units base --csv \
  --log-file $OUT/hopper_cycles_ncu.csv --metrics $M -k regex:hopper_fwd \
  python3 data/gpu/probe/hopper_cycles.py --order $OUT/hopper_cycles_launches.json >> $L 2>&1
echo "ncu rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
