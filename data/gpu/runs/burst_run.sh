#!/bin/bash
# One device call: many SMs asking for a tile at once, then storing one (data/gpu/probe/burst.py:
# $OUT/burst.json, $OUT/burst_stores.json, $OUT/burst.log). Run from the repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/burst.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
timeout 200 python3 data/gpu/probe/burst.py --out $OUT >> $L 2>&1
timeout 100 python3 data/gpu/probe/burst.py --out $OUT --stores >> $L 2>&1
echo "burst rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
