"""Fleets stage: the figures each fleet is judged on, chosen by ONE precedence rule, and how it is sized.

For today's GPU type and every candidate this stage gathers every figure there is for each quantity (the
workload's `[figures]`, its `[throughput]` / `[job]` tables, the projection and the simulation), lets
`figures.pick` choose (measured > projected > published > stated > assumption), and attaches a sizer: the
simulation's capacity curve when the chosen throughput is projected, else the requests/s figure at the target
utilization. Input: PlanSetup, TrafficStage, ProjectionStage, SimulationStage. Output: FleetsStage. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from chipswap.plan.figures import Chosen, Figure, pick
from chipswap.plan.projection import ProjectionStage
from chipswap.plan.result import FleetPlan, LatencySample
from chipswap.plan.setup import PlanSetup
from chipswap.plan.simulation import InstanceSim, SimulationStage
from chipswap.plan.sizing import CurveSizer, FixedSizer, RateSizer, Sizer
from chipswap.plan.traffic import TrafficStage
from chipswap.plan.workload import FIGURE_UNITS, FigureIn
from chipswap.textsafe import human_number

RPS = "requests/s per instance"
HOURS = "hours per run"


@dataclass(frozen=True)
class FleetsStage:
    gpu: FleetPlan
    candidates: tuple[FleetPlan, ...]
    sizers: dict[str, Sizer | None] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)  # instance -> why it cannot run the model
    notes: tuple[str, ...] = ()


def workload_source(source: str, note: str | None) -> str:
    """'assumption' when the figure's note says it is one (a stated figure the user calls an assumption)."""
    return "assumption" if note and "assumption" in note.lower() else source


def from_input(f: FigureIn | None, quantity: str, unit: str) -> Figure | None:
    """A `[figures]` entry as a Figure in chipswap's unit for that quantity (requests/min -> requests/s)."""
    if f is None or f.value is None or f.unit is None:
        return None
    factor = FIGURE_UNITS[quantity][1][f.unit]
    note = f.note or ""
    if f.unit != FIGURE_UNITS[quantity][0]:
        note = f"{f.value:g} {f.unit}" + (f"; {note}" if note else "")
    band = f.band_pct / 100 if f.band_pct else None
    return Figure(f.value * factor, unit, workload_source(f.source, f.note), note, band)


def _latency_source(source: str, note: str | None) -> str:
    """A hand-typed p99 is an assumption unless the user measured it."""
    return "measured" if source == "measured" else "assumption"


def _serving_throughput(
    s: PlanSetup,
    name: str,
    is_gpu: bool,
    gpu: Figure | None,
    sim: InstanceSim | None,
    projected: Figure | None,
) -> Chosen:
    wl = s.workload
    tp = wl.throughput
    given: list[Figure | None] = []
    if name in wl.figures:
        given.append(from_input(wl.figures[name].throughput, "throughput", RPS))
    m = s.measured.get(name)
    if m is not None:  # a run that never saturated is a lower bound: it outranks a projection only above it
        bound = bool(getattr(m, "lower_bound", False))
        given.append(Figure(m.requests_per_s, RPS + (" (at least)" if bound else ""), m.source, m.note,
                            at_least=bound))  # fmt: skip
    if tp is not None and is_gpu and tp.gpu_requests_per_s is not None:
        src = workload_source(tp.gpu_source, tp.gpu_note)
        given.append(Figure(tp.gpu_requests_per_s, RPS, src, tp.gpu_note or ""))
    ct = tp.candidates.get(name) if tp is not None and not is_gpu else None
    if ct is not None and ct.requests_per_s is not None:
        given.append(Figure(ct.requests_per_s, RPS, workload_source(ct.source, ct.note), ct.note or ""))
    if ct is not None and ct.speed_factor is not None and gpu is not None:
        given.append(
            Figure(
                float(gpu.value) * ct.speed_factor,
                RPS,
                "assumption",
                f"speed factor {ct.speed_factor:g} x GPU {human_number(gpu.value)} requests/s ({gpu.label})"
                + (f"; {ct.note}" if ct.note else ""),
            )
        )
    if sim is not None and sim.capacity_rps is not None:
        unit = RPS + " (at least)" if sim.capacity_is_lower_bound else RPS
        given.append(Figure(sim.capacity_rps, unit, "projected", sim.note, sim.band))
    elif projected is not None:  # no simulation: the projection's steady throughput
        given.append(projected)
    return pick(given)


