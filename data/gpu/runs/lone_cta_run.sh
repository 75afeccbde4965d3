#!/bin/bash
# One device call (a few minutes): this project's 64x64, 4-warp forward (d = 64 and 128) and
# backward (d = 64) at 1 .. native CTAs per SM (data/gpu/probe/lone_cta.py) under Nsight
# Compute with per-instruction warp-state sampling (SourceCounters), to see where a CTA alone
# waits that the warp replay does not (docs/validation.md, "Resident CTAs"). Run from the
# repository root. Writes $OUT/lone_cta_launches.json, $OUT/lone_cta.ncu-rep.gz,
# $OUT/lone_cta_source.csv.gz (per SASS instruction, every profiled launch),
# $OUT/lone_cta_ncu.csv.gz (the metrics) and $OUT/lone_cta.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
L=$OUT/lone_cta.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $L
git rev-parse HEAD >> $L 2>&1
ncu --version >> $L 2>&1
. data/gpu/runs/ncu_metrics.sh  # M: time, bytes, issue activity, clock, stall reasons
R=$OUT/lone_cta
timeout 300 ncu --clock-control none --print-units base \
  --section SourceCounters --section WarpStateStats --section SchedulerStats \
  --section LaunchStats --section Occupancy --metrics $M,sm__cycles_elapsed.avg \
  -k regex:'^flash2_(fwd|bwd)$' -o $R \
  python3 data/gpu/probe/lone_cta.py --order $OUT/lone_cta_launches.json >> $L 2>&1
echo "ncu rc=$?" >> $L
ncu -i $R.ncu-rep --csv --print-units base --page raw > $OUT/lone_cta_ncu.csv 2>> $L
echo "raw rc=$?" >> $L
ncu -i $R.ncu-rep --csv --page source --print-source sass > $OUT/lone_cta_source.csv 2>> $L
echo "source rc=$?" >> $L
if [ ! -s $OUT/lone_cta_source.csv ]; then  # an ncu that exports one result at a time
  for i in $(seq 0 19); do
    ncu -i $R.ncu-rep --csv --page source --print-source sass --launch-skip $i \
      --launch-count 1 >> $OUT/lone_cta_source.csv 2>> $L || break
  done
fi
if [ ! -s $OUT/lone_cta_source.csv ]; then  # an ncu without --print-source
  ncu -i $R.ncu-rep --csv --page source > $OUT/lone_cta_source.csv 2>> $L
  echo "source (plain) rc=$?" >> $L
fi
ncu --help 2>&1 | grep -A4 -- "--page\|--print-source" >> $L
gzip -f $OUT/lone_cta_source.csv $OUT/lone_cta_ncu.csv $R.ncu-rep
timeout 120 python3 data/gpu/probe/lone_cta.py --summary $OUT/lone_cta_source.csv.gz >> $L 2>&1
ls -l $OUT >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader >> $L
