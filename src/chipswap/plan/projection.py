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
from chipswap.simulation.servicetime import positions_held


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
    if tr.steady_rps is not None and tr.histogram is None:
        return np.array([tr.prompt_tokens]), np.array([tr.output_tokens or 0])
    prompt, out = load.all_prompt_tokens, load.all_output_tokens
    limit = work.dims.max_positions or 0
    keep = np.ones(prompt.size, dtype=bool)
    if limit:
        keep &= (positions_held(prompt, out) if tr.mode == "llm" else prompt) <= limit
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
    # the decode buckets the simulator charges a step at (project's capacity follows the same rule)
    dbuckets = list(shapes.decode_buckets) if buckets and shapes and shapes.decode_buckets else None
    wl = s.workload
    stack = wl.targets.stack if inst.is_neuron else wl.fleet.gpu_stack
    try:
        p = engine.project_serving(
            work, inst, prompt_tokens=prompt, output_tokens=out if tr.mode == "llm" else None, mode=tr.mode,
            buckets=buckets, catalog=s.catalog, stack=stack, decode_buckets=dbuckets,
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
                catalog=s.catalog, tp=tp, stack=stack, decode_buckets=dbuckets,
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
    """Tokens/s per instance from the layout-aware model (projection.training): the fastest layout that
    fits on the fleet's instance count, in the job's dtype (bf16 on both sides unless the job says
    otherwise)."""
    from chipswap.projection.training.layout import LayoutError
    from chipswap.projection.training.project import project_training, system_of

    job = s.workload.job
    assert job is not None
    seq = job.sequence_length or min(work.dims.max_positions or 4096, 4096)
    dtype = job.dtype
    if dtype != "bf16":
        chip = s.catalog.chip(inst.accelerator)
        supported = system_of(inst, chip).dtypes if inst.kind != "inferentia" else ()
        dtype = "fp8" if "fp8" in supported else "bf16"
    pin = None
    if job.layout is not None and inst.name == s.fleet.name:  # the layout is the GPU fleet's
        from chipswap.projection.training.layout import pin_from_mapping

        pin = pin_from_mapping(
            job.layout.model_dump(exclude_none=True), where=f"{s.path}: job.layout", defer=True
        )
    try:
        t = project_training(
            work, inst, tokens=job.job_tokens, seq_len=seq, dtype=dtype, nodes=s.workload.fleet.count,
            global_batch=job.global_batch, catalog=s.catalog, layout=pin, stack=job.stack,
            fp8_recipe=_recipe(job.fp8_recipe, dtype, s, inst),
        )  # fmt: skip
    except LayoutError:
        raise  # the pin's own lines (each names the workload's job.layout)
    except ChipswapError as exc:
        return InstanceProjection(inst.name, excluded=f"not projected: {exc}")
    tps = t.tokens_per_s_per_node
    what = f"{t.dtype}, {t.layout.label()}, sequence length {seq}"
    fig = Figure(tps.value, "tokens/s", "projected", what, tps.band)
    note = "; ".join((f"{inst.name} trains in {t.dtype} ({t.layout.label()})", *t.notes))
    return InstanceProjection(inst.name, tokens_per_s=fig, note=note, detail=t)


def _recipe(recipe: str | None, dtype: str, s: PlanSetup, inst: Any) -> str | None:
    """The job's fp8 recipe where this instance trains in fp8 (mxfp8 only on Blackwell: tensorwise
    elsewhere); None in bf16."""
    from chipswap.projection.training import system_of
    from chipswap.projection.training.model import FP8_BLOCK_FAMILIES

    if dtype != "fp8" or recipe is None:
        return None
    family = system_of(inst, s.catalog.chip(inst.accelerator)).family
    return recipe if recipe != "mxfp8" or family in FP8_BLOCK_FAMILIES else "tensorwise"


def _measured(s: PlanSetup, name: str, is_gpu: bool) -> bool:
    """Does the workload (or a bench file) give a measured figure of what the projection would predict for
    `name` (serving throughput; training tokens/s or run hours)?"""
    if s.measured.get(name) is not None:
        return True
    wl = s.workload
    figs = wl.figures.get(name)
    quantities = ("throughput",) if s.kind == "serving" else ("tokens_per_s", "run_hours")
    if figs is not None and any(
        getattr(figs, q) is not None and getattr(figs, q).source == "measured" for q in quantities
    ):
        return True
    tp = wl.throughput if s.kind == "serving" else None
    if tp is None:
        return False
    if is_gpu:
        return tp.gpu_requests_per_s is not None and tp.gpu_source == "measured"
    ct = tp.candidates.get(name)
    return ct is not None and ct.requests_per_s is not None and ct.source == "measured"


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
        if not all(_measured(s, i.name, i is s.fleet) for i in instances):
            raise ChipswapError(f"{s.path}: model: {exc}") from None
        why = f"every figure is measured, so the model's work is not needed and nothing is projected ({exc})"
        return ProjectionStage({i.name: InstanceProjection(i.name) for i in instances}, None, False, (why,))
    weights = _weights(work)
    out: dict[str, InstanceProjection] = {}
    for inst in instances:
        if s.kind == "serving":
            assert load is not None
            out[inst.name] = _serving(s, engine, work, inst, load, shapes)
        else:
            out[inst.name] = _training(s, engine, work, inst)
    return ProjectionStage(out, weights, True, _band_notes(out))


def _band_notes(out: dict[str, InstanceProjection]) -> tuple[str, ...]:
    """What the candidates' bands promise (one note per chip family, from the projection), for the report:
    the fleet notes that carry them are not printed there."""
    from chipswap.projection.predict import BAND_NOTE_START

    found = (n for x in out.values() for n in getattr(x.detail, "notes", ()) or ())
    return tuple(dict.fromkeys(n for n in found if isinstance(n, str) and n.startswith(BAND_NOTE_START)))
