#!/bin/bash
# One device call (with hopper_pipes64_run.sh): run 18's kernels, FFMA in one to three
# dependent chains beside another warp's mma.sync (overlap.py's hsplit_ffma_c1..c3), with
# their references. Run from the repository root. Writes $OUT/probe18/overlap.json and logs.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/overlap_run18_extra.log
K="hmma_1wg ffma_c1_1wg ffma_c2_1wg ffma_c3_1wg ffma_1wg hsplit_ffma hsplit_ffma_c1"
K="$K hsplit_ffma_c2 hsplit_ffma_c3 split_ffma_c1"
timeout 200 python3 data/gpu/probe/overlap.py --out $OUT/probe18 --only $K > $OUT/overlap_run18.log 2>&1
echo "overlap run 18 rc=$?" >> $OUT/overlap_run18.log
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv >> $OUT/overlap_run18_extra.log
