#!/bin/bash
# Device calls for the Hopper forward (kernels/cuda/hopper_fwd.cu). Run from the repository root.
#   hopper_run.sh check: one small case first (a hang or a wrong layout shows in a minute), then
#     the GPU tests of the kernel (tests/test_gpu_hopper.py), then a first timing beside
#     PyTorch SDPA at N = 4k and 16k. Writes $OUT/smoke.log, pytest.log, hopper_measure.json/.csv.
#   hopper_run.sh ncu: the GPU tests, then Nsight Compute on one launch of each preset build at
#     N = 4096 (d = 64 and 128, causal and not): SM-side and DRAM bytes against the trace
#     (`flashio crosscheck FILE --schedule flash2 ... --impl flashio-hopper`). Writes
#     $OUT/pytest.log, ncu_D_N_CAUSAL.csv, ncu.log.
#   hopper_run.sh full: compute-sanitizer (memcheck, racecheck, synccheck) on the two preset
#     builds at a ragged causal shape with grouped heads, then benchmarks/hopper_measure.py at
#     N = 1k..16k beside SDPA (flash, cuDNN) and flex_attention. Writes $OUT/sanitizer.log,
#     measure.log, hopper_measure.json/.csv.
#   hopper_run.sh bwd: the backward (kernels/cuda/hopper_bwd.cu): one small case first, then every
#     GPU test of the Hopper kernels, compute-sanitizer on the two preset builds at a ragged
#     causal shape with grouped heads, and benchmarks/hopper_bwd_measure.py beside SDPA's flash
#     and cuDNN backward (N from $2, default 1k..16k). Writes $OUT/smoke.log, pytest.log,
#     sanitizer.log, measure.log, hopper_bwd_measure.json/.csv.
#   hopper_run.sh bwdncu: the backward's GPU tests, its timing (N = 4k..16k), and Nsight Compute
#     on one launch of its preset builds' main kernel at N = 4096 (d = 64 and 128, causal and
#     not). Writes $OUT/pytest.log, measure.log, hopper_bwd_measure.json/.csv,
#     ncu_bwd_D_N_CAUSAL.csv, ncu.log.
#   hopper_run.sh fwd: the forward's GPU tests (more K and V buffers, persistent builds on three
#     CTAs, the preset's tiles by N), compute-sanitizer on the d = 64 builds below 16k (128 x
#     128, 2 and 3 buffers) and the persistent d = 128 preset build at a ragged causal shape with
#     grouped heads (both in pytest.log), benchmarks/hopper_measure.py at
#     N = 1k..16k (its rows of the preset's build per shape), and Nsight Compute on one launch
#     of the d = 64 preset at N = 4096 (causal and not). Writes $OUT/pytest.log, measure.log,
#     hopper_measure.json/.csv, ncu_64_4096_CAUSAL.csv (Nsight Compute's log in extra.log).
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/extra.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv >> $L
if [ "$1" = check ]; then
  timeout 90 python3 -m pytest tests/test_gpu_hopper.py -q -p no:cacheprovider -x \
    -k "both and bf16 and n1000 and d128-128x128" --timeout 60 -rfE > $OUT/smoke.log 2>&1
  rc=$?; echo "smoke rc=$rc" >> $L
  if [ $rc = 0 ]; then
    timeout 300 python3 -m pytest tests/test_gpu_hopper.py -q -p no:cacheprovider -n 8 \
      --timeout 30 --maxfail 8 -rfE > $OUT/pytest.log 2>&1
    echo "pytest rc=$?" >> $L
    timeout 150 python3 -m benchmarks.hopper_measure --out $OUT --seq-lens 4096,16384 \
      --backends sdpa-flash,sdpa-cudnn > $OUT/measure.log 2>&1
    echo "measure rc=$?" >> $L
  fi
elif [ "$1" = full ]; then
  for t in memcheck racecheck synccheck; do
    timeout 50 compute-sanitizer --tool $t --print-limit 20 python3 -m pytest \
      tests/test_gpu_hopper.py -q -p no:cacheprovider \
      -k "bf16 and n333 and (d128-128x176 and both or d64-192x128 and none)"
  done > $OUT/sanitizer.log 2>&1
  echo "sanitizer rc=$?" >> $L
  timeout 380 python3 -m benchmarks.hopper_measure --out $OUT > $OUT/measure.log 2>&1
  echo "measure rc=$?" >> $L
