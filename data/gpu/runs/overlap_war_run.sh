#!/bin/bash
# One device call: an exponential whose source register the next FFMA overwrites, so that
# it waits on the MUFU's read barrier (overlap.py's ex2_war_* and ex2_war2_* kernels, one to
# eight chains), with soft_1wg and soft_nomax_1wg beside them. Run from the repository root.
# Writes $OUT/probe/overlap.json and $OUT/overlap_war.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
K="ex2_war_n1_1wg ex2_war_n2_1wg ex2_war_n4_1wg ex2_war_n8_1wg ex2_war2_n1_1wg ex2_war2_n2_1wg"
K="$K soft_1wg soft_nomax_1wg mufu_1wg"
timeout 300 python3 data/gpu/probe/overlap.py --out $OUT/probe --only $K > $OUT/overlap_war.log 2>&1
echo "overlap rc=$?" >> $OUT/overlap_war.log
