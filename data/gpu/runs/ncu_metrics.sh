# Sourced by the Nsight Compute run scripts: M, the metric list they share (time, bytes in and
# out of the SMs, local memory and its L1 hit rate, instructions, issue activity, SM clock,
# and every warp stall reason per issued instruction).
S=smsp__average_warps_issue_stalled
M=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,gpu__time_duration.sum
M=$M,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum,l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum
M=$M,l1tex__t_sector_pipe_lsu_mem_local_op_ld_hit_rate.pct,smsp__inst_executed.sum
M=$M,sm__cycles_elapsed.avg.per_second,smsp__issue_active.avg.pct_of_peak_sustained_active
for r in no_instruction mio_throttle short_scoreboard wait math_pipe_throttle barrier \
         long_scoreboard lg_throttle dispatch_stall not_selected selected membar sleeping \
         branch_resolving drain misc tex_throttle imc_miss; do
  M=$M,${S}_${r}_per_issue_active.ratio
done
