"""The migration verdict: the seed article's screening rules and break-even, as tables. Pure: no I/O.

The seed ("Trainium and Inferentia vs GPU") gives a procedure, and this module is that procedure as data:

* SCREENING_RULES: one row per screening question. Each row names the fact it reads, the test that points to
  Neuron, and the seed's words for either outcome. Research churn, hand-written CUDA kernels, bursty or low
  traffic and short-lived work point to GPU; a stable model, a standard architecture (no readiness blockers),
  steady traffic and a bill large enough point to Neuron. A fact that is not known gives "unknown", which is
  never counted as a pass.
* DECISION_TABLE: ordered rows, the first that matches gives the verdict. "If the answer is close, it is a
  no": a saving under `close_margin_pct` percent of today's monthly cost, or a payback later than
  `close_payback_months`, is a "close call — stay"; so is a move whose saving flips somewhere inside the error
  band of the projections it rests on (`Facts.band_flip`, worked out by the caller, who can re-run the money).

Every reason carries the input value and threshold it was judged on, so the report can trace each word to a
number.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

STAY = "stay on GPU"
MOVE_INF = "move serving to Inferentia"
MOVE_TRN = "move to Trainium"
CLOSE = "close call — stay"
MEASURE = "measure first"
VERDICTS: tuple[str, ...] = (STAY, MOVE_INF, MOVE_TRN, CLOSE, MEASURE)
MOVES: frozenset[str] = frozenset({MOVE_INF, MOVE_TRN})

Outcome = Literal["pass", "fail", "unknown"]


@dataclass(frozen=True)
class Thresholds:
    """Screening thresholds and the close-call margin. Defaults are documented in docs/plan.md."""

    close_margin_pct: Decimal = Decimal("20")
    close_payback_months: int = 6
    bursty_peak_to_mean: float = 2.0
    low_traffic_rps: float = 1.0
    low_traffic_tokens_per_s: float = 250.0  # LLM traffic: the same rule on token volume (prompt + output)
    min_monthly_bill_usd: Decimal = Decimal("2000")
    max_model_changes_per_month: float = 1.0
    min_horizon_months: float = 6.0


# why a candidate that could win has no figure to decide on (Unmeasured.cause)
UNMEASURED_CAUSES: dict[str, str] = {
    "coverage": "has no figure: outside what the calibration covers",
    "readiness": "has no figure until a fixable readiness blocker is fixed",
    "band": "rests on a figure whose error band straddles the flip point by more than a trial costs",
}


@dataclass(frozen=True)
class Unmeasured:
    """A candidate that could win but has no figure to decide on: the fourth answer, "measure first".

    cause: a key of UNMEASURED_CAUSES; why: the one-line reason in words; flip: the figure that would flip the
    decision to a move, in words; fix: the readiness fix a port needs first ("" when none); trial: what the
    trial costs, in words, and next: the command that writes its kit (both filled by the caller that can cost
    a trial kit, `chipswap plan`; "" until then)."""

    target: str
    cause: str
    why: str
    flip: str
    fix: str = ""
    trial: str = ""
    next: str = ""  # the exact next command (`chipswap trial <workload> --candidate <target>`), by the caller


@dataclass(frozen=True)
class Facts:
    """Everything the verdict reads. None means "not known" (never treated as a pass)."""

    kind: Literal["serving", "training"]
    target_kind: Literal["inferentia", "trainium"] | None
    target: str | None
    research_churn: bool | None
    custom_cuda_kernels: bool | None
    model_changes_per_month: float | None
    readiness_blockers: int | None
    peak_to_mean: float | None
    mean_rps: float | None
    horizon_months: float
    monthly_now_usd: Decimal
    monthly_after_usd: Decimal | None
    porting_usd: Decimal
    payback_month: int | None
    meets_slo: bool | None = True
    slo_p99_ms: float | None = None  # the end-to-end objective, when one is set
    throughput_assumed: bool = False  # the pick's throughput is an assumption, not a measurement
    # checks outside the seed's screening (overflow, GPU right-sizing): a "fail" one stops a clear move
    cautions: tuple[Reason, ...] = ()
    slo_text: str | None = None  # every objective in words ("p99 <= 2,500 ms; TTFT p99 <= 500 ms")
    # the move's flip point inside the band of the figures it rests on, in words (None: outside, or no band)
    band_flip: str | None = None
    throughput_label: str | None = None  # how the pick's throughput was obtained ("projected ± 23%")
    no_candidate_why: str | None = None  # why no candidate could be chosen (e.g. no fleet size meets the SLO)
    # LLM traffic: mean prompt + output tokens per request; the traffic-volume rule then counts tokens/s
    tokens_per_request: float | None = None
    # candidates that could win but have no figure (most promising first): "measure first" names the first
    unmeasured: tuple[Unmeasured, ...] = ()
    # every readiness blocker of the candidates in `unmeasured` has a known fix (a flip, not a reason to stay)
    blockers_fixable: bool = False
    # no candidate could win at any throughput (its fewest instances cost too much), in words; None otherwise
    cannot_win: str | None = None
    # the bill the bill-size rule reads when it is not monthly_now_usd: today's own bill where the
    # like-for-like GPU fleet is larger only by the redundancy floor (N+1 is not spend the workload has today)
    bill_usd: Decimal | None = None

    @property
    def bill_size_usd(self) -> Decimal:
        return self.bill_usd if self.bill_usd is not None else self.monthly_now_usd

    @property
    def mean_tokens_per_s(self) -> float | None:
        if self.mean_rps is None or self.tokens_per_request is None:
            return None
        return self.mean_rps * self.tokens_per_request

    @property
    def monthly_saving_usd(self) -> Decimal | None:
        if self.monthly_after_usd is None:
            return None
        return self.monthly_now_usd - self.monthly_after_usd

    @property
    def saving_pct(self) -> Decimal | None:
        s = self.monthly_saving_usd
        if s is None or self.monthly_now_usd <= 0:
            return None
        return s / self.monthly_now_usd * Decimal(100)


@dataclass(frozen=True)
class ScreeningRule:
    """One screening question of the seed: the fact read, the test that points to Neuron, the words."""

    id: str
    fact: str  # attribute of Facts
    label: str  # how the input is named to the user
    op: str  # key of _OPS: the comparison that means "points to Neuron"
    threshold: str | int | float | bool  # attribute of Thresholds, or a literal
    if_pass: str
    if_fail: str
    applies_to: tuple[str, ...] = ("serving", "training")


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "is": operator.is_,
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
}

_SYMBOL = {"is": "", "<=": "<= ", ">=": ">= ", "==": "= "}

SCREENING_RULES: tuple[ScreeningRule, ...] = (
    ScreeningRule(
        "research-churn",
        "research_churn",
        "research churn",
        "is",
        False,
        "not research work: the model is a product, not an experiment",
        "research churn: the model shape changes weekly; compile steps and operator gaps cost more than the "
        "hourly saving",
    ),
    ScreeningRule(
        "custom-cuda-kernels",
        "custom_cuda_kernels",
        "custom CUDA kernels",
        "is",
        False,
        "no hand-written CUDA kernels to rewrite",
        "depends on hand-written CUDA kernels, which do not move to Neuron without a rewrite",
    ),
    ScreeningRule(
        "stable-model",
        "model_changes_per_month",
        "model changes per month",
        "<=",
        "max_model_changes_per_month",
        "stable model: the architecture rarely changes, so fixed compiled shapes hold",
        "the model changes too often for ahead-of-time compiled shapes",
    ),
    ScreeningRule(
        "standard-architecture",
        "readiness_blockers",
        "readiness blockers",
        "==",
        0,
        "standard architecture: the readiness check predicts no blockers",
        "the readiness check predicts blockers on the Neuron compiler",
    ),
    ScreeningRule(
        "steady-traffic",
        "peak_to_mean",
        "peak-to-mean traffic",
        "<=",
        "bursty_peak_to_mean",
        "steady traffic: the peak is close to the mean",
        "bursty traffic: a fixed-shape fleet sized for the peak sits idle between bursts",
        ("serving",),
    ),
    ScreeningRule(
        "traffic-volume",
        "mean_rps",
        "mean requests/s",
        ">=",
        "low_traffic_rps",
        "high-volume traffic",
        "low traffic: the porting time never earns itself back",
        ("serving",),
    ),
    ScreeningRule(  # the same question for LLM traffic, where a request's cost grows with its tokens
        "traffic-volume",
        "mean_tokens_per_s",
        "mean tokens/s (prompt + output)",
        ">=",
        "low_traffic_tokens_per_s",
        "high-volume traffic, counted in tokens (an LLM request costs in proportion to its tokens)",
        "low traffic, counted in tokens: the porting time never earns itself back",
        ("serving-llm",),
    ),
    ScreeningRule(
        "long-lived",
        "horizon_months",
        "horizon (months)",
        ">=",
        "min_horizon_months",
        "long-lived work: the saving compounds month after month",
        "short-lived work: the porting cost never pays back",
    ),
    ScreeningRule(
        "bill-size",
        "bill_size_usd",
        "GPU spend per month (USD)",
        ">=",
        "min_monthly_bill_usd",
        "the bill is large enough that a 40-60% cut matters",
        "the bill is too small for a cut to matter",
    ),
)


@dataclass(frozen=True)
class Reason:
    rule: str
    outcome: Outcome
    favours: Literal["neuron", "gpu"] | None
    text: str
    input_label: str
    input_value: object
    threshold: str

    @property
    def value_text(self) -> str:
        v = self.input_value
        if self.rule == "monthly-saving" and isinstance(v, Decimal) and v < 0:  # a cost, said as one
            return f"{_fmt(v)} (costs {1 - v / 100:.1f}x as much)"
        return "unknown" if v is None else _fmt(v)

    def line(self) -> str:
        mark = {"pass": "+", "fail": "-", "unknown": "?"}[self.outcome]
        # an unknown outcome names the threshold as what was NOT checked, so "[?]" never reads like a pass
        threshold = f"not checked: {self.threshold}" if self.outcome == "unknown" else self.threshold
        return f"[{mark}] {self.text} ({self.input_label} = {self.value_text}; {threshold})"


@dataclass(frozen=True)
class Verdict:
    verdict: str
    why: str
    reasons: tuple[Reason, ...]
    economics: tuple[Reason, ...] = field(default_factory=tuple)
    qualifier: str = ""  # what a move must do first (e.g. a quota increase), from the capacity rule
    measure: Unmeasured | None = None  # "measure first": the candidate to trial, why, and what flips it

    @property
    def is_move(self) -> bool:
        return self.verdict in MOVES

    @property
    def headline(self) -> str:
        """The verdict as printed: "move to Trainium — but request a quota increase ... first" when
        qualified."""
        return f"{self.verdict} — but {self.qualifier}" if self.qualifier else self.verdict


def _fmt(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, Decimal):
        return f"{v.quantize(Decimal('0.01')):,}"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _threshold_value(rule: ScreeningRule, th: Thresholds) -> object:
    if isinstance(rule.threshold, str):
        return getattr(th, rule.threshold)
    return rule.threshold


def _slo_shown(facts: Facts) -> str | None:
    if facts.slo_text:
        return f"objective {facts.slo_text}"
    if facts.slo_p99_ms is not None:
        return f"objective p99 <= {_fmt(facts.slo_p99_ms)} ms"
    return None


def _slo_reason(facts: Facts) -> Reason | None:
    shown = _slo_shown(facts)
    if facts.kind != "serving" or shown is None or facts.target is None:
        return None
    if facts.meets_slo is None:
        return Reason(
            "slo",
            "unknown",
            None,
            f"SLO: not evaluated (no latency figure for {facts.target}); unknown is not a pass",
            "p99 latency",
            None,
            shown,
        )
    ok = facts.meets_slo
    return Reason(
        "slo",
        "pass" if ok else "fail",
        "neuron" if ok else "gpu",
        f"{facts.target} {'meets' if ok else 'misses'} the latency objective",
        "meets SLO",
        ok,
        shown,
    )


def screen(facts: Facts, th: Thresholds) -> tuple[Reason, ...]:
    """Apply every screening rule that applies to this kind of work, then the SLO and the cautions."""
    out: list[Reason] = []
    llm = facts.kind == "serving" and facts.tokens_per_request is not None
    for rule in SCREENING_RULES:
        applies = facts.kind in rule.applies_to or (llm and "serving-llm" in rule.applies_to)
        if not applies or (llm and rule.id == "traffic-volume" and "serving-llm" not in rule.applies_to):
            continue  # LLM traffic volume is judged in tokens/s, everything else in requests/s
        value = getattr(facts, rule.fact)
        limit = _threshold_value(rule, th)
        shown = f"Neuron needs {_SYMBOL[rule.op]}{_fmt(limit)}"
        if value is None:
            out.append(
                Reason(
                    rule.id,
                    "unknown",
                    None,
                    f"{rule.label}: not known, so not counted as a pass",
                    rule.label,
                    None,
                    shown,
                )
            )
            continue
        ok = _OPS[rule.op](value, limit)
        out.append(
            Reason(
                rule.id,
                "pass" if ok else "fail",
                "neuron" if ok else "gpu",
                rule.if_pass if ok else rule.if_fail,
                rule.label,
                value,
                shown,
            )
        )
    slo = _slo_reason(facts)
    if slo is not None:
        out.append(slo)
    out.extend(facts.cautions)
    return tuple(out)


# reasons that are not screening questions: a failing one does not mean "stay on GPU" by itself
_NOT_SCREENING = frozenset({"slo"})
# caveats: reasons the verdict lists beside the figure they qualify but never decides on, even when their
# outcome is unknown (e.g. whether Capacity Blocks will be on offer for every renewal: nobody can know ahead)
CAVEATS = frozenset({"capacity-block"})


@dataclass(frozen=True)
class _Assessment:
    facts: Facts
    th: Thresholds
    reasons: tuple[Reason, ...]

    @property
    def failed(self) -> tuple[Reason, ...]:
        skip = _NOT_SCREENING | {c.rule for c in self.facts.cautions}
        return tuple(r for r in self.reasons if r.outcome == "fail" and r.rule not in skip)

    @property
    def hard_failed(self) -> tuple[Reason, ...]:
        """Screening failures a measurement cannot change: a readiness blocker with a known fix is a flip
        (port with the fix, then measure) when a candidate that could win waits on it, not a reason to
        stay."""
        soft = {"standard-architecture"} if self.facts.blockers_fixable and self.facts.unmeasured else set()
        return tuple(r for r in self.failed if r.rule not in soft)

    @property
    def unknown(self) -> tuple[Reason, ...]:
        return tuple(
            r for r in self.reasons if r.outcome == "unknown" and r.rule != "slo" and r.rule not in CAVEATS
        )

    @property
    def slo_unknown(self) -> bool:
        return any(r.rule == "slo" and r.outcome == "unknown" for r in self.reasons)

    @property
    def cautions_failed(self) -> tuple[Reason, ...]:
        return tuple(c for c in self.facts.cautions if c.outcome == "fail" and c.rule not in CAVEATS)


def _pays_back(a: _Assessment) -> bool:
    p = a.facts.payback_month
    return p is not None and p <= a.facts.horizon_months


def _close(a: _Assessment) -> bool:
    pct = a.facts.saving_pct
    p = a.facts.payback_month
    return pct is None or pct < a.th.close_margin_pct or p is None or p > a.th.close_payback_months


def _move_verdict(a: _Assessment) -> str:
    return MOVE_INF if (a.facts.target_kind == "inferentia" and a.facts.kind == "serving") else MOVE_TRN


def _costs_more_words(f: Facts) -> str:
    """"costs 8.0x as much" (the ratio of the two monthly figures), "costs as much" when equal."""
    now, after = f.monthly_now_usd, f.monthly_after_usd
    if now is None or after is None or now <= 0:
        return "costs at least as much"
    ratio = Decimal(after) / Decimal(now)
    shown = ratio.quantize(Decimal("0.01") if ratio < Decimal("1.1") else Decimal("0.1"))
    return "costs as much" if shown == 1 else f"costs {shown}x as much"


def _measure_words(u: Unmeasured) -> str:
    return f"{u.target} could win but {UNMEASURED_CAUSES[u.cause]}; a trial measures it"


def measure_lines(u: Unmeasured) -> tuple[str, ...]:
    """The "measure first" answer in lines: why no figure, the fix first, the figure that flips it, what the
    trial costs and the next command (the terminal, the Markdown and the HTML print the same lines)."""
    rows = [f"{'why not decided' if u.cause == 'band' else 'why no figure'}: {u.why}"]
    if u.fix:
        rows.append(f"first: {u.fix}")
    rows.append(f"what flips it: {u.flip}")
    if u.trial:
        rows.append(f"the trial: {u.trial}")
    if u.next:
        rows.append(f"next: {u.next}")
    return tuple(rows)


def _figured_move(a: _Assessment) -> bool:
    """Whether the rows after "measure-first" give a move on a candidate that has its figure: then that move
    stands (a measurement elsewhere could only add to it)."""
    if a.facts.target is None or a.facts.target in {u.target for u in a.facts.unmeasured} or a.failed:
        return False
    rows = DECISION_TABLE[[r[0] for r in DECISION_TABLE].index("measure-first") + 1 :]
    for _name, test, verdict, _why in rows:
        if test(a):
            return (verdict(a) if callable(verdict) else verdict) in MOVES
    return False


def _names(rs: tuple[Reason, ...]) -> str:
    return ", ".join(r.rule for r in rs)


# Ordered: the first row whose test holds gives the verdict. (test, verdict or callable, why)
DECISION_TABLE: tuple[
    tuple[
        str, Callable[[_Assessment], bool], str | Callable[[_Assessment], str], Callable[[_Assessment], str]
    ],
    ...,
] = (
    (
        "no-candidate-can-win",
        lambda a: a.facts.cannot_win is not None,
        STAY,
        lambda a: f"no candidate can win at any throughput: {a.facts.cannot_win}",
    ),
    (
        "screening-fails",
        lambda a: bool(a.hard_failed),
        STAY,
        lambda a: f"screening points to GPU: {_names(a.hard_failed)}",
    ),
    (
        "measure-first",
        lambda a: bool(a.facts.unmeasured) and not _figured_move(a),
        MEASURE,
        lambda a: _measure_words(a.facts.unmeasured[0]),
    ),
    (
        "no-candidate",
        lambda a: a.facts.target is None or a.facts.monthly_after_usd is None,
        STAY,
        lambda a: a.facts.no_candidate_why or "no candidate could be priced or sized for this workload",
    ),
    (
        "misses-slo",
        lambda a: a.facts.meets_slo is False,
        STAY,
        lambda a: f"{a.facts.target} does not meet the latency objective",
    ),
    (
        "costs-more",
        lambda a: (a.facts.monthly_saving_usd or Decimal(0)) <= 0,
        STAY,
        lambda a: (
            f"{a.facts.target} {_costs_more_words(a.facts)} per month as the GPU fleet it would replace"
        ),
    ),
    (
        "never-pays-back",
        lambda a: not _pays_back(a),
        STAY,
        lambda a: f"the porting cost does not pay back within the {a.facts.horizon_months:g}-month horizon",
    ),
    (
        "slo-not-evaluated",
        lambda a: a.slo_unknown,
        CLOSE,
        lambda a: (
            f"SLO not evaluated for {a.facts.target} (no latency figure; {_slo_shown(a.facts)}); "
            "unknown is not a pass"
        ),
    ),
    (
        "cautions",
        lambda a: bool(a.cautions_failed),
        CLOSE,
        lambda a: "; ".join(c.text for c in a.cautions_failed),
    ),
    (
        "unknown-inputs",
        lambda a: bool(a.unknown),
        CLOSE,
        lambda a: f"not known: {_names(a.unknown)}; an unchecked input is not a pass",
    ),
    (
        "close-call",
        _close,
        CLOSE,
        lambda a: (
            f"saving {_fmt(a.facts.saving_pct)}% / payback month {a.facts.payback_month} is inside the "
            f"close-call margin ({a.th.close_margin_pct}% / {a.th.close_payback_months} months); "
            "if the answer is close, it is a no"
        ),
    ),
    (
        "flip-inside-band",
        lambda a: a.facts.band_flip is not None,
        CLOSE,
        lambda a: str(a.facts.band_flip),
    ),
    (
        "clear-win",
        lambda a: True,
        _move_verdict,
        lambda a: (
            f"{a.facts.target} saves {_fmt(a.facts.saving_pct)}% a month"
            + (" (throughput assumed, not measured)" if a.facts.throughput_assumed else "")
            + (f" (throughput {a.facts.throughput_label})" if a.facts.throughput_label else "")
            + f" and pays back in month {a.facts.payback_month}"
        ),
    ),
)


def _economics(facts: Facts, th: Thresholds) -> tuple[Reason, ...]:
    """The saving and the payback against their close-call limits; none when no candidate is priced (the
    verdict's reason says why, and "saving = never; not checked" would read as a check left undone)."""
    if facts.monthly_after_usd is None:
        return ()
    pct = facts.saving_pct
    rows = (
        (
            "monthly-saving",
            "saving per month (% of the GPU side)",
            pct,
            pct is not None and pct >= th.close_margin_pct,
            f"clear when >= {th.close_margin_pct}%",
        ),
        (
            "payback",
            "payback month",
            facts.payback_month,
            facts.payback_month is not None and facts.payback_month <= th.close_payback_months,
            f"clear when <= month {th.close_payback_months}",
        ),
    )
    out = []
    for rid, label, value, ok, shown in rows:
        outcome: Outcome = (
            "unknown" if value is None and rid == "monthly-saving" else ("pass" if ok else "fail")
        )
        text = f"{label}: {'clear' if ok else 'not clear'}"
        out.append(
            Reason(
                rid,
                outcome,
                "neuron" if ok else "gpu",
                text,
                label,
                value if value is not None else "never",
                shown,
            )
        )
    return tuple(out)


def decide(facts: Facts, th: Thresholds | None = None) -> Verdict:
    """The verdict for one workload against one candidate, with every reason and its input."""
    th = th or Thresholds()
    a = _Assessment(facts, th, screen(facts, th))
    for _name, test, verdict, why in DECISION_TABLE:
        if test(a):
            v = verdict(a) if callable(verdict) else verdict
            measure = facts.unmeasured[0] if v == MEASURE else None
            return Verdict(v, why(a), a.reasons, _economics(facts, th), measure=measure)
    raise AssertionError("the decision table ends with a row that always matches")
