# Sourced by the Nsight Compute run scripts after ncu_metrics.sh: adds to M each pipe's active
# cycles and instructions issued (a share of its peak) that this ncu knows ($OUT/ncu_query.txt,
# written here), and the SMs' elapsed cycles.
ncu --query-metrics --chip gh100 > $OUT/ncu_query.txt 2>&1
for b in sm__pipe_tensor_op_gmma_cycles_active sm__pipe_fma_cycles_active \
         sm__pipe_fmaheavy_cycles_active sm__pipe_alu_cycles_active sm__pipe_xu_cycles_active \
         sm__pipe_shared_cycles_active sm__pipe_uniform_cycles_active \
         sm__inst_executed_pipe_fma sm__inst_executed_pipe_alu sm__inst_executed_pipe_xu \
         sm__inst_executed_pipe_uniform; do
  grep -q "^$b " $OUT/ncu_query.txt && M=$M,$b.avg.pct_of_peak_sustained_active
done
M=$M,sm__cycles_elapsed.max
