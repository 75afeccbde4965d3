#!/bin/bash
# One device call on an H100 (a few minutes): this project's validation grid timed as on the
# H200 (benchmarks/gpu_measure.py, the same grid and budget as data/gpu/gpu_measure.json), for
# the model's hypothetical H100 (analysis/validation/other_gpu.py). Run from the repository
# root. Writes $OUT/gpu_measure.json, $OUT/measure.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/measure.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
timeout 400 python3 benchmarks/gpu_measure.py --out $OUT --budget-s 120 >> $L 2>&1
echo "gpu_measure rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
