"""Shape planning, high level: a trace (or its histograms) -> a ShapePlan (buckets, padding cost, baselines,
config snippets).

Modes:
  encoder  one sequence bucket set over the request lengths (prompt_tokens), e.g. a classifier or embedder.
  llm      prefill (context-encoding) buckets over prompt lengths, and decode (token-generation) buckets over
  the
           running total length p+i, i = 1..g, of every decode step (a request weighs once per generated
           token).

The input is anything with the TrafficInput shape: a chipswap.traffic.Trace (arrays, small traces) or a
chipswap.traffic.TraceHistograms (aggregated by the engine, from a raw trace of any size or a pre-aggregated
histogram); both give the same plan for the same requests.

Optional batch-size buckets come from an arrival rate (given, or measured from the trace timestamps): requests
that
arrive within one batching window form a batch (Poisson counts), and the same exact planner picks the batch
sizes.

When the longest request is far beyond the rest (above 1.5x the 99.99th percentile, or the next-longest
request in
a small trace) and no max length is given, the plan carries an `outlier` note proposing --max-length with the
padding it saves and the share of requests it would reject or truncate.

The plan file (`chipswap.shapeplan/1` JSON) is what `chipswap compile` reads; `load_plan` validates it.
The math lives in chipswap.shapes.buckets; this module only assembles, serialises and formats.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from chipswap import shapes as B
from chipswap.errors import ChipswapError


class TrafficInput(Protocol):
    """What plan_shapes reads from a trace: Trace and TraceHistograms both provide it."""

    path: str

    def __len__(self) -> int: ...

    @property
    def arrival_rate_rps(self) -> float | None: ...

    def prompt_histogram(self) -> B.Histogram: ...

    def decode_histogram(self, top: int, policy: str) -> B.Histogram: ...


SCHEMA = "chipswap.shapeplan/1"
MODES = ("encoder", "llm")
COST_MODELS = ("tokens", "attention", "measured")

# Model dimensions used for the attention cost model when none are given: Llama-3-8B's published config
# (hidden 4096, 32 layers, MLP 14336 gated, 32 heads, 8 KV heads). Only the ratio b/a affects the plan.
DEFAULT_ATTENTION_DIMS: dict[str, Any] = {
    "hidden_size": 4096,
    "num_layers": 32,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "gated_mlp": True,
}
DEFAULT_ATTENTION_DIMS_NAME = "Llama-3-8B dims"

# Keys a plan file must have, with their JSON types (validated by load_plan).
REQUIRED_KEYS: dict[str, type | tuple[type, ...]] = {
    "schema": str,
    "mode": str,
    "sequence_buckets": list,
    "decode_buckets": list,
    "batch_buckets": list,
    "max_length": int,
    "overflow_policy": str,
    "cost_model": str,
    "padding_overhead_pct": (int, float),
    "overflow_share": (int, float),
    "source_trace": str,
}


@dataclass(frozen=True)
class ShapePlan:
    """The planner's answer. JSON-serialisable fields only (see to_json); histograms as (lengths, counts)."""

    mode: str
    sequence_buckets: list[int]
    decode_buckets: list[int]
    batch_buckets: list[int]
    max_length: int
    overflow_policy: str
    cost_model: str
    padding_overhead_pct: float
    overflow_share: float
    source_trace: str
    requests: int = 0
    max_total_length: int | None = None
    decode_padding_overhead_pct: float | None = None
    decode_overflow_share: float | None = None
    exact: bool = True
    note: str = ""
    cost_coefficients: dict[str, Any] = field(default_factory=dict)
    buckets: list[dict[str, Any]] = field(
        default_factory=list
    )  # per sequence bucket: upper, lower, share, ...
    decode_table: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, Any] = field(default_factory=dict)  # optimal plan: padded, real, waste (cost + tokens)
    decode_totals: dict[str, Any] = field(default_factory=dict)
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> comparable totals (prefill)
    decode_baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    batch: dict[str, Any] = field(default_factory=dict)
    outlier: dict[str, Any] = field(default_factory=dict)  # see outlier_advice(); empty when none
    histogram: tuple[list[int], list[float]] = ((), ())  # type: ignore[assignment]
    decode_histogram: tuple[list[int], list[float]] = ((), ())  # type: ignore[assignment]

    # ---- serialisation -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        # asdict deep-copies every list; the histograms can hold 100 k entries, so they are copied flat below
        d = asdict(replace(self, histogram=((), ()), decode_histogram=((), ())))
        d = {"schema": SCHEMA, **d}
        d["histogram"] = {"lengths": list(self.histogram[0]), "counts": list(self.histogram[1])}
        d["decode_histogram"] = {
            "lengths": list(self.decode_histogram[0]),
            "counts": list(self.decode_histogram[1]),
        }
        d["snippets"] = self.snippets()
        return d

    def to_json(self, indent: int | None = 2) -> str:
        """The plan as JSON; the (possibly 100 k-entry) histograms are written compactly on one line each,
        because the indenting encoder is pure Python and takes seconds on them."""
        d = self.to_dict()
        bulky = {key: d.pop(key) for key in ("histogram", "decode_histogram")}
        text = json.dumps(d, indent=indent, default=_json_default)
        pad = "" if indent is None else " " * indent
        parts = [f"{pad}{json.dumps(k)}: {json.dumps(v, default=_json_default)}" for k, v in bulky.items()]
        if indent is None:
            return text[:-1] + ", " + ", ".join(parts) + "}\n"
        return text[:-2] + ",\n" + ",\n".join(parts) + "\n}\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "plan JSON") -> ShapePlan:
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ChipswapError(
                f"{source}: not JSON ({exc.msg} at line {exc.lineno}); write it with chipswap shapes --out"
            ) from None
        return cls.from_dict(d, source=source)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, source: str = "plan") -> ShapePlan:
        _validate_plan_dict(d, source)
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known}
        for key in ("histogram", "decode_histogram"):
            h = d.get(key) or {}
            kw[key] = (
                (list(h.get("lengths", [])), list(h.get("counts", []))) if isinstance(h, dict) else ((), ())
            )
        return cls(**kw)

    def save(self, path: str | Path) -> Path:
        from chipswap.atomic import atomic_write_text

        return atomic_write_text(path, self.to_json())

    # ---- views ---------------------------------------------------------------------------------------------
    @property
    def histogram_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.histogram[0], dtype=np.int64), np.asarray(self.histogram[1], dtype=np.float64)

    def snippets(self) -> dict[str, str]:
        return config_snippets(self)


