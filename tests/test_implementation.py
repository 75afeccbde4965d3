"""Implementation descriptions: validation, the presets and their cited tilings, and the
contract that an implementation never changes a schedule's trace."""

import dataclasses
import json
import pickle

import numpy as np
import pytest

from flashio import kernels
from flashio.kernels import (
    IMPLEMENTATIONS,
    Implementation,
    ImplementationError,
    Tiling,
    implementation,
)
from flashio.simulator.errors import FlashioError, TilingError

PRESETS = ("flashio", "flash-attn2", "triton", "fa3", "cudnn", "flashio-hopper", "pytorch")


def _shape(d, causal=False, dtype="bf16", n=256):
    return kernels.AttentionShape(1, 2, n, d, dtype, causal=causal)


def _bare(**changes):
    """A valid wgmma implementation without tilings, with ``changes`` applied."""
    base = dataclasses.replace(IMPLEMENTATIONS["fa3"], tilings=())
    return dataclasses.replace(base, **changes)


# -- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"name": ""}, "name must be a non-empty string"),
        ({"mma": "wmma"}, "mma must be one of"),
        ({"wgmma_n": 12}, "multiple of 8 in \\[8, 256\\]"),
        ({"wgmma_n": 264}, "multiple of 8 in \\[8, 256\\]"),
        ({"wgmma_n": 0}, "multiple of 8 in \\[8, 256\\]"),
        ({"wgmma_n": True}, "multiple of 8"),
        ({"loads": "bulk"}, "loads must be one of"),
        ({"stages": 0}, "stages must be an integer >= 1"),
        ({"stages": 2.0}, "stages must be an integer"),
        ({"producer_warps": -1}, "producer_warps must be an integer"),
        ({"consumer_warpgroups": 0}, "consumer_warpgroups must be >= 1 with wgmma"),
        ({"consumer_warpgroups": 9}, "consumer_warpgroups must be an integer in \\[0, 8\\]"),
        ({"producer_warps": 8, "consumer_warpgroups": 7}, "exceed 32 warps"),
        ({"softmax_overlap": "magic"}, "softmax_overlap must be one of"),
        ({"consumer_warpgroups": 1}, "needs at least 2 consumer warpgroups"),
        ({"persistent": 1}, "persistent must be True or False"),
        ({"q_in_registers": "yes"}, "q_in_registers must be True or False"),
        ({"register_budget": 256}, "register_budget must be an integer in \\[1, 255\\]"),
        ({"register_budget": 0}, "register_budget must be an integer in \\[1, 255\\]"),
        ({"producer_warps": 0}, "producer_register_budget is set but producer_warps is 0"),
        ({"producer_register_budget": 300}, "producer_register_budget must be an integer"),
        ({"source": "  "}, "source must be a non-empty string"),
        ({"tilings": [Tiling("flash2", None, None, 64, 64, 12)]}, "tilings must be a tuple"),
    ],
)
def test_invalid_fields_are_refused(changes, match):
    with pytest.raises(ImplementationError, match=match):
        _bare(**changes)


def test_errors_are_flashio_errors():
    with pytest.raises(FlashioError):
        _bare(loads="bulk")
    assert issubclass(ImplementationError, TilingError)
    assert issubclass(ImplementationError, ValueError)


def test_mma_sync_constraints():
    fa2 = dataclasses.replace(IMPLEMENTATIONS["flash-attn2"], tilings=())
    with pytest.raises(ImplementationError, match="only meaningful for wgmma"):
        dataclasses.replace(fa2, wgmma_n=64)
    with pytest.raises(ImplementationError, match=r"must be 0 with mma\.sync"):
        dataclasses.replace(fa2, consumer_warpgroups=1)
    assert _bare(wgmma_n=256).wgmma_n == 256


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"schedule": ""}, "schedule must be a non-empty string"),
        ({"head_dim_max": 0}, "head_dim_max must be an integer >= 1"),
        ({"head_dim_max": 32, "head_dim_min": 64}, "head_dim_max must be an integer >= 64"),
        ({"causal": 1}, "causal must be True or False"),
        ({"block_q": 0}, "block_q must be an integer >= 1"),
        ({"warps": 33}, "warps must be an integer in \\[1, 32\\]"),
        ({"dtypes": ()}, "dtypes must be None or a non-empty tuple"),
        ({"dtypes": ("fp8",)}, "dtypes must be one of"),
        ({"overrides": (("tilings", ()),)}, "overrides field must be one of"),
        ({"overrides": (("stages", 2), ("stages", 3))}, "names 'stages' twice"),
        ({"overrides": ("stages",)}, "must hold \\(field, value\\) pairs"),
        ({"seq_len_min": 0}, "seq_len_min must be an integer >= 1"),
    ],
)
def test_invalid_tiling_rows_are_refused(kwargs, match):
    args = {"schedule": "flash2", "head_dim_max": 128, "causal": None, "block_q": 64}
    args |= {"block_kv": 64, "warps": 4} | kwargs
    with pytest.raises(ImplementationError, match=match):
        Tiling(**args)


