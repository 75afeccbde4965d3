#!/bin/bash
# One device call (a few minutes): the Hopper forward's builds at N = 16384, non-causal, d = 64
# (the ranking misses of docs/validation.md) and d = 128 (ranked right: the control), under
# Nsight Compute with per-instruction warp-state sampling (SourceCounters), to see where the
# GPU's consumer warps wait that the warp replay does not (data/gpu/probe/hopper_samples.py
# summarizes). Run from the repository root. Writes $OUT/hopper_samples_launches.json,
# $OUT/hopper_samples_source.csv.gz (per SASS instruction, every profiled launch),
# $OUT/hopper_samples_ncu.csv.gz (the metrics) and $OUT/hopper_samples.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/hopper_samples.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
date -u >> $L
git rev-parse HEAD >> $L 2>&1
ncu --version >> $L 2>&1
python3 -c "import cupy; print('cupy', cupy.__version__)" >> $L 2>&1
. data/gpu/runs/ncu_metrics.sh  # M: time, bytes, issue activity, clock, stall reasons
R=$OUT/hopper_samples
timeout 420 ncu --clock-control none --print-units base \
  --section SourceCounters --section WarpStateStats --section SchedulerStats \
  --metrics $M,sm__cycles_elapsed.max -k regex:hopper_fwd -o $R \
  python3 data/gpu/probe/hopper_cycles.py --order $OUT/hopper_samples_launches.json \
  --head-dim 64 128 --seq-len 16384 --causal no >> $L 2>&1
echo "ncu rc=$?" >> $L
ncu -i $R.ncu-rep --csv --print-units base --page raw > $OUT/hopper_samples_ncu.csv 2>> $L
echo "raw rc=$?" >> $L
ncu -i $R.ncu-rep --csv --page source --print-source sass > $OUT/hopper_samples_source.csv 2>> $L
echo "source rc=$?" >> $L
gzip -f $OUT/hopper_samples_source.csv $OUT/hopper_samples_ncu.csv
rm -f $R.ncu-rep  # the exports hold what is read; the report is large
ls -l $OUT >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