def _serving_latency(s: PlanSetup, name: str, is_gpu: bool, quantity: str, sim: InstanceSim | None) -> Chosen:
    wl = s.workload
    tp = wl.throughput
    given: list[Figure | None] = []
    if name in wl.figures:
        given.append(from_input(getattr(wl.figures[name], quantity), quantity, "ms"))
    m = s.measured.get(name)
    if m is not None:
        v = m.ttft_p99_ms if quantity == "ttft_p99" else m.p99_ms
        if v is not None:
            given.append(Figure(v, "ms", m.source, m.note))
    if quantity == "e2e_p99" and tp is not None:
        if is_gpu and tp.gpu_p99_ms is not None:
            given.append(
                Figure(tp.gpu_p99_ms, "ms", _latency_source(tp.gpu_source, tp.gpu_note), tp.gpu_note or "")
            )
        ct = tp.candidates.get(name) if not is_gpu else None
        if ct is not None and ct.p99_ms is not None:
            given.append(Figure(ct.p99_ms, "ms", _latency_source(ct.source, ct.note), ct.note or ""))
    if sim is not None:
        v = sim.ttft_p99_ms if quantity == "ttft_p99" else sim.e2e_p99_ms
        if v is not None:
            given.append(Figure(v, "ms", "projected", f"simulated at {sim.count} instances", sim.band))
    return pick(given)


def _meets(
    s: PlanSetup, thr: Figure | None, e2e: Figure | None, ttft: Figure | None, sim: InstanceSim | None
) -> bool | None:
    slo = s.workload.slo
    if thr is not None and thr.kind == "projected" and sim is not None:
        # the simulator sized the fleet for the p99 objectives, or found no size that meets them
        return sim.feasible  # every objective, p50s included, is in the simulated sizing
    checks: list[bool | None] = []
    got = slo.objectives()
    for objective, fig in ((got.get("e2e_p99"), e2e), (got.get("ttft_p99"), ttft)):
        if objective is not None:
            checks.append(None if fig is None else float(fig.value) <= objective)
    if not checks:
        return True
    if any(c is False for c in checks):
        return False
    return None if any(c is None for c in checks) else True


def _serving_fleet(
    s: PlanSetup, inst: object, t: TrafficStage | None, proj: ProjectionStage, sims: SimulationStage,
    gpu: Figure | None,
) -> tuple[FleetPlan, Sizer | None, str | None]:  # fmt: skip
    name = inst.name  # type: ignore[attr-defined]
    is_gpu = name == s.fleet.name
    sim = sims.get(name)
    p = proj.get(name)
    thr = _serving_throughput(s, name, is_gpu, gpu, sim, p.requests_per_s)
    e2e = _serving_latency(s, name, is_gpu, "e2e_p99", sim)
    # an encoder's first token is its answer: TTFT is the end-to-end latency, reported once
    ttft = _serving_latency(s, name, is_gpu, "ttft_p99", sim) if _mode(s) == "llm" else Chosen(None)
    fig = thr.figure
    simulated = fig is not None and fig.kind == "projected" and sim is not None and sim.sizer is not None
    sizer: Sizer | None = None
    sizing = ""
    load = t.load if t is not None else None
    if fig is not None and fig.kind == "projected" and sim is not None:
        sizer = sim.sizer
        sizing = (
            "simulated: the smallest fleet whose busiest window meets the SLO"
            if sim.feasible
            else "simulated: no fleet size meets the SLO"
        )
    elif fig is not None and load is not None:
        sizer = RateSizer(load.rate_rps, float(fig.value), s.workload.utilization)
        sizing = f"busiest-window rate / ({fig.label} throughput x {s.workload.utilization:.0%} utilization)"
    # the projection's exclusion (memory, no calibration) stands unless the user measured the instance
    excluded = None if fig is not None and fig.kind == "measured" else p.excluded
    least = s.workload.targets.min_replicas
    sizer = replace(sizer, least=least) if isinstance(sizer, RateSizer | CurveSizer) else sizer
    count = sizer.count() if sizer is not None else None
    band = fig.band if fig is not None else None
    rng: tuple[int | None, int | None] = (count, count)
    if sizer is not None and band:
        fast, slow = sizer.count(1.0, 1 + band), sizer.count(1.0, 1 / (1 + band))
        rng = (fast, slow)  # fewest (instances as fast as the band allows) .. most
    plan = FleetPlan(
        instance=name,
        kind="gpu" if is_gpu else inst.kind,  # type: ignore[attr-defined]
        throughput=fig,
        ttft_p99=ttft.figure,
        e2e_p99=e2e.figure,
        count=count,
        count_range=rng,
        sizing=sizing,
        meets_slo=_meets(s, fig, e2e.figure, ttft.figure, sim),
        slo_floor_ms=sim.floor_ms if sim is not None else None,
        curve_linear=_curve(sizer),
        config=sim.config if sim is not None and sim.config is not None and simulated else p.config,
        overridden=thr.overridden + e2e.overridden + ttft.overridden,
        latency=sim.latency if sim is not None else LatencySample(),
        note=p.note,
        to_measure=getattr(p.detail, "to_measure", None),
        min_count_why=_redundancy(sizer, count, least),
        **(
            _replanned(sim.curve, sizer, least)
            if simulated and sim is not None and sim.curve
            else {"curve": _curve(sizer)}
        ),
        **(_sim_fields(sim) if sim is not None and simulated or sim is not None and not sim.feasible else {}),
    )
    return plan, sizer, excluded


