"""`chipswap plan` end to end: shape planner -> readiness -> throughput -> cost -> verdict -> sensitivity.

This module is the one seam between the plan command and the other parts of chipswap (catalog and cost engine,
trace readers and shape planner, readiness check). Each part is reached through one small adapter function
below (`_read_trace`, `_plan_shapes`, `_readiness`, `_catalog`), so a new source of a figure (projected or
measured throughput) plugs in here without changing the pipeline's shape.

Every number in the PlanResult carries its source (`Figure`): "stated" (the workload file), "seed example",
"published benchmark", "catalog: <source> (<as_of>)", "trace", "computed", later "projected" / "measured".
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from chipswap.core import cost
from chipswap.core.sensitivity import Choice, Flip, Knob, sensitivity
from chipswap.core.verdict import Facts, Reason, Thresholds, Verdict, decide
from chipswap.errors import ChipswapError
from chipswap.workload import TERMS, Workload

# ----------------------------------------------------------------------------------------------- result types


@dataclass(frozen=True)
class Figure:
    """A number and where it came from."""

    value: Any
    unit: str
    source: str
    note: str = ""


@dataclass(frozen=True)
class TrafficSummary:
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


_TARGET_OF_FAMILY = {"inf1": "inf1", "inf2": "inf2", "trn1": "trn1", "trn1n": "trn1", "trn2": "trn2"}


def rules_target(family: str) -> str | None:
    """The readiness-rules target of an instance family (trn1n runs the trn1 rules)."""
    return _TARGET_OF_FAMILY.get(family)


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
    monthly_now: Figure
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
        return _jsonable(self)


def _decimal_json(d: Decimal, key: str) -> float:
    """A Decimal as a JSON number: percentages to 2 decimals, hourly rates as priced, money to the cent."""
    if "pct" in key:
        return float(d.quantize(Decimal("0.01")))
    if key == "rate_per_hour":
        return float(d)
    return float(d.quantize(Decimal("0.01")))


def _jsonable(obj: Any, key: str = "") -> Any:
    if isinstance(obj, Decimal):
        return _decimal_json(obj, key) if obj.is_finite() else None
    if isinstance(obj, np.ndarray):
        return None
    if isinstance(obj, PlanResult):
        d = {f: _jsonable(getattr(obj, f), f) for f in obj.__dataclass_fields__}
        d["monthly_after"] = _jsonable(obj.monthly_after, "monthly_after")
        be = obj.break_even_months
        d["break_even_months"] = None if be is None else round(be, 2)
        return d
    if isinstance(obj, Figure) and obj.unit == "USD/h":
        return {
            k: _jsonable(getattr(obj, k), "rate_per_hour" if k == "value" else k)
            for k in obj.__dataclass_fields__
        }
    if is_dataclass(obj) and not isinstance(obj, type):
        return {
            k: _jsonable(getattr(obj, k), k)
            for k in obj.__dataclass_fields__
            if not isinstance(getattr(obj, k), np.ndarray) and k != "svg"
        }
    if isinstance(obj, dict):
        return {str(k): _jsonable(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v, key) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


# ------------------------------------------------------------------------------------------------- adapters


def _catalog() -> Any:
    from chipswap.catalog_io import load_catalog

    return load_catalog()


def _bundled_trace() -> Path:
    from chipswap.traces import bundled_trace_path

    return Path(bundled_trace_path())


def _read_trace(path: Path, columns: dict[str, str] | None) -> Any:
    from chipswap.traces import read_trace

    return read_trace(path, columns=columns) if columns else read_trace(path)


def _plan_shapes(trace: Any, mode: str, max_buckets: int, max_length: int | None) -> ShapeSummary:
    try:
        from chipswap.shapeplan import plan_shapes
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("chipswap"):
            return ShapeSummary(False, f"shape planner not available ({exc.name} missing)")
        raise
    plan = plan_shapes(trace, mode=mode, max_buckets=max_buckets, max_length=max_length)
    svg = None
    try:
        from chipswap.report.shapes_plot import histogram_svg

        svg = histogram_svg(plan)
    except (ModuleNotFoundError, TypeError):
        svg = None
    plan_json = plan.to_dict() if hasattr(plan, "to_dict") else None
    baselines = {
        name: _float_or_none(b.get("padding_overhead_pct", b.get("overhead_pct")))
        if isinstance(b, dict)
        else _float_or_none(b)
        for name, b in (getattr(plan, "baselines", {}) or {}).items()
    }
    return ShapeSummary(
        True,
        f"optimal buckets from {len(trace.prompt_tokens):,} requests (mode {mode}, at most {max_buckets} "
        f"buckets)",
        tuple(int(b) for b in getattr(plan, "sequence_buckets", ()) or ()),
        tuple(int(b) for b in getattr(plan, "decode_buckets", ()) or ()),
        _float_or_none(getattr(plan, "padding_overhead_pct", None)),
        baselines,
        svg,
        plan_json,
        _float_or_none(getattr(plan, "overflow_share", None)),
        getattr(plan, "overflow_policy", None),
        getattr(plan, "max_length", None) or max_length,
    )


def _float_or_none(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


CHECK_DEPTH = 2  # layers kept in the representative readiness check
_DEPTH_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers")


def _representative(ref: Any, full: bool) -> tuple[Any, str]:
    """A copy of a transformer config with CHECK_DEPTH of its identical layers, and the words that say so.

    Every layer of a standard transformer has the same operators and dtypes, so the readiness findings of a
    2-layer copy are those of the full model (module paths name layer 0/1), at a fraction of the export time.
    Configs whose layers differ (a `layer_types` list) and factories / exported programs are checked whole.
    """
    cfg = getattr(ref, "config", None) or {}
    depth = cfg.get("num_hidden_layers")
    if (
        full
        or getattr(ref, "kind", "") not in ("preset", "hf-config")
        or not isinstance(depth, int)
        or depth <= CHECK_DEPTH
        or "layer_types" in cfg
    ):
        return ref, "the full model"
    small = {**cfg, **{k: CHECK_DEPTH for k in _DEPTH_KEYS if k in cfg}}
    return replace(ref, config=small), (
        f"a {CHECK_DEPTH}-layer copy of its {depth} identical layers (same operators and dtypes; "
        "set model.full_check = true to export every layer)"
    )


def _readiness(
    wl: Workload,
    shapes: ShapeSummary | None,
    target: str | None,
    base_dir: Path = Path("."),
    ref: Any = None,
    others: tuple[str, ...] = (),
) -> ReadinessSummary:
    if wl.model is None:
        return ReadinessSummary(
            False, "no [model] in the workload: readiness not checked (unknown, not a pass)"
        )
    if target is None:
        return ReadinessSummary(False, "no Neuron candidate to check against")
    try:
        from chipswap.check import run_check
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("chipswap"):
            return ReadinessSummary(
                False, f"readiness check not available ({exc.name} missing): unknown, not a pass"
            )
        raise
    if ref is None:
        from chipswap.models import resolve_model

        _key, spec = _model_spec(wl, base_dir) or ("", "")
        ref = resolve_model(spec, task=wl.model.task)
    checked, what = _representative(ref, wl.model.full_check)
    # One representative shape: batch 1 at the largest planned sequence bucket. A transformer's operator
    # inventory does not depend on the sequence length, so one export stands for every bucket.
    max_pos = int((getattr(ref, "config", None) or {}).get("max_position_embeddings") or 0) or None
    seq = max(shapes.sequence_buckets) if shapes and shapes.sequence_buckets else 128
    why = "the largest planned bucket" if shapes and shapes.sequence_buckets else "a representative length"
    if max_pos and seq > max_pos:
        seq, why = max_pos, f"the model's max_position_embeddings {max_pos}, below the planned buckets"
    t0 = time.perf_counter()
    report = run_check(
        checked,
        None if ref.kind == "factory" else [f"input_ids=1x{seq}:int64"],
        target=target,
        task=wl.model.task,
    )
    secs = time.perf_counter() - t0
    if hasattr(report, "findings_json"):
        findings = tuple(report.findings_json())
    else:
        findings = tuple(_finding_dict(f) for f in getattr(report, "findings", ()) or ())
    blockers = getattr(report, "blockers", None)
    n_block = len(blockers) if isinstance(blockers, (list, tuple)) else blockers
    md = report.to_markdown() if hasattr(report, "to_markdown") else None
    by_target = {
        target: (int(n_block or 0), _float_or_none(getattr(report, "support_percentage", None)), findings)
    }
    if others and hasattr(report, "inventory") and hasattr(report, "ruleset"):
        from chipswap.core.rules import evaluate as judge

        for other in others:
            if other in by_target:
                continue
            a = judge(report.inventory, report.ruleset, other)
            by_target[other] = (
                len(a.blockers),
                _float_or_none(a.support_percentage),
                tuple(_finding_dict(f) for f in a.findings),
            )
    shape_desc = (
        f"batch 1 x {seq} tokens ({why})" if ref.kind != "factory" else "the factory's example inputs"
    )
    return ReadinessSummary(
        True,
        f"predicted from published Neuron facts, not compiled: checked {what}, once, at {shape_desc}, "
        "without weights",
        target,
        getattr(report, "sdk", None),
        shape_desc,
        getattr(report, "exit_code", None),
        int(n_block) if n_block is not None else None,
        _float_or_none(getattr(report, "support_percentage", None)),
        findings,
        secs,
        md,
        by_target,
    )


def _max_positions(ref: Any) -> int | None:
    """The model's max_position_embeddings, when its config states it."""
    cfg = getattr(ref, "config", None) or {}
    try:
        v = int(cfg.get("max_position_embeddings") or 0)
    except (TypeError, ValueError, AttributeError):
        return None
    return v or None


