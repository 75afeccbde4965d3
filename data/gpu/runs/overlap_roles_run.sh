#!/bin/bash
# One device call: which side slows when wgmma and other work share an SMSP (overlap.py, each
# warpgroup's span recorded, with a softmax-like mix as a check), then the d = 128,
# N = 16384 Hopper builds under Nsight Compute with their pipes' activity and stall reasons
# (hopper_cycles.py). Run from the repository root. Writes $OUT/probe/overlap.json,
# $OUT/overlap_roles.log, $OUT/hopper_pipes_ncu.csv, $OUT/hopper_pipes_launches.json.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/overlap_roles.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
K="mma_1wg rmma_1wg ffma_1wg mufu_1wg fmnmx_1wg imad_1wg f2fp_1wg soft_1wg ffma_c1_1wg"
K="$K ffma_c2_1wg ffma_c3_1wg split_ffma split_ffma_c1 split_ffma_c2 split_ffma_c3 split_mufu"
K="$K split_fmnmx split_imad split_f2fp split_soft intra_ffma intra_mufu intra_fmnmx intra_soft"
K="$K both_soft both_ffma both_mufu rsplit_ffma rsplit_mufu rintra_ffma"
timeout 300 python3 data/gpu/probe/overlap.py --out $OUT/probe --only $K >> $L 2>&1
echo "overlap rc=$?" >> $L
. data/gpu/runs/ncu_metrics.sh  # M: time, bytes, issue activity, clock, stall reasons
. data/gpu/runs/ncu_pipes.sh  # M += the pipes this ncu knows, the SMs' elapsed cycles
echo "metrics: $M" >> $L
timeout 200 ncu --clock-control none --print-units base --csv \
  --log-file $OUT/hopper_pipes_ncu.csv --metrics $M -k regex:hopper_fwd \
  python3 data/gpu/probe/hopper_cycles.py --order $OUT/hopper_pipes_launches.json \
  --head-dim 128 --seq-len 16384 --causal no >> $L 2>&1
echo "ncu rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