def _redundancy(sizer: Sizer | None, count: int | None, least: int) -> str:
    """Words when the redundancy floor decides the count (or there is none), else ""."""
    if sizer is None or count is None:
        return ""
    if least == 1:
        return "" if count > 1 else "one instance: no redundancy (targets.min_replicas = 1)"
    alone = replace(sizer, least=1).count()  # type: ignore[type-var]
    if alone is not None and alone < least:
        return (
            f"{alone} would carry the traffic; {least} for redundancy (targets.min_replicas = {least}: one "
            "can fail or be drained while the rest serve)"
        )
    return ""


def _replanned(
    curve: tuple[tuple[float, int | None], ...], sizer: Sizer | None, least: int
) -> dict[str, Any]:
    """FleetPlan's curve from the simulation's re-planned points and its band: the band's edges at 1x (the
    count range) scaled by each point's re-planned count over the count at 1x; the redundancy floor
    applied."""

    def floor(n: float | None) -> int | None:
        return None if n is None else max(least, math.ceil(n - 1e-9))

    band = []
    one = dict(curve).get(1.0)
    for g, n in curve:
        edges: list[float | None] = [n, n]
        if isinstance(sizer, CurveSizer) and one and n is not None and len(sizer.speeds) > 1:
            caps = (sizer.capacity(sizer.speeds[-1]), sizer.capacity(sizer.speeds[0]))  # fast, slow
            edges = [None if not c else sizer.rate_rps / c * n / one for c in caps]
        band.append((g, floor(edges[0]), floor(edges[1])))
    return {"curve": tuple((g, floor(n)) for g, n in curve), "curve_band": tuple(band)}


def _sim_fields(sim: InstanceSim) -> dict[str, Any]:
    """What the simulation says about every objective, for FleetPlan."""
    return {
        "objectives": dict(sim.objectives),
        "goodput_pct": sim.goodput_pct,
        "slo_floor_key": sim.floor_key,
        "slo_blocking": sim.blocking,
        "slo_reach": dict(sim.reach),
        "slo_reach_count": sim.reach_count,
    }


def _mode(s: PlanSetup) -> str:
    return s.workload.traffic.mode if s.workload.traffic is not None else "llm"


CURVE_FACTORS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0)


def _curve(sizer: Sizer | None) -> tuple[tuple[float, int | None], ...]:
    """(traffic factor, instances) for the fleet-size-vs-traffic plot."""
    if sizer is None:
        return ()
    return tuple((f, sizer.count(f)) for f in CURVE_FACTORS)


def _training_hours(
    s: PlanSetup, name: str, is_gpu: bool, gpu: Figure | None, proj: ProjectionStage
) -> Chosen:
    wl = s.workload
    job = wl.job
    assert job is not None
    count = wl.fleet.count
    tokens = job.job_tokens
    given: list[Figure | None] = []
    figs = wl.figures.get(name)
    if figs is not None:
        given.append(from_input(figs.run_hours, "run_hours", HOURS))
        tps = from_input(figs.tokens_per_s, "tokens_per_s", "tokens/s")
        if tps is not None and tokens is not None:
            given.append(_hours_from(tps, tokens, count))
    if is_gpu and job.gpu_hours is not None:
        given.append(Figure(job.gpu_hours, HOURS, job.gpu_source, ""))
    cj = job.candidates.get(name) if not is_gpu else None
    if cj is not None and cj.hours is not None:
        given.append(Figure(cj.hours, HOURS, workload_source(cj.source, cj.note), cj.note or ""))
    if cj is not None and cj.speed_factor is not None and gpu is not None:
        given.append(
            Figure(
                float(gpu.value) / cj.speed_factor,
                HOURS,
                "assumption",
                f"{float(gpu.value):g} h on GPU ({gpu.label}) / speed factor {cj.speed_factor:g}"
                + (f"; {cj.note}" if cj.note else ""),
            )
        )
    p = proj.get(name)
    if p.tokens_per_s is not None and tokens is not None:
        given.append(_hours_from(p.tokens_per_s, tokens, count))
    elif p.tokens_per_s is not None and not is_gpu:
        inferred = _tokens_from_gpu_hours(s, proj)
        if inferred is not None:
            given.append(_hours_from_inferred(p.tokens_per_s, inferred, count))
    return pick(given)