def test_a_row_with_a_sequence_range_covers_only_that_range():
    """The flashio-hopper forward at d <= 64 changes tile with N (192-row tiles from 16k, where
    they fill the waves; 128 below): the first row that covers the shape wins, N included."""
    long = Tiling("flash2", 64, None, 192, 128, 16, seq_len_min=16384)
    assert not long.covers("flash2", _shape(64, n=16383))
    assert long.covers("flash2", _shape(64, n=16384))
    assert "seq_len >= 16384" in long.describe()
    hop = IMPLEMENTATIONS["flashio-hopper"]
    for n, tiles, consumers in ((8192, (128, 128, 12), 2), (16384, (192, 128, 16), 3)):
        assert hop.tiling("flash2", _shape(64, n=n)) == tiles
        assert hop.specialize("flash2", _shape(64, n=n)).consumer_warpgroups == consumers
    assert hop.tiling("flash2", _shape(128, n=32768)) == (128, 176, 12)


def test_rows_must_agree_with_the_warp_roles():
    bad = Tiling("flash2", None, None, 128, 128, 8)  # fa3: 4 producer + 2 x 4 consumer = 12
    with pytest.raises(ImplementationError, match="has warps=8, but 4 producer warps"):
        _bare(tilings=(bad,))
    # an override that makes the row consistent is accepted
    ok = dataclasses.replace(
        bad, overrides=(("producer_warps", 0), ("producer_register_budget", None))
    )
    assert _bare(tilings=(ok,)).tiling("flash2", _shape(64)) == (128, 128, 8)
    with pytest.raises(ImplementationError, match="overrides to an invalid implementation"):
        _bare(tilings=(dataclasses.replace(bad, overrides=(("loads", "bulk"),)),))


# -- presets ------------------------------------------------------------------------------------
def test_every_preset_loads():
    assert tuple(IMPLEMENTATIONS) == PRESETS
    for name in PRESETS:
        impl = implementation(name)
        assert isinstance(impl, Implementation) and impl.name == name
        assert impl.source and impl.schedules
        json.dumps(impl.to_dict())  # plain data
        for s in impl.schedules:  # every schedule a preset provides is a real schedule
            assert s in kernels.SCHEDULES
    assert implementation(None) is IMPLEMENTATIONS["flashio"]
    custom = _bare(name="mine")
    assert implementation(custom) is custom


def test_unknown_implementations_are_refused():
    with pytest.raises(ImplementationError, match="unknown implementation 'fa4'; choose one of"):
        implementation("fa4")
    with pytest.raises(ImplementationError, match="must be an implementation name"):
        implementation(3)


def test_missing_schedule_and_uncovered_shapes_are_explained():
    fa3 = IMPLEMENTATIONS["fa3"]
    with pytest.raises(ImplementationError, match="does not provide schedule 'flash1'"):
        fa3.tiling("flash1", _shape(64))
    with pytest.raises(ImplementationError, match="no flash2 tiling for head_dim=512"):
        fa3.tiling("flash2", _shape(512))
    with pytest.raises(ImplementationError, match="dtype='fp32'"):
        IMPLEMENTATIONS["flash-attn2"].tiling("flash2", _shape(64, dtype="fp32"))
    with pytest.raises(TypeError, match="AttentionShape"):
        fa3.tiling("flash2", (1, 2, 256, 64))


