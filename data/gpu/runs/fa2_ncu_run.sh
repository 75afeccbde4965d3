#!/bin/bash
# One device call: Nsight Compute on PyTorch's flash-attn 2 kernels (fa2_ncu.py): time,
# instructions, issue activity and stall reasons, bytes in and out of the SMs, the same
# metrics as triton_ncu_run.sh. Writes $OUT/fa2_ncu.csv and $OUT/fa2_ncu.log.
export PYTHONPATH=. PYTHONUNBUFFERED=1
S=smsp__average_warps_issue_stalled
M=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,gpu__time_duration.sum
M=$M,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum,l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum
M=$M,l1tex__t_sector_pipe_lsu_mem_local_op_ld_hit_rate.pct,smsp__inst_executed.sum
M=$M,sm__cycles_elapsed.avg.per_second,smsp__issue_active.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_xu.sum
for r in no_instruction mio_throttle short_scoreboard wait math_pipe_throttle barrier \
         long_scoreboard lg_throttle dispatch_stall not_selected selected membar sleeping \
         branch_resolving drain misc tex_throttle imc_miss; do
  M=$M,${S}_${r}_per_issue_active.ratio
done
timeout 300 ncu --clock-control none --print-units base --csv --log-file $OUT/fa2_ncu.csv \
  --metrics $M -k regex:"flash_(fwd|bwd)" python3 data/gpu/runs/fa2_ncu.py > $OUT/fa2_ncu.log 2>&1
echo "ncu rc=$?" >> $OUT/fa2_ncu.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >> $OUT/fa2_ncu.log