def _json_default(o: object) -> object:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _validate_plan_dict(d: Any, source: str) -> None:
    if not isinstance(d, Mapping):
        raise ChipswapError(
            f"{source}: a plan is a JSON object; write it with chipswap shapes --out plan.json"
        )
    for key, typ in REQUIRED_KEYS.items():
        if key not in d:
            raise ChipswapError(
                f"{source}: key {key!r} is missing; regenerate the plan with chipswap shapes --out"
            )
        if not isinstance(d[key], typ) or isinstance(d[key], bool):
            raise ChipswapError(
                f"{source}: key {key!r} has {type(d[key]).__name__} {d[key]!r}; expected {_tname(typ)}"
            )
    if d["schema"] != SCHEMA:
        raise ChipswapError(f"{source}: key 'schema' is {d['schema']!r}; this chipswap reads {SCHEMA!r}")
    if d["mode"] not in MODES:
        raise ChipswapError(f"{source}: key 'mode' is {d['mode']!r}; use one of {', '.join(MODES)}")
    if d["overflow_policy"] not in B.POLICIES:
        raise ChipswapError(
            f"{source}: key 'overflow_policy' is {d['overflow_policy']!r}; use one of {', '.join(B.POLICIES)}"
        )
    for key in ("sequence_buckets", "decode_buckets", "batch_buckets"):
        vals = d[key]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in vals):
            raise ChipswapError(f"{source}: key {key!r} = {vals!r} must hold positive integers")
        if any(b <= a for a, b in zip(vals, vals[1:], strict=False)):
            raise ChipswapError(f"{source}: key {key!r} = {vals!r} must be strictly ascending")
    if not d["sequence_buckets"]:
        raise ChipswapError(f"{source}: key 'sequence_buckets' is empty; a plan needs at least one bucket")
    if not d["batch_buckets"]:
        raise ChipswapError(f"{source}: key 'batch_buckets' is empty; use [1] for batch size 1")
    if d["mode"] == "llm" and not d["decode_buckets"]:
        raise ChipswapError(f"{source}: key 'decode_buckets' is empty but mode is 'llm'; give decode buckets")
    if d["max_length"] != d["sequence_buckets"][-1]:
        raise ChipswapError(
            f"{source}: key 'max_length' = {d['max_length']} differs from the largest sequence bucket "
            f"{d['sequence_buckets'][-1]}; they must be equal"
        )


