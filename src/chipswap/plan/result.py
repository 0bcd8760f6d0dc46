"""The typed outputs of the plan's stages and the whole PlanResult, with its JSON form.

Pure data: frozen dataclasses and one JSON encoder. May not read files, import torch or call another stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, is_dataclass, replace
from decimal import Decimal
from typing import Any

import numpy as np

from chipswap.plan.figures import Figure
from chipswap.verdict.rules import Thresholds, Verdict
from chipswap.verdict.sensitivity import Flip


@dataclass(frozen=True)
class TrafficSummary:
    """What the traffic stage read: counts, rates (after scale) and length percentiles."""

    source: str
    requests: int
    duration_s: float
    scale: float
    mean_rps: float | None  # after scale; None when the trace has no timestamps
    peak_rps: float | None  # 95th-percentile window rate, after scale
    peak_to_mean: float | None
    window_s: float
    window_counts: tuple[int, ...]
    prompt_p50: float | None
    prompt_p99: float | None
    output_p50: float | None
    prompt_tokens: np.ndarray = field(
        repr=False, compare=False, default_factory=lambda: np.zeros(0, dtype=np.int64)
    )
    output_tokens: np.ndarray = field(
        repr=False, compare=False, default_factory=lambda: np.zeros(0, dtype=np.int64)
    )
    output_p99: float | None = None
    busiest_rps: float | None = None  # rate of the busiest window (the one fleets are sized for), after scale
    busiest_start_s: float | None = None  # where that window starts in the trace


@dataclass(frozen=True)
class ShapeSummary:
    planned: bool
    note: str
    sequence_buckets: tuple[int, ...] = ()
    decode_buckets: tuple[int, ...] = ()
    padding_overhead_pct: float | None = None
    baselines: dict[str, Any] = field(default_factory=dict)
    svg: str | None = None
    plan_json: Any = None
    overflow_share: float | None = None  # share of requests longer than the largest bucket (0..1)
    overflow_policy: str | None = None
    max_length: int | None = None  # the longest sequence the planner allowed


@dataclass(frozen=True)
class ReadinessSummary:
    checked: bool
    note: str
    target: str | None = None
    sdk: str | None = None
    shape: str | None = None
    exit_code: int | None = None
    blockers: int | None = None
    support_pct: float | None = None
    findings: tuple[dict[str, Any], ...] = ()
    seconds: float | None = None
    markdown: str | None = None
    # the same captured graph judged for every candidate target: target -> (blockers, support %, findings)
    by_target: dict[str, tuple[int, float | None, tuple[dict[str, Any], ...]]] = field(default_factory=dict)

    def for_target(self, target: str | None) -> ReadinessSummary:
        """This summary headlined for `target` (a Neuron rules target: inf1, inf2, trn1, trn2)."""
        if target is None or target not in self.by_target or target == self.target:
            return self
        blockers, pct, findings = self.by_target[target]
        return replace(
            self,
            target=target,
            blockers=blockers,
            support_pct=pct,
            findings=findings,
            exit_code=1 if blockers else 0,
            markdown=None,
        )


@dataclass(frozen=True)
class LatencySample:
    """Simulated latencies of one fleet at its chosen size in the busiest window (for the report's plots)."""

    ttft_ms: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.zeros(0))
    e2e_ms: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.zeros(0))


@dataclass(frozen=True)
class FleetPlan:
    """One fleet (today's GPU type or a candidate) after figures, sizing and pricing.

    throughput: requests/s one instance carries at the SLO (serving) or hours per run (training), after the
    precedence rule; ttft_p99 / e2e_p99: latency at the chosen size; count: instances for the busiest window;
    count_range: the count at the slow and fast edges of the throughput's band; curve: (traffic factor, count)
    for the fleet-size-vs-traffic plot; config: the serving configuration chosen per instance."""

    instance: str
    kind: str  # "gpu", "inferentia", "trainium"
    throughput: Figure | None
    ttft_p99: Figure | None = None
    e2e_p99: Figure | None = None
    count: int | None = None
    count_range: tuple[int | None, int | None] = (None, None)
    sizing: str = ""  # how the count was found, in words
    meets_slo: bool | None = None
    slo_floor_ms: float | None = None  # unloaded latency: no fleet size goes below it
    curve: tuple[tuple[float, int | None], ...] = ()
    config: Any = None  # chipswap.simulation.servicetime.ServingConfig when projected
    overridden: tuple[Figure, ...] = ()  # figures outranked by `throughput` (shown, not used)
    stated: tuple[Figure, ...] = ()  # stated/seed figures kept for the report beside a projection
    latency: LatencySample = field(default_factory=LatencySample, compare=False)
    note: str = ""
    # outside what the calibration covers: the layout a trial measures (no projected figure; a
    # ServingConfig picked by memory fit), None otherwise
    to_measure: Any = None
    objectives: dict[str, float] = field(default_factory=dict)  # simulated value of every objective, ms
    goodput_pct: float | None = None  # simulated share of requests meeting every objective at once
    slo_floor_key: str = ""  # the objective slo_floor_ms is the unloaded value of ("ttft_p99")
    slo_blocking: tuple[str, ...] = ()  # no size meets the SLO: which objectives block, in words
    slo_reach: dict[str, float] = field(default_factory=dict)  # objectives (ms) that a fleet does meet
    slo_reach_count: int | None = None  # that fleet's instances
    min_count_why: str = ""  # the count was raised to the redundancy floor (targets.min_replicas): words
    # `curve` re-planned (each traffic point sized by simulation): its band (factor, fewest, most), and the
    # linear curve it replaces (the count at 1x scaled by the traffic), kept for comparison
    curve_band: tuple[tuple[float, int | None, int | None], ...] = ()
    curve_linear: tuple[tuple[float, int | None], ...] = ()


