#!/bin/bash
# One device call: PyTorch's eager attention kernels. The machine code of its elementwise and
# softmax kernels from libtorch_cuda.so (eager_sass.py: $OUT/eager_sass.json.gz), then Nsight
# Compute on every kernel of one eager forward at five shapes (eager_ncu.py): time, SM clock,
# instructions, issue activity, stall reasons, bytes in and out of the SMs and of DRAM
# ($OUT/eager_ncu.csv, $OUT/eager_ncu.log). Run from the repository root.
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/eager_ncu.log
PYTHONPATH=. timeout 240 python3 data/gpu/runs/eager_sass.py --out $OUT > $OUT/eager_sass.log 2>&1
echo "eager_sass rc=$?" >> $OUT/eager_sass.log
source data/gpu/runs/ncu_metrics.sh
M=$M,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size
M=$M,launch__registers_per_thread,launch__occupancy_limit_registers,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_xu.sum
M=$M,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_op_global_ld.sum,smsp__warps_launched.sum
timeout 300 ncu --clock-control none --print-units base --csv --log-file $OUT/eager_ncu.csv \
  --metrics $M python3 data/gpu/runs/eager_ncu.py > $L 2>&1
echo "ncu rc=$?" >> $L
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >> $L
