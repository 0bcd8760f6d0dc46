"""`chipswap plan` as a chain of stages, each a small function from typed inputs to a typed output:

    setup -> traffic -> shapes -> readiness -> projection -> simulation -> fleets -> verdict -> sensitivity

(the report is written by chipswap.report from the PlanResult). A new source of a figure plugs into one stage:
a measurement into `fleets` (through the one precedence rule in `figures.pick`), a new predictor into
`projection`, a new way to size a fleet into `simulation` / `sizing`. `run_plan` only calls the stages in
order
and assembles the PlanResult; it holds no logic of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from chipswap.plan.capacity import CapacityCheck
from chipswap.plan.figures import Figure
from chipswap.plan.result import (
    CandidateResult,
    FleetPlan,
    PlanResult,
    ReadinessSummary,
    ShapeSummary,
    TrafficSummary,
)
from chipswap.plan.workers import Job, Workers
from chipswap.plan.workload import Workload

if TYPE_CHECKING:
    from chipswap.plan.fleets import FleetsStage
    from chipswap.plan.projection import ProjectionStage
    from chipswap.plan.setup import PlanSetup
    from chipswap.plan.shapes import ShapesStage
    from chipswap.plan.simulation import SimulationStage
    from chipswap.plan.traffic import TrafficStage
    from chipswap.plan.verdict import VerdictStage
    from chipswap.verdict.sensitivity import Flip

P = ParamSpec("P")
R = TypeVar("R")

__all__ = [
    "CandidateResult",
    "Figure",
    "FleetPlan",
    "PlanResult",
    "ReadinessSummary",
    "ShapeSummary",
    "TrafficSummary",
    "open_workers",
    "run_plan",
]


class _Clock:
    """Seconds spent per stage (shown in the report's footer and used by the benchmark)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.seconds: dict[str, float] = {}
        self.t0 = time.perf_counter()

    def stage(self, name: str, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        self.say(name)
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        self.seconds[name] = round(time.perf_counter() - t, 3)
        return out

    def beside(
        self, name: str, w: Workers, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs
    ) -> _Beside[R]:
        """A stage that runs in a worker beside the next ones: its name is said now, its seconds run from now
        until its result is read (`get`)."""
        self.say(name)
        self.seconds[name] = 0.0  # its place in the order the stages started
        return _Beside(self, name, time.perf_counter(), w.submit(fn, *args, **kwargs))


class _Beside(Generic[R]):
    def __init__(self, clock: _Clock, name: str, t: float, job: Job[R]) -> None:
        self.clock, self.name, self.t, self.job = clock, name, t, job

    def get(self) -> R:
        out = self.job.get()
        self.clock.seconds[self.name] = round(time.perf_counter() - self.t, 3)
        return out


def run_plan(
    wl: Workload,
    workload_path: str | Path = "<workload>",
    *,
    close_margin_pct: Decimal | None = None,
    progress: Callable[[str], None] | None = None,
    bench: tuple[Path, ...] = (),
    catalog: Any = None,
    capacity_check: CapacityCheck | None = None,
    accept_bench_mismatch: bool = False,
    workers: int | None = None,
    pool: Workers | None = None,
) -> PlanResult:
    """The whole plan for one workload. `bench`: `chipswap bench` result files (measured figures) beside the
    workload's own; `catalog`: a catalog to price with (default: the shipped one); `capacity_check`: the
    capacity screen of the pick (None: not checked); `workers`: processes for the independent work (the
    readiness check beside the simulations, the fleets' searches beside each other; None: one per core this
    process may use, 1: none; `pool`: workers the caller opened, see `open_workers`, left open). The result
    does not depend on them. Raises ChipswapError (one line) on bad input."""
    if pool is not None:
        return _run(wl, workload_path, close_margin_pct, progress, bench, catalog, capacity_check,
                    accept_bench_mismatch, pool)  # fmt: skip
    with open_workers(workers) as w:
        return _run(wl, workload_path, close_margin_pct, progress, bench, catalog, capacity_check,
                    accept_bench_mismatch, w)  # fmt: skip


def open_workers(workers: int | None = None) -> Workers:
    """The plan's worker processes, forked now: a command opens them before it starts a progress spinner or
    timer (a thread), since the pool forks only in a process that runs no other thread."""
    from chipswap.plan import simulation

    simulation._simulator()  # the simulator's modules load here once, not again in every worker
    return Workers(workers)


def _run(
    wl: Workload,
    workload_path: str | Path,
    close_margin_pct: Decimal | None,
    progress: Callable[[str], None] | None,
    bench: tuple[Path, ...],
    catalog: Any,
    capacity_check: CapacityCheck | None,
    accept_bench_mismatch: bool,
    w: Workers,
) -> PlanResult:
    from chipswap.plan import (
        capacity,
        fleets,
        projection,
        readiness,
        sensitivity,
        setup,
        shapes,
        simulation,
        traffic,
    )
    from chipswap.plan import verdict as decide

    clock = _Clock(progress or (lambda _m: None))
    s = setup.setup(wl, workload_path, close_margin_pct, bench, catalog, accept_bench_mismatch)
    t = clock.stage("reading traffic", traffic.traffic, s)
    if s.measured and t is not None:  # the benched lengths against the workload's, now that they are read
        from dataclasses import replace as _replace

        from chipswap.plan.bench_check import with_length_notes

        lengths = (t.load.all_prompt_tokens, t.load.all_output_tokens)
        s = _replace(s, measured=with_length_notes(s.measured, *lengths))
    sh = clock.stage("planning shapes", shapes.shapes, s, t)
    ready = clock.beside("checking readiness", w, readiness.readiness, s, sh.summary)
    load = t.load if t is not None else None
    try:
        pr = clock.stage("projecting", projection.projection, s, load, sh.summary)
        sim = clock.stage("simulating fleets", simulation.simulation, s, load, sh.summary, pr, w)
    except Exception:
        ready.get()  # the readiness check's own error first, as when it ran before these stages
        raise
    rd = ready.get()
    fl = clock.stage("choosing figures", fleets.fleets, s, t, pr, sim)
    summary = t.summary if t is not None else None
    v = clock.stage("pricing and deciding", decide.verdict, s, summary, sh.summary, rd, fl)
    fp = clock.stage("sensitivity", sensitivity.flips, s, v)
    tabled = any(x.table is not None for x in sim.by_instance.values())
    if s.kind == "serving" and load is not None and tabled:

        def again(slo: Any, quick: bool) -> str:
            """The verdict for another [slo]: re-sized from the size tables (quick) or re-planned (the
            simulation, fleets and verdict stages run again; the stages before them do not read the SLO)."""
            s2 = replace(s, workload=s.workload.model_copy(update={"slo": slo}))
            sim2 = (
                simulation.resized(sim, slo)
                if quick
                else simulation.simulation(s2, load, sh.summary, pr, w, verdict_only=True)
            )
            fl2 = fleets.fleets(s2, t, pr, sim2)
            return decide.verdict(s2, summary, sh.summary, rd, fl2).verdict.verdict

        def again_all(slos: list[Any]) -> list[str]:
            """Re-plans side by side (threads here, each submitting its simulations to the workers)."""
            if w.size <= 1 or len(slos) <= 1:
                return [again(x, False) for x in slos]
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(len(slos), 8)) as threads:  # they wait on the workers
                return list(threads.map(lambda x: again(x, False), slos))

        fp = fp + clock.stage(
            "objectives' sensitivity",
            sensitivity.objective_flips,
            s,
            v,
            lambda x: again(x, True),
            lambda x: again(x, False),
            again_all,
        )
    checked, cap_notes = clock.stage(
        "checking capacity", capacity.capacity, s, v.verdict, v.best, capacity_check
    )
    v = replace(v, verdict=checked, notes=(*v.notes, *cap_notes))
    return _assemble(s, t, sh, pr, sim, fl, v, fp, clock)


def _assemble(
    s: PlanSetup,
    t: TrafficStage | None,
    sh: ShapesStage,
    pr: ProjectionStage,
    sim: SimulationStage,
    fl: FleetsStage,
    v: VerdictStage,
    fp: tuple[Flip, ...],
    clock: _Clock,
) -> PlanResult:
    wl = s.workload
    months = range(0, wl.horizon_months + 1)
    cum_now = tuple(v.monthly_now.value * m for m in months)
    cum_after = None
    if v.best is not None and v.best.monthly_usd is not None:
        cum_after = tuple(v.porting.value + v.best.monthly_usd * m for m in months)
    notes = [
        *(t.notes if t is not None else ()),
        *sh.notes,
        *pr.notes,
        *sim.notes,
        *fl.notes,
        *v.notes,
    ]
    slo = {f"{k}_ms": v for k, v in wl.slo.objectives().items()}
    for old, key in (("p99_ms", "e2e_p99_ms"), ("p50_ms", "e2e_p50_ms")):  # the first spellings, still read
        if key in slo:
            slo[old] = slo[key]
    if wl.slo.goodput_pct is not None:
        slo["goodput_pct"] = float(wl.slo.goodput_pct)
    return PlanResult(
        wl.title,
        wl.kind,
        str(s.path),
        wl.horizon_months,
        t.summary if t is not None else None,
        sh.summary,
        v.readiness,
        s.fleet.name,
        wl.fleet.count,
        v.fleet_rate,
        v.monthly_now,
        fl.gpu.throughput,
        v.gpu_cost_per_million_usd,
        v.porting,
        pr.weights,
        v.candidates,
        v.best,
        v.verdict,
        s.thresholds,
        fp,
        cum_now,
        cum_after,
        tuple(dict.fromkeys(notes)),
        time.perf_counter() - clock.t0,
        monthly_today=v.monthly_today,
        gpu_fleet=fl.gpu,
        slo=slo,
        stage_seconds=dict(clock.seconds),
        scheduling=dict(sim.scheduling),
    )
