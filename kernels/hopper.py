"""The Hopper-native kernels (kernels/cuda/hopper_fwd.cu, hopper_bwd.cu) run from a Schedule.

A ``flash2`` schedule whose implementation is the ``flashio-hopper`` preset runs here instead of
kernels/gpu.py's ``mma.sync`` kernel: the same CTAs (one per batch, head and Q block, in the
schedule's order) and the same tiles, moved by TMA and multiplied by wgmma, with one producer
warpgroup and ``block_q / 64`` consumer warpgroups (``warps = 4 * (block_q / 64 + 1)``).
A ``flash2_bwd`` schedule of the preset runs hopper_bwd.cu as its main kernel (one CTA per
batch, key/value head and K/V block, ``block_kv / 64`` consumer warpgroups of 64 keys each),
between flash2_bwd.cu's first and last kernels (D = rowsum(dO * O) with dQ_acc zeroed, and
dQ rounded from dQ_acc), which move the same bytes whichever main kernel runs; its runner is
kernels.hopper_bwd.

The TMA copies read tensor maps the driver encodes (``cuTensorMapEncodeTiled``, called through
ctypes from the library CuPy has loaded) and that live in device memory beside the inputs: a
3-D map per operand, (head_dim, N, batch x heads), read in boxes of 64 elements (128 bytes,
the swizzle's span) by the block's rows, so a box past N is filled with zeros by the copy; O is
written through a fourth, in boxes of a consumer warpgroup's 64 rows. The backward reads Q and
dO like Q, K and V like K and V, and writes dK and dV like O.

Needs an sm_90 GPU (the source is compiled for sm_90a) and CuPy; nothing is imported at module
load that a machine without a GPU lacks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from flashio.kernels import gpu
from flashio.kernels.schedules import Schedule

__all__ = [
    "CompiledHopper",
    "bwd_description",
    "bwd_smem_bytes",
    "compile_hopper",
    "description",
    "hopper_errors",
    "smem_bytes",
    "uses_hopper",
]

HOPPER_IMPLEMENTATION = "flashio-hopper"
_BOX_COLS = 64  # elements of a TMA box row: 128 bytes, the 128-byte swizzle's span
# cuda.h enums (CUDA 12.0+): CU_TENSOR_MAP_DATA_TYPE_UINT16, INTERLEAVE_NONE, SWIZZLE_128B,
# L2_PROMOTION_L2_256B, FLOAT_OOB_FILL_NONE (out-of-bounds elements read as zeros)
_TM_UINT16, _TM_INTERLEAVE_NONE, _TM_SWIZZLE_128B, _TM_L2_256B, _TM_OOB_ZERO = 1, 0, 3, 3, 0
_TENSOR_MAP_BYTES = 128
WGMMA_N = (64, 128, 176, 192, 256)  # the N of kernels/cuda/wgmma.cu's wrappers
# (head_dim, block_q, block_kv) of the backward builds that fit the consumers' 240 registers
# without spills or serialized wgmma (tests/test_hopper.py assembles each)
BWD_TILES = ((64, 128, 128), (64, 64, 64), (128, 64, 128))
BWD_STAGES = 2  # Q and dO buffers of a build unless said (the preset's d = 128 row: 3)


def uses_hopper(sched: Schedule) -> bool:
    """Whether ``sched`` runs on the Hopper kernels (its implementation is the preset)."""
    return sched.impl is not None and sched.impl.name == HOPPER_IMPLEMENTATION


def description(
    block_q: int,
    softmax_overlap: str | None = None,
    stages: int | None = None,
    persistent: bool | None = None,
):
    """The ``flashio-hopper`` description of the kernel built for ``block_q`` rows with
    ``softmax_overlap`` (None: the preset's) and ``stages`` K and V buffers (None: the
    preset's), launched with a CTA per tile or, ``persistent``, a CTA per SM taking every
    grid-th tile (None: the preset's): block_q / 64 consumer warpgroups, and the registers
    hopper_fwd.cu's setmaxnreg gives them (240, producers 24; with three consumers 160 and
    32). Its tiling rows carry no overrides and no sequence range: it describes this one
    build."""
    from flashio.kernels.implementation import implementation

    preset, consumers = implementation(HOPPER_IMPLEMENTATION), block_q // 64
    persistent = preset.persistent if persistent is None else persistent
    regs = (160, 32) if consumers == 3 else (240, 24)
    warps = 4 * (consumers + 1)
    tilings = tuple(
        dataclasses.replace(t, block_q=block_q, warps=warps, overrides=(), seq_len_min=1)
        for t in preset.tilings
        if t.seq_len_min == 1
    )
    return dataclasses.replace(
        preset,
        tilings=tilings,
        consumer_warpgroups=consumers,
        register_budget=regs[0],
        producer_register_budget=regs[1],
        softmax_overlap=softmax_overlap or preset.softmax_overlap,
        stages=stages or preset.stages,
        persistent=persistent,
        tile_scheduler="static" if persistent else "dynamic",  # hopper_fwd.cu's TILE_LOOP
    )


def bwd_description(block_kv: int, stages: int = BWD_STAGES):
    """The ``flashio-hopper`` description of the backward built for ``block_kv`` keys with
    ``stages`` Q and dO buffers: block_kv / 64 consumer warpgroups with 240 registers
    (producers 24), no softmax overlap (hopper_bwd.cu multiplies S^T and dP^T, then dQ, dV
    and dK, in turn)."""
    from flashio.kernels.implementation import implementation

    preset, consumers = implementation(HOPPER_IMPLEMENTATION), block_kv // 64
    tilings = tuple(
        dataclasses.replace(t, block_kv=block_kv, warps=4 * (consumers + 1), overrides=())
        for t in preset.tilings
        if t.schedule == "flash2_bwd"
    )
    return dataclasses.replace(
        preset,
        tilings=tilings,
        consumer_warpgroups=consumers,
        register_budget=240,
        producer_register_budget=24,
        softmax_overlap="none",
        stages=stages,
    )


def smem_bytes(block_q: int, block_kv: int, head_dim: int, stages: int) -> int:
    """Dynamic shared memory of a launch: the tiles, 2 + 4 * stages mbarriers of 8 bytes, and
    1 KiB of slack for the 1024-byte alignment the swizzled tiles need."""
    tiles = (block_q + 2 * stages * block_kv) * head_dim * 2
    return 1024 + tiles + 8 * (2 + 4 * stages)


def _impl(sched: Schedule):
    """The description of the build ``sched`` runs: its implementation with the overrides of
    the tiling row that covers its shape (three consumers and no ping-pong at d <= 64)."""
    from flashio.kernels.schedules import _specialized

    return _specialized(sched)


def _stages(sched: Schedule) -> int:
    return _impl(sched).stages


def _pingpong(sched: Schedule) -> int:
    return int(_impl(sched).softmax_overlap in ("pingpong", "both"))


def _intra(sched: Schedule) -> int:
    return int(_impl(sched).softmax_overlap in ("intra-warpgroup", "both"))


def hopper_errors(sched: Schedule) -> list[str]:
    """What the Hopper kernels cannot run of ``sched``, in words ([] = fine)."""
    sh, bq, bkv, d = sched.shape, sched.block_q, sched.block_kv, sched.shape.head_dim
    if sched.name == "flash2_bwd":
        return _bwd_errors(sched)
    if sched.name != "flash2":
        return [f"the Hopper kernels run 'flash2' and 'flash2_bwd', not {sched.name!r}"]
    errs = _shape_errors(sh, "forward")
    if d not in (64, 128, 192, 256):
        errs.append(f"head_dim={d}: the Hopper kernel runs 64, 128, 192 or 256")
    if bq not in (64, 128, 192):
        errs.append(f"block_q={bq}: 64 rows per consumer warpgroup, one to three (64, 128, 192)")
    if bkv not in WGMMA_N:
        errs.append(f"block_kv={bkv}: one of {WGMMA_N} (the wgmma N of S = Q K^T, wgmma.cu)")
    if bq in (64, 128, 192) and sched.warps != 4 * (bq // 64 + 1):
        errs.append(
            f"warps={sched.warps}: one producer and {bq // 64} consumer warpgroups make "
            f"{4 * (bq // 64 + 1)} warps at block_q={bq}"
        )
    if _pingpong(sched) and bq != 128:
        errs.append("ping-pong scheduling takes two consumer warpgroups (block_q=128)")
    if dict(sched.options).get("longest_first"):
        errs.append("the Hopper forward takes the tiles in the grid's order (longest_first=0)")
    need = smem_bytes(bq, bkv, d, _stages(sched))
    errs += _smem_errors(need, f"Q, {_stages(sched)} K and V buffers", "use smaller blocks")
    return errs


def _shape_errors(sh, kernel: str) -> list[str]:
    """What neither Hopper kernel runs of shape ``sh`` (``kernel``: which one is asked)."""
    errs = []
    if sh.variant:
        errs.append(f"the Hopper {kernel} runs full and causal attention of equal lengths")
    if sh.dtype not in ("fp16", "bf16"):
        errs.append(f"dtype {sh.dtype!r}: the Hopper {kernel} runs fp16 and bf16")
    return errs


def _smem_errors(need: int, what: str, remedy: str) -> list[str]:
    if need <= gpu.SMEM_OPTIN_BYTES:
        return []
    return [
        f"{what} need {need} bytes of shared memory, over the {gpu.SMEM_OPTIN_BYTES} a CTA "
        f"may have: {remedy}"
    ]


def bwd_smem_bytes(block_q: int, block_kv: int, head_dim: int, stages: int = BWD_STAGES) -> int:
    """Dynamic shared memory of a backward launch: K_j and V_j, ``stages`` Q and dO buffers,
    two dS^T buffers, ``stages`` L and D rows, 1 + 3 * stages mbarriers, 1 KiB of slack."""
    tiles = (2 * block_kv + 2 * stages * block_q) * head_dim * 2 + 2 * block_kv * block_q * 2
    return 1024 + tiles + 2 * stages * block_q * 4 + 8 * (1 + 3 * stages)


def _bwd_errors(sched: Schedule) -> list[str]:
    sh, bq, bkv, d = sched.shape, sched.block_q, sched.block_kv, sched.shape.head_dim
    errs = _shape_errors(sh, "backward")
    if (d, bq, bkv) not in BWD_TILES:
        tiles = ", ".join(f"d={a}: {b}x{c}" for a, b, c in BWD_TILES)
        errs.append(f"head_dim={d}, {bq}x{bkv}: the Hopper backward builds {tiles}")
    elif sched.warps != 4 * (bkv // 64 + 1):
        errs.append(
            f"warps={sched.warps}: one producer and {bkv // 64} consumer warpgroups (64 keys "
            f"each) make {4 * (bkv // 64 + 1)} warps at block_kv={bkv}"
        )
    need = bwd_smem_bytes(bq, bkv, d, _stages(sched))
    errs += _smem_errors(need, f"K, V and {_stages(sched)} Q and dO buffers", "use fewer stages")
    return errs


def defines(sched: Schedule) -> tuple[tuple[str, int], ...]:
    """The compile-time parameters of the build ``sched`` runs (the forward's overlap switches
    too)."""
    out = {
        "BLOCK_Q": sched.block_q,
        "BLOCK_KV": sched.block_kv,
        "HEAD_DIM": sched.shape.head_dim,
        "DTYPE_BF16": int(sched.shape.dtype == "bf16"),
        "STAGES": _stages(sched),
    }
    if sched.name == "flash2":
        out.update(PINGPONG=_pingpong(sched), INTRA=_intra(sched))
        if _impl(sched).persistent:  # the tile loop only where a CTA takes several
            out["PERSISTENT"] = 1
    return tuple(sorted(out.items()))


# NVRTC builds for sm_90a when -arch=sm_90a is given beside the -arch=sm_90 CuPy appends
# (observed with NVRTC 13.0; data/gpu/probe/overlap.py relies on the same).
ARCH_OPTION = "-arch=sm_90a"


def compile_options(defs) -> tuple[str, ...]:
    return (*gpu.compile_options(defs), ARCH_OPTION)


@functools.cache
def _encode():
    """cuTensorMapEncodeTiled from the CUDA driver library."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    fn = ctypes.CDLL(name).cuTensorMapEncodeTiled
    u32 = ctypes.c_uint32
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, u32, ctypes.c_void_p, u64p, u64p, u32p, u32p]
    fn.argtypes += [ctypes.c_int] * 4
    fn.restype = ctypes.c_int
    return fn


