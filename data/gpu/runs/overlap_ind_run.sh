#!/bin/bash
# One device call: MUFU.EX2 in eight chains beside independent FFMA, FMNMX or both
# (overlap.py's ex2_ind_* kernels), with the plain MUFU loop beside them. Run from the
# repository root. Writes $OUT/probe/overlap.json and $OUT/overlap_ind.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
K="mufu_1wg ex2_ind_ffma_1wg ex2_ind_fmnmx_1wg ex2_ind_three_1wg exp_1wg soft_noadd_1wg"
timeout 300 python3 data/gpu/probe/overlap.py --out $OUT/probe --only $K > $OUT/overlap_ind.log 2>&1
echo "overlap rc=$?" >> $OUT/overlap_ind.log
