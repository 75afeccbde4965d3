#!/bin/bash
# One device call: the softmax mix of overlap.py taken apart (each dependency alone), and a
# softmax whose exponentials are independent, alone and beside wgmma; each warpgroup's span
# recorded. Run from the repository root. Writes $OUT/probe/overlap.json, $OUT/overlap_soft.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/overlap_soft.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
K="mma_1wg mufu_1wg mufu_c1_1wg soft_1wg soft_nomax_1wg soft_noadd_1wg exp_1wg ex2_add_1wg"
K="$K soft_ind_1wg split_soft_ind intra_soft_ind both_soft_ind fmnmx_c1_1wg"
timeout 300 python3 data/gpu/probe/overlap.py --out $OUT/probe --only $K >> $L 2>&1
echo "overlap rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
