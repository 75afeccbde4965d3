#!/bin/bash
# One device call: run 15's kernels (an exponential whose source the next FFMA overwrites:
# overlap_war_run.sh) and run 16's (two warps of work beside one warp's wgmma on each SMSP,
# three warpgroups, with their one-warp and no-wgmma references). Run from the repository
# root. Writes $OUT/probe15/overlap.json, $OUT/probe16/overlap.json and their logs.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/overlap_run16_extra.log
K="ex2_war_n1_1wg ex2_war_n2_1wg ex2_war_n4_1wg ex2_war_n8_1wg ex2_war2_n1_1wg ex2_war2_n2_1wg"
K="$K soft_1wg soft_nomax_1wg mufu_1wg"
timeout 200 python3 data/gpu/probe/overlap.py --out $OUT/probe15 --only $K > $OUT/overlap_war.log 2>&1
echo "overlap run 15 rc=$?" >> $OUT/overlap_war.log
K="mma_1wg ffma_c1_1wg split_ffma_c1 ffma_c1_2wg split2_ffma_c1 ffma_c2_1wg split_ffma_c2 split2_ffma_c2"
K="$K ffma_c3_1wg split_ffma_c3 ffma_c3_2wg split2_ffma_c3 mma_1wg_g32 split_ffma_c3_g32 split2_ffma_c3_g32"
K="$K fmnmx_c1_1wg split_fmnmx_c1 fmnmx_c1_2wg split2_fmnmx_c1 soft_1wg split_soft soft_2wg split2_soft"
timeout 250 python3 data/gpu/probe/overlap.py --out $OUT/probe16 --only $K > $OUT/overlap_run16.log 2>&1
echo "overlap run 16 rc=$?" >> $OUT/overlap_run16.log
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv >> $OUT/overlap_run16_extra.log
