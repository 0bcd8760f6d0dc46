"""Simulation stage: replay the busiest window on each projected fleet and size it for the SLO, like for like
(today's GPU type and every candidate get the same traffic, objectives and search).

Input: PlanSetup, the Load, the ShapeSummary and the ProjectionStage. Output: SimulationStage: per instance
the
layout (tensor-parallel degree x replicas) that needs the fewest instances, that count, the capacity per
instance within the SLO at the projection's value and at the edges of its error band (a CurveSizer the
economics and sensitivity stages re-size with), simulated latency percentiles and distributions at that size,
and the unloaded floor when no size meets the SLO. The simulator is reached through
chipswap.simulation.simulate and
chipswap.simulation.fleet (size_fleet, check_fleet) only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from chipswap.plan.projection import ProjectionStage
from chipswap.plan.result import LatencySample, ShapeSummary
from chipswap.plan.setup import PlanSetup
from chipswap.plan.sizing import CurveSizer
from chipswap.plan.traffic import SEED, Load
from chipswap.plan.workers import Job, Workers

MAX_INSTANCES = 1000  # the largest fleet the sizing search tries; beyond it the SLO counts as unreachable
CAPACITY_STEPS = 4  # bisection steps for the capacity (the bracket is 15% wide: about 1% left)
BAND_STEPS = 1  # the same at the band's edges (about 7%)
SMALL_FLEET = 3  # up to this many instances the capacity per instance is searched, not bounded
CURVE_FACTORS = (0.5, 1.0, 2.0, 4.0)  # traffic multiples the fleet-size curve is re-planned at
TABLE_SIZES = 24  # most fleet sizes in a size table (the objectives' sensitivity re-sizes on it)
# The capacity search scales the window's traffic up; beyond this many simulated requests per probe it stops
# and the capacity found is a lower bound (a tiny model on a big instance carries ~1e6 requests/s).
MAX_PROBE_REQUESTS = 400_000


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
    e2e_p50_ms: float | None = None
    capacity_is_lower_bound: bool = False  # the SLO still held at the most traffic the search simulates
    objectives: dict[str, float] = field(default_factory=dict)  # every objective's value at the size, ms
    goodput_pct: float | None = None  # requests meeting every objective at once at the size, percent
    floor_key: str = ""  # the objective floor_ms is the unloaded value of ("ttft_p99")
    blocking: tuple[str, ...] = ()  # no size meets the SLO: the objectives that block, in words
    reach: dict[str, float] = field(default_factory=dict)  # objectives (ms; goodput_pct) a fleet does meet
    reach_count: int | None = None  # that fleet's instances
    table: Any = None  # simulation.fleet.SizeTable of the layout sized: re-sizing for other objectives
    # fleet size vs traffic, re-planned: (traffic factor, instances) at each of CURVE_FACTORS, each sized
    # by simulation on the traffic scaled by the workload's method
    curve: tuple[tuple[float, int | None], ...] = ()


@dataclass(frozen=True)
class SimulationStage:
    by_instance: dict[str, InstanceSim] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    scheduling: dict[str, str] = field(default_factory=dict)  # policies, dispatch, scaling method
    rate_rps: float = 0.0  # the busiest window's arrival rate the fleets are sized for

    def get(self, instance: str) -> InstanceSim | None:
        return self.by_instance.get(instance)


def scheduling_of(workload: Any, padded: bool, mode: str) -> tuple[str, str, int]:
    """(stack id, scheduler policy, chunked-prefill token budget on Neuron or 0) for one side of the plan:
    the workload's `stack` (Neuron candidates) or `gpu_stack` (today's GPUs), the stacks table's defaults
    when the workload names none."""
    from chipswap.projection.stacks import default_stack
    from chipswap.simulation.policies import CHUNKING_STACKS, DEFAULT_NEURON_CHUNK, scheduler_policy_for

    side = getattr(workload, "targets" if padded else "fleet", None)
    named = getattr(side, "stack" if padded else "gpu_stack", None)
    stack = named or default_stack("neuron" if padded else "gpu")
    policy = scheduler_policy_for(str(stack), mode)
    chunked = bool(getattr(side, "chunked_prefill", False)) and stack in CHUNKING_STACKS
    return str(stack), policy, DEFAULT_NEURON_CHUNK if padded and chunked and mode == "llm" else 0


def _gpu_batch_defaults(s: PlanSetup, instance: str, policy: str) -> tuple[int, int]:
    """vLLM's token budget (chunked prefill only) and max_num_seqs on one GPU of `instance`; (0, 0) when the
    catalog does not know it (the simulator's defaults then apply)."""
    from chipswap.simulation.policies import CHUNKED_PREFILL, vllm_defaults

    try:
        inst = s.catalog.instance(instance)
        per_gpu = float(inst.accelerator_memory_gib) / max(1, int(inst.accelerator_count))
    except Exception:  # an instance the catalog cannot name: keep the defaults
        return 0, 0
    budget, seqs = vllm_defaults(per_gpu, str(inst.accelerator))
    return (budget if policy == CHUNKED_PREFILL else 0), seqs


def scale_method_of(workload: Any) -> str:
    tr = getattr(workload, "traffic", None)
    return str(getattr(tr, "scale_method", None) or "superpose")


def scheduling_summary(workload: Any) -> dict[str, str]:
    """What the simulation of both sides assumed, for the plan's output and report.json."""
    from chipswap.simulation.policies import describe
    from chipswap.simulation.simulate import DEFAULT_DISPATCH, SCALE_METHOD_WORDS

    mode = workload.traffic.mode if getattr(workload, "traffic", None) else "llm"
    gpu_stack, gpu_policy, _ = scheduling_of(workload, False, mode)
    neuron_stack, neuron_policy, budget = scheduling_of(workload, True, mode)
    method = scale_method_of(workload)
    return {
        "gpu_stack": gpu_stack,
        "gpu_policy": gpu_policy,
        "neuron_stack": neuron_stack,
        "neuron_policy": neuron_policy + (f" with chunked prefill ({budget} tokens)" if budget else ""),
        "dispatch": DEFAULT_DISPATCH,
        "scale_method": method,
        "line": (
            f"scheduling simulated: GPUs ({gpu_stack}) {describe(gpu_policy)}; Neuron ({neuron_stack}) "
            f"{describe(neuron_policy)}{f' with {budget}-token chunked prefill' if budget else ''}; "
            f"requests dispatched {DEFAULT_DISPATCH.replace('_', ' ')} to per-replica queues; traffic "
            f"scaled by {SCALE_METHOD_WORDS[method]}"
        ),
    }


def traffic_max_length(s: PlanSetup, load: Load, prefill_buckets: tuple[int, ...], mode: str) -> int:
    """The most positions a request of the workload's traffic holds (prompt + output - 1; the prompt for an
    encoder) among those the plan's shape buckets and the model accept: the simulator's max length, taken
    from the traffic itself, never from the mean request a projection may have been made at (0: none)."""
    from chipswap.plan.setup import max_positions
    from chipswap.simulation.servicetime import positions_held

    p, o = load.all_prompt_tokens, load.all_output_tokens
    if p.size == 0:
        return 0
    held = positions_held(p, o) if mode == "llm" else p
    keep = np.ones(p.size, dtype=bool)
    if prefill_buckets:
        keep &= p <= max(prefill_buckets)
    limit = max_positions(s.model) or 0
    if limit:
        keep &= held <= limit
    return int(held[keep].max()) if keep.any() else 0


def _simulator() -> Any:
    try:
        from chipswap.simulation import fleet, simulate
    except ImportError:
        return None
    return simulate, fleet


class _Fleet:
    """One layout of one instance type on the Load: sizes it, checks it at other traffic and speeds."""

    def __init__(self, s: PlanSetup, load: Load, shapes: ShapeSummary | None, lay: Any, slo: Any):
        self.lay, self.cfg, self.load, self.slo = lay, lay.config, load, slo
        self.mode = s.workload.traffic.mode if s.workload.traffic else "llm"
        prefill = tuple(shapes.sequence_buckets) if shapes and shapes.sequence_buckets else ()
        decode = tuple(shapes.decode_buckets) if shapes and shapes.decode_buckets else ()
        self.stack, self.policy, budget = scheduling_of(s.workload, self.cfg.padded, self.mode)
        self.scale_method = scale_method_of(s.workload)
        seqs = 0
        if not self.cfg.padded and self.mode == "llm":
            budget, seqs = _gpu_batch_defaults(s, self.cfg.instance, self.policy)
        self.setup = self.simulate.setup_from_serving(
            self.cfg,
            mode=self.mode,
            prefill_buckets=prefill if self.cfg.padded else (),
            decode_buckets=decode if self.cfg.padded else (),
            policy=self.policy if self.mode == "llm" else None,
            token_budget=budget,
            max_num_seqs=seqs,
            max_length=traffic_max_length(s, load, prefill, self.mode) or None,
            over_length="reject",  # the workload's own limit: longer requests are its overflow, counted
        )
        self._scaled: dict[float, Any] = {1.0: load.traffic}
        self.g_max = max(1.0, MAX_PROBE_REQUESTS / max(1, len(load.traffic)))
        self.capped = False  # a capacity search met the SLO at g_max: what it found is a lower bound
        self.runs = 0
        self.sizing: Any = None

    @property
    def simulate(self) -> Any:
        from chipswap.simulation import simulate

        return simulate

    @property
    def fleet(self) -> Any:
        from chipswap.simulation import fleet

        return fleet

    def table(self, lower: int, top: int) -> Any:
        """chipswap.simulation.fleet.size_table from `lower` to `top` instances: every size when there are at
        most TABLE_SIZES, else TABLE_SIZES spaced geometrically (a count between two is rounded up)."""
        ld = self.load
        lo = max(1, min(lower, top))
        sizes = list(range(lo, top + 1))
        if len(sizes) > TABLE_SIZES:
            sizes = sorted({round(lo * (top / lo) ** (k / (TABLE_SIZES - 1))) for k in range(TABLE_SIZES)})
        self.runs += len(sizes)
        return self.fleet.size_table(
            ld.traffic, self.lay.times, self.setup, self.cfg.replicas, sizes, mode=self.mode,
            window_s=ld.window_s, warmup_s=ld.warmup_s, cooldown_s=ld.cooldown_s,
        )  # fmt: skip

    def curve_part(self, factors: tuple[float, ...], cap: int) -> dict[float, int | None]:
        """Fleet size vs traffic, re-planned for one side of 1x (`factors` all below or all above it):
        size_fleet_sweep on the traffic scaled to each (superposition unless the workload asks otherwise), up
        to `cap` instances."""
        ld = self.load
        traffics = []
        for g in factors:
            if g not in self._scaled:
                self._scaled[g] = self.simulate.scale_traffic(
                    ld.traffic, g, np.random.default_rng(SEED), method=self.scale_method
                )
            traffics.append(self._scaled[g])
        sweep = self.fleet.size_fleet_sweep(
            traffics, self.lay.times, self.setup, self.cfg.replicas, self.slo,
            mode=self.mode, window_s=ld.window_s, warmup_s=ld.warmup_s, cooldown_s=ld.cooldown_s,
            max_instances=cap,
        )  # fmt: skip
        self.runs += sum(len(z.probes) for z in sweep)
        return {g: z.instances for g, z in zip(factors, sweep, strict=True)}

    def size(self, cap: int) -> Any:
        """chipswap.simulation.fleet.size_fleet on the busiest window, up to `cap` instances."""
        ld = self.load
        self.sizing = self.fleet.size_fleet(
            ld.traffic,
            self.lay.times,
            self.setup,
            self.cfg.replicas,
            self.slo,
            mode=self.mode,
            window_s=ld.window_s,
            warmup_s=ld.warmup_s,
            cooldown_s=ld.cooldown_s,
            max_instances=cap,
        )
        self.runs += len(self.sizing.probes)
        return self.sizing

    def meets(self, n: int, g: float, speed: float) -> bool:
        """Do `n` instances meet the SLO with traffic scaled by `g` and every call `speed` times as fast?"""
        from chipswap.simulation.servicetime import ScaledServiceTimes

        g = round(g, 4)
        if g not in self._scaled:
            self._scaled[g] = self.simulate.scale_traffic(
                self.load.traffic, g, np.random.default_rng(SEED), method=self.scale_method
            )
        times = self.lay.times if speed == 1.0 else ScaledServiceTimes(self.lay.times, 1.0 / speed)
        w = self.sizing.window
        self.runs += 1
        check = self.fleet.check_fleet(
            self._scaled[g],
            times,
            self.setup,
            n,
            self.cfg.replicas,
            self.slo,
            mode=self.mode,
            measure=(w.start_s, w.end_s),
        )
        return bool(check.meets)

    def _floors(self) -> list[tuple[float, float, str]]:
        """(unloaded value / target, unloaded value in s, key) per objective."""
        z = self.sizing
        return [
            (floor / o.target_s, floor, o.key)
            for o, floor in zip(self.slo.objectives, z.floors, strict=False)
            if np.isfinite(floor)
        ]

    def floor_s(self, speed: float = 1.0) -> float:
        """The tightest objective's unloaded latency at `speed` as a share of it (> 1: unreachable)."""
        shares = [share / speed for share, _f, _k in self._floors()]
        return max(shares) if shares else 0.0

    def floor_ms(self) -> float | None:
        """The unloaded latency (ms) of the objective that bites hardest."""
        pairs = self._floors()
        return max(pairs)[1] * 1000 if pairs else None

    def floor_key(self) -> str:
        pairs = self._floors()
        return max(pairs)[2] if pairs else ""

    def reach(self) -> tuple[dict[str, float], int | None]:
        """No size meets the SLO: the objectives a large fleet does meet (ms; goodput_pct), and its size."""
        z = self.sizing
        if z is None or z.reach is None:
            return {}, None
        r = self.fleet.relaxed(self.slo, z.reach)
        if any(not np.isfinite(v) for v in z.reach.values):
            return {}, None  # rejected requests: no objective value helps
        out = {o.key: round(o.target_s * 1000, 6) for o in r.objectives}
        if r.goodput is not None:
            out["goodput_pct"] = round(r.goodput * 100, 6)
        return out, z.reach.instances


def _capacity(f: _Fleet, n: int, speed: float, start: float, steps: int) -> float | None:
    """The largest traffic scale `n` instances at `speed` carry within the SLO: bracket from `start` (15%
    steps first, then doubling, so a start far off costs a few probes, not dozens), then `steps` bisection
    steps (geometric). None when even an idle fleet misses it at this speed."""
    if f.floor_s(speed) > 1:
        return None
    lo, hi = None, None
    g = min(start, f.g_max)
    for i in range(24):
        step = 1.15 if i < 2 else 2.0
        if f.meets(n, g, speed):
            lo = g
            if hi is not None:
                break
            if g >= f.g_max:
                f.capped = True
                return g
            g = min(g * step, f.g_max)
        else:
            hi = g
            if lo is not None:
                break
            g /= step
    if lo is None:
        return None
    if hi is None:
        return lo
    while hi / lo > 1.16:  # doubling left a wide bracket: narrow it to the 15% the step count assumes
        mid = (lo * hi) ** 0.5
        if f.meets(n, mid, speed):
            lo = mid
        else:
            hi = mid
    for _ in range(steps):
        mid = (lo * hi) ** 0.5
        if f.meets(n, mid, speed):
            lo = mid
        else:
            hi = mid
    return lo


def _start_scale(p: Any, load: Load, n: int) -> float:
    """Where the capacity search of `n` instances starts: the projected steady throughput (a little under,
    since the SLO costs headroom), at least today's traffic (n instances are known to carry it)."""
    rps = getattr(getattr(p, "requests_per_s", None), "value", None)
    if not rps or not load.rate_rps:
        return 1.0
    return max(1.0, 0.8 * float(rps) * n / load.rate_rps)


def _ms(seconds: float) -> float | None:
    return None if not np.isfinite(seconds) else seconds * 1000


def _layout_words(cfg: Any) -> str:
    return f"TP{cfg.tp_degree} x {cfg.replicas}"


@dataclass
class _Sized:
    """One instance type after its layout search (the first phase of sizing it): the layout that needs the
    fewest instances and that count, or why none meets the SLO."""

    best: tuple[int, _Fleet] | None
    tried: list[str]
    floors: list[tuple[float, str]]
    blocked: tuple[float, tuple[str, ...], dict[str, float], int | None, _Fleet | None]
    runs: int


def _size_layouts(fleets: list[_Fleet], slo: Any) -> _Sized:
    """Size every layout of one instance type (`fleets`, the projection's own pick first) for the SLO and keep
    the one that needs the fewest instances (ties: the projection's own pick, the highest throughput). A
    layout is only searched below the best so far."""
    best: tuple[int, _Fleet] | None = None
    tried: list[str] = []
    floors: list[tuple[float, str]] = []
    blocked: list[tuple[float, tuple[str, ...], dict[str, float], int | None, _Fleet | None]] = []
    runs = 0
    for f in fleets:
        cap = MAX_INSTANCES if best is None else best[0] - 1
        z = f.size(max(cap, 1)) if cap >= 1 else None
        runs += f.runs
        if z is None or z.verdict != "meets":
            if z is not None and z.verdict == "below_floor" and f.floor_ms() is not None:
                floors.append((f.floor_ms() or 0.0, f.floor_key()))
            if z is not None and best is None and z.verdict in ("below_floor", "over_cap"):
                reach, n_reach = f.reach()
                blocked.append((_relaxation(slo, reach), z.blocking(), reach, n_reach, f))
            why = z.message if z is not None and best is None else f"no fewer than {best[0] if best else 0}"
            tried.append(f"{_layout_words(f.lay.config)}: {why}")
            continue
        tried.append(
            f"{_layout_words(f.lay.config)}: {z.instances} instance{'s' if z.instances != 1 else ''}"
        )
        best = (int(z.instances), f)
    nothing: tuple[float, tuple[str, ...], dict[str, float], int | None, _Fleet | None]
    nothing = (0.0, (), {}, None, None)
    chosen = min(blocked, key=lambda b: b[0]) if blocked and best is None else nothing
    return _Sized(best, tried, floors, chosen, runs)


def _capacities(f: _Fleet, n: int, speeds: tuple[float, ...], start: float) -> list[float | None]:
    """The traffic scale `n` instances carry within the SLO at each speed: n meets the window and n - 1 does
    not, so the capacity per instance lies within rate/n .. rate/(n-1); a small fleet is searched (that range
    is wide), a large one takes rate/n (its count at 1x is exact). The band's edges start from 1x's."""
    g1 = 1.0
    if n <= SMALL_FLEET:
        g1 = _capacity(f, n, 1.0, start, CAPACITY_STEPS) or 1.0
    return [g1 if sp == 1.0 else _capacity(f, n, sp, g1 * sp, BAND_STEPS) for sp in speeds]


def _on_fleet(f: _Fleet, what: str, *args: Any) -> tuple[Any, int, bool]:
    """One independent search on a sized fleet, as a worker runs it: (its result, the simulations it ran,
    whether a capacity search stopped at the most traffic it simulates)."""
    before = f.runs
    out = _capacities(f, *args) if what == "capacities" else getattr(f, what)(*args)
    return out, f.runs - before, f.capped


def _speeds(band: float) -> tuple[float, ...]:
    """The speeds a fleet's capacity is searched at: the band's slow edge, the projection's value, the fast
    edge."""
    return (1 / (1 + band), 1.0, 1 + band) if band else (1.0,)


def _submit_searches(
    w: Workers, sized: _Sized, p: Any, load: Load, verdict_only: bool
) -> dict[str, Job[Any]]:
    """The searches that follow the layout search, each independent of the others: the capacity per instance
    (at the projection's value and the band's edges), the size table, and the curve below and above 1x.
    `verdict_only`: the capacities alone (the verdict reads neither the table nor the curve)."""
    if sized.best is None:
        fl = sized.blocked[4]
        z = fl.sizing if fl is not None else None
        if fl is None or z is None or verdict_only:
            return {}
        top = min(MAX_INSTANCES, max(8, 4 * z.lower_bound))
        return {"table": w.submit(_on_fleet, fl, "table", z.lower_bound, top)}
    n, f = sized.best
    speeds = _speeds(float(f.lay.times.band or 0.0))
    lay = next((a for a in _layouts(p) if a.config == f.cfg), p)
    if verdict_only:
        return {"capacities": w.submit(_on_fleet, f, "capacities", n, speeds, _start_scale(lay, load, n))}
    below = tuple(g for g in CURVE_FACTORS if g < 1.0)
    above = tuple(g for g in CURVE_FACTORS if g > 1.0)
    top = min(MAX_INSTANCES, max(8, 2 * n + 2))
    jobs = {  # the longest first, so the last one to finish is a short one
        "above": w.submit(_on_fleet, f, "curve_part", above, MAX_INSTANCES) if above else None,
        "capacities": w.submit(_on_fleet, f, "capacities", n, speeds, _start_scale(lay, load, n)),
        "table": w.submit(_on_fleet, f, "table", f.sizing.lower_bound, top),
        "below": w.submit(_on_fleet, f, "curve_part", below, n) if below else None,  # less traffic: <= n
    }
    return {k: j for k, j in jobs.items() if j is not None}


def _one(sized: _Sized, jobs: dict[str, Job[Any]], load: Load, p: Any, slo: Any) -> InstanceSim:
    """One instance type's InstanceSim from its layout search and the searches that followed it."""
    got = {k: j.get() for k, j in jobs.items()}
    runs = sized.runs + sum(r for _v, r, _c in got.values())
    best, tried, floors = sized.best, sized.tried, sized.floors
    what = f"simulated: {load.what}, {load.requests:,} requests in the window"
    # the band of the layout sized (the fewest instances), not of the projection's own pick
    band = float((best[1].lay.times if best is not None else p.times).band or 0.0)
    if best is None:
        floor = min(floors) if floors else (None, "")
        _r, blocking, reach, reach_n, _fl = sized.blocked
        return InstanceSim(
            p.instance,
            None,
            None,
            None,
            None,
            None,
            band,
            False,
            floor[0],
            note=f"{what}; layouts tried: " + "; ".join(tried),
            floor_key=floor[1],
            blocking=blocking,
            reach=reach,
            reach_count=reach_n,
            table=got["table"][0] if "table" in got else None,
        )
    n, f = best
    speeds = _speeds(band)
    gs, _r, capped = got["capacities"]
    caps = [None if g is None else load.rate_rps * g / n for g in gs]
    table = got["table"][0] if "table" in got else None
    found: dict[float, int | None] = {1.0: n}
    for side in ("below", "above"):
        found.update(got[side][0] if side in got else {})
    curve = tuple((g, found[g]) for g in CURVE_FACTORS) if "table" in got else ()
    res = f.sizing.check.result
    batching = f"continuous ({f.policy})" if f.mode == "llm" else "dynamic"
    if capped:
        what += (
            f"; capacity per instance is a lower bound: the SLO still held at {f.g_max:,.1f}x this traffic, "
            f"the most the search simulates ({MAX_PROBE_REQUESTS:,} requests)"
        )
    note = (
        f"{what}; {batching} batching up to {f.setup.max_batch}"
        + (
            f" (KV cache {f.setup.kv_blocks:,} blocks of {f.setup.context_block} tokens)"
            if f.setup.kv_blocks
            else ""
        )
        + (", padded to the compiled buckets" if f.cfg.padded else "")
        + f"; layouts tried: {'; '.join(tried)}; {runs} simulations"
    )
    return InstanceSim(
        p.instance,
        CurveSizer(load.rate_rps, speeds, tuple(caps), "simulated for the SLO"),
        n,
        caps[speeds.index(1.0)],
        _ms(res.ttft.p99),
        _ms(res.e2e.p99),
        band,
        True,
        f.floor_ms(),
        LatencySample(res.latency_cdf("ttft")[1] * 1000, res.latency_cdf("e2e")[1] * 1000),
        note,
        f.cfg,
        f.lay.times,
        _ms(res.e2e.p50),
        capped,
        objectives={o.key: v * 1000 for o, v in zip(slo.objectives, f.sizing.check.values, strict=True)},
        goodput_pct=f.sizing.check.goodput * 100,
        table=table,
        curve=curve,
    )


def resized(stage: SimulationStage, workload_slo: Any) -> SimulationStage:
    """The stage re-sized for other objectives from each fleet's SizeTable, without simulating (the search of
    the objectives' sensitivity; the value it finds is then re-checked by re-running the plan). Capacities
    scale with the count (capacity per instance at n' = at n x n / n')."""
    slo = slo_of(workload_slo)
    out: dict[str, InstanceSim] = {}
    for name, x in stage.by_instance.items():
        n = x.table.count(slo) if x.table is not None and slo is not None else None
        if n is None or x.table is None:
            out[name] = replace(x, sizer=None, count=None, capacity_rps=None, feasible=False)
            continue
        if x.sizer is not None and x.count:
            k = x.count / n
            caps = tuple(None if c is None else c * k for c in x.sizer.capacity_rps)
            sizer = replace(x.sizer, capacity_rps=caps)
        else:  # not feasible at the stated objectives: the count, and the band taken as linear in speed
            b = x.band or 0.0
            speeds = _speeds(b)
            caps = tuple(stage.rate_rps / n * sp for sp in speeds)
            sizer = CurveSizer(stage.rate_rps, speeds, caps, "re-sized for the objectives")
        # at a band edge whose unloaded latency misses an objective no size meets it
        edges = zip(sizer.speeds, sizer.capacity_rps, strict=True)
        caps = tuple(c if x.table.floor_ok(slo, sp) else None for sp, c in edges)
        sizer = replace(sizer, capacity_rps=caps)
        cap = sizer.capacity(1.0)
        out[name] = replace(x, sizer=sizer, count=n, capacity_rps=cap, feasible=sizer is not None)
    return replace(stage, by_instance=out)


def _relaxation(slo: Any, reach: dict[str, float]) -> float:
    """How far `reach` relaxes the SLO: the largest ratio of a reached value to its target (inf: none)."""
    if not reach:
        return float("inf")
    ratios = [reach.get(o.key, o.target_s * 1000) / (o.target_s * 1000) for o in slo.objectives]
    if slo.goodput is not None and "goodput_pct" in reach:
        ratios.append(slo.goodput * 100 / max(reach["goodput_pct"], 1e-9))
    return max(ratios)


def objective_words(key: str, ms: float) -> str:
    """ "ttft_p99", 2000 -> "TTFT p99 <= 2,000 ms" (TPOT to a tenth of a ms)."""
    from chipswap.simulation.fleet import METRICS

    metric, pct = key.rsplit("_p", 1)
    value = f"{ms:,.1f}" if ms < 100 and ms != int(ms) else f"{ms:,.0f}"
    return f"{METRICS[metric]} p{pct} <= {value} ms"


def slo_of(workload_slo: Any) -> Any:
    """The simulator's SLO (chipswap.simulation.fleet.Slo) from the workload's [slo]; None without an
    objective."""
    from chipswap.simulation.fleet import Objective, Slo

    objs = []
    for key, ms in workload_slo.objectives().items():
        metric, pct = key.rsplit("_p", 1)
        objs.append(Objective(metric, float(pct), ms / 1000))
    if not objs:
        return None
    g = workload_slo.goodput_pct
    return Slo.of(objs, None if g is None else g / 100)


def _same_layouts(p: Any) -> tuple[Any, ...]:
    """What makes two instance types simulate alike: every layout's configuration (less the instance name)
    and service times (inf2.xlarge and inf2.8xlarge carry the same chip)."""
    return tuple((replace(lay.config, instance=""), lay.times) for lay in _layouts(p))


def simulation(
    s: PlanSetup,
    load: Load | None,
    shapes: ShapeSummary | None,
    proj: ProjectionStage,
    workers: Workers | None = None,
    *,
    verdict_only: bool = False,
) -> SimulationStage:
    """Every projected fleet sized by simulation. `workers`: where the independent searches run (None: here,
    one after another); the result is the same. `verdict_only`: what the verdict reads and no more (a
    sensitivity's re-plan): each fleet's size and capacity band, without the size table and the fleet-size
    curve."""
    projected = [p for p in proj.by_instance.values() if p.times is not None and p.excluded is None]
    if s.kind != "serving" or load is None or not projected:
        return SimulationStage()
    if _simulator() is None:
        return SimulationStage(
            notes=(
                "the fleet simulator is not installed here: projected fleets are sized from the projected "
                f"steady throughput at {s.workload.utilization:.0%} utilization, and latency is not "
                "simulated",
            )
        )
    slo = slo_of(s.workload.slo)
    if slo is None:
        return SimulationStage(
            notes=(
                "no latency objective (slo.ttft_p99_ms, tpot_p99_ms, e2e_p99_ms, ...): projected fleets are "
                f"sized from the projected steady throughput at {s.workload.utilization:.0%} utilization; "
                "state an SLO to size both fleets by simulation",
            )
        )
    w = workers or Workers(1)
    # instance types that simulate alike (inf2.xlarge and inf2.8xlarge) are sized once (keys compared, not
    # hashed: service times need not be hashable)
    keys = [_same_layouts(p) for p in projected]
    once = [i for i in range(len(projected)) if keys[i] not in keys[:i]]
    first = [projected[i] for i in once]
    sizing = [
        w.submit(_size_layouts, [_Fleet(s, load, shapes, x, slo) for x in _layouts(p)], slo) for p in first
    ]
    sized, searches = [], []
    for job, p in zip(sizing, first, strict=True):  # each fleet's searches start as soon as it is sized
        sized.append(job.get())
        searches.append(_submit_searches(w, sized[-1], p, load, verdict_only))
    done = [_one(z, j, load, p, slo) for z, j, p in zip(sized, searches, first, strict=True)]
    out: dict[str, InstanceSim] = {}
    for p, key in zip(projected, keys, strict=True):
        twin = done[[keys[i] for i in once].index(key)]
        out[p.instance] = twin if twin.instance == p.instance else replace(twin, instance=p.instance)
    sched = scheduling_summary(s.workload)
    return SimulationStage(out, (sched["line"],), sched, load.rate_rps)


def _layouts(p: Any) -> tuple[Any, ...]:
    return (p, *getattr(p, "alternatives", ()))