# Block sizes as the cited sources pick them (kernels/implementation.py names file and commit):
# (preset, schedule, head_dim, causal, dtype) -> (block_q, block_kv, warps)
CITED = {
    # flash-attn 2, PyTorch's vendored copy, sm80 code on sm90 (is_sm8x false), no dropout
    ("flash-attn2", "flash2", 64, False, "bf16"): (128, 128, 4),
    ("flash-attn2", "flash2", 64, True, "bf16"): (128, 128, 4),
    ("flash-attn2", "flash2", 128, False, "bf16"): (128, 64, 4),
    ("flash-attn2", "flash2", 128, True, "fp16"): (128, 64, 4),
    ("flash-attn2", "flash2", 256, False, "bf16"): (64, 64, 4),
    ("flash-attn2", "flash2_bwd", 64, False, "bf16"): (128, 128, 8),
    ("flash-attn2", "flash2_bwd", 128, True, "bf16"): (64, 128, 8),
    # torch flex_attention defaults on H100 (Triton, sm90)
    ("triton", "flash2", 64, False, "bf16"): (128, 128, 4),
    ("triton", "flash2", 128, False, "bf16"): (128, 64, 8),
    ("triton", "flash2", 128, True, "fp16"): (128, 64, 8),
    ("triton", "flash2", 96, False, "bf16"): (128, 64, 4),  # not in the table: the default
    ("triton", "flash2_bwd", 64, False, "bf16"): (64, 128, 8),
    ("triton", "flash2_bwd", 128, False, "bf16"): (64, 128, 8),
    # FlashAttention-3, hopper/tile_size.h and flash_bwd_launch_template.h
    ("fa3", "flash2", 64, False, "bf16"): (192, 192, 16),
    ("fa3", "flash2", 64, True, "bf16"): (192, 128, 16),
    ("fa3", "flash2", 128, False, "bf16"): (128, 176, 12),
    ("fa3", "flash2", 128, True, "bf16"): (128, 128, 12),
    ("fa3", "flash2", 256, False, "fp16"): (128, 80, 12),
    ("fa3", "flash2_bwd", 64, False, "bf16"): (128, 128, 12),
    ("fa3", "flash2_bwd", 128, False, "bf16"): (80, 128, 12),
    ("fa3", "flash2_bwd", 128, True, "bf16"): (64, 128, 12),
    # cuDNN's forward: its kernel name, threads and grid in data/impl/impl_measure.json
    ("cudnn", "flash2", 64, False, "bf16"): (128, 128, 12),
    ("cudnn", "flash2", 64, True, "fp16"): (128, 128, 12),
    ("cudnn", "flash2", 128, True, "bf16"): (128, 128, 12),
    # this project's kernels: what benchmarks/gpu_measure.py measures
    ("flashio", "flash2", 64, False, "bf16"): (128, 128, 8),
    ("flashio", "flash2", 128, True, "bf16"): (128, 64, 8),
    ("flashio", "flash2_bwd", 64, False, "bf16"): (64, 64, 4),
    ("flashio", "flash2_bwd", 128, False, "bf16"): (64, 64, 4),
    ("flashio", "standard", 64, False, "bf16"): (128, 128, 8),
    ("flashio", "standard", 128, False, "bf16"): (128, 64, 8),
    # PyTorch eager: a documented assumption (cuBLAS tiles are not public)
    ("pytorch", "standard", 64, False, "bf16"): (128, 128, 12),
    ("pytorch", "standard", 128, True, "bf16"): (128, 128, 12),
}


@pytest.mark.parametrize(("key", "tiles"), CITED.items(), ids=lambda v: str(v))
def test_tilings_match_the_cited_sources(key, tiles):
    name, sched, d, causal, dtype = key
    assert implementation(name).tiling(sched, _shape(d, causal, dtype)) == tiles


def test_flashio_tilings_are_what_the_project_measures():
    from benchmarks import measure_grids as gm

    flashio = IMPLEMENTATIONS["flashio"]
    for d in (64, 128):
        assert flashio.tiling("flash2", _shape(d)) == gm.FWD_TILES[d][0]
        assert flashio.tiling("flash2_bwd", _shape(d)) == gm.BWD_TILES[d][0]
        assert flashio.tiling("standard", _shape(d)) == gm.STD_TILES[d][0]
    # other head dims and schedules: the project's default rule
    s = _shape(256)
    b = kernels.default_block(s)
    assert flashio.tiling("flash2", s) == (b, b, 4)
    assert flashio.tiling("flash1_bwd", _shape(64)) == (kernels.default_block(_shape(64)),) * 2 + (
        4,
    )


