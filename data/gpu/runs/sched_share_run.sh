#!/bin/bash
# One device call (about a minute): how the warp schedulers share an SM's issue among its
# resident CTAs, by CTA age, for five kinds of work and five residencies
# (data/gpu/probe/sched_share.py; the question docs/model.md's "CTA drift" leaves open). Run
# from the repository root; writes $OUT/sched_share.json.gz and $OUT/sched_share.log (the
# summary table at its end).
export PYTHONUNBUFFERED=1 PYTHONPATH=.
L=$OUT/sched_share.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
git rev-parse HEAD >> $L 2>&1
timeout 300 python3 data/gpu/probe/sched_share.py --out $OUT >> $L 2>&1
echo "rc=$?" >> $L
