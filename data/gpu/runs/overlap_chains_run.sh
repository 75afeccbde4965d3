#!/bin/bash
# One device call: overlap.py's softmax mixes (overlap.MIXES) in one, two and four dependent
# chains, alone. Run from the repository root. Writes $OUT/probe/overlap.json and
# $OUT/overlap_chains.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -m pip install --quiet --no-deps --no-build-isolation -e .  # the package imports as flashio
K=$(python3 -c "
import sys; sys.path.insert(0, 'data/gpu/probe'); import overlap
print(' '.join(f'{m}_n{c}_1wg' for m in overlap.MIXES for c in (1, 2, 4)))")
timeout 300 python3 data/gpu/probe/overlap.py --out $OUT/probe --only $K > $OUT/overlap_chains.log 2>&1
echo "overlap rc=$?" >> $OUT/overlap_chains.log
