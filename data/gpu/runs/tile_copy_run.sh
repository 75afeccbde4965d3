#!/bin/bash
# One device call: a CTA's cp.async copy of a tile and its wait, as the attention loops copy
# (data/gpu/probe/tile_copy.py: $OUT/tile_copy.json, $OUT/tile_copy.log). Run from the
# repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/tile_copy.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
timeout 240 python3 data/gpu/probe/tile_copy.py --out $OUT >> $L 2>&1
echo "tile_copy rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
