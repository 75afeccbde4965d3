#!/bin/bash
# One device call: Nsight Compute on the Triton FA2 forward's five d = 128 tilings (launched
# twice each by triton_ncu.py; the second launch of each is the one compared): bytes, local
# memory, instructions and stall reasons; the same for this project's spilling kernels.
# Writes $OUT/triton_ncu.csv, $OUT/spill_inst.csv and $OUT/triton_ncu.log.
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
source data/gpu/runs/ncu_metrics.sh
timeout 200 ncu --clock-control none --print-units base --csv --log-file $OUT/triton_ncu.csv \
  --metrics $M -k regex:"fa2_fwd" python3 data/gpu/runs/triton_ncu.py > $OUT/triton_ncu.log 2>&1
echo "ncu rc=$?" >> $OUT/triton_ncu.log
# the same instruction and stall metrics on this project's spilling kernels (--ncu-set spills)
timeout 150 ncu --clock-control none --print-units base --csv --log-file $OUT/spill_inst.csv \
  --metrics $M -k regex:"^flash2_(fwd|bwd)$" \
  python3 -m benchmarks.gpu_measure --mode ncu --ncu-set spills --out /tmp/s1 >> $OUT/triton_ncu.log 2>&1
echo "ncu2 rc=$?" >> $OUT/triton_ncu.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >> $OUT/triton_ncu.log