def _source(source: str, note: str | None) -> str:
    """'assumption' when the figure's note says it is one (workload sources have no such value yet)."""
    return "assumption" if note and "assumption" in note.lower() else source


def _model_spec(wl: Workload, base_dir: Path) -> tuple[str, str] | None:
    """(key, spec) of the workload's model; a config path is taken relative to the workload file."""
    m = wl.model
    if m is None:
        return None
    if m.preset:
        return "model.preset", m.preset
    if m.config:
        p = Path(m.config)
        return "model.config", str(p if p.is_absolute() else base_dir / p)
    assert m.factory is not None
    return "model.factory", m.factory


def _resolve_model(wl: Workload, wpath: Path, base_dir: Path) -> Any:
    spec = _model_spec(wl, base_dir)
    if spec is None:
        return None
    key, value = spec
    from chipswap.models import resolve_model

    try:
        return resolve_model(value, task=wl.model.task if wl.model else None)
    except ChipswapError as exc:
        raise ChipswapError(f"{wpath}: {key}: {exc}") from None


def _weights_gib(ref: Any) -> Figure | None:
    """Weight memory in bf16 from a meta-device build (no weight memory); None when it cannot be counted."""
    if ref is None or not getattr(ref, "weightless_ok", False):
        return None
    from chipswap.models import parameter_count

    try:
        n = parameter_count(ref)
    except ChipswapError:
        return None
    gib = n * 2 / 2**30
    return Figure(
        gib, "GiB (bf16 weights)", "computed", f"{n / 1e9:.2f}B parameters x 2 bytes, from the model config"
    )


