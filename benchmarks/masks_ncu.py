"""The launches Nsight Compute profiles for the masked flash2 forward (``bash
data/gpu/runs/masks_run.sh measure``): each case of analysis.validation.masks.NCU_CASES once,
on fresh inputs, in that order (the order the comparison reads them back in)."""

from flashio.analysis.validation.masks import ncu_schedules
from flashio.kernels import gpu
from tests._util import random_inputs

if __name__ == "__main__":
    for _label, s in ncu_schedules():
        gpu.run_schedule(s, *random_inputs(s.shape, seed=2))
