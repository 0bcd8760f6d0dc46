"""Projection stage: how fast the model runs on each instance (GPU fleet and candidates), predicted.

Input: PlanSetup, the Load and the ShapeSummary. Output: ProjectionStage: per instance the serving
configuration
and the ServiceTimes the simulator replays (serving), or training tokens/s per instance (training), each a
prediction with its error band; or why the instance cannot run the model. The projection engine is reached
through `_engine()` only; the model's weight size through `chipswap.models.parameter_count`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from chipswap.errors import ChipswapError
from chipswap.plan.figures import Figure
from chipswap.plan.result import ShapeSummary
from chipswap.plan.setup import PlanSetup
from chipswap.plan.traffic import Load


@dataclass(frozen=True)
class InstanceProjection:
    """The projection for one instance type. times: a chipswap.simulation.servicetime.ServiceTimes (serving);
    config: its ServingConfig; requests_per_s: the projected steady throughput of one instance (serving);
    tokens_per_s: training throughput per instance; excluded: why the model cannot run there (memory, no
    calibration), None when it can or when nothing was projected."""

    instance: str
    config: Any = None
    times: Any = None
    requests_per_s: Figure | None = None
    tokens_per_s: Figure | None = None
    excluded: str | None = None
    note: str = ""
    detail: Any = None  # the engine's full answer (its as_dict() goes into report.json)
    # other layouts that fit (one per tensor-parallel degree), for the simulator to size against the SLO
    alternatives: tuple[InstanceProjection, ...] = ()


@dataclass(frozen=True)
class ProjectionStage:
    by_instance: dict[str, InstanceProjection] = field(default_factory=dict)
    weights: Figure | None = None
    available: bool = False
    notes: tuple[str, ...] = ()

    def get(self, instance: str) -> InstanceProjection:
        return self.by_instance.get(instance, InstanceProjection(instance))


def _engine() -> Any:
    """The projection engine (chipswap.projection.api), or None where it is not installed."""
    try:
        from chipswap.projection import api as engine
    except ImportError:
        return None
    return engine


def _weights(work: Any) -> Figure:
    gib = work.params * 2 / 2**30
    return Figure(
        gib,
        "GiB (bf16 weights)",
        "computed",
        f"{work.params / 1e9:.2f}B parameters x 2 bytes ({work.source})",
    )


def _fits(instance: Any, weights: Figure | None) -> str | None:
    mem = float(instance.accelerator_memory_gib)
    if weights is not None and weights.value > mem:
        return (
            f"the model's weights ({weights.value:.1f} GiB in bf16) do not fit in its {mem:g} GiB of "
            "accelerator memory"
        )
    return None


def _lengths(s: PlanSetup, load: Load, shapes: ShapeSummary | None, work: Any) -> tuple[Any, Any]:
    """The request lengths a configuration must hold: the whole trace's, without the requests no compiled
    shape or the model accepts (they are rejected and reported as overflow, never served)."""
    tr = s.workload.traffic
    assert tr is not None
    if tr.steady_rps is not None:
        return np.array([tr.prompt_tokens]), np.array([tr.output_tokens or 0])
    prompt, out = load.all_prompt_tokens, load.all_output_tokens
    limit = work.dims.max_positions or 0
    keep = np.ones(prompt.size, dtype=bool)
    if limit:
        keep &= prompt + (out if tr.mode == "llm" else 0) <= limit
    if shapes is not None and shapes.sequence_buckets:
        keep &= prompt <= max(shapes.sequence_buckets)
    if not keep.any():
        keep[:] = True
    return prompt[keep], out[keep]


def _serving(
    s: PlanSetup, engine: Any, work: Any, inst: Any, load: Load, shapes: ShapeSummary | None
) -> InstanceProjection:
    tr = s.workload.traffic
    assert tr is not None
    prompt, out = _lengths(s, load, shapes, work)
    buckets = list(shapes.sequence_buckets) if inst.is_neuron and shapes and shapes.sequence_buckets else None
    try:
        p = engine.project_serving(
            work, inst, prompt_tokens=prompt, output_tokens=out if tr.mode == "llm" else None, mode=tr.mode,
            buckets=buckets, catalog=s.catalog,
        )  # fmt: skip
    except ChipswapError as exc:
        return InstanceProjection(inst.name, excluded=f"not projected: {exc}")
    if not p.fits:
        return InstanceProjection(inst.name, excluded=p.reason, detail=p)
    alternatives = []
    if tr.mode == "llm":
        for tp in engine.tp_options(work, inst, catalog=s.catalog):
            if tp == p.config.tp_degree:
                continue
            alt = engine.project_serving(
                work, inst, prompt_tokens=prompt, output_tokens=out, mode=tr.mode, buckets=buckets,
                catalog=s.catalog, tp=tp,
            )  # fmt: skip
            if alt.fits:
                alternatives.append(_layout(inst.name, alt))
    return replace(_layout(inst.name, p), alternatives=tuple(alternatives))


def _layout(name: str, p: Any) -> InstanceProjection:
    rps = p.requests_per_s
    fig = None
    if rps is not None:
        fig = Figure(
            rps.value,
            "requests/s per instance",
            "projected",
            "steady throughput at the chosen batch",
            rps.band,
        )
    return InstanceProjection(name, p.config, p.times, fig, note="; ".join(p.notes), detail=p)


def _training(s: PlanSetup, engine: Any, work: Any, inst: Any) -> InstanceProjection:
    job = s.workload.job
    assert job is not None
    tokens = job.job_tokens
    if tokens is None:
        return InstanceProjection(
            inst.name, note="no job size (job.tokens), so the run time is not projected"
        )
    seq = job.sequence_length or min(work.dims.max_positions or 4096, 4096)
    try:
        t = engine.project_training(
            work, inst, tokens=tokens, seq_len=seq, nodes=s.workload.fleet.count, catalog=s.catalog
        )
    except ChipswapError as exc:
        return InstanceProjection(inst.name, excluded=f"not projected: {exc}")
    tps = t.tokens_per_s_per_node
    fig = Figure(tps.value, "tokens/s", "projected", f"{tps.note}; sequence length {seq}", tps.band)
    return InstanceProjection(inst.name, tokens_per_s=fig, note="; ".join(t.notes), detail=t)


def projection(s: PlanSetup, load: Load | None, shapes: ShapeSummary | None) -> ProjectionStage:
    instances = (s.fleet, *s.candidates)
    engine = _engine() if s.model is not None else None
    if engine is None:
        why = (
            "no [model] in the workload, so nothing is projected"
            if s.model is None
            else "the projection engine is not installed here, so nothing is projected"
        )
        return ProjectionStage({i.name: InstanceProjection(i.name) for i in instances}, None, False, (why,))
    try:
        work = engine.model_work(s.model, task=s.workload.model.task if s.workload.model else None)
    except ChipswapError as exc:
        raise ChipswapError(f"{s.path}: model: {exc}") from None
    weights = _weights(work)
    out: dict[str, InstanceProjection] = {}
    for inst in instances:
        if s.kind == "serving":
            assert load is not None
            out[inst.name] = _serving(s, engine, work, inst, load, shapes)
        else:
            out[inst.name] = _training(s, engine, work, inst)
    return ProjectionStage(out, weights, True)