def _finding_dict(f: Any) -> dict[str, Any]:
    if isinstance(f, dict):
        return f
    if is_dataclass(f) and not isinstance(f, type):
        return {k: _jsonable(v) for k, v in asdict(f).items()}
    return {"text": str(f)}


# -------------------------------------------------------------------------------------------------- traffic


def traffic_stats(
    timestamps_s: np.ndarray, window_s: float, scale: float
) -> tuple[float, float | None, float | None, tuple[int, ...]]:
    """Mean rate, 95th-percentile window rate, their ratio, and the per-window counts (full windows only)."""
    t = np.sort(np.asarray(timestamps_s, dtype=float))
    t = t - t[0]
    duration = float(t[-1]) if len(t) > 1 else 0.0
    mean = (len(t) / duration * scale) if duration > 0 else float("nan")
    n_full = int(duration // window_s)
    if n_full < 2:
        return mean, None, None, ()
    counts = np.bincount((t[t < n_full * window_s] // window_s).astype(int), minlength=n_full)
    rates = counts / window_s * scale
    peak = float(np.percentile(rates, 95))
    wmean = float(rates.mean())
    return mean, peak, (peak / wmean if wmean > 0 else None), tuple(int(c) for c in counts)


def _traffic(wl: Workload, base: Path, wpath: Path) -> tuple[TrafficSummary, Any]:
    tr = wl.traffic
    assert tr is not None
    if tr.steady_rps is not None:
        summary = TrafficSummary(
            "steady rate (stated)",
            0,
            0.0,
            1.0,
            tr.steady_rps,
            tr.steady_rps,
            1.0,
            tr.burst_window_s,
            (),
            float(tr.prompt_tokens or 0),
            float(tr.prompt_tokens or 0),
            float(tr.output_tokens or 0),
            np.array([tr.prompt_tokens], dtype=np.int64),
            np.array([tr.output_tokens or 0], dtype=np.int64),
        )
        return summary, None
    assert tr.trace is not None
    path = _bundled_trace() if tr.trace == "bundled" else (base / tr.trace)
    if not path.exists():
        raise ChipswapError(
            f"{wpath}: traffic.trace: file not found: {path}; expected a CSV/JSONL/Parquet path "
            'relative to the workload file, or "bundled"'
        )
    cols = tr.columns.model_dump(exclude_none=True) if tr.columns else None
    trace = _read_trace(path, cols)
    prompt = np.asarray(trace.prompt_tokens)
    out = np.asarray(trace.output_tokens if trace.output_tokens is not None else np.zeros_like(prompt))
    counts: tuple[int, ...]
    if trace.timestamps_s is None:
        ts = np.zeros(0)
        mean, peak, ratio, counts = float("nan"), None, None, ()
    else:
        ts = np.asarray(trace.timestamps_s, dtype=float)
        mean, peak, ratio, counts = traffic_stats(ts, tr.burst_window_s, tr.scale)
    mean_known = mean if math.isfinite(mean) else None
    name = (
        "bundled Azure LLM code trace (CC-BY 4.0, Patel et al., Splitwise, ISCA 2024)"
        if tr.trace == "bundled"
        else str(tr.trace)
    )
    duration = float(ts.max() - ts.min()) if len(ts) else 0.0
    return TrafficSummary(
        name,
        len(prompt),
        duration,
        tr.scale,
        mean_known,
        peak,
        ratio,
        tr.burst_window_s,
        counts,
        float(np.median(prompt)),
        float(np.percentile(prompt, 99)),
        float(np.median(out)),
        prompt,
        out,
    ), trace


# ----------------------------------------------------------------------------------------- pure economics


@dataclass(frozen=True)
class Scenario:
    """The numbers the money depends on, for one candidate; evaluate() re-runs the verdict on a variation."""

    kind: str
    monthly_now: Decimal
    fleet_count: int
    hours_per_month: Decimal
    cand_rate: Decimal | None
    porting_usd: Decimal
    horizon_months: int
    utilization: float
    peak_rps: float | None = None
    mean_rps: float | None = None
    cand_rps: float | None = None
    gpu_hours: float | None = None
    cand_hours: float | None = None
    gpu_rate: Decimal | None = None
    runs_per_month: float | None = None
    traffic_factor: float = 1.0
    gpu_rps: float | None = None  # requests/s one GPU instance carries (serving), for right-sizing
    overflow_share: float | None = None  # share of requests no compiled shape holds (0..1)
    overflow_policy: str | None = None


@dataclass(frozen=True)
class Money:
    monthly_now: Decimal
    count: int | None
    monthly_after: Decimal | None
    saving: Decimal | None
    saving_pct: Decimal | None
    payback_month: int | None
    payback_run: int | None


def economics(s: Scenario) -> Money:
    """Monthly cost now and after, saving and payback for one scenario (cost engine of chipswap.core.cost)."""
    if s.kind == "serving":
        now = s.monthly_now  # the stated (or priced) bill: a real run with other traffic pays the same
        if s.cand_rate is None or s.cand_rps is None or s.peak_rps is None:
            return Money(now, None, None, None, None, None, None)
        count = cost.fleet_size(s.peak_rps * s.traffic_factor, s.cand_rps, s.utilization)
        after = cost.monthly_cost(s.cand_rate, count, s.hours_per_month)
        run = None
    else:
        assert s.gpu_hours is not None and s.gpu_rate is not None and s.runs_per_month is not None
        runs = cost.D(s.runs_per_month * s.traffic_factor)
        per_run_now = cost.job_cost(s.gpu_hours, s.gpu_rate, s.fleet_count)
        now = per_run_now * runs
        if s.cand_rate is None or s.cand_hours is None:
            return Money(now, None, None, None, None, None, None)
        count = s.fleet_count
        per_run_after = cost.job_cost(s.cand_hours, s.cand_rate, s.fleet_count)
        after = per_run_after * runs
        run = cost.break_even(s.porting_usd, per_run_now - per_run_after).period
    saving = now - after
    pct = saving / now * 100 if now > 0 else None
    month = cost.break_even(s.porting_usd, saving).period
    return Money(now, count, after, saving, pct, month, run)


def facts_for(base: Facts, s: Scenario, money: Money) -> Facts:
    mean = s.mean_rps * s.traffic_factor if s.mean_rps is not None else None
    return replace(
        base,
        monthly_now_usd=money.monthly_now,
        monthly_after_usd=money.monthly_after,
        porting_usd=s.porting_usd,
        payback_month=money.payback_month,
        mean_rps=mean if base.kind == "serving" else None,
    )


OVERFLOW_CLOSE_PCT = 1.0  # with policy "reject", more than this share (%) of requests unserved: no clear move


def _pct(x: Decimal) -> str:
    return f"{x.quantize(Decimal('0.01'))}"


def cautions(base: Facts, s: Scenario, money: Money, th: Thresholds) -> tuple[Reason, ...]:
    """Checks outside the seed's screening: requests no compiled shape holds, and an oversized GPU fleet."""
    out: list[Reason] = []
    if s.kind == "serving" and s.overflow_share:
        share = s.overflow_share * 100
        policy = s.overflow_policy or "reject"
        bad = policy == "reject" and share > OVERFLOW_CLOSE_PCT
        out.append(
            Reason(
                "overflow",
                "fail" if bad else "pass",
                "gpu" if bad else None,
                f"{share:.1f}% of requests are longer than the largest compiled shape (policy {policy})"
                + (
                    ": those requests cannot be served by the compiled shapes, and the fleet is sized on "
                    "100% of traffic"
                    if bad
                    else ""
                ),
                "overflow share (%)",
                round(share, 2),
                f"clear when <= {OVERFLOW_CLOSE_PCT:g}% with policy reject",
            )
        )
    if (
        s.kind == "serving"
        and s.gpu_rps
        and s.peak_rps is not None
        and s.peak_rps > 0
        and money.monthly_after is not None
        and money.monthly_now > 0
    ):
        needed = cost.fleet_size(s.peak_rps * s.traffic_factor, s.gpu_rps, s.utilization)
        if needed < s.fleet_count:
            rs_now = money.monthly_now * Decimal(needed) / Decimal(s.fleet_count)
            gpu_pct = (money.monthly_now - rs_now) / money.monthly_now * 100
            vs_rs = (rs_now - money.monthly_after) / rs_now * 100
            bad = vs_rs < th.close_margin_pct
            out.append(
                Reason(
                    "right-size-gpu",
                    "fail" if bad else "pass",
                    "gpu" if bad else "neuron",
                    f"today's GPU fleet is {s.fleet_count} instances; the traffic needs {needed} at "
                    f"{s.utilization:.0%} utilization: right-sizing the GPU fleet alone saves "
                    f"{_pct(gpu_pct)}% "
                    f"({_pct(money.monthly_now - rs_now)} USD/month); against a right-sized GPU fleet "
                    f"{base.target} saves {_pct(vs_rs)}%"
                    + ("; right-size the GPU fleet first" if bad else ""),
                    "saving vs a right-sized GPU fleet (%)",
                    vs_rs,
                    f"clear when >= {th.close_margin_pct}%",
                )
            )
    return tuple(out)


def evaluate(base: Facts, s: Scenario, th: Thresholds) -> Verdict:
    money = economics(s)
    facts = replace(facts_for(base, s, money), cautions=cautions(base, s, money, th))
    return decide(facts, th)


# --------------------------------------------------------------------------------------------------- pipeline


def _rate(catalog: Any, instance: str, region: str, term: str) -> Figure | None:
    try:
        r = catalog.rate(instance, region, term)
    except ChipswapError:
        return None
    return Figure(
        Decimal(r.usd_per_hour), "USD/h", f"catalog: {r.source} ({r.as_of})", getattr(r, "note", "")
    )


def run_plan(
    wl: Workload,
    workload_path: str | Path = "<workload>",
    *,
    close_margin_pct: Decimal | None = None,
    progress: Callable[[str], None] | None = None,
) -> PlanResult:
    """The whole plan for one workload. Raises ChipswapError (one line) on bad input."""
    t_start = time.perf_counter()
    say = progress or (lambda _m: None)
    wpath = Path(workload_path)
    base_dir = wpath.parent if wpath.name != "<workload>" else Path.cwd()
    notes: list[str] = []
    vs = wl.verdict
    th = Thresholds(
        close_margin_pct=close_margin_pct if close_margin_pct is not None else vs.close_margin_pct,
        close_payback_months=vs.close_payback_months,
        bursty_peak_to_mean=vs.bursty_peak_to_mean,
        low_traffic_rps=vs.low_traffic_rps,
        min_monthly_bill_usd=vs.min_monthly_bill_usd,
        max_model_changes_per_month=vs.max_model_changes_per_month,
        min_horizon_months=vs.min_horizon_months,
    )

    # -- catalog: fleet and candidates must be known instance types (error names the key) -
    catalog = _catalog()
    try:
        fleet_inst = catalog.instance(wl.fleet.instance)
    except ChipswapError as exc:
        raise ChipswapError(f"{wpath}: fleet.instance: {exc}") from None
    cands = []
    for name in wl.targets.candidates:
        try:
            inst = catalog.instance(name)
        except ChipswapError as exc:
            raise ChipswapError(f"{wpath}: targets.candidates: {exc}") from None
        if inst.kind not in ("inferentia", "trainium"):
            raise ChipswapError(
                f"{wpath}: targets.candidates: {name} is a {inst.kind} instance; expected a Neuron instance "
                "(inf1/inf2/trn1/trn2)"
            )
        cands.append(inst)
    region = wl.targets.region or wl.fleet.region
    model_ref = _resolve_model(wl, wpath, base_dir)

    # -- traffic and shapes -
    traffic = shapes = None
    if wl.kind == "serving":
        say("reading traffic")
        traffic, trace = _traffic(wl, base_dir, wpath)
        if trace is not None:
            say("planning shapes")
            assert wl.traffic is not None
            max_len = wl.traffic.max_length
            max_pos = _max_positions(model_ref)
            if max_pos is not None and max_len is not None and max_len > max_pos:
                raise ChipswapError(
                    f"{wpath}: traffic.max_length: {max_len} is longer than the model's "
                    f"max_position_embeddings {max_pos}; set traffic.max_length = {max_pos} or less"
                )
            longest = int(np.max(trace.prompt_tokens)) if len(trace.prompt_tokens) else 0
            if max_pos is not None and max_len is None and longest > max_pos:
                max_len = max_pos  # cap at what the model accepts; the longer requests are overflow
            shapes = _plan_shapes(trace, wl.traffic.mode, wl.traffic.max_buckets, max_len)
            if shapes.overflow_share:
                notes.append(
                    f"{shapes.overflow_share:.1%} of requests are longer than the largest planned bucket "
                    f"({max_len if max_len is not None else 'max length'} tokens; policy "
                    f"{shapes.overflow_policy or 'reject'})"
                    + (
                        " — capped at the model's max_position_embeddings"
                        if wl.traffic.max_length is None
                        else ""
                    )
                )
        else:
            max_pos = _max_positions(model_ref)
            if max_pos is not None and wl.traffic is not None and (wl.traffic.prompt_tokens or 0) > max_pos:
                raise ChipswapError(
                    f"{wpath}: traffic.prompt_tokens: {wl.traffic.prompt_tokens} is longer than the model's "
                    f"max_position_embeddings {max_pos}; set traffic.prompt_tokens = {max_pos} or less"
                )
            shapes = ShapeSummary(
                False,
                "steady rate with one length: one shape, no planning needed",
                (int(wl.traffic.prompt_tokens or 0),) if wl.traffic else (),
            )

    # -- readiness -
    say("checking readiness")
    targets = tuple(
        dict.fromkeys(
            t
            for c in cands
            if not (wl.kind == "training" and c.kind == "inferentia")
            and (t := rules_target(c.family)) is not None
        )
    )
    readiness = _readiness(
        wl, shapes, targets[0] if targets else None, base_dir, model_ref, others=targets[1:]
    )
    weights = _weights_gib(model_ref)

    # -- today's fleet -
    fleet_rate = _rate(catalog, fleet_inst.name, wl.fleet.region, wl.fleet.term)
    hours = cost.D(wl.fleet.hours_per_month)
    if wl.kind == "training":
        assert wl.job is not None
        if fleet_rate is None:
            raise ChipswapError(
                f"{wpath}: fleet.term: no {wl.fleet.term} price for {fleet_inst.name} in {wl.fleet.region}; "
                "expected a term the catalog prices (on-demand or spot)"
            )
        per_run = cost.job_cost(wl.job.gpu_hours, fleet_rate.value, wl.fleet.count)
        monthly_now = Figure(
            per_run * cost.D(wl.job.runs_per_month),
            "USD/month",
            "computed",
            f"{wl.job.gpu_hours:g} h x {fleet_rate.value} USD/h x {wl.fleet.count} x "
            f"{wl.job.runs_per_month:g} runs/month",
        )
    elif wl.fleet.monthly_bill_usd is not None:
        monthly_now = Figure(wl.fleet.monthly_bill_usd, "USD/month", "stated", "fleet.monthly_bill_usd")
    else:
        if fleet_rate is None:
            raise ChipswapError(
                f"{wpath}: fleet.term: no {wl.fleet.term} price for {fleet_inst.name} in {wl.fleet.region}; "
                "expected a priced term, or give fleet.monthly_bill_usd"
            )
        monthly_now = Figure(
            cost.monthly_cost(fleet_rate.value, wl.fleet.count, hours),
            "USD/month",
            "computed",
            f"{wl.fleet.count} x {fleet_inst.name} x {fleet_rate.value} USD/h x {hours} h",
        )

    porting_usd = cost.porting_cost(wl.porting.engineer_days, wl.porting.day_rate_usd)
    porting = Figure(
        porting_usd,
        "USD",
        "stated",
        f"{wl.porting.engineer_days:g} engineer-days x {wl.porting.day_rate_usd} USD/day (assumption)",
    )

    # -- throughput per candidate -
    say("pricing candidates")
    tp = wl.throughput
    gpu_tp = None
    gpu_cpm = None
    util = tp.target_utilization if tp else 1.0
    if wl.kind == "serving" and tp is not None and tp.gpu_requests_per_s is not None:
        gpu_tp = Figure(tp.gpu_requests_per_s, "requests/s per instance", tp.gpu_source, tp.gpu_note or "")
        if fleet_rate is not None:
            gpu_cpm = cost.cost_per_million(tp.gpu_requests_per_s, fleet_rate.value, util)
        if traffic is not None and traffic.peak_rps is not None:
            cap = tp.gpu_requests_per_s * wl.fleet.count * util
            if cap < traffic.peak_rps * 0.999:
                notes.append(
                    f"today's fleet at {util:.0%} utilization carries {cap:.3g} requests/s, below the "
                    f"traffic peak "
                    f"{traffic.peak_rps:.3g} requests/s: check the stated GPU throughput or fleet count"
                )
            elif cap > 2 * traffic.peak_rps:
                notes.append(
                    f"today's fleet carries {cap:.3g} requests/s at {util:.0%} utilization, over twice "
                    f"the traffic peak "
                    f"({traffic.peak_rps:.3g}): right-sizing the GPU fleet alone would also save money"
                )
    elif wl.kind == "training" and wl.job is not None:
        gpu_tp = Figure(wl.job.gpu_hours, "hours per run", wl.job.gpu_source, "")

    base_facts = Facts(
        kind=wl.kind,
        target_kind=None,
        target=None,
        research_churn=wl.stability.research_churn,
        custom_cuda_kernels=wl.stability.custom_cuda_kernels,
        model_changes_per_month=wl.stability.model_changes_per_month,
        readiness_blockers=readiness.blockers if readiness.checked else None,
        peak_to_mean=traffic.peak_to_mean if traffic else None,
        mean_rps=traffic.mean_rps if traffic else None,
        horizon_months=wl.horizon_months,
        monthly_now_usd=monthly_now.value,
        monthly_after_usd=None,
        porting_usd=porting_usd,
        payback_month=None,
        slo_p99_ms=wl.slo.p99_ms if wl.kind == "serving" else None,
    )
    base_scn = Scenario(
        kind=wl.kind,
        monthly_now=monthly_now.value,
        fleet_count=wl.fleet.count,
        hours_per_month=hours,
        cand_rate=None,
        porting_usd=porting_usd,
        horizon_months=wl.horizon_months,
        utilization=util,
        peak_rps=traffic.peak_rps if traffic else None,
        mean_rps=traffic.mean_rps if traffic else None,
        gpu_hours=wl.job.gpu_hours if wl.job else None,
        gpu_rate=fleet_rate.value if fleet_rate else None,
        runs_per_month=wl.job.runs_per_month if wl.job else None,
        gpu_rps=tp.gpu_requests_per_s if (wl.kind == "serving" and tp is not None) else None,
        overflow_share=shapes.overflow_share if shapes else None,
        overflow_policy=shapes.overflow_policy if shapes else None,
    )

    results: list[tuple[CandidateResult, Scenario, Facts]] = []
    for inst in cands:
        rate = _rate(catalog, inst.name, region, wl.pricing.term)
        excluded = None
        thr: Figure | None = None
        meets: bool | None = True
        scn = replace(base_scn, cand_rate=rate.value if rate else None)
        if wl.kind == "serving":
            assert tp is not None
            ct = (
                tp.candidates[inst.name]
                if inst.name in tp.candidates
                else tp.candidates[next(k for k in tp.candidates if k.lower() == inst.name.lower())]
            )
            if ct.requests_per_s is not None:
                rps = ct.requests_per_s
                thr = Figure(rps, "requests/s per instance", _source(ct.source, ct.note), ct.note or "")
            else:
                assert tp.gpu_requests_per_s is not None and ct.speed_factor is not None
                rps = tp.gpu_requests_per_s * ct.speed_factor
                thr = Figure(
                    rps,
                    "requests/s per instance",
                    _source(ct.source, ct.note),
                    f"speed factor {ct.speed_factor:g} x GPU {tp.gpu_requests_per_s:g} requests/s"
                    + (f"; {ct.note}" if ct.note else ""),
                )
            scn = replace(scn, cand_rps=rps)
            if wl.slo.p99_ms is not None and ct.p99_ms is not None:
                meets = ct.p99_ms <= wl.slo.p99_ms
                if not meets:
                    excluded = f"p99 {ct.p99_ms:g} ms misses the {wl.slo.p99_ms:g} ms objective"
            elif wl.slo.p99_ms is not None:
                meets = None
        else:
            assert wl.job is not None
            cj = (
                wl.job.candidates.get(inst.name)
                or wl.job.candidates[next(k for k in wl.job.candidates if k.lower() == inst.name.lower())]
            )
            if inst.kind == "inferentia":
                excluded = "Inferentia is built for inference, not training runs"
            if cj.hours is not None:
                hrs = cj.hours
                thr = Figure(hrs, "hours per run", _source(cj.source, cj.note), cj.note or "")
            else:
                assert cj.speed_factor is not None
                hrs = wl.job.gpu_hours / cj.speed_factor
                thr = Figure(
                    hrs,
                    "hours per run",
                    _source(cj.source, cj.note),
                    f"{wl.job.gpu_hours:g} h on GPU / speed factor {cj.speed_factor:g}"
                    + (f"; {cj.note}" if cj.note else ""),
                )
            scn = replace(scn, cand_hours=hrs)
        mem = float(inst.accelerator_memory_gib)
        if weights is not None and weights.value > mem:
            excluded = excluded or (
                f"the model's weights ({weights.value:.1f} GiB in bf16) do not fit in its {mem:g} GiB of "
                "accelerator memory"
            )
        if rate is None:
            excluded = excluded or f"no published {wl.pricing.term} price in {region} (unknown, not guessed)"
        money = economics(scn)
        cpm = None
        if wl.kind == "serving" and rate is not None and scn.cand_rps:
            cpm = cost.cost_per_million(scn.cand_rps, rate.value, util)
        tgt = rules_target(inst.family)
        blockers = readiness.for_target(tgt).blockers if readiness.checked else None
        facts = replace(
            base_facts,
            target=inst.name,
            target_kind=inst.kind,
            meets_slo=meets,
            readiness_blockers=blockers,
            throughput_assumed=thr is not None and thr.source == "assumption",
        )
        results.append(
            (
                CandidateResult(
                    inst.name,
                    inst.kind,
                    rate,
                    thr,
                    money.count,
                    money.monthly_after,
                    cpm,
                    money.saving,
                    money.saving_pct,
                    money.payback_month,
                    money.payback_run,
                    meets,
                    excluded,
                ),
                scn,
                facts,
            )
        )

    # best: the largest monthly saving among priced, fitting, SLO-meeting candidates, preferring those whose
    # readiness target has no predicted blockers
    viable = [r for r in results if r[0].excluded is None and r[0].saving_usd is not None]
    clean = [r for r in viable if r[2].readiness_blockers == 0]
    # an SLO that is set but not evaluated is never a pass: candidates that meet it come first
    pool = clean or viable
    pool = [r for r in pool if r[0].meets_slo is True] or pool
    chosen = max(pool, key=lambda r: r[0].saving_usd or Decimal(0)) if pool else None
    if chosen is not None:
        best, scn, facts = chosen
        verdict = evaluate(facts, scn, th)
        if readiness.checked:
            readiness = readiness.for_target(rules_target(catalog.instance(best.instance).family))
    else:
        best = None
        scn, facts = base_scn, base_facts
        verdict = decide(base_facts, th)

    # -- sensitivity -----------------------------------------------------------------------------------------
    say("sensitivity")
    flips: tuple[Flip, ...] = ()
    if chosen is not None:
        flips = _sensitivity(wl, facts, scn, th, catalog, region, best.instance if best else "")

    # -- cumulative cost over the horizon -
    months = range(0, wl.horizon_months + 1)
    cum_now = tuple(monthly_now.value * m for m in months)
    cum_after = None
    if best is not None and best.monthly_usd is not None:
        cum_after = tuple(porting_usd + best.monthly_usd * m for m in months)

    return PlanResult(
        wl.title,
        wl.kind,
        str(workload_path),
        wl.horizon_months,
        traffic,
        shapes,
        readiness,
        fleet_inst.name,
        wl.fleet.count,
        fleet_rate,
        monthly_now,
        gpu_tp,
        gpu_cpm,
        porting,
        weights,
        tuple(r[0] for r in results),
        best,
        verdict,
        th,
        flips,
        cum_now,
        cum_after,
        tuple(notes),
        time.perf_counter() - t_start,
    )


def _sensitivity(
    wl: Workload, facts: Facts, scn: Scenario, th: Thresholds, catalog: Any, region: str, instance: str
) -> tuple[Flip, ...]:
    def v(s: Scenario) -> str:
        return evaluate(facts, s, th).verdict

    knobs: list[Knob] = []
    if wl.kind == "serving" and scn.cand_rps:
        base_rps = scn.cand_rps
        knobs.append(
            Knob("throughput ratio", 1.0, 0.05, 20.0, lambda m: v(replace(scn, cand_rps=base_rps * m)))
        )
    elif scn.cand_hours:
        base_h = scn.cand_hours
        knobs.append(
            Knob(
                "run time (hours)", base_h, base_h / 20, base_h * 20, lambda h: v(replace(scn, cand_hours=h))
            )
        )
    rate = wl.porting.day_rate_usd
    days = wl.porting.engineer_days
    knobs.append(
        Knob(
            "engineer-days",
            days,
            0.0,
            max(days * 50, 500.0),
            lambda d: v(replace(scn, porting_usd=cost.porting_cost(cost.D(round(d, 6)), rate))),
        )
    )
    if wl.kind == "serving":
        knobs.append(
            Knob("utilization", scn.utilization, 0.05, 1.0, lambda u: v(replace(scn, utilization=u)))
        )
    if wl.kind == "serving":
        knobs.append(Knob("traffic", 1.0, 0.01, 100.0, lambda f: v(replace(scn, traffic_factor=f))))
    elif scn.runs_per_month:
        runs = scn.runs_per_month
        knobs.append(
            Knob(
                "runs per month",
                runs,
                runs * 0.01,
                runs * 100,
                lambda r: v(replace(scn, traffic_factor=r / runs)),
            )
        )

    def by_term(term: str) -> str | None:
        fig = _rate(catalog, instance, region, term)
        return None if fig is None else v(replace(scn, cand_rate=fig.value))

    choices = [Choice("price term", wl.pricing.term, tuple(TERMS), by_term)]
    return sensitivity(knobs, choices)
