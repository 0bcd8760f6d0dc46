"""The LLM layout search of a projection: every (weight dtype, TP degree, replicas, compiled batch) a model
can
take on an instance under one serving stack, each with its figures, its distance from the published rows and
its band; the winner is the layout with the highest slow edge (requests/s / (1 + band)).

What it is for: chipswap.projection.predict.project_serving (mode "llm") calls `search`; `chipswap project
--json`
lists every evaluated layout; `--tp/--replicas/--batch` pin one (`Pin`). Heads that do not divide the TP
degree
are padded on Neuron (as NxD Inference does); on GPUs the heads must divide it.

Pure: no I/O, no torch, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from chipswap.economics.catalog import Instance
from chipswap.projection.platform import Coefficients, DeviceSpec, LlmPoly, PlatformModel, llm_poly
from chipswap.projection.serving.coverage import Coverage, is_outside
from chipswap.projection.serving.physics import Physics, Schedule, phys_poly, replica_rps, with_stack
from chipswap.projection.work import ModelWork
from chipswap.simulation.servicetime import decode_steps, live_slots

# the table-fit stacks' schedule: their published rows are capacity runs at full slots
TABLE_SCHEDULE = Schedule("table-fit", static_batch=False, prefill_pauses_decode=True, occupancy=1.0)
NEURON_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)  # compiled batch sizes tried on Neuron (up to the family cap)
METRICS = ("requests_per_s", "out_tok_s", "tpot_s", "ttft_s")


@dataclass(frozen=True)
class StackContext:
    """The serving stack a projection assumes. physics: the physical model's parameters of the chip family
    under an NxD Inference stack (None: a table-fit stack, whose time model is the chip family's table fit:
    the SDK tables for tnx-2.18, the NVIDIA tables on GPUs); hardware: coefficients to use instead of the
    family's own; extra_band: relative band added for a stack with no published rows of its own
    (assumption, stated in `note`)."""

    stack: str = ""
    hardware: Coefficients | None = None
    sampling: str = "device"
    extra_band: float = 0.0
    note: str = ""
    # log-band per unit of distance from the fitted runs (the table fits' rule), charged on the table-fit
    # stacks for what no calibration covers (MoE: no published MoE serving run was fitted anywhere)
    widen_unit: float = 0.0
    # the physical model (chipswap.projection.serving.physics): the chip family's fitted parameters, the
    # stack's scheduling terms and what the calibration covers; None = a table-fit stack
    physics: Physics | None = None
    schedule: Schedule | None = None
    coverage: Coverage | None = None
    # widening of the capacity (knee) band for a stack whose saturation rate the shared rate sweeps do not
    # validate (chipswap.projection.stack_load; 0 for a validated stack)
    knee_widening: float = 0.0
    # the stack's MoE kernel terms fitted on the published MoE runs (physics.toml stacks.<stack>-moe; fp8:
    # its dynamic-fp8 kernels), applied to a MoE model's physics; () = no MoE run of this stack was fitted
    moe_terms: tuple[tuple[str, float], ...] = ()
    moe_fp8_terms: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Pin:
    """A layout fixed by the caller (`--tp`, `--replicas`, `--batch`); None = searched."""

    tp: int | None = None
    replicas: int | None = None
    batch: int | None = None


@dataclass(frozen=True)
class Layout:
    """One evaluated layout: figures at the traffic's mean request and the band each figure carries."""

    dtype: str
    compute: str
    tp: int
    replicas: int
    max_batch: int
    poly: LlmPoly
    rps: float
    label: str
    bands: tuple[tuple[str, float], ...] = ()
    distance: float = 0.0
    outside: tuple[str, ...] = ()
    padded_heads: int = 0
    occupancy: float = 1.0
    live_step_s: float = 0.0  # the decode step's growth per live sequence (Schedule.live_step_s)
    notes: tuple[str, ...] = field(default=())
    kv_tokens: int = 0  # KV-cache tokens one replica holds (memory after weights and reserve); 0 = unknown
    lnc: int = 0  # Trainium2 logical core size (TP counted in logical cores); 0 = not a Trn2 layout

    @property
    def refused(self) -> bool:
        """The calibration does not cover this layout's throughput (no honest band under +-100 %)."""
        return is_outside(self.band("requests_per_s"))

    def band(self, metric: str) -> float:
        return dict(self.bands).get(metric, 0.0)

    @property
    def slow_edge(self) -> float:
        """Requests/s at the slow edge of the band: what the layout delivers if the truth is at the low
        end."""
        if self.refused:
            return 0.0
        return self.rps / (1.0 + self.band("requests_per_s"))

    def as_dict(self, output: float, chosen: bool = False) -> dict[str, Any]:
        b = self.band("requests_per_s")
        return {
            "tp_degree": self.tp,
            "replicas": self.replicas,
            "batch": self.max_batch,
            "weight_dtype": self.dtype,
            "chosen": chosen,
            "requests_per_s": {
                "value": self.rps,
                "band": b,
                "low": self.rps / (1 + b),
                "high": self.rps * (1 + b),
            },
            "output_tokens_per_s": self.rps * output,
            "bands": dict(self.bands),
            "envelope_distance": self.distance,
            "outside_data": list(self.outside),
            "padded_heads": self.padded_heads or None,
            "lnc": self.lnc or None,
            "outside_calibration": self.refused,
        }