def test_fa3_warp_roles_and_register_budgets_per_head_dim():
    fa3 = IMPLEMENTATIONS["fa3"]
    assert (fa3.mma, fa3.loads, fa3.stages, fa3.producer_warps) == ("wgmma.m64nNk16", "tma", 2, 4)
    assert fa3.persistent and not fa3.q_in_registers
    d64 = fa3.specialize("flash2", _shape(64))
    assert (d64.consumer_warpgroups, d64.register_budget, d64.producer_register_budget) == (
        3,
        160,
        32,
    )
    assert d64.softmax_overlap == "both" and d64.tilings == ()
    d128 = fa3.specialize("flash2", _shape(128, causal=True))
    assert (d128.consumer_warpgroups, d128.register_budget, d128.producer_register_budget) == (
        2,
        240,
        24,
    )
    d256 = fa3.specialize("flash2", _shape(256))
    assert d256.softmax_overlap == "intra-warpgroup"  # no scheduler barrier above d = 128
    bwd = fa3.specialize("flash2_bwd", _shape(128))
    assert not bwd.persistent and bwd.softmax_overlap == "none"


def test_warp_roles_follow_the_warps_not_the_shape():
    """A tiling row's warp roles hold for its own warps: FA3's 128 x 128 tiles with 12 warps at
    d = 64 (cuDNN's) keep two consumer warpgroups at 240/24 registers, where FA3's own d = 64
    row (192 rows, 16 warps) has three at 160/32; a row with the same warps lends its roles
    (Triton's 8-warp rows: two warpgroups); warps that make no roles are refused, and the
    schedule then keeps the preset's fields. The shape's other overrides stay (causal FA3:
    the dynamic scheduler)."""
    fa3 = IMPLEMENTATIONS["fa3"]
    roles = ("consumer_warpgroups", "register_budget", "producer_register_budget")
    own = fa3.specialize("flash2", _shape(64), 16)
    assert tuple(getattr(own, f) for f in roles) == (3, 160, 32)
    twelve = fa3.specialize("flash2", _shape(64, causal=True), 12)
    assert tuple(getattr(twelve, f) for f in roles) == (2, 240, 24)
    assert twelve.tile_scheduler == "dynamic"
    with pytest.raises(ImplementationError, match="10 warps do not make its 4 producer warps"):
        fa3.specialize("flash2", _shape(64), 10)
    sched = kernels.schedule("flash2", _shape(64), 128, 128, 12, impl="fa3")
    assert sched.meta.params["warp_roles"]["consumer_warpgroups"] == 2
    assert sched.meta.params["launch_registers"] == {"flash2_fwd": 168}
    tri = IMPLEMENTATIONS["triton"]
    assert tri.tiling("flash2", _shape(64)) == (128, 128, 4)
    assert tri.specialize("flash2", _shape(64), 8).consumer_warpgroups == 2
    assert tri.specialize("flash2", _shape(64), 4).consumer_warpgroups == 1


def test_cudnn_is_fa3_at_its_launches_in_the_grids_order():
    """The cudnn preset: FA3's description at cuDNN's 128 x 128 tiles with 12 warps (168
    registers a thread on average, a persistent grid), forward only, head dims up to 128; its
    causal tiles in the grid's order, where FA3's take the longest first."""
    cud, fa3 = IMPLEMENTATIONS["cudnn"], IMPLEMENTATIONS["fa3"]
    assert cud.schedules == ("flash2",) and cud.persistent
    for d in (64, 128):
        for causal in (False, True):
            sched = kernels.schedule("flash2", _shape(d, causal), impl="cudnn")
            assert (sched.block_q, sched.block_kv, sched.warps) == (128, 128, 12)
            assert sched.meta.params["launch_registers"] == {"flash2_fwd": 168}
            assert not dict(sched.options).get("longest_first")
            assert bool(sched.meta.params.get("static_tile_kernels")) is not causal
    assert dict(kernels.schedule("flash2", _shape(128, True), impl="fa3").options) == {
        "longest_first": 1
    }
    with pytest.raises(ImplementationError, match="no flash2 tiling for head_dim=256"):
        cud.tiling("flash2", _shape(256))
    same = ("mma", "loads", "stages", "producer_warps", "softmax_overlap", "register_budget")
    assert all(getattr(cud, f) == getattr(fa3, f) for f in same)


