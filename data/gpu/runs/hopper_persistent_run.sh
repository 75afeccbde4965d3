#!/bin/bash
# One device call: the Hopper forward's persistent builds, each after its build with a CTA a
# tile, at every validation shape, launched alone under Nsight Compute
# (data/gpu/probe/hopper_cycles.py --persistent): their cycles, which the power limit does not
# change ($OUT/hopper_persistent_ncu.csv, $OUT/hopper_persistent_launches.json). Run from the
# repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/hopper_persistent.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
date -u >> $L
python3 -c "import cupy; print('cupy', cupy.__version__)" >> $L
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max
timeout 400 ncu --clock-control none --print-units base --csv \
  --log-file $OUT/hopper_persistent_ncu.csv --metrics $M -k regex:hopper_fwd \
  python3 data/gpu/probe/hopper_cycles.py --persistent \
  --order $OUT/hopper_persistent_launches.json >> $L 2>&1
echo "ncu rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
