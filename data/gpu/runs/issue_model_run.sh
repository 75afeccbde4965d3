#!/bin/bash
# One device call: our kernels re-timed (gpu_measure) and profiled (bytes; instructions, stall
# reasons and shared-memory bank conflicts), then PyTorch's flash kernels' resource usage and
# SASS (impl_measure --mode resources sass). Run from the repository root; writes $OUT/r.tgz.
# The two profiling launches' scratch folders were machine temporaries when this ran; they are
# written as $OUT/n0 and $OUT/n1 here (only n0's ncu_launches.json is kept).
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
R=$OUT/r; mkdir -p $R/impl_res; L=$R/extra.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
timeout 200 python3 -m benchmarks.gpu_measure --out $R --budget-s 120 > $R/measure.log 2>&1
echo "measure rc=$?" >> $L
B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum
B=$B,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum
timeout 90 ncu --clock-control none --print-units base --csv --log-file $R/ncu.csv --metrics $B \
  -k regex:"^(flash2|std_)" python3 -m benchmarks.gpu_measure --mode ncu --out $OUT/n0 >> $L 2>&1
echo "ncu rc=$?" >> $L
cp $OUT/n0/ncu_launches.json $R/
S=smsp__average_warps_issue_stalled
M=smsp__inst_executed.sum,sm__inst_executed_pipe_tensor_op_hmma.sum,sm__cycles_elapsed.avg.per_second
M=$M,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
for r in no_instruction mio_throttle short_scoreboard wait math_pipe_throttle barrier \
         long_scoreboard lg_throttle dispatch_stall not_selected selected; do
  M=$M,${S}_${r}_per_issue_active.ratio
done
M=$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_op_ldsm.sum
timeout 100 ncu --clock-control none --print-units base --csv --log-file $R/ncu_inst.csv \
  --metrics $M -k regex:"^(flash2_fwd|flash2_bwd|std_qk|std_pv)$" \
  python3 -m benchmarks.gpu_measure --mode ncu --out $OUT/n1 >> $L 2>&1
echo "ncu2 rc=$?" >> $L
timeout 300 python3 -m benchmarks.impl_measure --out $R/impl_res --mode resources sass \
  --sass-parts torch --cuobjdump-budget-s 260 > $R/impl_res/resources.log 2>&1
echo "res rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv >> $L
cd $OUT && tar czf r.tgz r && rm -rf r
