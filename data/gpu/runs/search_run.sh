#!/bin/bash
# One device call: this project's forward at every tiling the instruction census holds
# (gpu_measure.py's SEARCH_TILES, d = 64 and 128) at shapes none of them was timed at, the
# candidates `flashio tiling --search` ranks. The model's ranking was committed first
# (data/gpu/search/predicted.json, benchmarks/unseen_predict.py --grid search). Run from the
# repository root; writes $OUT/gpu_measure.json, $OUT/gpu_measure.csv and $OUT/measure.log.
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
timeout 540 python3 -m benchmarks.gpu_measure --grid search --out $OUT --budget-s 480 \
  > $OUT/measure.log 2>&1
echo "measure rc=$?" >> $OUT/measure.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >> $OUT/measure.log