@dataclass(frozen=True)
class CandidateResult:
    instance: str
    kind: str
    rate: Figure | None  # $/h at the chosen term, None = no published price
    throughput: Figure | None  # requests/s per instance (serving) or hours per run (training)
    count: int | None
    monthly_usd: Decimal | None
    cost_per_million_usd: Decimal | None
    saving_usd: Decimal | None
    saving_pct: Decimal | None
    payback_month: int | None
    payback_run: int | None
    meets_slo: bool | None
    excluded: str | None  # why the candidate cannot be chosen
    saving_pct_range: tuple[Decimal | None, Decimal | None] = (None, None)  # at the band's edges (low, high)
    fleet: FleetPlan | None = None
    term: str = ""  # the price term the money uses ("capacity-block" for an instance sold only that way)
    block: str = ""  # Capacity Blocks: how the money is bought, in words (the chain, or one block per run)


@dataclass(frozen=True)
class PlanResult:
    title: str
    kind: str
    workload_path: str
    horizon_months: int
    traffic: TrafficSummary | None
    shapes: ShapeSummary | None
    readiness: ReadinessSummary
    fleet_instance: str
    fleet_count: int
    fleet_rate: Figure | None
    monthly_now: Figure  # the baseline the saving is measured against (the GPU fleet sized like for like)
    gpu_throughput: Figure | None
    gpu_cost_per_million_usd: Decimal | None
    porting: Figure
    weights: Figure | None
    candidates: tuple[CandidateResult, ...]
    best: CandidateResult | None
    verdict: Verdict
    thresholds: Thresholds
    flips: tuple[Flip, ...]
    cumulative_now: tuple[Decimal, ...]
    cumulative_after: tuple[Decimal, ...] | None
    notes: tuple[str, ...]
    seconds: float
    monthly_today: Figure | None = None  # what today's fleet costs (stated bill or count x rate x hours)
    gpu_fleet: FleetPlan | None = None
    slo: dict[str, float] = field(default_factory=dict)  # objective name -> ms
    stage_seconds: dict[str, float] = field(default_factory=dict)
    scheduling: dict[str, str] = field(default_factory=dict)  # scheduler policies, dispatch, traffic scaling

    @property
    def monthly_after(self) -> Decimal | None:
        return self.best.monthly_usd if self.best else None

    @property
    def break_even_months(self) -> float | None:
        """Where the cumulative lines cross (porting / monthly saving), in fractional months. The payback
        month (best.payback_month) is the first whole month at or after it: the cumulative data agree at whole
        months, so a plot marks payback_month on the month axis and this crossing between the points."""
        if self.best is None or not self.best.saving_usd or self.best.saving_usd <= 0:
            return None
        return float(self.porting.value / self.best.saving_usd)

    def to_json(self) -> dict[str, Any]:
        return jsonable(self)


# report.json / `plan --json`: bump when a key is renamed, removed or changes meaning (docs/plan.md)
PLAN_SCHEMA = "chipswap.plan/1"


def _decimal_json(d: Decimal, key: str) -> float:
    """A Decimal as a JSON number: percentages to 2 decimals, hourly rates as priced, money to the cent."""
    if key == "rate_per_hour":
        return float(d)
    return float(d.quantize(Decimal("0.01")))


def jsonable(obj: Any, key: str = "") -> Any:
    """Plain JSON values: Decimal money to the cent (rates as priced), arrays dropped, non-finite -> null."""
    if isinstance(obj, Decimal):
        return _decimal_json(obj, key) if obj.is_finite() else None
    if isinstance(obj, np.ndarray):
        return None
    if isinstance(obj, PlanResult):
        d = {"schema": PLAN_SCHEMA, **{f: jsonable(getattr(obj, f), f) for f in obj.__dataclass_fields__}}
        d["monthly_after"] = jsonable(obj.monthly_after, "monthly_after")
        be = obj.break_even_months
        d["break_even_months"] = None if be is None else round(be, 2)
        return d
    if isinstance(obj, Figure) and obj.unit == "USD/h":
        return {
            k: jsonable(getattr(obj, k), "rate_per_hour" if k == "value" else k)
            for k in obj.__dataclass_fields__
        }
    if isinstance(obj, LatencySample):
        return None
    if is_dataclass(obj) and not isinstance(obj, type):
        return {
            k: jsonable(getattr(obj, k), k)
            for k in obj.__dataclass_fields__
            if not isinstance(getattr(obj, k), np.ndarray) and k not in ("svg", "latency")
        }
    if isinstance(obj, dict):
        return {str(k): jsonable(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, key) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return jsonable(float(obj), key)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