def _tokens_from_gpu_hours(s: PlanSetup, proj: ProjectionStage) -> tuple[float, Figure, float] | None:
    """(tokens, the GPU's projected tokens/s, stated hours): the run's size inferred from the stated GPU hours
    and the GPU fleet's projected throughput, when the job gives hours but no token count."""
    job = s.workload.job
    gpu = proj.get(s.fleet.name).tokens_per_s
    if job is None or job.gpu_hours is None or gpu is None:
        return None
    hours = float(job.gpu_hours)
    return hours * 3600.0 * float(gpu.value) * s.workload.fleet.count, gpu, hours


def _hours_from_inferred(tps: Figure, inferred: tuple[float, Figure, float], count: int) -> Figure:
    tokens, gpu, hours = inferred
    band = (1 + (gpu.band or 0.0)) * (1 + (tps.band or 0.0)) - 1
    return Figure(
        tokens / (float(tps.value) * count) / 3600,
        HOURS,
        "projected",
        f"run size inferred: {hours:g} h stated on GPU x {float(gpu.value):,.0f} tokens/s projected "
        f"({gpu.label}) = "
        f"{human_number(tokens)} tokens; / {float(tps.value):,.0f} tokens/s ({tps.label})",
        band,
    )


def _hours_from(tps: Figure, tokens: float, count: int) -> Figure:
    hours = tokens / (float(tps.value) * count) / 3600
    return Figure(
        hours,
        HOURS,
        tps.source,
        f"{human_number(tokens)} tokens / ({human_number(tps.value)} tokens/s x {count} instance"
        f"{'s' if count != 1 else ''}) ({tps.label})" + (f"; {tps.note}" if tps.note else ""),
        tps.band,
    )


def _training_fleet(
    s: PlanSetup, inst: object, proj: ProjectionStage, gpu: Figure | None
) -> tuple[FleetPlan, Sizer | None, str | None]:
    name = inst.name  # type: ignore[attr-defined]
    is_gpu = name == s.fleet.name
    hours = _training_hours(s, name, is_gpu, gpu, proj)
    p = proj.get(name)
    excluded = None
    if not is_gpu and inst.kind == "inferentia":  # type: ignore[attr-defined]
        excluded = "Inferentia is built for inference, not training runs"
    elif hours.figure is not None and hours.figure.kind != "measured":
        excluded = p.excluded
    plan = FleetPlan(
        instance=name,
        kind="gpu" if is_gpu else inst.kind,  # type: ignore[attr-defined]
        throughput=hours.figure,
        count=s.workload.fleet.count,
        count_range=(s.workload.fleet.count, s.workload.fleet.count),
        sizing="the fleet's instance count (stated)",
        meets_slo=True,
        config=p.config,
        overridden=hours.overridden,
        note=p.note,
    )
    return plan, FixedSizer(s.workload.fleet.count), excluded


def _overridden_note(plan: FleetPlan) -> str | None:
    """What the data imply for a figure the user stated, when a projection outranked it."""
    fig = plan.throughput
    lost = [
        o
        for o in plan.overridden
        if o.unit == (fig.unit if fig else "") and o.kind in ("stated", "assumption")
    ]
    if fig is None or fig.kind != "projected" or not lost:
        return None
    said = "; ".join(f"{human_number(o.value)} {o.unit} ({o.source})" for o in lost)
    return (
        f"{plan.instance}: the workload states {said}; the projection from published benchmarks implies "
        f"{human_number(fig.value)} {fig.unit} (± {fig.band * 100 if fig.band else 0:.0f}%), and a "
        'projection outranks a stated figure: measure it and mark it source = "measured" to use your own'
    )


def fleets(s: PlanSetup, t: TrafficStage | None, proj: ProjectionStage, sims: SimulationStage) -> FleetsStage:
    sizers: dict[str, Sizer | None] = {}
    excluded: dict[str, str] = {}
    plans: list[FleetPlan] = []
    gpu_fig: Figure | None = None
    for inst in (s.fleet, *s.candidates):
        if s.kind == "serving":
            plan, sizer, why = _serving_fleet(s, inst, t, proj, sims, gpu_fig)
        else:
            plan, sizer, why = _training_fleet(s, inst, proj, gpu_fig)
        if inst is s.fleet:
            gpu_fig = plan.throughput
        plans.append(plan)
        sizers[inst.name] = sizer
        if why:
            excluded[inst.name] = why
    notes: list[str] = [n for plan in plans if (n := _overridden_note(plan))]
    notes += [f"{plan.instance}: {plan.min_count_why}" for plan in plans if plan.min_count_why]
    gpu = plans[0]
    if gpu.throughput is None:
        notes.append(
            f"no throughput figure or projection for {gpu.instance}: the GPU fleet is not re-sized, and the "
            "saving compares with today's bill"
        )
    return FleetsStage(gpu, tuple(plans[1:]), sizers, excluded, tuple(notes))
