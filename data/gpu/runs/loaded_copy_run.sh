#!/bin/bash
# One device call: one SM's TMA copy while the other SMs stream (data/gpu/probe/loaded_copy.py:
# $OUT/loaded_copy.json, $OUT/loaded_copy.log). Run from the repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/loaded_copy.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
date -u >> $L
git rev-parse HEAD >> $L 2>&1
python3 -c "import cupy; print('cupy', cupy.__version__)" >> $L
timeout 240 python3 data/gpu/probe/loaded_copy.py --out $OUT >> $L 2>&1
echo "loaded_copy rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
