#!/bin/bash
# Device calls for the masked flash2 forward and backward (kernels/cuda/flash2_fwd.cu and
# flash2_bwd.cu, MASKED builds). Run from the repository root.
#   masks_run.sh check: the GPU tests ($OUT/pytest.log) and compute-sanitizer memcheck,
#     racecheck and synccheck on masked launches, forward and backward ($OUT/sanitizer.log).
#   masks_run.sh measure: benchmarks/masks_measure.py, ours beside flex_attention and SDPA
#     ($OUT/masks/masks.json, $OUT/measure.log), then Nsight Compute's bytes and times of the
#     launches of benchmarks/masks_ncu.py ($OUT/masks_ncu.csv, masks_ncu.log).
#   masks_run.sh measure-bwd: the same for the backward ($OUT/masks/masks_bwd.json,
#     $OUT/measure_bwd.log, $OUT/masks_bwd_ncu.csv, masks_bwd_ncu.log).
#   masks_run.sh measure-decode: flash_decode beside PyTorch's decoding
#     ($OUT/masks/masks_decode.json, $OUT/measure_decode.log, $OUT/masks_decode_ncu.csv).
#   masks_run.sh block: the block-sparse GPU tests ($OUT/pytest_block.log), the sanitizers
#     on block-sparse launches ($OUT/sanitizer_block.log) and Nsight Compute's bytes of
#     benchmarks/masks_ncu.py --block-sparse ($OUT/masks_block_ncu.csv).
#   masks_run.sh paged: flash_decode over a paged KV cache (the PAGED build): its GPU tests
#     ($OUT/pytest_paged.log), the sanitizers ($OUT/sanitizer_paged.log), the timings beside a
#     contiguous cache and PyTorch ($OUT/masks/masks_paged.json, $OUT/measure_paged.log) and
#     Nsight Compute's bytes of benchmarks/masks_ncu.py --paged ($OUT/masks_paged_ncu.csv).
#   masks_run.sh measure-block: the forward and backward with block masks beside
#     flex_attention ($OUT/masks/masks_block.json, $OUT/measure_block.log).
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-deps --no-build-isolation -e .
L=$OUT/extra.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv >> $L
if [ "$1" = check ]; then
  timeout 200 python3 -m pytest tests/test_gpu_kernels.py -q -p no:cacheprovider -n 8 \
    --timeout 150 -rfE > $OUT/pytest.log 2>&1
  echo "pytest rc=$?" >> $L
  for t in memcheck racecheck synccheck; do
    timeout 120 compute-sanitizer --tool $t --print-limit 20 python3 -c "
from flashio import kernels
from flashio.kernels import gpu
from tests._util import random_inputs
for f in ({'causal': True, 'window': 100}, {'causal': True, 'segments': (50, 150, 56)},
          {'causal': True, 'kv_seq_len': 100}, {'seq_len': 1, 'kv_seq_len': 700}):
    f = {'seq_len': 256, **f}
    sh = kernels.AttentionShape(1, 2, head_dim=64, dtype='bf16', **f)
    for name, tiles in (('flash2', (64, 64, 4)), ('flash2', (128, 64, 8)),
                        ('flash2_bwd', (64, 64, 4)), ('flash2_bwd', (64, 128, 8))):
        s = kernels.schedule(name, sh, *tiles)
        gpu.run_schedule(s, *random_inputs(sh, seed=1, backward=name == 'flash2_bwd'))
for f in ({'kv_heads': 2}, {'causal': True, 'window': 100}, {'seq_len': 3, 'causal': True}):
    sh = kernels.AttentionShape(1, 4, **{'seq_len': 1, **f}, kv_seq_len=1000, head_dim=64,
                                dtype='bf16')
    for splits in (None, 1, 3):
        s = kernels.schedule('flash_decode', sh, num_splits=splits)
        gpu.run_schedule(s, *random_inputs(sh, seed=1))
print('ran')
"
  done > $OUT/sanitizer.log 2>&1
  echo "sanitizer rc=$?" >> $L
elif [ "$1" = measure ]; then
  timeout 420 python3 -m benchmarks.masks_measure --out $OUT/masks --budget-s 300 \
    > $OUT/measure.log 2>&1
  echo "measure rc=$?" >> $L
  B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum
  B=$B,dram__bytes_write.sum,gpu__time_duration.sum
  timeout 200 ncu --clock-control none --print-units base --csv --log-file $OUT/masks_ncu.csv \
    --metrics $B -k regex:"^flash2" python3 -m benchmarks.masks_ncu > $OUT/masks_ncu.log 2>&1
  echo "ncu rc=$?" >> $L
  ncu --version | tail -1 >> $OUT/masks_ncu.log
