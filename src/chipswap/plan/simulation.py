"""Simulation stage: replay the busiest window on each projected fleet and size it for the SLO, like for like
(today's GPU type and every candidate get the same traffic, objectives and search).

Input: PlanSetup, the Load, the ShapeSummary and the ProjectionStage. Output: SimulationStage: per instance
the
capacity per instance that meets the SLO (at the projection's value and at the edges of its band), the
fleet size, simulated latency percentiles and distributions at that size, the unloaded latency floor, and a
CurveSizer the economics and sensitivity stages re-size with. The simulator is reached through `_simulator()`
only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from chipswap.plan.projection import ProjectionStage
from chipswap.plan.result import LatencySample, ShapeSummary
from chipswap.plan.setup import PlanSetup
from chipswap.plan.sizing import CurveSizer
from chipswap.plan.traffic import Load


@dataclass(frozen=True)
class InstanceSim:
    """One fleet simulated at its size. capacity_rps: requests/s one instance carries within the SLO;
    feasible: False when no fleet size meets the SLO (floor_ms says how low latency can go unloaded)."""

    instance: str
    sizer: CurveSizer | None
    count: int | None
    capacity_rps: float | None
    ttft_p99_ms: float | None
    e2e_p99_ms: float | None
    band: float | None
    feasible: bool
    floor_ms: float | None = None
    latency: LatencySample = field(default_factory=LatencySample, compare=False)
    note: str = ""
    config: Any = None  # the layout that needs the fewest instances (ServingConfig)
    times: Any = None  # its ServiceTimes


@dataclass(frozen=True)
class SimulationStage:
    by_instance: dict[str, InstanceSim] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def get(self, instance: str) -> InstanceSim | None:
        return self.by_instance.get(instance)


def _simulator() -> Any:
    try:
        from chipswap.core import simulate  # type: ignore[attr-defined]
    except ImportError:
        return None
    return simulate


def simulation(
    s: PlanSetup, load: Load | None, shapes: ShapeSummary | None, proj: ProjectionStage
) -> SimulationStage:
    projected = [p for p in proj.by_instance.values() if p.times is not None and p.excluded is None]
    if s.kind != "serving" or load is None or not projected:
        return SimulationStage()
    sim = _simulator()
    if sim is None:
        return SimulationStage(
            notes=(
                "the fleet simulator is not installed here: projected fleets are sized from the projected "
                f"steady throughput at {s.workload.utilization:.0%} utilization, and latency is not "
                "simulated",
            )
        )
    return _simulate_all(s, sim, load, shapes, projected)


MAX_INSTANCES = 4096  # the largest fleet the sizing search tries; beyond it the SLO counts as unreachable
FLOOR_REQUESTS = 2000  # requests replayed one at a time for the unloaded latency floor
CAPACITY_STEPS = 4  # bisection steps for the capacity (the bracket is 15% wide: about 1% left)
BAND_STEPS = 2  # the same at the band's edges (about 4%)
SEED = 7


@dataclass(frozen=True)
class Objective:
    """What a fleet must meet at the busiest window: p99 TTFT / end-to-end and p50 end-to-end (ms), or, with
    no SLO, a utilization ceiling."""

    ttft_ms: float | None = None
    e2e_ms: float | None = None
    p50_ms: float | None = None
    utilization: float | None = None

    def met(self, r: Any) -> bool:
        checks = (
            (self.ttft_ms, r.ttft.p99),
            (self.e2e_ms, r.e2e.p99),
            (self.p50_ms, r.e2e.p50),
        )
        for limit, seconds in checks:
            if limit is not None and not seconds * 1000 <= limit:  # NaN (nothing served) is a miss
                return False
        return self.utilization is None or r.utilization <= self.utilization

    def floor_miss(self, r: Any, speed: float = 1.0) -> float | None:
        """The unloaded latency (ms) of the first objective even an idle fleet misses, or None. At another
        speed every call takes 1/speed as long, and so does an idle request."""
        for limit, seconds in (
            (self.ttft_ms, r.ttft.p99),
            (self.e2e_ms, r.e2e.p99),
            (self.p50_ms, r.e2e.p50),
        ):
            if limit is not None and not seconds / speed * 1000 <= limit:
                return seconds / speed * 1000
        return None


def objective(s: PlanSetup) -> Objective:
    slo = s.workload.slo
    if slo.any:
        return Objective(slo.ttft_p99_ms, slo.p99_ms, slo.p50_ms)
    return Objective(utilization=s.workload.utilization)


class _Fleet:
    """One instance type's replicas on the busiest window: runs simulations, caches scaled traffic."""

    def __init__(self, sim: Any, s: PlanSetup, load: Load, shapes: ShapeSummary | None, p: Any) -> None:
        self.sim, self.p, self.cfg = sim, p, p.config
        self.mode = s.workload.traffic.mode if s.workload.traffic else "llm"
        prefill = tuple(shapes.sequence_buckets) if shapes and shapes.sequence_buckets else ()
        decode = tuple(shapes.decode_buckets) if shapes and shapes.decode_buckets else ()
        self.setup = sim.setup_from_serving(
            self.cfg,
            mode=self.mode,
            prefill_buckets=prefill if self.cfg.padded else (),
            decode_buckets=decode if self.cfg.padded else (),
        )
        self.traffic = sim.make_traffic(load.times_s, load.prompt_tokens, load.output_tokens)
        self._scaled: dict[float, Any] = {1.0: self.traffic}
        self._floor: Any = None
        self.runs = 0

    def scaled(self, g: float) -> Any:
        g = round(g, 4)
        if g not in self._scaled:
            self._scaled[g] = self.sim.scale_traffic(self.traffic, g, np.random.default_rng(SEED))
        return self._scaled[g]

    def run(self, n: int, g: float = 1.0, speed: float = 1.0) -> Any:
        from chipswap.core.servicetime import ScaledServiceTimes

        times = self.p.times if speed == 1.0 else ScaledServiceTimes(self.p.times, 1.0 / speed)
        self.runs += 1
        return self.sim.simulate(self.scaled(g), times, self.setup, n * self.cfg.replicas, mode=self.mode)

    def floor(self) -> Any:
        """Every request alone on an idle replica: the latency no fleet size can go below."""
        if self._floor is None:
            self._floor = self._idle()
        return self._floor

    def _idle(self) -> Any:
        t = self.traffic
        k = min(len(t), FLOOR_REQUESTS)
        pick = np.sort(np.random.default_rng(SEED).choice(len(t), size=k, replace=False))
        spaced = self.sim.make_traffic(np.arange(k) * 1e6, t.prompt_tokens[pick], t.output_tokens[pick])
        return self.sim.simulate(spaced, self.p.times, self.setup, 1, mode=self.mode)


