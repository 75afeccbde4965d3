#!/bin/bash
# One device call: the Triton FA2 forward's five tilings over N (data/gpu/runs/triton_scaling.py):
# timed by CUDA events ($OUT/triton_scaling.json), then each launched under Nsight Compute with
# the shared metric list, the pipes' activity, the L2's hit rate and the DRAM's bytes
# ($OUT/triton_scaling_ncu.csv; the second launch of each configuration is the one compared).
# Run from the repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/triton_scaling.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
date -u >> $L
timeout 200 python3 data/gpu/runs/triton_scaling.py --time $OUT/triton_scaling.json >> $L 2>&1
echo "time rc=$?" >> $L
source data/gpu/runs/ncu_metrics.sh
source data/gpu/runs/ncu_pipes.sh
M=$M,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,lts__t_bytes.sum
timeout 300 ncu --clock-control none --print-units base --csv \
  --log-file $OUT/triton_scaling_ncu.csv --metrics $M -k regex:"fa2_fwd" \
  python3 data/gpu/runs/triton_scaling.py --ncu >> $L 2>&1
echo "ncu rc=$?" >> $L
rm -f $OUT/ncu_query.txt
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