def _encoded(args) -> np.ndarray:
    buf = ctypes.create_string_buffer(_TENSOR_MAP_BYTES + 64)
    addr = (ctypes.addressof(buf) + 63) // 64 * 64  # CUtensorMap is 64-byte aligned
    err = _encode()(addr, *args)
    if err:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {err})")
    return np.frombuffer(ctypes.string_at(addr, _TENSOR_MAP_BYTES), dtype=np.uint8).copy()


def tensor_map(x, rows: int) -> np.ndarray:
    """The 128-byte tensor map of a device (batch, heads, N, d) uint16 array, read in boxes of
    64 elements by ``rows`` rows of one (batch, head)."""
    b, h, n, d = x.shape
    dims = (ctypes.c_uint64 * 3)(d, n, b * h)
    strides = (ctypes.c_uint64 * 2)(d * 2, n * d * 2)  # bytes of dims 1 and 2
    box = (ctypes.c_uint32 * 3)(_BOX_COLS, rows, 1)
    elem = (ctypes.c_uint32 * 3)(1, 1, 1)
    return _encoded(
        (_TM_UINT16, 3, x.data.ptr, dims, strides, box, elem,
         _TM_INTERLEAVE_NONE, _TM_SWIZZLE_128B, _TM_L2_256B, _TM_OOB_ZERO)
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class CompiledHopper:
    """The compiled Hopper forward of a ``flash2`` schedule, with kernels/gpu.py's interface
    (``alloc``, ``launch``, ``outputs``) so that the same measurement code times it."""

    sched: Schedule
    module: object
    launches: tuple[gpu.Launch, ...]

    def function(self, name: str):
        return self.module.get_function(name)

    def alloc(self, q, k, v, grad_out=None) -> dict:
        """Device inputs, their tensor maps (in device memory), O and L poisoned with NaN."""
        cp, sh = gpu._cupy(), self.sched.shape
        b, h, n, d, kh = sh.batch, sh.heads, sh.seq_len, sh.head_dim, sh.n_kv_heads
        bufs = {
            "q": gpu._to_bits(q, sh.dtype, (b, h, n, d)),
            "k": gpu._to_bits(k, sh.dtype, (b, kh, n, d)),
            "v": gpu._to_bits(v, sh.dtype, (b, kh, n, d)),
            "o": cp.full((b, h, n, d), np.uint16(gpu._NAN_BITS[sh.dtype]), dtype=cp.uint16),
            "lse": cp.full((b, h, n), np.nan, dtype=cp.float32),
        }
        # O is written by the consumer warpgroups, 64 rows each
        rows = {"q": self.sched.block_q, "k": self.sched.block_kv, "v": self.sched.block_kv}
        for x, r in {**rows, "o": 64}.items():
            bufs[f"tm_{x}"] = cp.asarray(tensor_map(bufs[x], r))
        return bufs

    def launch(self, bufs: dict, events=None) -> None:
        sh, ln = self.sched.shape, self.launches[0]
        i32 = np.int32
        fn = self.function(ln.function)
        if fn.max_dynamic_shared_size_bytes < ln.smem_bytes:
            fn.max_dynamic_shared_size_bytes = ln.smem_bytes
        args = (
            *(bufs[x] for x in ("tm_q", "tm_k", "tm_v", "tm_o", "lse")),
            i32(sh.batch), i32(sh.heads), i32(sh.n_kv_heads), i32(sh.seq_len),
            np.float32(sh.scale), i32(sh.causal),
        )  # fmt: skip
        if events is not None:
            events[0].record()
        fn((ln.grid,), (ln.block,), args, shared_mem=ln.smem_bytes)
        if events is not None:
            events[1].record()

    def outputs(self, bufs: dict) -> tuple[np.ndarray, ...]:
        """(O, L): O in the storage dtype (bf16 values as float32), L fp32."""
        return gpu._from_bits(bufs["o"], self.sched.shape.dtype), bufs["lse"].get()


def compile_hopper(sched: Schedule):
    """The compiled Hopper kernels of ``sched``: a :class:`CompiledHopper` for ``flash2``, a
    ``hopper_bwd.CompiledHopperBwd`` for ``flash2_bwd``."""
    errs = hopper_errors(sched)
    if errs:
        raise ValueError("schedule cannot run on the Hopper kernel: " + "; ".join(errs))
    if sched.name == "flash2_bwd":
        from flashio.kernels.hopper_bwd import compile_bwd

        return compile_bwd(sched)
    k = sched.kernels[0]
    smem = smem_bytes(sched.block_q, sched.block_kv, sched.shape.head_dim, _stages(sched))
    grid = k.ctas
    if _impl(sched).persistent:  # a CTA per SM (one fits an SM), each taking every grid-th tile
        grid = min(grid, gpu._cupy().cuda.Device().attributes["MultiProcessorCount"])
    launch = gpu.Launch("hopper_fwd", grid, sched.warps * 32, smem)
    code = (gpu.CUDA_DIR / "hopper_fwd.cu").read_text()
    return CompiledHopper(sched, gpu._module(code, compile_options(defines(sched))), (launch,))
