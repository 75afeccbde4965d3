"""The launches Nsight Compute profiles for the masked flash2 forward (``bash
data/gpu/runs/masks_run.sh measure``), or with ``--backward`` the masked backward (``measure-bwd``:
its forward, then its three kernels): each case of analysis.validation.masks.NCU_CASES
(NCU_BWD_CASES) once, on fresh inputs, in that order (the order the comparison reads them back
in)."""

import sys

from flashio.analysis.validation.masks import ncu_schedules
from flashio.kernels import gpu
from tests._util import random_inputs

if __name__ == "__main__":
    backward = "--backward" in sys.argv[1:]
    for _label, s in ncu_schedules(backward):
        gpu.run_schedule(s, *random_inputs(s.shape, seed=2, backward=backward))
