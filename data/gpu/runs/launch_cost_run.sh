#!/bin/bash
# One device call (about a minute): this project's d = 64 forward (1 .. 3 CTAs an SM) and
# backward (1, 2), each launched alone between events as occupancy.py times it and in bursts of
# back-to-back launches (data/gpu/probe/launch_cost.py), then occupancy.py's own run again, so
# that both are from the same card and hour. Run from the repository root. Writes
# $OUT/launch_cost.json, $OUT/occupancy.json, $OUT/launch_cost.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/launch_cost.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
git rev-parse HEAD >> $L 2>&1
timeout 240 python3 data/gpu/probe/launch_cost.py --out $OUT >> $L 2>&1
echo "launch_cost rc=$?" >> $L
timeout 200 python3 data/gpu/probe/occupancy.py --out $OUT --reps 10 >> $L 2>&1
echo "occupancy rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