elif [ "$1" = bwd ]; then
  timeout 90 python3 -m pytest tests/test_gpu_hopper.py -q -p no:cacheprovider -x \
    -k "backward and bf16 and n1000 and d128" --timeout 60 -rfE > $OUT/smoke.log 2>&1
  rc=$?; echo "smoke rc=$rc" >> $L
  if [ $rc = 0 ]; then
    timeout 240 python3 -m pytest tests/test_gpu_hopper.py -q -p no:cacheprovider -n 8 \
      --timeout 30 --maxfail 8 -rfE > $OUT/pytest.log 2>&1
    echo "pytest rc=$?" >> $L
    for t in memcheck racecheck synccheck; do
      timeout 40 compute-sanitizer --tool $t --print-limit 20 python3 -m pytest \
        tests/test_gpu_hopper.py -q -p no:cacheprovider -k "backward and bf16 and n333"
    done > $OUT/sanitizer.log 2>&1
    echo "sanitizer rc=$?" >> $L
    timeout 200 python3 -m benchmarks.hopper_bwd_measure --out $OUT \
      --seq-lens ${2:-1024,4096,8192,16384} --stages 2,3 > $OUT/measure.log 2>&1
    echo "measure rc=$?" >> $L
  fi
elif [ "$1" = bwdncu ]; then
  timeout 150 python3 -m pytest tests/test_gpu_hopper.py -q -p no:cacheprovider -n 8 \
    -k backward --timeout 30 -rfE > $OUT/pytest.log 2>&1
  echo "pytest rc=$?" >> $L
  timeout 200 python3 -m benchmarks.hopper_bwd_measure --out $OUT --seq-lens 4096,8192,16384 \
    --stages 2,3 > $OUT/measure.log 2>&1
  echo "measure rc=$?" >> $L
  B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum
  B=$B,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum
  for s in 64,4096,0 64,4096,1 128,4096,0 128,4096,1; do
    timeout 60 ncu --clock-control none --print-units base --csv -k hopper_bwd --metrics $B \
      python3 -m benchmarks.hopper_bwd_measure --once $s > $OUT/ncu_bwd_${s//,/_}.csv 2>> $OUT/ncu.log
  done
  echo "ncu rc=$?" >> $L
elif [ "$1" = fwd ]; then
  timeout 200 python3 -m pytest tests/test_gpu_hopper.py -q -p no:cacheprovider -n 8 \
    -k "not backward" --timeout 30 -rfE > $OUT/pytest.log 2>&1
  echo "pytest rc=$?" >> $L
  for t in memcheck racecheck synccheck; do
    timeout 50 compute-sanitizer --tool $t --print-limit 20 python3 -m pytest \
      tests/test_gpu_hopper.py -q -p no:cacheprovider \
      -k "n333 and (bf16 and d64-128x128 and none or bf16 and more_kv_buffers and 128-3 or persistent and d128-128x176)"
  done >> $OUT/pytest.log 2>&1
  echo "sanitizer rc=$?" >> $L
  timeout 300 python3 -m benchmarks.hopper_measure --out $OUT > $OUT/measure.log 2>&1
  echo "measure rc=$?" >> $L
  B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum
  B=$B,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum
  for s in 64,4096,0 64,4096,1; do
    timeout 60 ncu --clock-control none --print-units base --csv -k hopper_fwd --metrics $B \
      python3 -m benchmarks.hopper_measure --once $s > $OUT/ncu_${s//,/_}.csv 2>> $L
  done
  echo "ncu rc=$?" >> $L
elif [ "$1" = ncu ]; then
  timeout 200 python3 -m pytest tests/test_gpu_hopper.py -q -p no:cacheprovider -n 8 \
    --timeout 30 -rfE > $OUT/pytest.log 2>&1
  echo "pytest rc=$?" >> $L
  B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum
  B=$B,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum
  for s in 64,4096,0 64,4096,1 128,4096,0 128,4096,1; do
    timeout 60 ncu --clock-control none --print-units base --csv -k hopper_fwd --metrics $B \
      python3 -m benchmarks.hopper_measure --once $s > $OUT/ncu_${s//,/_}.csv 2>> $OUT/ncu.log
  done
  echo "ncu rc=$?" >> $L
fi
# what is committed names no machine path: the output folder as $OUT, packages as
# site-packages/, the interpreter by its name (pytest's and Nsight Compute's lines print its path)
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
PY=$(python3 -c "import sys; print(sys.executable)")
for f in $OUT/*; do
  sed -i -E "s#$OUT#\$OUT#g; s#$SP/#site-packages/#g; s#$PY#python3#g" "$f"
  sed -i -E 's#\(/usr/bin/(python3[0-9.]*)\)#(\1)#g' "$f"
done
cat $L