def test_warp_specialized_kernels_launch_with_their_register_budgets():
    """setmaxnreg trades registers between warp roles; the launch has their average: FA3's 4
    producer warps at 24 and 8 consumers at 240 make 168 a thread (at d = 64, 4 at 32 and 12
    at 160 make 128), so one CTA fits an SM. The trace keeps its estimate; the time model
    reads the launch's registers from its params."""
    from flashio import simulator

    fa3 = kernels.schedule("flash2", _shape(128), impl="fa3")
    assert fa3.meta.params["launch_registers"] == {"flash2_fwd": 168}
    assert kernels.schedule("flash2", _shape(64), impl="fa3").meta.params["launch_registers"] == {
        "flash2_fwd": 128
    }
    bwd = kernels.schedule("flash2_bwd", _shape(128), impl="fa3")
    assert bwd.meta.params["launch_registers"] == {"flash2_bwd": 168}  # not pre and post
    res = simulator.simulate(bwd, "h200-measured")
    assert [k.occupancy.regs_per_thread for k in res.kernels][1] == 168
    assert (
        "launch_registers"
        not in kernels.schedule("flash2", _shape(128), impl="triton").meta.params
    )


@pytest.mark.parametrize("gpu", ["h200-measured", "h100-sxm"])
def test_every_other_implementations_tiling_simulates(gpu):
    """Each tiling row of the presets other than this project's (whose rows leave the block
    sizes to the project's defaults) builds a schedule that a Hopper GPU runs: one CTA fits
    an SM."""
    from flashio import simulator

    n = 0
    for name, impl in IMPLEMENTATIONS.items():
        if name == "flashio":
            continue
        for row in impl.tilings:
            for d in (64, 96, 128, 192, 256):
                for causal in (False, True):
                    shape = kernels.AttentionShape(1, 4, 512, d, "bf16", causal=causal)
                    if not row.covers(row.schedule, shape):
                        continue
                    res = simulator.simulate(kernels.schedule(row.schedule, shape, impl=name), gpu)
                    assert res.time_s > 0 and all(
                        k.occupancy.ctas_per_sm >= 1 for k in res.kernels
                    )
                    n += 1
    assert n > 100


def test_preset_facts():
    fa2, flashio = IMPLEMENTATIONS["flash-attn2"], IMPLEMENTATIONS["flashio"]
    for impl in (fa2, flashio):
        assert impl.mma == "mma.sync.m16n8k16" and impl.loads == "cp.async"
        assert impl.stages == 1 and impl.consumer_warpgroups == 0 and not impl.q_in_registers
        assert not impl.persistent and impl.register_budget == 255
    assert fa2.specialize("flash2_bwd", _shape(64)).stages == 2  # Q double buffered
    triton = IMPLEMENTATIONS["triton"]
    assert (triton.mma, triton.loads, triton.stages, triton.producer_warps) == (
        "wgmma.m64nNk16",
        "cp.async",
        3,
        0,
    )
    assert triton.specialize("flash2", _shape(128)).consumer_warpgroups == 2  # 8 warps
    pt = IMPLEMENTATIONS["pytorch"]
    assert pt.mma == "wgmma.m64nNk16" and pt.schedules == ("standard", "standard_bwd")


# -- plumbing -----------------------------------------------------------------------------------
def _cases():
    for name in PRESETS:
        impl = IMPLEMENTATIONS[name]
        for sched in impl.schedules:
            for d in (64, 128):
                yield name, sched, d


def _same_trace(a, b):
    """The same events, kernels and tensors; the metadata's params differ only by the
    implementation's name, which the issue model looks kernels up by, and its warp roles and
    the registers they launch with, which occupancy and the written programs read, how its
    loads overlap its products (``copy_stages``), which the engine's staged loads read, the
    tensors it moves by bulk copies (``bulk_copies``), which the engine prices as such, and
    the kernels a persistent grid runs (``persistent_kernels``), whose CTAs the engine starts
    without the block scheduler's turnaround, and those of them whose tile scheduler is static
    (``static_tile_kernels``), whose slots the engine gives every slots-th CTA."""
    ta, tb = a.trace(), b.trace()
    assert np.array_equal(ta.events, tb.events)
    assert ta.meta.kernels == tb.meta.kernels and ta.meta.tensors == tb.meta.tensors
    pa, pb = dict(ta.meta.params), dict(tb.meta.params)
    for p in (pa, pb):
        p.pop("launch_registers", None)
        p.pop("warp_roles", None)
        p.pop("copy_stages", None)
        p.pop("bulk_copies", None)
        p.pop("persistent_kernels", None)
        p.pop("static_tile_kernels", None)
    names = {pa.pop("impl", "flashio"), pb.pop("impl", "flashio")}
    assert pa == pb
    assert names <= {"flashio", a.implementation.name, b.implementation.name}