def _size(f: _Fleet, obj: Objective, start: int = 1, below: int | None = None) -> tuple[int | None, Any]:
    """The smallest instance count that meets `obj`, with its run: from `start` (a lower bound, e.g. the
    projected steady throughput's count) upward by 60% steps, then a bisection. With `below`, only counts
    under it are of interest: one run at below - 1 settles that none is."""
    if below is not None:
        if below <= 1 or not obj.met(f.run(below - 1)):
            return None, None
        hi, best = below - 1, f.run(below - 1)
        lo = 0
    else:
        n, last, lo = max(1, start), None, 0
        while n <= MAX_INSTANCES:
            last = f.run(n)
            if obj.met(last):
                break
            lo, n = n, max(n + 1, math.ceil(n * 1.6))
        else:
            return None, last
        hi, best = n, last
        if lo == 0 and n > 1:  # the start met already: look below it
            lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        r = f.run(mid)
        if obj.met(r):
            hi, best = mid, r
        else:
            lo = mid
    return hi, best


def _capacity(f: _Fleet, obj: Objective, n: int, speed: float, start: float, steps: int) -> float | None:
    """The largest traffic scale `n` instances at `speed` carry within `obj`: bracket from `start` by 15%
    steps, then `steps` bisection steps (geometric)."""
    if obj.floor_miss(f.floor(), speed) is not None:
        return None  # even an idle fleet at this speed misses the objective
    lo, hi = None, None
    g = start
    for _ in range(16):
        if obj.met(f.run(n, g, speed)):
            lo = g
            if hi is not None:
                break
            g *= 1.15
        else:
            hi = g
            if lo is not None:
                break
            g /= 1.15
    if lo is None:
        return None
    if hi is None:
        return lo
    for _ in range(steps):
        mid = (lo * hi) ** 0.5
        if obj.met(f.run(n, mid, speed)):
            lo = mid
        else:
            hi = mid
    return lo


def _ms(seconds: float) -> float | None:
    return None if not np.isfinite(seconds) else seconds * 1000


def _layout_words(cfg: Any) -> str:
    return f"TP{cfg.tp_degree} x {cfg.replicas}"


