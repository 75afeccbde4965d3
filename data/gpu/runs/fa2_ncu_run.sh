#!/bin/bash
# One device call: Nsight Compute on PyTorch's flash-attn 2 kernels (fa2_ncu.py): time,
# instructions, issue activity and stall reasons, bytes in and out of the SMs, the same
# metrics as triton_ncu_run.sh. Writes $OUT/fa2_ncu.csv and $OUT/fa2_ncu.log.
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
source data/gpu/runs/ncu_metrics.sh
M=$M,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_xu.sum
timeout 300 ncu --clock-control none --print-units base --csv --log-file $OUT/fa2_ncu.csv \
  --metrics $M -k regex:"flash_(fwd|bwd)" python3 data/gpu/runs/fa2_ncu.py > $OUT/fa2_ncu.log 2>&1
echo "ncu rc=$?" >> $OUT/fa2_ncu.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >> $OUT/fa2_ncu.log
