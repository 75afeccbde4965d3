#!/bin/bash
# One device call: board power and SM clock for one kind of work at a time on 33-132 SMs
# (data/gpu/probe/power.py: $OUT/power.json, $OUT/power.log). Run from the repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/power.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv > $L
python3 data/gpu/probe/power.py --out $OUT >> $L 2>&1
echo "power rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $L
