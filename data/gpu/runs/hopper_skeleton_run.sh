#!/bin/bash
# One device call: the --cta-cost tilings of the Hopper forward built with SKELETON=1 (every
# copy, barrier and store, no arithmetic; data/gpu/probe/hopper_cycles.py --skeleton), N =
# 128..2816 at one round of 132 CTAs and ten, each launched alone under Nsight Compute.
# Run from the repository root. Writes $OUT/hopper_skeleton_ncu.csv,
# $OUT/hopper_skeleton_launches.json, the log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/hopper_skeleton.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max
timeout 400 ncu --clock-control none --print-units base --csv \
  --log-file $OUT/hopper_skeleton_ncu.csv --metrics $M -k regex:hopper_fwd \
  python3 data/gpu/probe/hopper_cycles.py --cta-cost --skeleton --order $OUT/hopper_skeleton_launches.json >> $L 2>&1
echo "ncu rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
