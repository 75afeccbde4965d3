#!/bin/bash
# One device call: kernel_clock_run.sh for the Hopper forward's d = 64 builds whose tiling
# ranking fails (data/gpu/probe/kernel_clock.py --set d64): back to back with the board power
# ($OUT/kernel_clock_d64.json), then Nsight Compute on each launched alone (the SM clock and
# cycles: $OUT/kernel_clock_d64_ncu.csv). Run from the repository root.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
P=data/gpu/probe/kernel_clock.py
L=$OUT/kernel_clock_d64.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv > $L
python3 -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)" >> $L 2>&1
git rev-parse HEAD >> $L 2>&1; date -u >> $L
python3 $P --sustain --set d64 --seconds 2 --out $OUT >> $L 2>&1
echo "sustain rc=$?" >> $L
timeout 240 ncu --clock-control none --print-units base --csv --log-file $OUT/kernel_clock_d64_ncu.csv \
  --metrics sm__cycles_elapsed.avg,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum \
  -k regex:'flash|hopper' python3 $P --once --set d64 >> $L 2>&1
echo "ncu rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