def _one(
    s: PlanSetup, sim: Any, load: Load, shapes: ShapeSummary | None, p: Any, obj: Objective
) -> InstanceSim:
    """Size every layout of one instance type for the objective and keep the one that needs the fewest
    instances (ties: the projection's own pick, the highest throughput)."""
    layouts = [p, *getattr(p, "alternatives", ())]
    best: tuple[int, Any, _Fleet, Any] | None = None
    floors: list[float] = []
    tried: list[str] = []
    runs = 0
    for lay in layouts:
        f = _Fleet(sim, s, load, shapes, lay)
        miss = obj.floor_miss(f.floor())
        if miss is not None:
            floors.append(miss)
            tried.append(f"{_layout_words(lay.config)}: unloaded latency {miss:,.0f} ms misses the SLO")
            runs += f.runs
            continue
        steady = float(lay.requests_per_s.value) if lay.requests_per_s is not None else 0.0
        start = math.ceil(load.rate_rps / steady - 1e-9) if steady > 0 else 1
        n, run = _size(f, obj, start, best[0] if best is not None else None)
        runs += f.runs
        if n is None or run is None:
            why = f"no fewer than {best[0]}" if best is not None else f"no size up to {MAX_INSTANCES}"
            tried.append(f"{_layout_words(lay.config)}: {why} meets the SLO")
            continue
        tried.append(f"{_layout_words(lay.config)}: {n} instance{'s' if n != 1 else ''}")
        best = (n, lay, f, run)
    what = f"simulated: {load.what}, {load.requests:,} requests"
    band = float(p.times.band or 0.0)
    if best is None:
        return InstanceSim(
            p.instance,
            None,
            None,
            None,
            None,
            None,
            band,
            False,
            min(floors) if floors else None,
            note=f"{what}; layouts tried: " + "; ".join(tried),
        )
    n, lay, f, run = best
    before = f.runs
    speeds = (1 / (1 + band), 1.0, 1 + band) if band else (1.0,)
    g1 = _capacity(f, obj, n, 1.0, 1.0, CAPACITY_STEPS) or 1.0
    caps: list[float | None] = []
    for sp in speeds:
        g = g1 if sp == 1.0 else _capacity(f, obj, n, sp, g1 * sp, BAND_STEPS)
        caps.append(None if g is None else load.rate_rps * g / n)
    floor = f.floor()
    floor_ms = _ms(floor.e2e.p99) if obj.e2e_ms is not None or obj.ttft_ms is None else _ms(floor.ttft.p99)
    runs += f.runs - before
    batching = "continuous" if f.mode == "llm" else "dynamic"
    note = (
        f"{what}; {batching} batching up to {f.cfg.max_batch}"
        + (", padded to the compiled buckets" if f.cfg.padded else "")
        + f"; layouts tried: {'; '.join(tried)}; {runs} simulations"
    )
    return InstanceSim(
        p.instance,
        CurveSizer(load.rate_rps, speeds, tuple(caps), "simulated for the SLO"),
        n,
        caps[speeds.index(1.0)],
        _ms(run.ttft.p99),
        _ms(run.e2e.p99),
        band,
        True,
        floor_ms,
        LatencySample(run.latency_cdf("ttft")[1] * 1000, run.latency_cdf("e2e")[1] * 1000),
        note,
        lay.config,
        lay.times,
    )


def _same_layouts(p: Any) -> tuple[Any, ...]:
    """What makes two instance types simulate alike: every layout's configuration (less the instance name)
    and service times (inf2.xlarge and inf2.8xlarge carry the same chip)."""
    return tuple(
        (replace(lay.config, instance=""), lay.times) for lay in (p, *getattr(p, "alternatives", ()))
    )


def _simulate_all(
    s: PlanSetup, sim: Any, load: Load, shapes: ShapeSummary | None, projected: list[Any]
) -> SimulationStage:
    obj = objective(s)
    out: dict[str, InstanceSim] = {}
    done: list[tuple[tuple[Any, ...], InstanceSim]] = []
    for p in projected:
        key = _same_layouts(p)
        twin = next((r for k, r in done if k == key), None)
        out[p.instance] = replace(twin, instance=p.instance) if twin else _one(s, sim, load, shapes, p, obj)
        done.append((key, out[p.instance]))
    notes = []
    if obj.utilization is not None:
        notes.append(
            f"no [slo] given: simulated fleets are sized to keep busy time under {obj.utilization:.0%} at "
            "the busiest window; state an SLO to size them for latency"
        )
    return SimulationStage(out, tuple(notes))
