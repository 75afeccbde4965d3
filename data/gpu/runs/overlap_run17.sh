#!/bin/bash
# One device call (with hopper_cta_cost_run.sh): run 17's kernels, two warpgroups each
# issuing wgmma, waiting, then a softmax mix (a warp-specialized forward's consumers without
# softmax overlap), at the parts' lengths of that kernel's step, with their references. Run
# from the repository root. Writes $OUT/probe17/overlap.json and its logs.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/overlap_run17_extra.log
K="mma_1wg_g4 soft_e32_1wg same_soft_g4 both_soft_g4 mma_1wg_g8 soft_e64_1wg same_soft_g8"
K="$K both_soft_g8 mma_1wg soft_1wg both_soft mma_2wg mma_2wg_fresh"
timeout 200 python3 data/gpu/probe/overlap.py --out $OUT/probe17 --only $K > $OUT/overlap_run17.log 2>&1
echo "overlap run 17 rc=$?" >> $OUT/overlap_run17.log
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv >> $OUT/overlap_run17_extra.log
