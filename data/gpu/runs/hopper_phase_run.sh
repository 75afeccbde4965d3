#!/bin/bash
# One device call (about a minute): the Hopper forward's builds at N = 16384, d = 64 and 128,
# each timed as it runs and built with STEP_CLOCK=1, whose consumer warpgroups stamp the SM's
# clock at four points of each key block (data/gpu/probe/hopper_phase.py): the phase the
# warpgroups settle into on the GPU. Run from the repository root. Writes
# $OUT/hopper_phase.json, $OUT/hopper_phase_stamps.json.gz and $OUT/hopper_phase.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/hopper_phase.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
date -u >> $L
git rev-parse HEAD >> $L 2>&1
python3 -c "import cupy; print('cupy', cupy.__version__)" >> $L 2>&1
timeout 400 python3 data/gpu/probe/hopper_phase.py --out $OUT >> $L 2>&1
echo "rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
