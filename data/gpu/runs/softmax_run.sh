#!/bin/bash
# Two device calls after standard attention's softmax kernel was rewritten (straight-line
# chunks, kernels/cuda/standard.cu). Run from the repository root.
#   softmax_run.sh check: the GPU tests and compute-sanitizer on every kernel, then this
#     project's kernels re-timed (gpu_measure, the validation grid). Writes $OUT/pytest.log,
#     sanitizer.log, gpu_measure.json, gpu_measure.csv, measure.log.
#   softmax_run.sh ncu: Nsight Compute on the validation launches: bytes (ncu.csv, as before),
#     then instructions, issue activity and stall reasons of every kernel the instruction
#     census holds, std_softmax included (ncu_inst.csv), and of the backward at the held-out
#     and spilling tilings (bwd_ncu.csv). Writes those and ncu_launches.json.
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/extra.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv >> $L
if [ "$1" = check ]; then
  timeout 200 python3 -m pytest tests/test_gpu_kernels.py -q -p no:cacheprovider -n 8 \
    --timeout 150 -rfE > $OUT/pytest.log 2>&1
  echo "pytest rc=$?" >> $L
  for t in memcheck racecheck synccheck initcheck; do
    timeout 100 compute-sanitizer --tool $t --print-limit 20 \
      python3 -m benchmarks.gpu_measure --mode small --out /tmp/s
  done > $OUT/sanitizer.log 2>&1
  echo "sanitizer rc=$?" >> $L
  timeout 240 python3 -m benchmarks.gpu_measure --out $OUT --budget-s 120 > $OUT/measure.log 2>&1
  echo "measure rc=$?" >> $L
elif [ "$1" = ncu ]; then
  B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum
  B=$B,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum
  timeout 120 ncu --clock-control none --print-units base --csv --log-file $OUT/ncu.csv \
    --metrics $B -k regex:"^(flash2|std_)" \
    python3 -m benchmarks.gpu_measure --mode ncu --out $OUT >> $L 2>&1
  echo "ncu rc=$?" >> $L
  source data/gpu/runs/ncu_metrics.sh
  M=$M,sm__inst_executed_pipe_tensor_op_hmma.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
  timeout 150 ncu --clock-control none --print-units base --csv --log-file $OUT/ncu_inst.csv \
    --metrics $M -k regex:"^(flash2_fwd|flash2_bwd|std_qk|std_softmax|std_pv)$" \
    python3 -m benchmarks.gpu_measure --mode ncu --out /tmp/n1 >> $L 2>&1
  echo "ncu_inst rc=$?" >> $L
  for set in heldout spills; do
    timeout 120 ncu --clock-control none --print-units base --csv --log-file $OUT/bwd_ncu_$set.csv \
      --metrics $M -k regex:"^flash2_bwd$" \
      python3 -m benchmarks.gpu_measure --mode ncu --ncu-set $set --out /tmp/n2_$set >> $L 2>&1
    echo "bwd ncu $set rc=$?" >> $L
    cp /tmp/n2_$set/ncu_launches.json $OUT/bwd_ncu_launches_$set.json
  done
fi
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