elif [ "$1" = measure-bwd ]; then
  timeout 330 python3 -m benchmarks.masks_measure --out $OUT/masks --backward --budget-s 240 \
    > $OUT/measure_bwd.log 2>&1
  echo "measure-bwd rc=$?" >> $L
  B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum
  B=$B,dram__bytes_write.sum,gpu__time_duration.sum
  timeout 150 ncu --clock-control none --print-units base --csv --log-file $OUT/masks_bwd_ncu.csv \
    --metrics $B -k regex:"^flash2_bwd" python3 -m benchmarks.masks_ncu --backward \
    > $OUT/masks_bwd_ncu.log 2>&1
  echo "ncu-bwd rc=$?" >> $L
elif [ "$1" = measure-decode ]; then
  timeout 200 python3 -m benchmarks.masks_measure --out $OUT/masks --decode \
    > $OUT/measure_decode.log 2>&1
  echo "measure-decode rc=$?" >> $L
  B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum
  B=$B,dram__bytes_write.sum,gpu__time_duration.sum
  timeout 150 ncu --clock-control none --print-units base --csv \
    --log-file $OUT/masks_decode_ncu.csv --metrics $B -k regex:"^flash_decode" \
    python3 -m benchmarks.masks_ncu --decode > /dev/null 2>&1
  echo "ncu-decode rc=$?" >> $L
elif [ "$1" = block ]; then
  timeout 150 python3 -m pytest tests/test_gpu_kernels.py -q -p no:cacheprovider -n 8 \
    --timeout 120 -rfE -k "block" > $OUT/pytest_block.log 2>&1
  echo "pytest-block rc=$?" >> $L
  for t in memcheck racecheck synccheck; do
    timeout 90 compute-sanitizer --tool $t --print-limit 20 python3 -c "
from flashio import kernels
from flashio.kernels import gpu
from tests._util import random_inputs
bm = kernels.BlockMask
for f in ({'block_mask': bm.random(300, 0.4, block_q=64, block_kv=64, seed=3)},
          {'causal': True, 'block_mask': bm.local(300, 2, global_blocks=1, block_q=64,
                                                   block_kv=64)}):
    sh = kernels.AttentionShape(1, 2, 300, 64, 'bf16', **f)
    for name, tiles in (('flash2', (64, 64, 4)), ('flash2_bwd', (64, 64, 4))):
        s = kernels.schedule(name, sh, *tiles)
        gpu.run_schedule(s, *random_inputs(sh, seed=1, backward=name == 'flash2_bwd'))
print('ran')
"
  done > $OUT/sanitizer_block.log 2>&1
  echo "sanitizer-block rc=$?" >> $L
  B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum
  B=$B,dram__bytes_write.sum,gpu__time_duration.sum
  timeout 120 ncu --clock-control none --print-units base --csv \
    --log-file $OUT/masks_block_ncu.csv --metrics $B -k regex:"^flash2" \
    python3 -m benchmarks.masks_ncu --block-sparse > /dev/null 2>&1
  echo "ncu-block rc=$?" >> $L
elif [ "$1" = paged ]; then
  timeout 150 python3 -m pytest tests/test_gpu_kernels.py -q -p no:cacheprovider -n 8 \
    --timeout 120 -rfE -k "paged or flash_decode" > $OUT/pytest_paged.log 2>&1
  echo "pytest-paged rc=$?" >> $L
  for t in memcheck racecheck synccheck; do
    timeout 90 compute-sanitizer --tool $t --print-limit 20 python3 -c "
from flashio import kernels
from flashio.kernels import gpu
from tests._util import random_inputs
for ps, f in ((16, {'kv_heads': 2}), (64, {'causal': True, 'window': 100}),
              (256, {'seq_len': 3, 'causal': True})):
    pk = kernels.PagedKV.shuffled(2, 1000, ps, seed=1, num_pages=2 * (-(-1000 // ps)) + 3)
    sh = kernels.AttentionShape(2, 4, **{'seq_len': 1, **f}, kv_seq_len=1000, head_dim=64,
                                dtype='bf16', paged_kv=pk)
    for splits in (None, 1, 3):
        s = kernels.schedule('flash_decode', sh, num_splits=splits)
        gpu.run_schedule(s, *random_inputs(sh, seed=1))
print('ran')
"
  done > $OUT/sanitizer_paged.log 2>&1
  echo "sanitizer-paged rc=$?" >> $L
  timeout 200 python3 -m benchmarks.masks_measure --out $OUT/masks --paged \
    > $OUT/measure_paged.log 2>&1
  echo "measure-paged rc=$?" >> $L
  B=l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum
  B=$B,dram__bytes_write.sum,gpu__time_duration.sum
  timeout 120 ncu --clock-control none --print-units base --csv \
    --log-file $OUT/masks_paged_ncu.csv --metrics $B -k regex:"^flash_decode" \
    python3 -m benchmarks.masks_ncu --paged > /dev/null 2>&1
  echo "ncu-paged rc=$?" >> $L
elif [ "$1" = measure-block ]; then
  timeout 500 python3 -m benchmarks.masks_measure --out $OUT/masks --block-sparse \
    --budget-s 400 > $OUT/measure_block.log 2>&1
  echo "measure-block rc=$?" >> $L
fi
