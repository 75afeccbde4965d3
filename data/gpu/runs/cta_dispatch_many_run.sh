#!/bin/bash
# One device call (under a minute): many short CTAs an SM (4 to 16 resident, 1-10 us each) on
# the whole GPU (data/gpu/probe/cta_dispatch.py --many): whether an SM's slot still idles for
# the block scheduler's turnaround when many CTAs share the SM. Run from the repository root.
# Writes $OUT/cta_dispatch_many.json.gz and $OUT/cta_dispatch_many.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/cta_dispatch_many.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
date -u >> $L
git rev-parse HEAD >> $L 2>&1
python3 -c "import cupy; print('cupy', cupy.__version__)" >> $L 2>&1
timeout 300 python3 data/gpu/probe/cta_dispatch.py --out $OUT --many >> $L 2>&1
echo "rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
