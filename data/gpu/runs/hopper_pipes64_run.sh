#!/bin/bash
# One device call: the d = 64 Hopper builds at N = 16384, non-causal, under Nsight Compute with
# their pipes' activity and stall reasons (hopper_cycles.py; run 11 measured the d = 128 builds:
# overlap_roles_run.sh), then the Hopper kernels' GPU tests (tests/test_gpu_hopper.py). Run
# from the repository root. Writes $OUT/hopper_pipes64_ncu.csv,
# $OUT/hopper_pipes64_launches.json, $OUT/hopper_pipes64.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/hopper_pipes64.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
git rev-parse HEAD >> $L 2>&1
. data/gpu/runs/ncu_metrics.sh  # M: time, bytes, issue activity, clock, stall reasons
. data/gpu/runs/ncu_pipes.sh  # M += the pipes this ncu knows, the SMs' elapsed cycles
echo "metrics: $M" >> $L
timeout 300 ncu --clock-control none --print-units base --csv \
  --log-file $OUT/hopper_pipes64_ncu.csv --metrics $M -k regex:hopper_fwd \
  python3 data/gpu/probe/hopper_cycles.py --order $OUT/hopper_pipes64_launches.json \
  --head-dim 64 --seq-len 16384 --causal no >> $L 2>&1
echo "ncu rc=$?" >> $L
timeout 200 python3 -m pytest -q tests/test_gpu_hopper.py >> $L 2>&1
echo "pytest rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
