"""Bad input gets a clear error naming what is wrong and what is allowed."""

import numpy as np
import pytest

from flashio import kernels
from tests._util import random_inputs


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"batch": 0}, "AttentionShape.batch must be a positive integer, got 0"),
        ({"heads": 2.5}, "AttentionShape.heads"),
        ({"seq_len": True}, "AttentionShape.seq_len"),
        ({"head_dim": -64}, "AttentionShape.head_dim"),
        ({"dtype": "fp8"}, "dtype must be one of fp16, bf16, fp32, fp64, got 'fp8'"),
        ({"causal": "yes"}, "causal must be True or False"),
        ({"kv_heads": 3}, "kv_heads=3 must divide heads=4"),
        ({"kv_heads": 0}, "kv_heads must be a positive integer"),
    ],
)
def test_shape_validation(kwargs, needle):
    args = {"batch": 1, "heads": 4, "seq_len": 16, "head_dim": 8, **kwargs}
    with pytest.raises(ValueError) as err:
        kernels.AttentionShape(**args)
    assert needle in str(err.value)


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda s: kernels.schedule("flash3", s), "unknown schedule 'flash3'; choose one of"),
        (lambda s: kernels.schedule("flash2", s, block_q=0), "block_q must be a positive integer"),
        (lambda s: kernels.schedule("flash2", s, warps=64), "warps=64 exceeds 32"),
        (lambda s: kernels.schedule("flash2", s, softmax_passes=2), "has no option"),
        (lambda s: kernels.schedule("standard", s, softmax_passes=3), "softmax_passes"),
    ],
)
def test_schedule_validation(call, needle):
    shape = kernels.AttentionShape(1, 4, 16, 8)
    with pytest.raises(ValueError) as err:
        call(shape)
    assert needle in str(err.value)


def test_blocks_larger_than_seq_len_are_one_partial_block():
    """Any block >= 1 is accepted: 17 rows over N = 16 is one block of 16 real rows."""
    shape = kernels.AttentionShape(1, 4, 16, 8)
    sched = kernels.schedule("flash2", shape, block_q=128, block_kv=17)
    assert (sched.block_q, sched.block_kv, sched.t_q, sched.t_kv) == (128, 17, 1, 1)


def test_execute_rejects_bad_arrays():
    shape = kernels.AttentionShape(1, 2, 16, 8, "fp32")
    sched = kernels.schedule("flash2", shape, 4, 4)
    q, k, v = random_inputs(shape)
    with pytest.raises(ValueError, match=r"q has shape \(1, 2, 16, 4\), expected \(1, 2, 16, 8\)"):
        kernels.execute(sched, q[..., :4], k, v)
    with pytest.raises(ValueError, match="k has dtype float64, expected float32 for fp32"):
        kernels.execute(sched, q, k.astype(np.float64), v)
    bad = v.copy()
    bad[0, 1, 3, 2] = np.nan
    with pytest.raises(
        ValueError, match=r"v contains NaN or Inf \(first at index \(0, 1, 3, 2\)\)"
    ):
        kernels.execute(sched, q, k, bad)
    with pytest.raises(ValueError, match="forward pass: grad_out must be None"):
        kernels.execute(sched, q, k, v, q)
    bwd = kernels.schedule("flash2_bwd", shape, 4, 4)
    with pytest.raises(ValueError, match="backward pass: pass grad_out"):
        kernels.execute(bwd, q, k, v)
    with pytest.raises(TypeError, match="must be a numpy array"):
        kernels.execute(sched, q.tolist(), k, v)


def test_bf16_inputs_are_rounded_to_bfloat16():
    shape = kernels.AttentionShape(1, 1, 8, 8, "bf16")
    q, k, v = (np.full((1, 1, 8, 8), 1.0 + 2.0**-10, np.float32) for _ in range(3))
    out, _ = kernels.execute(kernels.schedule("flash2", shape, 4, 4), q, k, v)
    # 1 + 2^-10 is not a bfloat16 (8-bit mantissa): it rounds to 1, and so does the output
    assert np.all(out == 1.0)
