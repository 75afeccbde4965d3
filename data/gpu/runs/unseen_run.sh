#!/bin/bash
# One device call: this project's forward at tilings the instruction census never held
# (gpu_measure.py's UNSEEN_TILES, head dims 96 and 256 among them), timed like the validation
# grid. The model's predictions were committed first (data/gpu/unseen/predicted.json,
# benchmarks/unseen_predict.py). Run from the repository root; writes $OUT/gpu_measure.json,
# $OUT/gpu_measure.csv and $OUT/measure.log.
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
timeout 420 python3 -m benchmarks.gpu_measure --grid unseen --out $OUT --budget-s 360 \
  > $OUT/measure.log 2>&1
echo "measure rc=$?" >> $OUT/measure.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >> $OUT/measure.log