def _tname(t: type | tuple[type, ...]) -> str:
    return " or ".join(x.__name__ for x in (t if isinstance(t, tuple) else (t,)))


def load_plan(path: str | Path) -> ShapePlan:
    """Read and validate a plan file; errors name the file and the key."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ChipswapError(
            f"plan file not found: {p}; write one with chipswap shapes TRACE --out {p}"
        ) from None
    except OSError as exc:
        raise ChipswapError(f"cannot read plan file {p}: {exc.strerror}; check the path") from None
    return ShapePlan.from_json(text, source=str(p))


# ------------------------------------------------------------------------------------------------------------
# Cost-model construction
# ------------------------------------------------------------------------------------------------------------


def build_cost_models(
    cost_model: str | B.CostModel,
    *,
    model_dims: Mapping[str, Any] | None = None,
    attention_coefficients: tuple[float, float] | None = None,
    measured_table: Mapping[int, float] | None = None,
    measured_interpolate: bool = True,
) -> tuple[B.CostModel, B.CostModel, dict[str, Any]]:
    """(prefill/sequence model, decode model, description) for a cost model name."""
    if isinstance(cost_model, B.CostModel):
        return cost_model, B.tokens_cost(), {"kind": cost_model.kind}
    if cost_model not in COST_MODELS:
        raise ChipswapError(f"cost model {cost_model!r} is unknown; use one of {', '.join(COST_MODELS)}")
    if cost_model == "tokens":
        return B.tokens_cost(), B.tokens_cost(), {"kind": "tokens", "formula": "c(L) = L"}
    if cost_model == "attention":
        if attention_coefficients is not None:
            a, b = attention_coefficients
            src = "given"
        else:
            dims = dict(model_dims) if model_dims else dict(DEFAULT_ATTENTION_DIMS)
            src = "model dims" if model_dims else DEFAULT_ATTENTION_DIMS_NAME
            a, b = B.attention_coefficients(**dims)
        seq = B.attention_cost(a, b)
        dec = B.CostModel("attention", linear=b, constant=a)  # one decode step over a context of L: a + b*L
        return (
            seq,
            dec,
            {
                "kind": "attention",
                "a": a,
                "b": b,
                "source": src,
                "formula": "prefill c(L) = a*L + b*L^2 FLOPs; decode step c(L) = a + b*L",
            },
        )
    if not measured_table:
        raise ChipswapError(
            "cost model 'measured' needs a latency table (shape -> seconds); pass --latency-table FILE.json "
            "or use --cost-model tokens|attention"
        )
    xs = [int(k) for k in measured_table]
    ys = [float(measured_table[k]) for k in measured_table]
    seq = B.measured_cost(xs, ys, interpolate=measured_interpolate)
    return (
        seq,
        B.tokens_cost(),
        {
            "kind": "measured",
            "table": dict(zip(xs, ys, strict=True)),
            "interpolate": measured_interpolate,
            "decode": "tokens (the latency table covers prefill/encoder shapes only)",
        },
    )


def max_length_for_reading(
    cost_model: str | B.CostModel,
    max_length: int | None,
    *,
    measured_table: Mapping[int, float] | None = None,
    measured_interpolate: bool = True,
) -> int | None:
    """The prefill max length a plan with these settings will use, known before the trace is read (None: the
    longest prompt). Pass it as max_length to chipswap.traffic.aggregate_trace / read_histogram so the decode
    counts are built for the buckets the plan will have."""
    if max_length is None:
        return None
    seq_model, _, _ = build_cost_models(
        cost_model, measured_table=measured_table, measured_interpolate=measured_interpolate
    )
    return B.resolve_max_length(None, seq_model, max_length)


# ------------------------------------------------------------------------------------------------------------
# Planning
# ------------------------------------------------------------------------------------------------------------


def _scored(ev: B.Evaluation, tok: B.Evaluation) -> dict[str, Any]:
    return {
        "edges": [int(x) for x in ev.edges],
        "k": ev.k,
        "padded": ev.padded_total,
        "real": ev.real_total,
        "waste": ev.waste,
        "overhead_pct": ev.overhead_pct,
        "overflow_share": ev.overflow_share,
        "padded_tokens": tok.padded_total,
        "real_tokens": tok.real_total,
        "waste_tokens": tok.waste,
        "overhead_tokens_pct": tok.overhead_pct,
        "note": ev.note,
    }


def _table(ev: B.Evaluation) -> list[dict[str, Any]]:
    rows = []
    lower = 0
    pct = ev.bucket_overhead_pct()
    for i, upper in enumerate(ev.edges.tolist()):
        rows.append(
            {
                "upper": int(upper),
                "lower_exclusive": int(lower),
                "requests": float(ev.weights[i]),
                "share": float(ev.shares[i]),
                "padding_overhead_pct": float(pct[i]),
            }
        )
        lower = upper
    return rows


def _plan_one(
    hist: B.Histogram,
    model: B.CostModel,
    *,
    policy: str,
    **planner: Any,
) -> tuple[B.Evaluation, dict[str, Any], dict[str, dict[str, Any]], list[dict[str, Any]]]:
    best = B.plan_optimal(hist, model, policy=policy, **planner)
    top = int(best.edges[-1])
    tok = B.tokens_cost()

    def in_tokens(ev: B.Evaluation) -> B.Evaluation:  # the same scoring again only if the model differs
        return ev if model == tok else B.evaluate(hist, ev.edges, tok, policy=policy)

    best_tok = in_tokens(best)
    totals = _scored(best, best_tok)
    bl = {}
    for name, ev in B.baseline_plans(hist, model, k=best.k, max_length=top, policy=policy).items():
        ev_tok = in_tokens(ev)
        row = _scored(ev, ev_tok)
        row["waste_reduction_pct"] = 100.0 * (1 - best.waste / ev.waste) if ev.waste > 0 else 0.0
        row["waste_tokens_reduction_pct"] = (
            100.0 * (1 - best_tok.waste / ev_tok.waste) if ev_tok.waste > 0 else 0.0
        )
        bl[name] = row
    return best, totals, bl, _table(best)


def plan_shapes(
    trace: TrafficInput,
    *,
    mode: str = "llm",
    k: int | None = None,
    max_buckets: int | None = 6,
    decode_k: int | None = None,
    cost_model: str | B.CostModel = "tokens",
    max_length: int | None = None,
    max_total_length: int | None = None,
    policy: str = "reject",
    align: int = 1,
    model_dims: Mapping[str, Any] | None = None,
    attention_coefficients: tuple[float, float] | None = None,
    measured_table: Mapping[int, float] | None = None,
    measured_interpolate: bool = True,
    budgets: B.Budgets | None = None,
    arrival_rate_rps: float | str | None = None,
    batch_window_s: float = 0.05,
    max_batch: int = 8,
    batch_k: int = 3,
    keep_histogram: bool = True,
    max_positions: int | None = None,
    outlier_check: bool = True,
) -> ShapePlan:
    """Plan fixed shapes for `trace` (a Trace or TraceHistograms). See the module docstring for the modes; k
    fixes
    the bucket count, otherwise up to max_buckets are used (more buckets never cost more padding, so the cap
    is
    usually reached). arrival_rate_rps: None (batch [1]), a number, or "trace" to measure it from the
    timestamps.
    max_positions: the model's maximum positions; a request or bucket beyond it is an error naming it."""
    if mode not in MODES:
        raise ChipswapError(f"mode {mode!r} is unknown; use --mode encoder or --mode llm")
    if len(trace) == 0:
        raise ChipswapError(f"{trace.path}: the trace is empty; give a trace with at least one request")
    seq_model, dec_model, desc = build_cost_models(
        cost_model,
        model_dims=model_dims,
        attention_coefficients=attention_coefficients,
        measured_table=measured_table,
        measured_interpolate=measured_interpolate,
    )
    hist = trace.prompt_histogram()
    _check_positions(hist, max_length, max_positions, "prompt", "--max-length")
    shared = {"max_buckets": max_buckets, "policy": policy, "align": align}  # prefill and decode alike
    best, totals, baselines, table = _plan_one(
        hist, seq_model, k=k, max_length=max_length, budgets=budgets, **shared
    )
    top = int(best.edges[-1])
    decode_buckets: list[int] = []
    dec_fields: dict[str, Any] = {}
    if mode == "llm":
        dhist = trace.decode_histogram(top, policy)
        if max_total_length is not None and max_total_length < top:
            raise ChipswapError(
                f"max total length {max_total_length} is below the largest prefill bucket {top}; "
                f"use --max-total-length >= {top}"
            )
        _check_positions(dhist, max_total_length, max_positions, "prompt + output", "--max-total-length")
        # decode buckets share the prefill's bucket and memory limits; the compile budget is the prefill's
        no_compile = {"max_compile_s": None, "compile_fixed_s": None, "compile_per_token_s": 0.0}
        dbudgets = None if budgets is None else replace(budgets, **no_compile)
        dk = decode_k if decode_k is not None else k
        if dk is not None and dk > dhist.lengths.size:
            dk = int(dhist.lengths.size)
        dbest, dtotals, dbaselines, dtable = _plan_one(
            dhist, dec_model, k=dk, max_length=max_total_length, budgets=dbudgets, **shared
        )
        decode_buckets = [int(x) for x in dbest.edges]
        dec_fields = {
            "max_total_length": int(dbest.edges[-1]),
            "decode_padding_overhead_pct": dbest.overhead_pct,
            "decode_overflow_share": dbest.overflow_share,
            "decode_table": dtable,
            "decode_totals": dtotals,
            "decode_baselines": dbaselines,
            "decode_histogram": (dhist.lengths.tolist(), dhist.counts.tolist())
            if keep_histogram
            else ((), ()),
        }
        dec_fields["decode_totals"]["overflow_unit"] = "decode steps"
    batch_buckets = [1]
    batch_info: dict[str, Any] = {}
    if arrival_rate_rps is not None:
        rate = trace.arrival_rate_rps if arrival_rate_rps == "trace" else float(arrival_rate_rps)
        if rate is None:
            raise ChipswapError(
                f"{trace.path}: cannot measure an arrival rate: the trace has no timestamps (or one "
                "request); "
                "pass --arrival-rate RPS"
            )
        batch_buckets, batch_info = batch_buckets_for_rate(
            rate, window_s=batch_window_s, max_batch=max_batch, k=batch_k
        )
    outlier: dict[str, Any] = {}
    if outlier_check and max_length is None and not seq_model.listed_only:
        outlier = outlier_advice(
            hist, seq_model, best, k=k, max_buckets=max_buckets, policy=policy, align=align, budgets=budgets
        )
    return ShapePlan(
        mode=mode,
        sequence_buckets=[int(x) for x in best.edges],
        decode_buckets=decode_buckets,
        batch_buckets=batch_buckets,
        max_length=top,
        overflow_policy=policy,
        cost_model=seq_model.name,
        padding_overhead_pct=best.overhead_pct,
        overflow_share=best.overflow_share,
        source_trace=str(trace.path),
        requests=len(trace),
        exact=best.exact,
        note=best.note,
        cost_coefficients=desc,
        buckets=table,
        totals=totals,
        baselines=baselines,
        batch=batch_info,
        outlier=outlier,
        histogram=(hist.lengths.tolist(), hist.counts.tolist()) if keep_histogram else ((), ()),
        **dec_fields,
    )


