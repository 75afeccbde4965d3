#!/bin/bash
# One device call (with hopper_cta_cost_run.sh and overlap_run17.sh): board power and SM clock
# for the dense wgmma loop on the same operands and on operands that change from one wgmma to
# the next, on 33-132 SMs (data/gpu/probe/power.py --kinds: $OUT/power3/power.json and its
# log). Run from the repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
mkdir -p $OUT/power3
L=$OUT/power3/power.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv > $L
timeout 150 python3 data/gpu/probe/power.py --out $OUT/power3 --kinds mma_2wg mma_2wg_fresh >> $L 2>&1
echo "power rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $L
