#!/bin/bash
# One device call: MUFU.EX2's dependent-chain latency on 1 SM and on every SM, with 1, 2 and 4
# warps a CTA (data/gpu/probe/mufu_latency.py), and isa.py's own MUFU.EX2 row again beside it.
# Run from the repository root. Writes $OUT/probe/mufu_latency.json, $OUT/probe/isa.json and
# $OUT/mufu_latency.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/mufu_latency.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
timeout 200 python3 data/gpu/probe/mufu_latency.py --out $OUT/probe >> $L 2>&1
echo "mufu_latency rc=$?" >> $L
timeout 300 python3 data/gpu/probe/isa.py --out $OUT/probe --only mufu_ex2,ffma >> $L 2>&1
echo "isa rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