def _check_positions(
    hist: B.Histogram, max_length: int | None, max_positions: int | None, what: str, flag: str
) -> None:
    """Lengths the model cannot take are an error naming its maximum positions (unless a cap handles them)."""
    if max_positions is None:
        return
    if max_length is not None:
        if max_length > max_positions:
            raise ChipswapError(
                f"{flag} {max_length} is longer than the model's maximum positions {max_positions}; use "
                f"{flag} {max_positions} or less"
            )
        return
    if hist.max_length > max_positions:
        over = float(hist.counts[hist.lengths > max_positions].sum()) / hist.total
        raise ChipswapError(
            f"{what} lengths up to {hist.max_length:,} exceed the model's maximum positions "
            f"{max_positions:,} "
            f"({100 * over:.3g}% of {'requests' if what == 'prompt' else 'decode steps'}); pass {flag} "
            f"{max_positions} (or less) with --policy reject|truncate"
        )


# An outlier: the longest request is more than this times the reference length (the 99.99th percentile, or
# the next-longest request when the trace has under 10,000 requests).
OUTLIER_RATIO = 1.5
OUTLIER_QUANTILE = 0.9999


def outlier_advice(
    hist: B.Histogram,
    model: B.CostModel,
    plan: B.Evaluation,
    *,
    k: int | None,
    max_buckets: int | None,
    policy: str,
    align: int,
    budgets: B.Budgets | None,
) -> dict[str, Any]:
    """If the longest request sets the max length far beyond the rest, the max length to propose instead.

    Returns {} or {longest, reference, reference_rule, proposed_max_length, overhead_pct (now),
    proposed_overhead_pct,
    padding_saved_pct (of the padded cost), affected_share (rejected or truncated), policy}.
    """
    total = hist.total
    below = hist.counts[:-1].sum() if hist.lengths.size > 1 else 0
    if below <= 0:
        return {}
    if total >= 1 / (1 - OUTLIER_QUANTILE):
        reference, rule = hist.quantile(OUTLIER_QUANTILE), "99.99th percentile"
    else:
        reference, rule = int(hist.lengths[-2]), "next-longest request"
    longest = hist.max_length
    if reference >= longest or longest <= OUTLIER_RATIO * reference:
        return {}
    try:
        alt = B.plan_optimal(
            hist,
            model,
            k=k,
            max_buckets=max_buckets,
            max_length=reference,
            policy=policy,
            align=align,
            budgets=budgets,
        )
    except ChipswapError:
        return {}
    saved = 100.0 * (1 - alt.padded_total / plan.padded_total) if plan.padded_total > 0 else 0.0
    return {
        "longest": longest,
        "reference": reference,
        "reference_rule": rule,
        "proposed_max_length": reference,
        "overhead_pct": plan.overhead_pct,
        "proposed_overhead_pct": alt.overhead_pct,
        "padding_saved_pct": saved,
        "affected_share": alt.overflow_share,
        "policy": policy,
        "message": (
            f"the longest request ({longest:,} tokens) is {longest / reference:.1f}x the {rule} "
            f"({reference:,}); "
            f"--max-length {reference} would cut the padded cost by {saved:.1f}% (overhead "
            f"{plan.overhead_pct:.1f}% -> {alt.overhead_pct:.1f}%) and "
            f"{'reject' if policy == 'reject' else 'truncate'}"
            f" {100 * alt.overflow_share:.3g}% of requests"
        ),
    }


