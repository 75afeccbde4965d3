"""Accuracy checks shared by the tests and benchmarks.numerics_rule: the dense references of a
schedule, the flash-attention rule, and the rounding bound of tests/_rounding_bound.py."""

import numpy as np

from flashio import kernels
from flashio.kernels._numerics import to_dtype
from tests._rounding_bound import rounding_bound

# Where the flash-attention rule is applied to drawn shapes (docs/numerics.md, "Where the rule
# applies"): forward passes at every N; backward passes from N = 32 and d = 32, where the worst
# ratio measured by benchmarks.numerics_rule stays at or below 0.60 (at N = 2..4 it exceeds 1,
# at N = 8..16 it reaches 0.9).
RULE_BWD_MIN_SEQ_LEN = 32
RULE_BWD_MIN_HEAD_DIM = 32


def reference(sched, arrays, dtype=None):
    """The dense outputs of ``sched``'s function: float64, or in ``dtype`` as a framework's
    standard attention computes them."""
    s = sched.shape
    if sched.name.endswith("_bwd"):
        return kernels.attention_backward(*arrays, causal=s.causal, dtype=dtype)
    return (kernels.attention_forward(*arrays, causal=s.causal, dtype=dtype)[0],)


def outputs(result):
    return result if isinstance(result, tuple) else (result,)


def quantum(exact, dtype):
    """Twice the rounding step of ``dtype`` at the reference's values, or at 0.3 where they
    are smaller: flash-attention's own absolute floor (its Hopper tests add
    ``2 * (ref + 0.3 - 0.3 - ref).abs().max()``), for outputs that happen to be near zero."""
    x = to_dtype(exact, dtype).astype(np.float64)
    y = to_dtype(to_dtype(x + 0.3, dtype).astype(np.float64) - 0.3, dtype).astype(np.float64)
    return 2 * np.abs(y - x).max()


def rule_ratios(sched, arrays, got):
    """err / (2 * same-precision reference error + floor) per output: the flash-attention rule
    holds where every ratio is at most 1."""
    dtype = sched.shape.dtype
    exact = reference(sched, [a.astype(np.float64) for a in arrays])
    same_prec = reference(sched, arrays, dtype=dtype)
    ratios = []
    for g, e, p in zip(outputs(got), exact, same_prec, strict=True):
        ref_err = np.abs(p.astype(np.float64) - e).max()
        err = np.abs(g.astype(np.float64) - e).max()
        allowed = 2 * ref_err + quantum(e, dtype)  # 0 where both are exact (e.g. O = V at N = 1)
        ratios.append(err / allowed if allowed > 0 else (0.0 if err == 0 else np.inf))
    return ratios


def bound_ratios(sched, arrays, got):
    """max |computed - exact| / rounding bound per output: at most 1 for any summation order."""
    exact = reference(sched, [a.astype(np.float64) for a in arrays])
    bounds = rounding_bound(sched, arrays)
    return [
        float((np.abs(g.astype(np.float64) - e) / b).max())
        for g, e, b in zip(outputs(got), exact, bounds, strict=True)
    ]


def rule_applies(sched) -> bool:
    s = sched.shape
    if not sched.name.endswith("_bwd"):
        return True
    return s.seq_len >= RULE_BWD_MIN_SEQ_LEN and s.head_dim >= RULE_BWD_MIN_HEAD_DIM
