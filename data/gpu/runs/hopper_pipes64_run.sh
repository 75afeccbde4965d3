#!/bin/bash
# One device call: the d = 64 Hopper builds at N = 16384, non-causal, under Nsight Compute with
# their pipes' activity and stall reasons (hopper_cycles.py; run 11 measured the d = 128 builds:
# overlap_roles_run.sh), then the Hopper kernels' GPU tests (tests/test_gpu_hopper.py). Run
# from the repository root. Writes $OUT/hopper_pipes64_ncu.csv,
# $OUT/hopper_pipes64_launches.json, $OUT/hopper_pipes64.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/hopper_pipes64.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
git rev-parse HEAD >> $L 2>&1
ncu --query-metrics --chip gh100 > $OUT/ncu_query.txt 2>&1
. data/gpu/runs/ncu_metrics.sh  # M: time, bytes, issue activity, clock, stall reasons
# the pipes run 11 read (overlap_roles_run.sh), those this ncu knows
for b in sm__pipe_tensor_op_gmma_cycles_active sm__pipe_fma_cycles_active \
         sm__pipe_fmaheavy_cycles_active sm__pipe_alu_cycles_active sm__pipe_xu_cycles_active \
         sm__pipe_shared_cycles_active sm__pipe_uniform_cycles_active \
         sm__inst_executed_pipe_fma sm__inst_executed_pipe_alu sm__inst_executed_pipe_xu \
         sm__inst_executed_pipe_uniform; do
  grep -q "^$b " $OUT/ncu_query.txt && M=$M,$b.avg.pct_of_peak_sustained_active
done
M=$M,sm__cycles_elapsed.max
echo "metrics: $M" >> $L
timeout 300 ncu --clock-control none --print-units base --csv \
  --log-file $OUT/hopper_pipes64_ncu.csv --metrics $M -k regex:hopper_fwd \
  python3 data/gpu/probe/hopper_cycles.py --order $OUT/hopper_pipes64_launches.json \
  --head-dim 64 --seq-len 16384 --causal no >> $L 2>&1
echo "ncu rc=$?" >> $L
timeout 200 python3 -m pytest -q tests/test_gpu_hopper.py >> $L 2>&1
echo "pytest rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
