#!/bin/bash
# One device call: the Hopper forward's non-causal persistent builds at N = 4096 and 16384,
# each after its build with a CTA a tile (data/gpu/probe/hopper_cycles.py --persistent), under
# Nsight Compute with the shared metric list and the pipes' activity: instructions, issue
# activity and every stall reason of the twins whose cycles differ by 7-8%
# ($OUT/hopper_persistent_stalls_ncu.csv, $OUT/hopper_persistent_stalls_launches.json).
# Run from the repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/hopper_persistent_stalls.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
date -u >> $L
source data/gpu/runs/ncu_metrics.sh
source data/gpu/runs/ncu_pipes.sh
M=$M,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,lts__t_bytes.sum
timeout 280 ncu --clock-control none --print-units base --csv \
  --log-file $OUT/hopper_persistent_stalls_ncu.csv --metrics $M -k regex:hopper_fwd \
  python3 data/gpu/probe/hopper_cycles.py --persistent --causal no --seq-len 4096 16384 \
  --order $OUT/hopper_persistent_stalls_launches.json >> $L 2>&1
echo "ncu rc=$?" >> $L
rm -f $OUT/ncu_query.txt
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
