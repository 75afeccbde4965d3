#!/bin/bash
# One device call: overlap.py's softmax mixes alone (runs 12-14) under Nsight Compute, each
# kernel's five launches profiled: issue activity, every stall reason per issued instruction and
# the pipes' activity, to see what holds the exponentials back in eight chains and not in one
# or two. Run from the repository root. Writes $OUT/overlap_ncu.csv and $OUT/overlap_ncu.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/overlap_ncu.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
. data/gpu/runs/ncu_metrics.sh  # M: time, bytes, issue activity, clock, stall reasons
M=$M,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
M=$M,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active
M=$M,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__cycles_elapsed.max
K="mufu_1wg mufu_n1_1wg exp_1wg exp_n1_1wg soft_1wg soft_n1_1wg soft_n4_1wg soft_noadd_1wg"
K="$K soft_nomax_1wg ex2_add_1wg ex2_ind_ffma_1wg ex2_ind_fmnmx_1wg soft_ind_1wg"
timeout 400 ncu --clock-control none --print-units base --csv --log-file $OUT/overlap_ncu.csv \
  --metrics $M -k regex:"_1wg$" \
  python3 data/gpu/probe/overlap.py --out $OUT/probe --only $K >> $L 2>&1
echo "ncu rc=$?" >> $L
