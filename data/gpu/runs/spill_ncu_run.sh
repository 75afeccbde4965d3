#!/bin/bash
# One device call: where register spills go. The bytes that leave and enter the SMs, and the
# local-memory traffic, of this project's kernels whose loops spill (gpu_measure --mode ncu
# --ncu-set spills). Run from the repository root; writes $OUT/spill_ncu.csv and the launches.
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum
B=$B,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum
L=l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum,l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum
L=$L,l1tex__t_sector_pipe_lsu_mem_local_op_ld_hit_rate.pct
run() {  # $1: metrics
  timeout 150 ncu --clock-control none --print-units base --csv --log-file $OUT/spill_ncu.csv \
    --metrics $1 -k regex:"^flash2_(fwd|bwd)$" \
    python3 -m benchmarks.gpu_measure --mode ncu --ncu-set spills --out $OUT >> $OUT/spill_ncu.log 2>&1
}
run $B,$L || { echo "local-memory metrics refused; bytes only" >> $OUT/spill_ncu.log; run $B; }
echo "ncu rc=$?" >> $OUT/spill_ncu.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >> $OUT/spill_ncu.log
