"""Run schedules as CUDA kernels on a GPU through CuPy, blocked by the same Schedule object.

The CUDA sources live in ``kernels/cuda/``; block sizes, head dim, warps and the dtype are
injected as defines, so one compiled variant exists per (source, defines) and every launch takes
its grid (``sched.kernels[k].ctas``, one CTA per schedule CTA, ``blockIdx.x`` = the schedule's CTA
index), its threads (``warps * 32``) and its shared memory from the schedule. The ``flash2``,
``flash2_bwd``, ``flash_decode`` and ``standard`` schedules have GPU versions, in fp16 and bf16.

CuPy is imported inside the functions that need it; it is an optional extra.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flashio.kernels import flash_decode
from flashio.kernels._numerics import to_dtype
from flashio.kernels._standard_common import softmax_chunk
from flashio.kernels.mask import tile_states
from flashio.kernels.schedules import Schedule

__all__ = [
    "GPU_SCHEDULES",
    "CompiledSchedule",
    "Launch",
    "compile_schedule",
    "launches",
    "run_schedule",
    "tiling_errors",
]

GPU_SCHEDULES = ("flash2", "flash2_bwd", "flash_decode", "standard")
CUDA_DIR = Path(__file__).parent / "cuda"
INSTALL_HINT = "pip install -e '.[gpu]' (CuPy for CUDA 12) or pip install cupy-cuda13x"
_SOURCES = {
    "flash2": "flash2_fwd.cu",
    "flash2_bwd": "flash2_bwd.cu",
    "flash_decode": "flash2_fwd.cu",  # its SPLIT_KV build
    "standard": "standard.cu",
}
_FUNCTIONS = {  # per schedule kernel (flash_decode with one split has no combine)
    "flash2": ("flash2_fwd",),
    "flash2_bwd": ("flash2_bwd_pre", "flash2_bwd", "flash2_bwd_post"),
    "flash_decode": ("flash_decode", "flash_decode_combine"),
    "standard": ("std_qk", "std_softmax", "std_pv"),
}
SMEM_OPTIN_BYTES = 232448  # H100/H200 opt-in shared memory per block (227 KiB)
STATIC_SMEM_BYTES = 49152  # above this a kernel must raise its dynamic shared-memory limit
_NAN_BITS = {"fp16": 0x7E00, "bf16": 0x7FC0}  # quiet NaN, for poisoning outputs


def _cupy():
    try:
        import cupy
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"kernels.gpu needs CuPy: {INSTALL_HINT}") from e
    return cupy


@dataclass(frozen=True, slots=True)
class Launch:
    """One kernel launch: CUDA function, CTAs (1-D grid), threads per CTA, dynamic smem bytes."""

    function: str
    grid: int
    block: int
    smem_bytes: int


def _fwd_warps(sched: Schedule) -> int:
    """Warps of the forward pass a backward run needs for O and L: the schedule's, or fewer
    where BLOCK_Q does not split into m16 tiles over that many warps (numerically the same)."""
    w = sched.warps
    while sched.block_q % (16 * w):
        w -= 1
    return w


def tiling_errors(sched: Schedule) -> list[str]:
    """What the CUDA kernels' static_asserts would reject for ``sched``, in words ([] = fine)."""
    sh, w = sched.shape, sched.warps
    bq, bkv, d = sched.block_q, sched.block_kv, sched.shape.head_dim
    errs = []
    if sched.name not in GPU_SCHEDULES:
        return [f"schedule {sched.name!r} has no GPU version; choose one of {GPU_SCHEDULES}"]
    if sh.variant and sched.name == "standard":
        errs.append(
            "of the CUDA kernels flash2's forward and backward run a window, segments, a block "
            "mask or another kv_seq_len (MASKED), flash_decode all but the block mask; standard "
            "runs full and causal attention of equal lengths"
        )
        return errs
    if dict(sched.options).get("longest_first"):
        errs.append("the CUDA kernels take the tiles in the grid's order (longest_first=0)")
    bm = sh.block_mask
    if bm is not None and (bm.block_q % bq or bm.block_kv % bkv):
        errs.append(
            f"a block mask of {bm.block_q} x {bm.block_kv} blocks must hold whole {bq} x {bkv} "
            "tiles (its block sizes multiples of block_q and block_kv), as flex_attention's"
        )
    pk = sh.paged_kv
    if pk is not None and (bkv % pk.page_size and pk.page_size % bkv):
        errs.append(
            f"a paged cache's pages of {pk.page_size} tokens must divide block_kv={bkv} or be a "
            "multiple of it"
        )
    elif pk is not None and bkv // pk.page_size > 32:
        errs.append(
            f"block_kv={bkv} spans {bkv // pk.page_size} pages of {pk.page_size} tokens; one "
            "warp reads a key block's page ids: at most 32"
        )
    if sh.dtype not in _NAN_BITS:
        errs.append(f"dtype {sh.dtype!r} has no GPU version; use fp16 or bf16")
    if d % 16 or d > 256:
        errs.append(f"head_dim={d} must be a multiple of 16, at most 256 (k16 MMA steps)")
    if bkv % 16:
        errs.append(f"block_kv={bkv} must be a multiple of 16")
    if sched.name == "flash2_bwd":
        if bkv % (16 * w):
            errs.append(f"block_kv={bkv} must be a multiple of 16 * warps = {16 * w}")
        if bq % 16:
            errs.append(f"block_q={bq} must be a multiple of 16")
        wm = w  # dQ warp grid, as dq_warps_m in flash2_bwd.cu
        while wm > 1 and (bq % (16 * wm) or w % wm):
            wm //= 2
        if d % (16 * (w // wm)):
            errs.append(f"head_dim={d} must split into 16-column slices over {w // wm} warps (dQ)")
    elif bq % (16 * w):
        errs.append(f"block_q={bq} must be a multiple of 16 * warps = {16 * w}")
    for ln in launches(sched):
        if ln.smem_bytes > SMEM_OPTIN_BYTES:
            errs.append(
                f"{ln.function} needs {ln.smem_bytes} bytes of shared memory per CTA, more "
                f"than {SMEM_OPTIN_BYTES}; use smaller blocks"
                + (" or softmax_passes=2" if ln.function == "std_softmax" else "")
            )
    return errs


def launches(sched: Schedule) -> tuple[Launch, ...]:
    """The launches of ``sched``, taken from ``sched.kernels``: grid = ctas, block = warps * 32,
    dynamic shared memory = the schedule's ``smem_bytes``, plus, for ``flash2_bwd``'s main
    kernel, the dS^T tile (block_kv * block_q * elem bytes) that the schedule keeps in
    registers and the kernel passes through shared memory (kernels/cuda/flash2_bwd.cu) and,
    in its masked build, each Q row's key interval (two int32 a row)."""
    if sched.name not in _FUNCTIONS:
        raise NotImplementedError(
            f"schedule {sched.name!r} has no GPU version; "
            f"GPU schedules: {', '.join(GPU_SCHEDULES)}"
        )
    intervals = 8 * sched.block_q if sched.shape.variant else 0
    extra = {"flash2_bwd": sched.block_kv * sched.block_q * sched.shape.elem_bytes + intervals}
    out = []
    for fn, k in zip(_FUNCTIONS[sched.name][: len(sched.kernels)], sched.kernels, strict=True):
        smem = k.smem_bytes + (extra.get(fn, 0))
        out.append(Launch(fn, k.ctas, k.warps * 32, smem))
    return tuple(out)


def _masked(sched: Schedule) -> bool:
    """Whether ``sched`` runs a MASKED build (flash2_fwd.cu, flash2_bwd.cu): a mask beyond full
    and causal attention of equal lengths, and always flash_decode, whose queries sit at the
    end of its keys."""
    return sched.shape.variant or sched.name == "flash_decode"


def defines(sched: Schedule) -> tuple[tuple[str, int], ...]:
    """Compile-time parameters injected into the CUDA source."""
    d = {
        "BLOCK_Q": sched.block_q,
        "BLOCK_KV": sched.block_kv,
        "HEAD_DIM": sched.shape.head_dim,
        "WARPS": sched.warps,
        "DTYPE_BF16": int(sched.shape.dtype == "bf16"),
    }
    if _masked(sched):
        d["MASKED"] = 1
    if sched.name == "flash_decode":  # flash2_fwd.cu's FlashDecoding build
        d["SPLIT_KV"] = 1
    if sched.shape.block_mask is not None:  # the tile states of a block mask
        d["BLOCK_SPARSE"] = 1
    if sched.shape.paged_kv is not None:  # K and V from pages through the block table
        d["PAGED"] = 1
        d["PAGE_SIZE"] = sched.shape.paged_kv.page_size
    if sched.name == "standard":
        d["SOFTMAX_ROWS"] = sched.option("softmax_rows")
        d["SOFTMAX_PASSES"] = sched.option("softmax_passes")
        # rows of S start 16-byte aligned: the softmax copies them with cp.async
        d["ROWS_ALIGNED"] = int(sched.shape.seq_len % 8 == 0)
        d["SOFTMAX_CHUNK"] = softmax_chunk(sched.block_kv, sched.option("softmax_passes"))
    return tuple(sorted(d.items()))


def source(sched: Schedule) -> str:
    return (CUDA_DIR / _SOURCES[sched.name]).read_text()


def compile_options(defs) -> tuple[str, ...]:
    """The options this runner gives CuPy's RawModule (CuPy adds ``CUPY_NVRTC_OPTIONS``)."""
    return ("-std=c++17", f"-I{CUDA_DIR}", *(f"-D{k}={v}" for k, v in defs))


# What CuPy 14 appends before NVRTC compiles a RawModule (cupy/cuda/compiler.py:
# _compile_with_cache_cuda adds -ftz=true; _compile_using_nvrtc adds -arch=sm_<cc>, a cubin
# for the device's compute capability, and --device-as-default-execution-space); the
# instruction census (benchmarks/sass_census.py) compiles with the same options.
CUPY_NVRTC_OPTIONS = ("-ftz=true", "--device-as-default-execution-space")


def nvrtc_options(defs, arch: str = "sm_90") -> tuple[str, ...]:
    """The full NVRTC option list CuPy compiles this runner's kernels with on ``arch``."""
    return (*compile_options(defs), *CUPY_NVRTC_OPTIONS, f"-arch={arch}")


@functools.lru_cache(maxsize=64)
def _module(code: str, options: tuple[str, ...]):
    return _cupy().RawModule(code=code, options=options)


@dataclass(frozen=True, slots=True)
class CompiledSchedule:
    """A schedule's compiled kernels and launches; ``launch(bufs)`` runs them in order on
    device buffers made by ``alloc`` (timing code launches repeatedly without host copies)."""

    sched: Schedule
    module: object
    launches: tuple[Launch, ...]
    forward: CompiledSchedule | None  # flash2_bwd: the forward that makes O and L

    def function(self, name: str):
        return self.module.get_function(name)

    def alloc(self, q, k, v, grad_out=None) -> dict:
        """Device buffers: inputs (16-bit storage), outputs poisoned with NaN; for flash2_bwd
        also O and L from the GPU forward pass."""
        cp, sh = _cupy(), self.sched.shape
        b, h, n, d, kh = sh.batch, sh.heads, sh.seq_len, sh.head_dim, sh.n_kv_heads
        bufs = {
            "q": _to_bits(q, sh.dtype, (b, h, n, d)),
            "k": _to_bits(k, sh.dtype, (b, kh, sh.n_kv, d)),
            "v": _to_bits(v, sh.dtype, (b, kh, sh.n_kv, d)),
        }
        if sh.paged_kv is not None:  # K and V moved into their pools, unused slots NaN
            bufs["k"], bufs["v"] = (_paged(bufs[x], sh) for x in "kv")
            bufs["table"] = cp.asarray(sh.paged_kv.table, dtype=cp.int32)
        if _masked(self.sched):  # the segments' cumulative ends (one 0 when there are none)
            ends = np.cumsum(sh.segments) if sh.segments else np.zeros(1)
            bufs["seg_ends"] = cp.asarray(ends, dtype=cp.int32)
        if sh.block_mask is not None:
            states = tile_states(sh, self.sched.block_q, self.sched.block_kv)
            bufs["tiles"] = cp.asarray(states.astype(np.uint8))
        nan16 = np.uint16(_NAN_BITS[sh.dtype])

        def poison16(shape):
            return cp.full(shape, nan16, dtype=cp.uint16)

        def poison32(shape):
            return cp.full(shape, np.nan, dtype=cp.float32)

        name = self.sched.name
        if name in ("flash2", "flash_decode"):
            bufs.update(o=poison16((b, h, n, d)), lse=poison32((b, h, n)))
            if name == "flash_decode":  # the splits' partial outputs (one split: unused)
                ns = self.sched.option("num_splits")
                bufs.update(o_accum=poison32((ns, b, h, n, d)), lse_accum=poison32((ns, b, h, n)))
        elif name == "standard":
            nn = (b, h, n, n)
            bufs.update(s=poison16(nn), p=poison16(nn), o=poison16((b, h, n, d)))
        else:
            if grad_out is None:
                raise ValueError("flash2_bwd is a backward pass: pass grad_out (dO)")
            fwd = self.forward.alloc(bufs["q"], bufs["k"], bufs["v"])
            self.forward.launch(fwd)
            bufs.update(
                do=_to_bits(grad_out, sh.dtype, (b, h, n, d)),
                o=fwd["o"],
                lse=fwd["lse"],
                dvec=poison32((b, h, n)),
                dq_acc=poison32((b, h, n, d)),
                dq=poison16((b, h, n, d)),
                dk=poison16((b, kh, sh.n_kv, d)),
                dv=poison16((b, kh, sh.n_kv, d)),
            )
        return bufs

    def launch(self, bufs: dict, events=None) -> None:
        """Launch every kernel of the schedule, in order, on ``bufs``, on CuPy's current stream
        (asynchronous).

        ``events``: optional CUDA events, one more than kernels; event ``i`` is recorded before
        kernel ``i`` and the last after the last kernel (per-kernel times for measurements)."""
        sh = self.sched.shape
        i32, f32 = np.int32, np.float32
        heads, kvh, n = i32(sh.heads), i32(sh.n_kv_heads), i32(sh.seq_len)
        scale, causal = f32(sh.scale), i32(sh.causal)
        masked = ()
        if _masked(self.sched):  # kv length, window, segments
            left, right = sh.window_bounds or (-1, -1)
            n_segs = len(sh.segments) if sh.segments else 0
            masked = (i32(sh.n_kv), i32(left), i32(right), "seg_ends", i32(n_segs))
            if sh.block_mask is not None:
                masked += ("tiles",)
        split, paged = (), ()
        if self.sched.name == "flash_decode":
            ns = self.sched.option("num_splits")
            split = (i32(ns), i32(flash_decode.packs_group(sh)))
        if sh.paged_kv is not None:
            paged = ("table", i32(sh.paged_kv.pages_per_seq))
        args = {
            "flash2_fwd": ("q", "k", "v", "o", "lse", heads, kvh, n, scale, causal, *masked),
            "flash2_bwd_pre": ("o", "do", "dvec", "dq_acc", n),
            "flash2_bwd": (
                "q",
                "k",
                "v",
                "do",
                "lse",
                "dvec",
                "dq_acc",
                "dk",
                "dv",
                heads,
                kvh,
                n,
                scale,
                causal,
                *masked,
            ),
            "flash2_bwd_post": ("dq_acc", "dq", n),
            "flash_decode": (
                *("q", "k", "v", "o", "lse", "o_accum", "lse_accum"),
                *(heads, kvh, n, scale, causal, *masked, *split, *paged),
            ),
            "flash_decode_combine": (
                *("o_accum", "lse_accum", "o", "lse"),
                np.int64(sh.batch * sh.heads * sh.seq_len),
                *split[:1],
            ),
            "std_qk": ("q", "k", "s", heads, kvh, n, scale),
            "std_softmax": ("s", "p", n, causal),
            "std_pv": ("p", "v", "o", heads, kvh, n),
        }
        for i, ln in enumerate(self.launches):
            if events is not None:
                events[i].record()
            fn = self.function(ln.function)
            big = ln.smem_bytes > STATIC_SMEM_BYTES
            if big and fn.max_dynamic_shared_size_bytes < ln.smem_bytes:
                fn.max_dynamic_shared_size_bytes = ln.smem_bytes  # opt in beyond 48 KiB
            a = tuple(bufs[x] if isinstance(x, str) else x for x in args[ln.function])
            fn((ln.grid,), (ln.block,), a, shared_mem=ln.smem_bytes)
        if events is not None:
            events[len(self.launches)].record()

    def outputs(self, bufs: dict) -> tuple[np.ndarray, ...]:
        """Host copies of the results, in the storage dtype (bf16 values as float32)."""
        dt = self.sched.shape.dtype
        keys = {
            "flash2": ("o", "lse"),
            "flash_decode": ("o", "lse"),
            "standard": ("o", "p", "s"),
            "flash2_bwd": ("dq", "dk", "dv"),
        }[self.sched.name]
        return tuple(_from_bits(bufs[x], dt) for x in keys)


def compile_schedule(sched: Schedule) -> CompiledSchedule:
    """Compile (cached per source and defines) the kernels of ``sched``; a ``flash2`` schedule
    of the ``flashio-hopper`` implementation compiles kernels/cuda/hopper_fwd.cu
    (kernels/hopper.py), every other one the ``mma.sync`` kernels."""
    from flashio.kernels import hopper

    if hopper.uses_hopper(sched):
        return hopper.compile_hopper(sched)
    errs = tiling_errors(sched)
    if sched.name not in GPU_SCHEDULES:
        raise NotImplementedError(errs[0])
    if errs:
        raise ValueError(f"schedule {sched.name!r} cannot run on the GPU: " + "; ".join(errs))
    fwd = None
    if sched.name == "flash2_bwd":
        s = sched
        fwd = compile_schedule(Schedule("flash2", s.shape, s.block_q, s.block_kv, _fwd_warps(s)))
    module = _module(source(sched), compile_options(defines(sched)))
    return CompiledSchedule(sched, module, launches(sched), fwd)


def run_schedule(sched: Schedule, q, k, v, grad_out=None) -> tuple[np.ndarray, ...]:
    """Run ``sched`` on the GPU and return numpy arrays in the storage dtype.

    Parameters
    ----------
    sched : kernels.Schedule
        ``flash2``, ``flash2_bwd``, ``flash_decode`` or ``standard``, fp16 or bf16.
    q, k, v, grad_out : numpy or cupy arrays, (batch, heads or kv_heads, seq_len, head_dim)
        fp16 as float16; bf16 as float32 holding bf16 values (rounded to nearest even here),
        numpy ``bfloat16`` or raw uint16 bits.

    Returns
    -------
    tuple
        flash2 and flash_decode: (O, L) with L the fp32 logsumexp (batch, heads, seq_len);
        standard: (O, P, S);
        flash2_bwd: (dQ, dK, dV). Every output was filled with NaN before the kernels ran.
    """
    c = compile_schedule(sched)
    bufs = c.alloc(q, k, v, grad_out)
    c.launch(bufs)
    _cupy().cuda.get_current_stream().synchronize()
    return c.outputs(bufs)


def _paged(x, shape):
    """A device K or V, (batch, kv heads, N_kv, d) bits, laid out in ``shape.paged_kv``'s pool,
    (pages, kv heads, page size, d); slots no sequence fills hold NaN."""
    cp, pk = _cupy(), shape.paged_kv
    ps, need = pk.page_size, -(-shape.n_kv // pk.page_size)
    b, kh, nk, d = x.shape
    pool = cp.full((pk.num_pages, kh, ps, d), _NAN_BITS[shape.dtype], dtype=cp.uint16)
    whole = cp.full((b, kh, need * ps, d), _NAN_BITS[shape.dtype], dtype=cp.uint16)
    whole[:, :, :nk] = x
    pages = whole.reshape(b, kh, need, ps, d).transpose(0, 2, 1, 3, 4).reshape(-1, kh, ps, d)
    pool[cp.asarray(pk.table[:, :need].ravel())] = pages
    return pool


def _to_bits(x, dtype: str, shape: tuple[int, ...]):
    """A device uint16 array of the fp16/bf16 bits of ``x``."""
    cp = _cupy()
    if tuple(x.shape) != shape:
        raise ValueError(f"array has shape {tuple(x.shape)}, expected {shape}")
    if x.dtype == np.uint16:
        return cp.ascontiguousarray(cp.asarray(x))
    if dtype == "fp16":
        if x.dtype != np.float16:
            raise ValueError(f"fp16 inputs must be float16 arrays, got {x.dtype}")
        return cp.ascontiguousarray(cp.asarray(x)).view(cp.uint16)
    if x.dtype.name == "bfloat16":
        return cp.asarray(np.ascontiguousarray(x).view(np.uint16))
    if x.dtype != np.float32:
        raise ValueError(f"bf16 inputs must be float32 arrays of bf16 values, got {x.dtype}")
    if isinstance(x, np.ndarray):
        bits = to_dtype(x, "bf16").view(np.uint32) >> np.uint32(16)
        return cp.asarray(bits.astype(np.uint16))
    u = cp.ascontiguousarray(x).view(cp.uint32)  # round to nearest even on the device
    return ((u + cp.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(cp.uint16)


def _from_bits(x, dtype: str) -> np.ndarray:
    h = x.get()
    if h.dtype == np.float32:
        return h
    if dtype == "fp16":
        return h.view(np.float16)
    return (h.astype(np.uint32) << np.uint32(16)).view(np.float32)
