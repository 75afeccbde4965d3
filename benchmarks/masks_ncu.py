"""The launches Nsight Compute profiles for the masked flash2 forward (``bash
data/gpu/runs/masks_run.sh measure``), with ``--backward`` the masked backward (``measure-bwd``:
its forward, then its three kernels), with ``--decode`` flash_decode (``measure-decode``: the
split kernel and the combine), with ``--paged`` flash_decode over a paged cache
(``paged``), with ``--block-sparse`` the block masks' forwards, then their
backwards (``measure-block``): each case of analysis.validation.masks.NCU_CASES
(NCU_BWD_CASES, NCU_DECODE_CASES) once, on fresh inputs, in that order (the order the
comparison reads them back in)."""

import sys

from flashio.analysis.validation.masks import ncu_schedules
from flashio.kernels import gpu
from tests._util import random_inputs

if __name__ == "__main__":
    kind = {
        "--backward": "backward",
        "--decode": "decode",
        "--block-sparse": "block",
        "--paged": "paged",
    }.get(sys.argv[-1], "forward")
    for _label, s in ncu_schedules(kind):
        backward = s.name == "flash2_bwd"
        gpu.run_schedule(s, *random_inputs(s.shape, seed=2, backward=backward))
