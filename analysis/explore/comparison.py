"""Side-by-side simulation of several schedules on one shape and GPU (FA paper, Fig. 2 left)."""

from __future__ import annotations

from dataclasses import dataclass

from flashio import kernels, simulator

__all__ = ["ComparisonRow", "compare"]

FORWARD = ("standard", "flash1", "flash2")
BACKWARD = ("standard_bwd", "flash1_bwd", "flash2_bwd")


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """One schedule's simulated figures."""

    schedule: str
    block_q: int
    block_kv: int
    warps: int
    mma_flops: int
    global_bytes: int
    hbm_bytes: int
    time_s: float
    bound: str
    ctas_per_sm: int
    occupancy_limiter: str
    sram_peak_bytes: int
    result: simulator.SimResult | None
    error: str = ""  # why the schedule cannot run on this GPU (then the figures are 0)
    # the kernels whose steps their compiled main loops priced (the issue model), by name
    compiled_kernels: tuple[str, ...] = ()

    @property
    def tflops_per_s(self) -> float:
        return self.mma_flops / self.time_s / 1e12 if self.time_s else 0.0

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "result"}
        d["tflops_per_s"] = self.tflops_per_s
        return d


def result_figures(res: simulator.SimResult | None) -> dict:
    """The figures a comparison or sweep row shows of one run (zeros when it could not run)."""
    if res is None:
        return dict(
            mma_flops=0,
            global_bytes=0,
            hbm_bytes=0,
            time_s=0.0,
            bound="",
            ctas_per_sm=0,
            occupancy_limiter="",
        )
    return dict(
        mma_flops=res.mma_flops,
        global_bytes=res.global_bytes,
        hbm_bytes=res.hbm_bytes,
        time_s=res.time_s,
        bound=res.bound,
        ctas_per_sm=res.occupancy.ctas_per_sm,
        occupancy_limiter=res.occupancy.limiter,
    )


def compare(
    shape: kernels.AttentionShape,
    gpu: simulator.GPUSpec,
    names: tuple[str, ...] = FORWARD,
    block_q: int | None = None,
    block_kv: int | None = None,
    warps: int | None = None,
    progress=None,
    options: simulator.ModelOptions | None = None,
) -> list[ComparisonRow]:
    """Simulate each named schedule on ``shape`` and ``gpu``.

    Parameters
    ----------
    shape : kernels.AttentionShape
    gpu : simulator.GPUSpec
    names : tuple of str
        Schedules to run, in order.
    block_q, block_kv, warps : int, optional
        Tiles shared by all schedules; ``kernels.schedule`` defaults when omitted.
    progress : callable, optional
        ``progress(name)`` before each schedule is simulated.
    options : simulator.ModelOptions, optional
        The time model's switches (default: ``ModelOptions()``).

    Returns
    -------
    list of ComparisonRow
        One per name; a schedule whose tiles do not fit the GPU gets a row whose ``error``
        holds the capacity message.
    """
    rows = []
    for name in names:
        if progress:
            progress(name)
        sched = kernels.schedule(name, shape, block_q=block_q, block_kv=block_kv, warps=warps)
        try:
            more = {} if options is None else {"options": options}
            res, error = simulator.simulate(sched, gpu, **more), ""
        except simulator.CapacityError as exc:  # one schedule not fitting should not hide the rest
            res, error = None, str(exc)
        rows.append(
            ComparisonRow(
                schedule=name,
                block_q=sched.block_q,
                block_kv=sched.block_kv,
                warps=sched.warps,
                **result_figures(res),
                sram_peak_bytes=res.sram_peak_bytes if res else 0,
                result=res,
                error=error,
                compiled_kernels=tuple(k.name for k in res.kernels if k.census_key) if res else (),
            )
        )
    return rows