# Bounds on the batch-size model's tables (the Poisson pmf spans about lam + 10 sqrt(lam) entries)
MAX_BATCH = 4096
MAX_ARRIVALS_PER_WINDOW = 1_000_000


def batch_buckets_for_rate(
    rate_rps: float, *, window_s: float = 0.05, max_batch: int = 8, k: int = 3, tail: float = 1e-4
) -> tuple[list[int], dict[str, Any]]:
    """Batch-size buckets for Poisson arrivals at `rate_rps` batched every `window_s` seconds.

    A window with N >= 1 arrivals runs floor(N / max_batch) full batches and one of N mod max_batch; the
    batch-size
    histogram (N up to the 1 - tail quantile) is planned with the exact planner (cost = padded batch slots).
    """
    if not (rate_rps > 0 and math.isfinite(rate_rps)):
        raise ChipswapError(f"arrival rate {rate_rps} must be a positive number of requests per second")
    if not (window_s > 0):
        raise ChipswapError(f"batch window {window_s} s must be > 0; e.g. 0.05")
    if max_batch < 1:
        raise ChipswapError(f"max batch {max_batch} must be >= 1")
    if k < 1:
        raise ChipswapError(f"batch buckets K = {k} must be >= 1")
    if max_batch > MAX_BATCH:
        raise ChipswapError(
            f"max batch {max_batch} exceeds the limit of {MAX_BATCH:,}; use a smaller --max-batch"
        )
    lam = rate_rps * window_s
    if lam > MAX_ARRIVALS_PER_WINDOW:
        raise ChipswapError(
            f"{rate_rps:g} req/s in {window_s:g} s windows is {lam:,.0f} arrivals per window, more than "
            f"{MAX_ARRIVALS_PER_WINDOW:,}; check the rate or use a shorter --batch-window-ms"
        )
    # Poisson pmf up to the tail quantile (log space, no scipy)
    nmax = int(lam + 10 * math.sqrt(lam) + 20)
    ns = np.arange(0, nmax + 1)
    logp = ns * math.log(lam) - lam - np.array([math.lgamma(n + 1) for n in ns])
    pmf = np.exp(logp)
    cdf = np.cumsum(pmf)
    cut = int(np.searchsorted(cdf, 1 - tail)) + 1
    sizes: dict[int, float] = {}
    for n in range(1, min(cut, nmax) + 1):
        full, rest = divmod(n, max_batch)
        if full:
            sizes[max_batch] = sizes.get(max_batch, 0.0) + full * pmf[n]
        if rest:
            sizes[rest] = sizes.get(rest, 0.0) + pmf[n]
    hist = B.histogram_from_pairs(list(sizes), list(sizes.values()))
    kk = min(k, hist.lengths.size)
    ev = B.plan_optimal(hist, B.tokens_cost(), k=kk, max_buckets=None)
    info = {
        "arrival_rate_rps": rate_rps,
        "window_s": window_s,
        "mean_arrivals_per_window": lam,
        "max_batch": max_batch,
        "padding_overhead_pct": ev.overhead_pct,
        "rule": "Poisson arrivals per window; windows over max_batch split into full batches",
    }
    return [int(x) for x in ev.edges], info


