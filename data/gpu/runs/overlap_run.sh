#!/bin/bash
# One device call: the tensor-pipe overlap probe (data/gpu/probe/overlap.py), then the SASS
# of cuDNN's run-time compiled SDPA kernels as Nsight Compute records it (hopper_sass.py).
# Writes $OUT/probe/overlap.json, $OUT/overlap.log, $OUT/cudnn_sass.csv, $OUT/cudnn_sass.log.
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
timeout 200 python3 data/gpu/probe/overlap.py --out $OUT/probe > $OUT/overlap.log 2>&1
echo "overlap rc=$?" >> $OUT/overlap.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >> $OUT/overlap.log
ncu --version > $OUT/cudnn_sass.log 2>&1
ncu --help 2>&1 | grep -A4 -e "--print-source\|--page" >> $OUT/cudnn_sass.log
timeout 200 ncu --clock-control none --section SourceCounters -k regex:"cudnn" -c 8 \
  --page source --print-source sass --csv python3 data/gpu/runs/hopper_sass.py \
  > $OUT/cudnn_sass.csv 2>> $OUT/cudnn_sass.log
echo "ncu rc=$?" >> $OUT/cudnn_sass.log
gzip -f $OUT/cudnn_sass.csv
