#!/bin/bash
# One device call on the H200: whether CTAs that ask for the same new tile wait for its fill
# (data/gpu/probe/burst.py --shared: $OUT/burst_shared.json), the d = 64 backward's two tilings
# on 32, 64 and 132 SMs at N = 6144 and 10240, where a wave of CTAs does not cover whole heads
# (data/gpu/probe/sm_scaling.py --seq-len: $OUT/n6144/sm_scaling.json, $OUT/n10240/...), then
# launch_cost_run.sh's launch costs ($OUT/launch/). Run from the repository root; log in
# $OUT/fills.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/fills.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
git rev-parse HEAD >> $L 2>&1
timeout 100 python3 data/gpu/probe/burst.py --out $OUT --shared >> $L 2>&1
echo "burst --shared rc=$?" >> $L
for n in 6144 10240; do
  timeout 150 python3 data/gpu/probe/sm_scaling.py --out $OUT/n$n --sms 32 64 132 --configs 6 7 \
    --seq-len $n --reps 10 >> $L 2>&1
  echo "sm_scaling N=$n rc=$?" >> $L
done
mkdir -p $OUT/launch
OUT=$OUT/launch timeout 260 bash data/gpu/runs/launch_cost_run.sh
echo "launch_cost_run rc=$?" >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
