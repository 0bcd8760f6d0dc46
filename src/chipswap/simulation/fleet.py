"""Fleet sizing for a latency SLO: the smallest number of instances whose simulated tail latency meets the
objectives at the traffic's busiest window, for any ServiceTimes (today's GPUs or a Neuron candidate, like for
like), and whether a given fleet meets them.

The search: a lower bound from the work the window carries (no fleet can be busier than 100%), doubling until
a size meets the SLO, then bisection; every probe is a deterministic simulation of the same requests, and the
answer must also hold one size up (so a lucky dip in a noisy tail cannot pick it). If the SLO is below the
latency requests have alone on an idle replica (the floor), no size can meet it: that is the verdict, with the
floor, not a long search. (The floor is exact when a decode step never gets cheaper by adding a request to the
batch, which holds when its time grows with the batch's total context, as in memory-bound decoding.) The
search never goes past `max_instances`.

Pure: numpy and the standard library. No files, clock or printing. Bad input raises ChipswapError.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from chipswap.errors import ChipswapError
from chipswap.simulation.servicetime import ServiceTimes
from chipswap.simulation.simulate import (
    DEFAULT_DISPATCH,
    MAX_REPLICAS,
    ReplicaSetup,
    SimResult,
    Traffic,
    Window,
    busiest_window,
    request_work,
    simulate,
)

DEFAULT_WINDOW_S = 300.0
DEFAULT_WARMUP_S = 120.0  # traffic simulated before the window so it does not start on an empty fleet
DEFAULT_COOLDOWN_S = 60.0  # traffic after it, so requests at the window's end still share their replicas
DEFAULT_MAX_INSTANCES = 1000

VERDICTS = ("meets", "below_floor", "over_cap", "rejects")


METRICS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end"}  # per-request latencies an objective bounds


@dataclass(frozen=True)
class Objective:
    """One latency objective: the `percentile` of `metric` over the window's requests at most `target_s`.
    Metrics: "ttft" (arrival to first token, or to the result for an encoder), "tpot" (time per output token
    after the first: (end-to-end - TTFT) / (output tokens - 1), vLLM's TPOT; requests of one output token have
    none), "e2e" (arrival to the last token)."""

    metric: str
    percentile: float
    target_s: float

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            known = ", ".join(METRICS)
            raise ChipswapError(f"objective metric {self.metric!r} is not known; use one of {known}")
        p, v = self.percentile, self.target_s
        if not (isinstance(p, int | float) and 0 < p < 100):
            raise ChipswapError(f"SLO percentile must be between 0 and 100, got {p!r}; e.g. 99")
        if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            raise ChipswapError(f"{self.name} SLO must be a positive number of seconds, got {v!r}; e.g. 2.5")

    @property
    def key(self) -> str:
        """e.g. "ttft_p99" (the workload's field is this + "_ms")."""
        return f"{self.metric}_p{self.percentile:g}"

    @property
    def name(self) -> str:
        return f"{METRICS[self.metric]} p{self.percentile:g}"

    def describe(self) -> str:
        return f"{self.name} <= {_ms(self.target_s)}"


@dataclass(frozen=True)
class Slo:
    """Latency objectives. `ttft_s` / `e2e_s` at `percentile` (default p99) are the short form; `more`
    adds any objective (TPOT, other percentiles). `goodput`: the share of requests (0..1] that must meet
    every metric's threshold at once, as in vLLM's and guidellm's SLO modes (a metric's threshold is the
    target of its highest-percentile objective). Give at least one objective; a request rejected as too
    long counts as missing every objective."""

    ttft_s: float | None = None  # time to first token (LLM) or to the result (encoder)
    e2e_s: float | None = None  # arrival to the last token
    percentile: float = 99.0
    more: tuple[Objective, ...] = ()
    goodput: float | None = None

    def __post_init__(self) -> None:
        if self.ttft_s is None and self.e2e_s is None and not self.more:
            raise ChipswapError("the SLO has no objective; give a TTFT, TPOT and/or end-to-end latency")
        for name, v in (("TTFT", self.ttft_s), ("end-to-end", self.e2e_s)):
            if v is not None and not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ChipswapError(f"{name} SLO must be a positive number of seconds, got {v!r}; e.g. 2.5")
        p = self.percentile
        if not (isinstance(p, int | float) and 0 < p < 100):
            raise ChipswapError(f"SLO percentile must be between 0 and 100, got {p!r}; e.g. 99")
        g = self.goodput
        if g is not None and not (isinstance(g, int | float) and 0 < g <= 1):
            raise ChipswapError(f"goodput must be a share in (0, 1], got {g!r}; e.g. 0.99")
        keys = [o.key for o in self.objectives]
        if len(set(keys)) != len(keys):
            raise ChipswapError(f"an objective is given twice ({', '.join(keys)}); give each once")

    @staticmethod
    def of(objectives: Sequence[Objective], goodput: float | None = None) -> Slo:
        """An SLO from any objectives (the long form)."""
        return Slo(more=tuple(objectives), goodput=goodput)

    @property
    def objectives(self) -> tuple[Objective, ...]:
        short = [
            Objective(m, self.percentile, v)
            for m, v in (("ttft", self.ttft_s), ("e2e", self.e2e_s))
            if v is not None
        ]
        return (*short, *self.more)

    def target(self, metric: str, percentile: float | None = None) -> float | None:
        """The target of `metric` at `percentile` (default: the short form's), None when not an objective."""
        p = self.percentile if percentile is None else percentile
        return next((o.target_s for o in self.objectives if o.metric == metric and o.percentile == p), None)

    def thresholds(self) -> dict[str, float]:
        """Per metric, the per-request threshold goodput counts against: its highest-percentile target."""
        out: dict[str, tuple[float, float]] = {}
        for o in self.objectives:
            if o.metric not in out or o.percentile > out[o.metric][0]:
                out[o.metric] = (o.percentile, o.target_s)
        return {m: v for m, (_p, v) in out.items()}

    def describe(self) -> str:
        parts = [o.describe() for o in self.objectives]
        if self.goodput is not None:
            parts.append(f"goodput >= {self.goodput:.1%}")
        return " and ".join(parts)


def per_request(metric: str, ttft: np.ndarray, e2e: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
    """One metric per request (seconds; NaN where rejected, and for TPOT where there is one output token or
    none)."""
    if metric == "ttft":
        return ttft
    if metric == "e2e":
        return e2e
    steps = output_tokens.astype(np.float64) - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(steps >= 1, (e2e - ttft) / np.maximum(steps, 1), np.nan)


@dataclass(frozen=True)
class Assessment:
    """Each objective's value (aligned with slo.objectives), the goodput share and the words."""

    values: tuple[float, ...]
    goodput: float
    misses: tuple[str, ...]
    margins: tuple[str, ...]


def assess(slo: Slo, ttft: np.ndarray, e2e: np.ndarray, output_tokens: np.ndarray) -> Assessment:
    """The SLO against per-request latencies (one entry per request; NaN end-to-end = rejected)."""
    rejected = np.isnan(e2e)
    series = {m: per_request(m, ttft, e2e, output_tokens) for m in {o.metric for o in slo.objectives}}
    values: list[float] = []
    misses: list[str] = []
    margins: list[str] = []
    for o in slo.objectives:
        v = series[o.metric]
        keep = rejected | ~np.isnan(v)  # TPOT of a one-token answer is not a value; a rejected one is late
        got = _tail(v[keep], rejected[keep], o.percentile)
        values.append(got)
        line = f"{o.name} {_ms(got)} {'>' if got > o.target_s else '<='} {_ms(o.target_s)}"
        (misses if got > o.target_s else margins).append(line)
    good = ~rejected
    for m, limit in slo.thresholds().items():
        with np.errstate(invalid="ignore"):
            good &= ~(series[m] > limit)  # a NaN TPOT (one token) is no miss
    share = float(good.mean()) if good.size else float("nan")
    if slo.goodput is not None:
        line = f"goodput {share:.1%} {'<' if share < slo.goodput else '>='} {slo.goodput:.1%}"
        (misses if share < slo.goodput else margins).append(line)
    return Assessment(tuple(values), share, tuple(misses), tuple(margins))


def _nice_up(seconds: float) -> float:
    """`seconds` rounded up to two significant digits in milliseconds (2,268 ms -> 2,300 ms)."""
    ms = seconds * 1000
    if not math.isfinite(ms) or ms <= 0:
        return seconds
    step = 10.0 ** (math.floor(math.log10(ms)) - 1)
    return math.ceil(ms / step - 1e-9) * step / 1000


def relaxed(slo: Slo, check: FleetCheck) -> Slo:
    """The SLO with every objective `check` misses relaxed to the value it reached (rounded up to two
    significant digits), and goodput lowered to the share reached: `check`'s fleet meets it."""
    objs = []
    for o, got in zip(slo.objectives, check.values, strict=True):
        objs.append(o if got <= o.target_s or not math.isfinite(got) else replace(o, target_s=_nice_up(got)))
    g = slo.goodput
    if g is not None and check.goodput < g:
        g = math.floor(check.goodput * 1000) / 1000 or None
    return Slo.of(objs, g)


@dataclass(frozen=True)
class FleetCheck:
    """One fleet size simulated against the SLO. Latencies are at the SLO's percentile over the measured
    requests, rejected ones counting as infinitely late (NaN when the SLO has no such objective)."""

    instances: int
    replicas_per_instance: int
    meets: bool
    ttft_s: float
    e2e_s: float
    why: str  # one line: the margin, or which objective is missed and by how much
    result: SimResult
    values: tuple[float, ...] = ()  # every objective's value, aligned with slo.objectives
    goodput: float = math.nan  # share of the measured requests meeting every metric's threshold at once

    @property
    def replicas(self) -> int:
        return self.instances * self.replicas_per_instance


@dataclass(frozen=True)
class FleetSizing:
    """The smallest fleet meeting the SLO at the busiest window, or why there is none.

    verdict: "meets" (instances is the answer), "below_floor" (the SLO is tighter than the latency requests
    have alone on an idle replica), "over_cap" (not met even at max_instances), "rejects" (more requests are
    too long for this setup than the percentile allows)."""

    verdict: str
    instances: int | None
    replicas_per_instance: int
    slo: Slo
    window: Window
    floor_ttft_s: float  # the SLO percentile of the alone latencies (NaN without that objective)
    floor_e2e_s: float
    lower_bound: int  # instances needed to carry the window's work at 100% busy
    max_instances: int
    check: FleetCheck | None  # the simulation at the answer (or at the cap when over it)
    probes: tuple[
        tuple[int, float, float, bool], ...
    ]  # (instances, TTFT, end-to-end, meets), in search order
    message: str  # one line for reports
    floors: tuple[float, ...] = ()  # every objective's value alone on an idle replica (slo.objectives)
    goodput_floor: float = math.nan  # share of requests meeting every threshold alone
    reach: FleetCheck | None = None  # no size meets the SLO: a large fleet simulated (`relaxed(slo, reach)`)

    @property
    def replicas(self) -> int | None:
        return None if self.instances is None else self.instances * self.replicas_per_instance

    def blocking(self) -> tuple[str, ...]:
        """The objectives no size meets, in words (the floor above the target, or missed at the cap)."""
        if self.verdict == "meets":
            return ()
        out = [
            f"{o.name} alone is {_ms(f)} > {_ms(o.target_s)}"
            for o, f in zip(self.slo.objectives, self.floors, strict=False)
            if f > o.target_s
        ]
        g = self.slo.goodput
        if g is not None and self.goodput_floor < g:
            out.append(f"goodput alone is {self.goodput_floor:.1%} < {g:.1%}")
        if not out and self.reach is not None and not self.reach.meets:
            out = self.reach.why.split("; ")
        return tuple(out)


def _count(value: object, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= int(value) <= high:
        raise ChipswapError(f"{what} must be a whole number {low} .. {high:,}, got {value!r}")
    return int(value)


def _tail(values: np.ndarray, rejected: np.ndarray, percentile: float) -> float:
    """The percentile with rejected requests counted as infinitely late (an observed value, or inf)."""
    v = np.where(rejected, np.inf, values)
    return float(np.percentile(v, percentile, method="higher")) if v.size else float("nan")


def window_traffic(
    traffic: Traffic,
    window_s: float = DEFAULT_WINDOW_S,
    *,
    warmup_s: float = DEFAULT_WARMUP_S,
    cooldown_s: float = DEFAULT_COOLDOWN_S,
    by: str = "tokens",
) -> tuple[Traffic, Window]:
    """The busiest window and the traffic to simulate for it (the window plus warm-up before and cool-down
    after, where the trace has them). Measure only the window: `measure=(window.start_s, window.end_s)`."""
    for name, v in (("warm-up", warmup_s), ("cool-down", cooldown_s)):
        if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
            raise ChipswapError(f"{name} must be >= 0 seconds, got {v!r}")
    window = busiest_window(traffic, window_s, by=by)
    part = traffic.between(window.start_s - warmup_s, window.end_s + cooldown_s)
    return part, window


def check_fleet(
    traffic: Traffic,
    service: ServiceTimes,
    setup: ReplicaSetup,
    instances: int,
    replicas_per_instance: int,
    slo: Slo,
    **run: Any,
) -> FleetCheck:
    """Simulate `instances` x `replicas_per_instance` replicas on `traffic` and compare the tail with the SLO
    (e.g. today's GPU fleet: does it meet the SLO?). `run`: simulate's keywords, with its defaults (mode,
    dispatch, measure, report_buckets)."""
    n_inst = _count(instances, "instance count", 1, MAX_REPLICAS)
    rpi = _count(replicas_per_instance, "replicas per instance", 1, MAX_REPLICAS)
    if n_inst * rpi > MAX_REPLICAS:
        raise ChipswapError(f"{n_inst} x {rpi} replicas is more than {MAX_REPLICAS:,}; use a smaller fleet")
    res = simulate(traffic, service, setup, n_inst * rpi, **run)
    m = res.measured
    a = assess(slo, res.ttft_s[m], res.e2e_s[m], traffic.output_tokens[m])
    ttft, e2e = _short_form(slo, a.values)
    why = "; ".join(a.misses) if a.misses else "; ".join(a.margins)
    return FleetCheck(n_inst, rpi, not a.misses, ttft, e2e, why, res, a.values, a.goodput)


def _short_form(slo: Slo, values: tuple[float, ...]) -> tuple[float, float]:
    """(TTFT, end-to-end) at the SLO's percentile among `values` (NaN where not an objective)."""
    got = {o.key: v for o, v in zip(slo.objectives, values, strict=True)}
    p = f"_p{slo.percentile:g}"
    return got.get("ttft" + p, math.nan), got.get("e2e" + p, math.nan)


def _ms(seconds: float) -> str:
    return "inf (rejected requests)" if math.isinf(seconds) else f"{seconds * 1000:,.0f} ms"


def size_fleet(
    traffic: Traffic,
    service: ServiceTimes,
    setup: ReplicaSetup,
    replicas_per_instance: int,
    slo: Slo,
    *,
    mode: str = "llm",
    dispatch: str = DEFAULT_DISPATCH,
    window_s: float = DEFAULT_WINDOW_S,
    warmup_s: float = DEFAULT_WARMUP_S,
    cooldown_s: float = DEFAULT_COOLDOWN_S,
    max_instances: int = DEFAULT_MAX_INSTANCES,
    min_instances: int = 1,
    report_buckets: Sequence[int] = (),
) -> FleetSizing:
    """The smallest number of instances (each `replicas_per_instance` replicas of `setup`) whose simulated
    tail latency meets `slo` for the busiest `window_s` of `traffic`; never below `min_instances` (e.g. the
    answer for less traffic, see `size_fleet_sweep`)."""
    rpi = _count(replicas_per_instance, "replicas per instance", 1, MAX_REPLICAS)
    cap = _count(max_instances, "max instances", 1, MAX_REPLICAS // rpi)
    least = _count(min_instances, "min instances", 1, cap)
    part, window = window_traffic(traffic, window_s, warmup_s=warmup_s, cooldown_s=cooldown_s)
    measure = (window.start_s, window.end_s)
    in_window = (part.arrivals_s >= window.start_s) & (part.arrivals_s < window.end_s)
    alone_ttft, alone_e2e, work = request_work(part, service, setup, mode)
    rejected = np.isnan(alone_e2e[in_window])
    alone = assess(slo, alone_ttft[in_window], alone_e2e[in_window], part.output_tokens[in_window])
    floor_ttft, floor_e2e = _short_form(slo, alone.values)
    replicas_lb = float(np.nansum(work[in_window])) / (window.end_s - window.start_s)
    lower = max(least, min(cap, math.ceil(replicas_lb / rpi - 1e-9)))

    probes: list[tuple[int, float, float, bool]] = []
    checks: dict[int, FleetCheck] = {}

    def probe(n: int) -> FleetCheck:
        if n not in checks:
            c = check_fleet(
                part,
                service,
                setup,
                n,
                rpi,
                slo,
                mode=mode,
                dispatch=dispatch,
                measure=measure,
                report_buckets=report_buckets,
            )
            checks[n] = c
            probes.append((n, c.ttft_s, c.e2e_s, c.meets))
        return checks[n]

    def verdict(
        kind: str, n: int | None, check: FleetCheck | None, message: str, reach: FleetCheck | None = None
    ) -> FleetSizing:
        return FleetSizing(
            kind, n, rpi, slo, window, floor_ttft, floor_e2e, lower, cap, check, tuple(probes), message,
            alone.values, alone.goodput, reach,
        )  # fmt: skip

    if rejected.mean() * 100 > 100 - slo.percentile:
        share = 100 * rejected.mean()
        return verdict(
            "rejects",
            None,
            None,
            f"{share:.1f}% of the window's requests are too long for this setup (more than the "
            f"{100 - slo.percentile:g}% the p{slo.percentile:g} allows); "
            f"no fleet size can meet {slo.describe()}",
        )
    below = [
        f"{o.name} alone is {_ms(f)} > {_ms(o.target_s)}"
        for o, f in zip(slo.objectives, alone.values, strict=True)
        if f > o.target_s
    ]
    if slo.goodput is not None and alone.goodput < slo.goodput:
        below.append(f"goodput alone is {alone.goodput:.1%} < {slo.goodput:.1%}")
    if below:
        # a large fleet (about a quarter busy), simulated so the caller can say which objectives it reaches
        reach = check_fleet(
            part, service, setup, min(cap, max(2, 4 * lower)), rpi, slo, mode=mode, dispatch=dispatch,
            measure=measure,
        )  # fmt: skip
        return verdict(
            "below_floor",
            None,
            None,
            f"no fleet size can meet {slo.describe()}: {'; '.join(below)} (a request alone on an idle "
            "replica); relax the SLO or choose a faster setup",
            reach,
        )

    def first_meeting_above(bad: int) -> int | None:
        """Doubling from a size that fails until one meets; None if not even the cap does."""
        while bad < cap:
            bad = n = min(cap, 2 * bad)
            if probe(n).meets:
                return n
        return None

    def over_cap() -> FleetSizing:
        at_cap = probe(cap)
        return verdict(
            "over_cap",
            None,
            at_cap,
            f"{slo.describe()} is not met steadily by up to {cap:,} instances ({at_cap.why}); raise "
            "max_instances or choose a faster setup",
            at_cap,
        )

    # bracket the answer: `bad` fails (least - 1: below the search), `good` meets
    if probe(lower).meets:
        bad, good = least - 1, lower
        while bad == least - 1 and good > least:
            half = max(least, good // 2)
            if probe(half).meets:
                good = half
            else:
                bad = half
    else:
        found = first_meeting_above(lower)
        if found is None:
            return over_cap()
        bad, good = lower, found
    while True:
        while good - bad > 1:
            mid = (bad + good) // 2
            if probe(mid).meets:
                good = mid
            else:
                bad = mid
        # one size up must meet too, so the answer is not a dip in a noisy tail
        if good >= cap or probe(good + 1).meets:
            break
        found = first_meeting_above(good + 1)
        if found is None:
            return over_cap()
        bad, good = good + 1, found
    best = probe(good)
    return verdict(
        "meets",
        good,
        best,
        f"{good:,} x {rpi} replicas meet {slo.describe()} at the busiest {window_s:g} s "
        f"({window.requests:,} requests, {window.rate_rps:.2f}/s): {best.why}",
    )


def size_fleet_sweep(
    traffics: Sequence[Traffic],
    service: ServiceTimes,
    setup: ReplicaSetup,
    replicas_per_instance: int,
    slo: Slo,
    *,
    max_instances: int = DEFAULT_MAX_INSTANCES,
    **options: Any,
) -> tuple[FleetSizing, ...]:
    """`size_fleet` for increasing traffic (e.g. the same trace at growing scales), for "fleet size vs
    traffic". More traffic never needs fewer instances: each level's search starts at the previous level's
    answer (a tail percentile over a finite window is noisy near the SLO, and a dip would otherwise read as
    "more traffic is cheaper"), and once a level cannot be served (over the cap, below the floor, too many
    rejects) neither can the ones after it. Other options are passed to `size_fleet`."""
    results: list[FleetSizing] = []
    least = 1
    for traffic in traffics:
        before = results[-1] if results else None
        blocked = before is not None and before.verdict != "meets"
        sizing = size_fleet(
            traffic,
            service,
            setup,
            replicas_per_instance,
            slo,
            max_instances=max_instances,
            min_instances=max_instances if blocked else least,
            **options,
        )
        if before is not None and blocked and sizing.verdict == "meets":
            sizing = replace(
                sizing,
                verdict=before.verdict,
                instances=None,
                message=f"less traffic could not be served ({before.message}); nor can this",
            )
        if sizing.instances is not None:
            least = sizing.instances
        results.append(sizing)
    return tuple(results)


@dataclass(frozen=True)
class SizeTable:
    """One layout's measured latencies at every fleet size from `sizes[0]` to `sizes[-1]` on the busiest
    window, and alone on an idle replica, so the size that meets other objectives is found again without a
    simulation (the sensitivity of each objective). `count` applies size_fleet's rule: the smallest size that
    meets them and whose next size up meets them too; None when the floor is above an objective or no size in
    the table meets them (the table ends at `sizes[-1]`)."""

    sizes: tuple[int, ...]
    ttft: tuple[np.ndarray, ...] = field(repr=False)  # per size, the window's requests (NaN: rejected)
    e2e: tuple[np.ndarray, ...] = field(repr=False)
    output_tokens: np.ndarray = field(repr=False)
    alone_ttft: np.ndarray = field(repr=False)
    alone_e2e: np.ndarray = field(repr=False)

    def floor_ok(self, slo: Slo, speed: float = 1.0) -> bool:
        """Does a request alone, every call `speed` times as fast, meet every objective?"""
        a = assess(slo, self.alone_ttft / speed, self.alone_e2e / speed, self.output_tokens)
        return not a.misses

    def meets(self, i: int, slo: Slo) -> bool:
        return not assess(slo, self.ttft[i], self.e2e[i], self.output_tokens).misses

    def count(self, slo: Slo) -> int | None:
        if not self.floor_ok(slo):
            return None
        ok = [self.meets(i, slo) for i in range(len(self.sizes))]
        for i, n in enumerate(self.sizes):
            if ok[i] and (i + 1 == len(ok) or ok[i + 1]):
                return n
        return None


def size_table(
    traffic: Traffic,
    service: ServiceTimes,
    setup: ReplicaSetup,
    replicas_per_instance: int,
    sizes: Sequence[int],
    *,
    mode: str = "llm",
    dispatch: str = DEFAULT_DISPATCH,
    window_s: float = DEFAULT_WINDOW_S,
    warmup_s: float = DEFAULT_WARMUP_S,
    cooldown_s: float = DEFAULT_COOLDOWN_S,
) -> SizeTable:
    """Simulate the busiest window at every size in `sizes` (ascending instance counts of
    `replicas_per_instance` replicas; a gap between two sizes makes `count` round up to the next one)."""
    rpi = _count(replicas_per_instance, "replicas per instance", 1, MAX_REPLICAS)
    sizes = [_count(n, "instance count", 1, MAX_REPLICAS // rpi) for n in sizes]
    if not sizes or sizes != sorted(set(sizes)):
        raise ChipswapError(f"sizes must be ascending distinct instance counts, got {sizes!r}")
    part, window = window_traffic(traffic, window_s, warmup_s=warmup_s, cooldown_s=cooldown_s)
    inside = (part.arrivals_s >= window.start_s) & (part.arrivals_s < window.end_s)
    alone_ttft, alone_e2e, _work = request_work(part, service, setup, mode)
    ttft, e2e = [], []
    for n in sizes:
        measure = (window.start_s, window.end_s)
        res = simulate(part, service, setup, n * rpi, mode=mode, dispatch=dispatch, measure=measure)
        ttft.append(res.ttft_s[res.measured])
        e2e.append(res.e2e_s[res.measured])
    out = part.output_tokens[inside]
    return SizeTable(tuple(sizes), tuple(ttft), tuple(e2e), out, alone_ttft[inside], alone_e2e[inside])