@pytest.mark.parametrize(("name", "sched", "d"), list(_cases()))
def test_schedule_defaults_to_the_impl_tiling_and_keeps_the_trace(name, sched, d):
    shape = _shape(d, causal=d == 128)
    s = kernels.schedule(sched, shape, impl=name)
    assert (s.block_q, s.block_kv, s.warps) == IMPLEMENTATIONS[name].tiling(sched, shape)
    assert s.implementation == IMPLEMENTATIONS[name]
    # an implementation's row may set schedule options (pytorch: standard unfused): those,
    # and only those, change the trace
    row_options = dict(IMPLEMENTATIONS[name].tiling_entry(sched, shape).options)
    plain = kernels.schedule(sched, shape, s.block_q, s.block_kv, s.warps, **row_options)
    assert plain.impl is None
    _same_trace(s, plain)
    assert s.kernels == plain.kernels and s.tensors == plain.tensors


def test_explicit_block_sizes_win_over_the_impl():
    shape = _shape(128)
    s = kernels.schedule("flash2", shape, block_q=64, impl="fa3")
    assert (s.block_q, s.block_kv, s.warps) == (64, 176, 12)
    s = kernels.schedule("flash2", shape, 128, 64, 4, impl="flash-attn2")  # the DESIGN contract
    assert (s.block_q, s.block_kv, s.warps, s.impl.name) == (128, 64, 4, "flash-attn2")
    # all three given: no tiling is needed, even for a schedule the impl does not provide
    s = kernels.schedule("flash1", shape, 64, 64, 4, impl="fa3")
    assert s.impl is IMPLEMENTATIONS["fa3"]
    with pytest.raises(ImplementationError, match="does not provide schedule 'flash1'"):
        kernels.schedule("flash1", shape, impl="fa3")


def test_no_impl_keeps_the_old_defaults():
    shape = _shape(64)
    s = kernels.schedule("flash2", shape)
    b = kernels.default_block(shape)
    assert (s.block_q, s.block_kv, s.warps, s.impl) == (b, b, 4, None)
    assert s.implementation is IMPLEMENTATIONS["flashio"]


def test_equality_hashing_and_replace():
    shape = _shape(64)
    plain = kernels.Schedule("flash2", shape, 128, 128, 8)
    named = kernels.Schedule("flash2", shape, 128, 128, 8, impl="flashio")
    obj = kernels.Schedule("flash2", shape, 128, 128, 8, impl=IMPLEMENTATIONS["flashio"])
    assert named.impl is None and obj.impl is None  # flashio is stored as None
    assert plain == named == obj and len({plain, named, obj}) == 1
    fa3 = kernels.Schedule("flash2", shape, 128, 128, 8, impl="fa3")
    assert fa3.impl is IMPLEMENTATIONS["fa3"] and fa3 != plain
    assert len({plain, fa3}) == 2
    _same_trace(fa3, plain)
    moved = dataclasses.replace(fa3, name="flash1")  # as flash1_bwd derives its forward
    assert moved.impl is IMPLEMENTATIONS["fa3"]
    with pytest.raises(ImplementationError, match="unknown implementation"):
        kernels.Schedule("flash2", shape, 128, 128, 8, impl="nope")


def test_pickling_round_trips():
    for impl in IMPLEMENTATIONS.values():
        back = pickle.loads(pickle.dumps(impl))
        assert back == impl and hash(back) == hash(impl) and back.tilings == impl.tilings
    shape = _shape(128, causal=True)
    for name in PRESETS:
        impl = IMPLEMENTATIONS[name]
        s = kernels.schedule(impl.schedules[0], shape, impl=name)
        back = pickle.loads(pickle.dumps(s))
        assert back == s and hash(back) == hash(s) and back.implementation == impl
    row = IMPLEMENTATIONS["fa3"].tiling_entry("flash2", _shape(64))
    assert pickle.loads(pickle.dumps(row)) == row