def tp_degrees(work: ModelWork, devices: int, padded: bool) -> list[int]:
    """TP degrees to search: on GPUs those that split the attention heads evenly (KV heads split or
    replicated); on Neuron also the divisors of the instance's devices, the heads padded up to a multiple."""
    d = work.dims
    even = [
        t for t in range(1, devices + 1) if d.heads % t == 0 and (d.kv_heads % t == 0 or t % d.kv_heads == 0)
    ]
    if not padded:
        return even
    return sorted(set(even) | {t for t in range(1, devices + 1) if devices % t == 0})


def padded_heads(work: ModelWork, tp: int) -> int:
    """Attention heads after padding to a multiple of the TP degree (== heads when they divide)."""
    h = work.dims.heads
    return math.ceil(h / tp) * tp


def bands_of(
    platform_bands: dict[str, float], ctx: StackContext, distance: float, uncovered: float = 0.0
) -> tuple[tuple[str, float], ...]:
    """Each metric's band for a layout at envelope `distance` under the stack, widened by `uncovered` units
    of what no calibration covers (at the fitted per-unit rule)."""
    out = {}
    for m in METRICS:
        b = platform_bands.get(m, platform_bands.get("out_tok_s", 0.0))
        out[m] = (1.0 + b) * (1.0 + ctx.extra_band) * math.exp(ctx.widen_unit * (distance + uncovered)) - 1.0
    return tuple(sorted(out.items()))


def evaluate(
    work: ModelWork,
    platform: PlatformModel,
    instance: Instance,
    device: DeviceSpec,
    coef: Coefficients,
    ctx: StackContext,
    *,
    dtype: str,
    compute: str,
    tp: int,
    replicas: int,
    batch: int,
    mean_prompt: float,
    mean_output: float,
    mean_pad: int,
    platform_bands: dict[str, float],
    label: str,
    lnc: int = 0,
    decode_ctx: int | None = None,
) -> Layout:
    """Figures and band of one layout. decode_ctx: the context a decode step is charged at
    (chipswap.simulation.servicetime.charged_context; default the mean live context)."""
    kv_dtype = "fp8" if compute == "fp8" else "bf16"
    if ctx.physics is not None:
        return _evaluate_physics(
            work, platform, device, ctx, dtype=dtype, compute=compute, tp=tp, replicas=replicas, batch=batch,
            mean_prompt=mean_prompt, mean_output=mean_output, mean_pad=mean_pad, label=label, lnc=lnc,
            decode_ctx=decode_ctx,
        )  # fmt: skip
    poly = llm_poly(
        work, device, coef, tp=tp, weight_dtype=dtype, compute_dtype=compute, kv_dtype=kv_dtype,
        family=platform.family,
    )  # fmt: skip
    occ = TABLE_SCHEDULE.occupancy
    rps = replicas * replica_rps(
        poly, batch, mean_prompt, mean_output, mean_pad, TABLE_SCHEDULE, context=decode_ctx,
        steps=decode_steps(mean_output),
    )  # fmt: skip
    distance: float = 0.0
    outside: tuple[str, ...] = ()
    uncovered = 0.0
    if work.is_moe:
        uncovered = 1.0
        outside = (*outside, "MoE model: no published MoE serving run was fitted")
    heads = padded_heads(work, tp) if platform.padded else 0
    return Layout(
        dtype, compute, tp, replicas, batch, poly, rps, label,
        bands=bands_of(platform_bands, ctx, distance, uncovered), distance=distance + uncovered,
        outside=tuple(outside),
        padded_heads=heads if heads != work.dims.heads else 0, occupancy=occ,
    )  # fmt: skip


