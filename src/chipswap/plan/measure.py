"""What a "measure first" verdict rests on: the candidates that could win but have no figure to decide on
(outside the calibration's coverage, behind a readiness blocker with a known fix, or a band straddling the
clear-saving point), the figure that would flip the decision, and whether no candidate can win at all.

Pure: prices, traffic and the GPU fleet in, words and verdict.rules.Unmeasured out; no I/O. May not decide
(verdict/rules.py does) or import another plan stage than the result types.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from chipswap.economics import cost
from chipswap.plan.economics import Money
from chipswap.plan.result import CandidateResult, ReadinessSummary, TrafficSummary
from chipswap.plan.setup import PlanSetup, rules_target
from chipswap.verdict.rules import Unmeasured


def _pct(x: Decimal | None) -> str:
    return "unknown" if x is None else f"{x.quantize(Decimal('0.1'))}"


def blocker_fix(readiness: ReadinessSummary, target: str | None) -> tuple[int, str] | None:
    """(blockers, the fix in a few words) of a Neuron rules target whose every blocker has a known fix; None
    when it has none, or one without a fix (that one is a reason to stay, not a flip)."""
    if not readiness.checked or target is None:
        return None
    r = readiness.for_target(target)
    if not r.blockers:
        return None
    found = [f for f in r.findings if f.get("severity") == "blocker"]
    if not found or any(not str(f.get("fix") or "").strip() for f in found):
        return None
    words = "; ".join(dict.fromkeys(f"{f.get('rule')}: {_first_clause(str(f['fix']))}" for f in found))
    return int(r.blockers), words


TRIAL_DAY_H = 24  # a trial's cost bound in plan: one whole day on one instance (a one-day Capacity Block)


def _stake(s: PlanSetup, c: CandidateResult, now: Decimal, hi_pct: Decimal) -> Decimal:
    """The saving over the horizon at the favourable edge of the band: what a trial could win."""
    return now * hi_pct / Decimal(100) * Decimal(s.workload.horizon_months)


def _first_clause(text: str) -> str:
    """A fix in a few words: its first sentence without the parenthesised detail."""
    import re

    first, prev = text.split(". ")[0], ""
    while prev != first:  # innermost parentheses first, so nested ones go too
        prev, first = first, re.sub(r" ?\([^()]*\)", "", first)
    return first.strip()


def short_reason(text: str) -> str:
    """A candidate's reason in one short line: the "(issue ..." detail and the "measure it" prefix off."""
    t = text.split(" (issue ")[0].replace(" — measure it (chipswap trial):", ":")
    return t if len(t) <= 400 else t[:399] + "…"


def _flip_figure(
    s: PlanSetup, traffic: TrafficSummary | None, c: CandidateResult, now: Decimal, th: Any
) -> str | None:
    """The figure that would flip the decision to a move, in words; None when no throughput could (even the
    redundancy floor of this instance costs too much against the right-sized GPU fleet)."""
    if c.rate is None or s.kind != "serving" or now <= 0:
        return None
    hours = cost.D(s.workload.fleet.hours_per_month)
    porting = cost.porting_cost(s.workload.porting.engineer_days, s.workload.porting.day_rate_usd)
    need = max(now * th.close_margin_pct / Decimal(100), porting / Decimal(th.close_payback_months))
    per_instance = c.rate.value * hours
    most = int((now - need) / per_instance) if now > need else 0
    least = s.workload.targets.min_replicas
    if most < least:
        return None
    busiest = traffic.busiest_rps or traffic.peak_rps or traffic.mean_rps if traffic is not None else None
    after = (per_instance * most).quantize(Decimal("0.01"))
    gpu = now.quantize(Decimal("0.01"))
    fleet = f"{most} x {c.instance} at {after:,} USD/month, a clear saving against {gpu:,}"
    if not busiest:
        return f"a move flips when {fleet} carry the traffic"
    per = busiest / most / s.workload.utilization
    return (
        f"the move flips at >= {per:,.3g} requests/s per {c.instance} within the SLO ({fleet} carrying the "
        f"busiest window's {busiest:,.3g} requests/s at {s.workload.utilization:.0%} utilization)"
    )