# ------------------------------------------------------------------------------------------------------------
# Config snippets
# ------------------------------------------------------------------------------------------------------------


def config_snippets(
    plan: ShapePlan, *, model: str = "MODEL_ID", task: str = "text-classification"
) -> dict[str, str]:
    """Ready-to-paste settings for the Neuron serving stacks (knobs: shape_bucketing_knobs.csv)."""
    seq = plan.sequence_buckets
    out: dict[str, str] = {}
    batch = max(plan.batch_buckets or [1])
    if plan.mode == "llm":
        dec = plan.decode_buckets
        total = plan.max_total_length or dec[-1]
        over = {"enable_bucketing": True, "context_encoding_buckets": seq, "token_generation_buckets": dec}
        out["nxdi"] = (
            "# NxD Inference (neuronx_distributed_inference.models.config.NeuronConfig)\n"
            "neuron_config = NeuronConfig(\n"
            f"    batch_size={batch},\n"
            f"    max_context_length={plan.max_length},\n"
            f"    seq_len={total},\n"
            "    enable_bucketing=True,\n"
            f"    context_encoding_buckets={seq},\n"
            f"    token_generation_buckets={dec},\n"
            ")\n"
        )
        out["vllm_neuron"] = (
            "# vLLM on Neuron, NxDI backend: pass NxDI NeuronConfig fields through override_neuron_config\n"
            f"vllm serve {model} --device neuron --max-model-len {total} --max-num-seqs {batch} \\\n"
            f"  --additional-config '{json.dumps({'override_neuron_config': over})}'\n"
            "# (upstream vLLM v0: LLM(..., override_neuron_config=" + json.dumps(over) + "))\n"
            "# transformers-neuronx backend (upstream vLLM v0) reads environment variables instead:\n"
            f"export NEURON_CONTEXT_LENGTH_BUCKETS={','.join(map(str, seq))}\n"
            f"export NEURON_TOKEN_GEN_BUCKETS={','.join(map(str, dec))}\n"
        )
    else:
        lines = ["# optimum-neuron: one static export per bucket (each NEFF serves lengths up to its bucket)"]
        for n in seq:
            for b in plan.batch_buckets or [1]:
                lines.append(
                    f"optimum-cli export neuron --model {model} --task {task} --batch_size {b} "
                    f"--sequence_length {n} {_slug(model)}_neuron_b{b}_s{n}/"
                )
        out["optimum_neuron"] = "\n".join(lines) + "\n"
        out["torch_neuronx"] = (
            "# torch_neuronx.trace: one traced model per bucket, example inputs padded to each length\n"
            f"BUCKETS = {seq}\n"
            "models = {n: torch_neuronx.trace(model, make_inputs(batch_size=1, seq_len=n)) for n in "
            "BUCKETS}\n"
        )
    return out


def _slug(model: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in model.split("/")[-1]).strip("_").lower() or "model"