def _evaluate_physics(
    work: ModelWork, platform: PlatformModel, device: DeviceSpec, ctx: StackContext, *, dtype: str,
    compute: str, tp: int, replicas: int, batch: int, mean_prompt: float, mean_output: float, mean_pad: int,
    label: str, lnc: int, decode_ctx: int | None = None,
) -> Layout:  # fmt: skip
    """One layout under the physical model: its service times, requests/s at saturation under the stack's
    schedule, and the bands of the kinds of extrapolation it makes (inf = outside the calibration)."""
    assert ctx.physics is not None and ctx.schedule is not None and ctx.coverage is not None
    kv_dtype = "fp8" if compute == "fp8" else "bf16"
    physics = ctx.physics
    moe_terms = ctx.moe_fp8_terms if compute in ("fp8", "int8") else ctx.moe_terms
    if work.is_moe and moe_terms:
        physics = with_stack(physics, dict(moe_terms))
    poly = phys_poly(
        work, device, physics, tp=tp, weight_dtype=dtype, compute_dtype=compute, kv_dtype=kv_dtype,
        lnc=lnc or 2, batch=batch, prompt=mean_pad, schedule=ctx.schedule,
    )  # fmt: skip
    schedule = ctx.schedule
    if platform.padded:  # the whole slots the simulator runs (servicetime.live_slots), as a share
        schedule = replace(schedule, occupancy=live_slots(batch, schedule.occupancy) / batch)
    rps = replicas * replica_rps(
        poly, batch, mean_prompt, mean_output, mean_pad, schedule, context=decode_ctx,
        steps=decode_steps(mean_output),
    )  # fmt: skip
    bands, why = ctx.coverage.assess(
        family=ctx.physics.family, tp=tp, prompt=mean_prompt, params_b=work.params / 1e9, batch=batch,
        moe=work.is_moe, moe_fitted=bool(moe_terms),
    )  # fmt: skip
    if ctx.extra_band:  # a stack with no published runs of its own (assumption, stated in ctx.note)
        bands = {m: (1.0 + b) * (1.0 + ctx.extra_band) - 1.0 for m, b in bands.items()}
    heads = padded_heads(work, tp) if platform.padded else 0
    return Layout(
        dtype, compute, tp, replicas, batch, poly, rps, label, bands=tuple(sorted(bands.items())),
        distance=float(len(why)), outside=why, padded_heads=heads if heads != work.dims.heads else 0,
        occupancy=schedule.occupancy, lnc=lnc, live_step_s=schedule.live_step_s,
    )  # fmt: skip


def batch_options(platform: PlatformModel, memory_batch: int, pin: Pin) -> list[int]:
    """Compiled batch sizes to try: the pinned one, else on Neuron the powers of two up to the memory limit
    and the family cap (each a compiled graph), on GPUs the memory limit (continuous batching)."""
    cap = min(platform.max_batch, memory_batch)
    if pin.batch is not None:
        return [pin.batch]
    if not platform.padded:
        return [cap]
    sizes = [b for b in NEURON_BATCHES if b <= cap]
    return sizes or [cap]


def best_of(layouts: list[Layout]) -> Layout:
    """The winner: highest slow edge of the band (a layout outside the calibration never beats one inside
    it); ties to the smaller TP degree."""
    return max(layouts, key=lambda c: (not c.refused, c.slow_edge, -c.tp, c.rps))