def unmeasured_candidates(
    s: PlanSetup,
    traffic: TrafficSummary | None,
    readiness: ReadinessSummary,
    cands: list[CandidateResult],
    base_money: Money,
) -> tuple[tuple[Unmeasured, ...], bool]:
    """The candidates that could win but have no figure to decide on (outside the calibration's coverage,
    blocked by a readiness finding with a known fix, or a band straddling the clear-saving point), the most
    promising first; and whether every blocker among them has a fix. A candidate that could not win at any
    throughput is not one (the verdict says stay)."""
    if s.kind != "serving":
        return (), False
    th = s.thresholds
    out: list[tuple[Decimal, Unmeasured]] = []
    fixable = True
    for c in cands:
        if c.kind not in ("inferentia", "trainium"):
            continue
        flip = _flip_figure(s, traffic, c, base_money.monthly_now, th)
        if flip is None:
            continue
        tgt = rules_target(s.catalog.instance(c.instance).family)
        fix = blocker_fix(readiness, tgt)
        blocked = readiness.checked and readiness.for_target(tgt).blockers
        if blocked and fix is None:
            fixable = False
            continue  # a blocker nobody knows how to fix: not a measurement away
        fix_words = f"port with the fix ({fix[1]})" if fix else ""
        to_measure = c.fleet is not None and c.fleet.to_measure is not None
        lo, hi = c.saving_pct_range
        if c.throughput is None or to_measure:
            cause, why = "coverage", short_reason(c.excluded or "no throughput figure")
        elif fix is not None:
            cause, why = "readiness", f"{fix[0]} readiness blocker(s) on {tgt}: the figure holds once ported"
        elif (
            c.excluded is None
            and c.throughput.band  # the candidate's own band: its trial narrows it (not the GPU's)
            and lo is not None
            and hi is not None
            and lo < th.close_margin_pct <= hi
            and _stake(s, c, base_money.monthly_now, hi) > TRIAL_DAY_H * c.rate.value
            if c.rate is not None
            else False
        ):
            cause = "band"
            why = (
                f"{c.instance} throughput {c.throughput.label}: across the band the saving is {_pct(lo)}% to "
                f"{_pct(hi)}%, and the saving at stake outweighs a trial (at most a day on one instance)"
            )
        else:
            continue
        rate = c.rate.value if c.rate is not None else Decimal(0)
        out.append((rate, Unmeasured(c.instance, cause, why, flip, fix_words)))
    out.sort(key=lambda x: (x[1].cause != "band", x[0], x[1].target))
    return tuple(u for _r, u in out), fixable and bool(out)


def cannot_win(
    s: PlanSetup, traffic: TrafficSummary | None, cands: list[CandidateResult], base_money: Money
) -> str | None:
    """Words when no priced Neuron candidate could win at any throughput: its redundancy floor
    (targets.min_replicas) alone costs more than a clear saving allows against the right-sized GPU fleet."""
    if s.kind != "serving":
        return None
    priced = [c for c in cands if c.kind in ("inferentia", "trainium") and c.rate is not None]
    if not priced or any(_flip_figure(s, traffic, c, base_money.monthly_now, s.thresholds) for c in priced):
        return None
    least = s.workload.targets.min_replicas
    hours = cost.D(s.workload.fleet.hours_per_month)
    now = base_money.monthly_now.quantize(Decimal("0.01"))
    cheapest = min(priced, key=lambda c: c.rate.value if c.rate is not None else Decimal(0))
    floor = (cheapest.rate.value * hours * least).quantize(Decimal("0.01")) if cheapest.rate else None
    gpu = f"{base_money.gpu_count} x {s.fleet.name}" if base_money.gpu_count else "today's GPU fleet"
    return (
        f"even {least} x {cheapest.instance} (the fewest, targets.min_replicas = {least}; the cheapest "
        f"candidate) cost {floor:,} USD/month against {now:,} for {gpu}, short of a clear "
        f"{s.thresholds.close_margin_pct}% saving whatever its throughput"
    )
