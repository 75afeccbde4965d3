#!/bin/bash
# One device call on an H100 (about five minutes): the other implementations' attention
# (PyTorch SDPA's flash and cuDNN backends, flex_attention, this project's Triton forward,
# eager attention) timed as data/impl/impl_measure.json was on the H200 (call 1 of
# data/impl/README.md, time only), for the model's hypothetical H100
# (analysis/validation/other_gpu.py). Run from the repository root. Writes
# $OUT/impl/impl_measure.json, $OUT/impl/impl_measure.csv, $OUT/impl/measure.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
mkdir -p $OUT/impl
L=$OUT/impl/measure.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
timeout 540 python3 -m benchmarks.impl_measure --out $OUT/impl --mode time --budget-s 420 >> $L 2>&1
echo "impl_measure rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
