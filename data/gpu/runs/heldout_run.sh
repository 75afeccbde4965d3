#!/bin/bash
# One device call: this project's kernels at tilings never timed before (gpu_measure.py's
# HELDOUT_TILES), timed like the validation grid, then profiled once each (bytes, local
# memory and its L1 hit rate). Run from the repository root; writes $OUT/gpu_measure.json,
# $OUT/gpu_measure.csv, $OUT/heldout_ncu.csv, $OUT/ncu_launches.json and logs.
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
timeout 300 python3 -m benchmarks.gpu_measure --grid heldout --out $OUT --budget-s 200 \
  > $OUT/measure.log 2>&1
echo "measure rc=$?" >> $OUT/measure.log
B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,gpu__time_duration.sum
B=$B,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum,l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum
B=$B,l1tex__t_sector_pipe_lsu_mem_local_op_ld_hit_rate.pct,sm__cycles_elapsed.avg.per_second
timeout 150 ncu --clock-control none --print-units base --csv --log-file $OUT/heldout_ncu.csv \
  --metrics $B -k regex:"^flash2_(fwd|bwd)$" \
  python3 -m benchmarks.gpu_measure --mode ncu --ncu-set heldout --out $OUT >> $OUT/measure.log 2>&1
echo "ncu rc=$?" >> $OUT/measure.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >> $OUT/measure.log
