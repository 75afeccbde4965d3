#!/bin/bash
# One device call: the backward configurations of the SM-scaling probe at d = 64 (both tilings)
# on two different groups of 64 SMs (green contexts), to tell a kernel's scaling from where its
# SMs sit (docs/hypothetical-gpus.md: the 64x128, 8-warp backward's point at 64 SMs). Run from
# the repository root; writes $OUT/place0/sm_scaling.json, $OUT/place1/sm_scaling.json and
# $OUT/placement.log.
export PYTHONUNBUFFERED=1
for g in 0 1; do
  timeout 200 python3 data/gpu/probe/sm_scaling.py --out $OUT/place$g --sms 64 --group $g \
    --configs 6 7 --reps 10 >> $OUT/placement.log 2>&1
  echo "group $g rc=$?" >> $OUT/placement.log
done
