#!/bin/bash
# One device call (about a minute): the Hopper forward's builds of hopper_cycles.py --cta-cost
# and one skeleton at N = 2048 and 16384, each timed as it runs and built with CTA_CLOCK=1,
# whose CTAs record their SM and the global timer at their start, Q tile, last key block and
# store (data/gpu/probe/hopper_rounds.py): whether the GPU's rounds of CTAs keep in step.
# Run from the repository root. Writes $OUT/hopper_rounds.json,
# $OUT/hopper_rounds_clock.json.gz and $OUT/hopper_rounds.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/hopper_rounds.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
date -u >> $L
git rev-parse HEAD >> $L 2>&1
python3 -c "import cupy; print('cupy', cupy.__version__)" >> $L 2>&1
timeout 400 python3 data/gpu/probe/hopper_rounds.py --out $OUT >> $L 2>&1
echo "rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
