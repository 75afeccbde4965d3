#!/bin/bash
# One device call: the L2's delivery to all SMs when k of them read the same lines, together or
# one after another (data/gpu/probe/l2_share.py): event-timed ($OUT/l2_share.json), then every
# case launched twice under Nsight Compute for the bytes the L2's slices serve and the bytes the
# SMs receive ($OUT/l2_share_ncu.csv; the second launch of each case is the one to compare).
# Run from the repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/l2_share.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
date -u >> $L
git rev-parse HEAD >> $L 2>&1
python3 -c "import cupy; print('cupy', cupy.__version__)" >> $L
timeout 200 python3 data/gpu/probe/l2_share.py --out $OUT >> $L 2>&1
echo "l2_share rc=$?" >> $L
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,lts__t_bytes.sum
M=$M,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__m_xbar2l1tex_read_bytes.sum
# --cache-control none: the L2 keeps what the case's first launch brought in
timeout 300 ncu --clock-control none --cache-control none --print-units base --csv \
  --log-file $OUT/l2_share_ncu.csv --metrics $M -k regex:"l2_share" \
  python3 data/gpu/probe/l2_share.py --out $OUT --ncu >> $L 2>&1
echo "ncu rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
