#!/bin/bash
# One device call: the board power and launch times of mma.sync and wgmma attention forwards run
# back to back (data/gpu/probe/kernel_clock.py --sustain: $OUT/kernel_clock.json), then Nsight
# Compute on each launched alone (SM clock, issue and stall metrics: $OUT/kernel_clock_ncu.csv).
# Run from the repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
P=data/gpu/probe/kernel_clock.py
L=$OUT/kernel_clock.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv > $L
python3 $P --sustain --out $OUT >> $L 2>&1
echo "sustain rc=$?" >> $L
source data/gpu/runs/ncu_metrics.sh
timeout 300 ncu --clock-control none --print-units base --csv --log-file $OUT/kernel_clock_ncu.csv \
  --metrics $M -k regex:'flash|fmha|hopper|cudnn|sm90|device_kernel' python3 $P --once >> $L 2>&1
echo "ncu rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
