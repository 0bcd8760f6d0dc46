"""Verdict stage: price both sides, pick the best candidate, and decide, with the error band taken into
account.

Input: PlanSetup, the traffic summary, shapes, readiness and FleetsStage. Output: VerdictStage (every
candidate's
money, the pick, the Verdict and the Scenario/Facts the sensitivity stage varies). The decision itself is the
pure table in chipswap.verdict.rules; this stage only assembles its Facts, including `band_flip`: when the
move's
saving flips somewhere inside the error band of the throughput figures it rests on, the verdict is a close
call
and the words say which figure, which band and where it flips. Prices come from the catalog in PlanSetup.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from chipswap.economics import cost
from chipswap.errors import ChipswapError
from chipswap.plan.economics import Money, Scenario, economics, evaluate, held_as_blocks, run_as_block
from chipswap.plan.figures import Figure
from chipswap.plan.fleets import FleetsStage
from chipswap.plan.measure import _pct, cannot_win, unmeasured_candidates
from chipswap.plan.result import CandidateResult, FleetPlan, ReadinessSummary, ShapeSummary, TrafficSummary
from chipswap.plan.setup import PlanSetup, rules_target
from chipswap.verdict.rules import MOVES, Facts, Verdict, decide


@dataclass(frozen=True)
class VerdictStage:
    candidates: tuple[CandidateResult, ...]
    best: CandidateResult | None
    verdict: Verdict
    facts: Facts  # of the pick (or the workload alone when there is none)
    scenario: Scenario
    monthly_now: Figure  # the baseline the saving is measured against
    monthly_today: Figure  # what today's fleet costs
    fleet_rate: Figure | None
    gpu_cost_per_million_usd: Decimal | None
    porting: Figure
    readiness: ReadinessSummary  # headlined for the pick's target
    gpu_count: int | None  # GPU instances the traffic needs (serving), None when not sized
    notes: tuple[str, ...] = ()
    gpu: FleetPlan | None = None  # today's GPU type as sized (its throughput band re-checks every flip)


def rate(catalog: Any, instance: str, region: str, term: str) -> Figure | None:
    """The catalog's hourly price as a Figure (source and date); None when the term has no published price."""
    try:
        r = catalog.rate(instance, region, term)
    except ChipswapError:
        return None
    return Figure(
        Decimal(r.usd_per_hour), "USD/h", f"catalog: {r.source} ({r.as_of})", getattr(r, "note", "")
    )


def candidate_rate(catalog: Any, instance: str, region: str, term: str) -> tuple[Figure | None, Any]:
    """A candidate's hourly price and its catalog Rate: at `term`, or, for an instance sold only as Capacity
    Blocks, its Capacity Block rate, labelled "Capacity Block only" beside the figure; (None, None) when
    neither is known."""
    from chipswap.economics.catalog import term_words

    try:
        r = catalog.purchase_rate(instance, region, term)
    except ChipswapError:
        return None, None
    if r is None:
        return None, None
    if not r.is_capacity_block:
        return rate(catalog, instance, region, term), r
    only = " only" if term != r.term else ""
    label = f"catalog: {term_words(r).replace('Capacity Block', 'Capacity Block' + only)}: {r.source}"
    note = f"{r.note}; " if r.note else ""
    return Figure(
        Decimal(r.usd_per_hour), "USD/h", label, note + "booked ahead, paid up front, dynamic price"
    ), r


def block_caveat(s: PlanSetup, scn: Scenario, money: Money, r: Any) -> tuple[str, Any]:
    """How a Capacity Block candidate's money is bought, in words, and the availability caveat as a Reason
    (rule "capacity-block": listed beside the verdict, never decided on)."""
    from chipswap.economics.catalog import block_terms_text
    from chipswap.verdict.rules import Reason

    count = money.count if money.count is not None else scn.fleet_count
    if s.kind == "serving":
        chain = held_as_blocks(scn, count)
        how = (
            f"{count} x {r.instance} held for the {scn.horizon_months}-month horizon as {chain.words}, "
            f"{chain.usd.quantize(Decimal('0.01')):,} USD up front in all; renewals assumed at today's rate"
        )
    elif scn.cand_hours is not None:
        blk = run_as_block(scn, scn.cand_hours)
        how = (
            f"each run as {blk.words} ({scn.cand_hours:,.1f} h rounded up to whole days: "
            f"{blk.usd.quantize(Decimal('0.01')):,} USD a run; per hour it would be "
            f"{blk.per_hour_usd.quantize(Decimal('0.01')):,} USD)"
        )
    else:
        how = "priced per Capacity Block"
    text = (
        f"availability: {r.instance} is priced as an EC2 Capacity Block ({block_terms_text(r)}); {how}; "
        "whether a block is on offer when it is booked is not known ahead (check `chipswap capacity "
        f"{r.instance} --block-days N` before committing)"
    )
    reason = Reason(
        "capacity-block",
        "unknown",
        None,
        text,
        "Capacity Block rate (USD/h)",
        Decimal(r.usd_per_hour),
        "a caveat: listed, not decided on",
    )
    return how, reason


def _saving_range(rng: tuple[Decimal | None, Decimal | None]) -> str:
    """The saving across the error band in words; an edge where no fleet size is known is said, not printed as
    a number."""
    lo, hi = rng
    if lo is None and hi is None:
        return "across the band the saving is not known"
    if lo is None:
        return f"across the band the saving is at most {_pct(hi)}% (at the slow edge no fleet size is known)"
    if hi is None:
        return f"across the band the saving is at least {_pct(lo)}%"
    return f"across the band the saving is {_pct(lo)}% to {_pct(hi)}%"


def _count_band(count_range: tuple[int | None, int | None], needed: int) -> str:
    """A right-sizing count's range across the error band, in words ("" when the band does not move it)."""
    lo, hi = count_range
    if lo is None or (lo == hi == needed):
        return ""
    if hi is None:
        return f" ({lo} or more across the error band; no size meets the SLO at its slow edge)"
    return f" ({lo}-{hi} across the error band)"


def tokens_per_request(s: PlanSetup, traffic: Any) -> float | None:
    """Mean prompt + output tokens of an LLM request (the traffic-volume rule counts tokens for LLMs)."""
    tr = getattr(s.workload, "traffic", None)
    if s.kind != "serving" or traffic is None or getattr(tr, "mode", None) != "llm":
        return None
    n = len(traffic.prompt_tokens)
    if n == 0:
        return None
    out = float(traffic.output_tokens.mean()) if len(traffic.output_tokens) == n else 0.0
    return float(traffic.prompt_tokens.mean()) + out


def _today(s: PlanSetup, fleet_rate: Figure | None, gpu_hours: float | None) -> Figure:
    wl = s.workload
    hours = cost.D(wl.fleet.hours_per_month)
    if s.kind == "training":
        assert wl.job is not None
        if fleet_rate is None:
            raise ChipswapError(
                f"{s.path}: fleet.term: no {wl.fleet.term} price for {s.fleet.name} in {wl.fleet.region}; "
                "expected a term the catalog prices (on-demand or spot)"
            )
        if gpu_hours is None:
            raise ChipswapError(
                f"{s.path}: job: no run time for {s.fleet.name}: give job.gpu_hours, or job.tokens with a "
                "[model] to project it"
            )
        per_run = cost.job_cost(gpu_hours, fleet_rate.value, wl.fleet.count)
        return Figure(
            per_run * cost.D(wl.job.runs_per_month),
            "USD/month",
            "computed",
            f"{gpu_hours:.4g} h x {fleet_rate.value} USD/h x {wl.fleet.count} x "
            f"{wl.job.runs_per_month:g} runs/month",
        )
    if wl.fleet.monthly_bill_usd is not None:
        return Figure(wl.fleet.monthly_bill_usd, "USD/month", "stated", "fleet.monthly_bill_usd")
    if fleet_rate is None:
        raise ChipswapError(
            f"{s.path}: fleet.term: no {wl.fleet.term} price for {s.fleet.name} in {wl.fleet.region}; "
            "expected a priced term, or give fleet.monthly_bill_usd"
        )
    return Figure(
        cost.monthly_cost(fleet_rate.value, wl.fleet.count, hours),
        "USD/month",
        "computed",
        f"{wl.fleet.count} x {s.fleet.name} x {fleet_rate.value} USD/h x {hours} h",
    )


def gpu_hourly(s: PlanSetup, today: Figure, fleet_rate: Figure | None) -> Decimal | None:
    """USD per GPU instance-hour: the catalog price, or the stated bill spread over count x hours."""
    wl = s.workload
    if s.kind == "serving" and wl.fleet.monthly_bill_usd is not None:
        return wl.fleet.monthly_bill_usd / (cost.D(wl.fleet.count) * cost.D(wl.fleet.hours_per_month))
    return fleet_rate.value if fleet_rate is not None else None


def _slo_text(s: PlanSetup) -> str | None:
    from chipswap.plan.simulation import objective_words

    slo = s.workload.slo
    parts = [objective_words(k, v) for k, v in slo.objectives().items()]
    if slo.goodput_pct is not None:
        parts.append(f"goodput >= {slo.goodput_pct:g}% of requests meeting every objective")
    return "; ".join(parts) or None


def band_edges(cand: Figure | None, gpu: Figure | None) -> tuple[float, float]:
    """Relative half-widths of the candidate's and the GPU's throughput bands (0 when a figure has none)."""
    bc = cand.band if cand is not None and cand.band else 0.0
    bg = gpu.band if gpu is not None and gpu.band else 0.0
    return bc, bg


def at_band(scn: Scenario, bc: float, bg: float, e: float) -> Scenario:
    """The scenario `e` of the way to the band's edge against the move (e = 1: candidate slowest, GPU fastest;
    e = -1: the other edge)."""
    return replace(scn, cand_speed=(1 + bc) ** (-e), gpu_speed=(1 + bg) ** e)


def _band_words(c: CandidateResult, gpu: FleetPlan, bc: float, bg: float, e: float) -> str:
    parts = []
    if bc:
        parts.append(f"a {(1 + bc) ** e:.2f}x slower {c.instance} throughput (projection band ±{bc:.0%})")
    if bg:
        parts.append(f"a {(1 + bg) ** e:.2f}x faster {gpu.instance} throughput (band ±{bg:.0%})")
    return " and ".join(parts)


def band_check(
    facts: Facts, scn: Scenario, th: Any, c: CandidateResult, gpu: FleetPlan
) -> tuple[str | None, tuple[Decimal | None, Decimal | None]]:
    """(why the move is a close call, or None; the saving % at the band's two edges)."""
    bc, bg = band_edges(c.throughput, gpu.throughput)
    if not bc and not bg:
        return None, (c.saving_pct, c.saving_pct)
    worst, best = economics(at_band(scn, bc, bg, 1.0)), economics(at_band(scn, bc, bg, -1.0))
    rng = (worst.saving_pct, best.saving_pct)
    base = evaluate(facts, scn, th).verdict
    if base not in MOVES or evaluate(facts, at_band(scn, bc, bg, 1.0), th).verdict == base:
        return None, rng
    lo, hi = 0.0, 1.0  # bisection on the share of the band: the move holds at lo, not at hi
    for _ in range(30):
        mid = (lo + hi) / 2
        if evaluate(facts, at_band(scn, bc, bg, mid), th).verdict == base:
            lo = mid
        else:
            hi = mid
    flipped = evaluate(facts, at_band(scn, bc, bg, hi), th).verdict
    return (
        f"the move rests on projections: {_band_words(c, gpu, bc, bg, hi)} would make it '{flipped}', and "
        f"that lies inside the error band; {_saving_range(rng)} — if the answer is close, it is a no",
        rng,
    )


def _floor_words(fleet: FleetPlan) -> str:
    if fleet.slo_blocking:
        return f"{fleet.instance} ({'; '.join(fleet.slo_blocking)})"
    floor = f"{fleet.slo_floor_ms:,.0f} ms" if fleet.slo_floor_ms is not None else "unknown"
    return f"{fleet.instance} (unloaded latency {floor})"


def slo_key(s: PlanSetup, key: str) -> str:
    """The workload field that holds objective `key` ("ttft_p99" -> "slo.ttft_p99_ms"; the first spellings
    p99_ms / p50_ms where the workload uses them)."""
    slo = s.workload.slo
    for old, k in (("p99_ms", "e2e_p99"), ("p50_ms", "e2e_p50")):
        if key == k and getattr(slo, old) is not None:
            return f"slo.{old}"
    return f"slo.{key}_ms" if key != "goodput_pct" else "slo.goodput_pct"


def reachable_hint(s: PlanSetup, fleets: list[FleetPlan]) -> str:
    """'; reachable: slo.ttft_p99_ms = 2300 ... (N x inst meet every objective then)': the objectives that a
    simulated fleet of the least-relaxed instance does meet; "" when none is known."""
    stated = s.workload.slo.objectives()
    if s.workload.slo.goodput_pct is not None:
        stated["goodput_pct"] = float(s.workload.slo.goodput_pct)

    def relax(f: FleetPlan) -> float:
        return max(
            (v / stated[k] if k != "goodput_pct" else stated[k] / max(v, 1e-9))
            for k, v in f.slo_reach.items()
            if k in stated
        )

    known = [f for f in fleets if f.slo_reach]
    if not known:
        return ""
    f = min(known, key=relax)
    moved = [(k, v) for k, v in f.slo_reach.items() if k in stated and v != stated[k]]
    if not moved:
        return ""
    sets = ", ".join(f"{slo_key(s, k)} = {v:g}" for k, v in moved)
    n = f.slo_reach_count
    who = f"{n} x {f.instance}" if n else f.instance
    return f"; reachable when set: {sets} ({who} meet every objective then)"


def verdict(
    s: PlanSetup,
    traffic: TrafficSummary | None,
    shapes: ShapeSummary | None,
    readiness: ReadinessSummary,
    fl: FleetsStage,
) -> VerdictStage:
    wl, th = s.workload, s.thresholds
    fleet_rate = rate(s.catalog, s.fleet.name, wl.fleet.region, wl.fleet.term)
    gpu = fl.gpu
    gpu_hours = float(gpu.throughput.value) if s.kind == "training" and gpu.throughput else None
    today = _today(s, fleet_rate, gpu_hours)
    hours = cost.D(wl.fleet.hours_per_month)
    porting_usd = cost.porting_cost(wl.porting.engineer_days, wl.porting.day_rate_usd)
    porting = Figure(
        porting_usd,
        "USD",
        "stated",
        f"{wl.porting.engineer_days:g} engineer-days x {wl.porting.day_rate_usd} USD/day (assumption)",
    )
    util = wl.utilization
    slo_on = s.kind == "serving" and wl.slo.any
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
        tokens_per_request=tokens_per_request(s, traffic),
        horizon_months=wl.horizon_months,
        monthly_now_usd=today.value,
        monthly_after_usd=None,
        porting_usd=porting_usd,
        payback_month=None,
        slo_p99_ms=wl.slo.objectives().get("e2e_p99") if slo_on else None,
        slo_text=_slo_text(s) if slo_on else None,
    )
    base_scn = Scenario(
        kind=wl.kind,
        monthly_today=today.value,
        fleet_count=wl.fleet.count,
        hours_per_month=hours,
        gpu_rate=gpu_hourly(s, today, fleet_rate),
        cand_rate=None,
        porting_usd=porting_usd,
        horizon_months=wl.horizon_months,
        gpu_sizer=fl.sizers.get(s.fleet.name),
        mean_rps=traffic.mean_rps if traffic else None,
        gpu_hours=gpu_hours,
        runs_per_month=wl.job.runs_per_month if wl.job else None,
        overflow_share=shapes.overflow_share if shapes else None,
        overflow_policy=shapes.overflow_policy if shapes else None,
    )
    base_money = economics(base_scn)
    base_facts = replace(base_facts, monthly_now_usd=base_money.monthly_now)
    if s.kind == "serving" and _redundancy_only(s, base_money, base_scn):
        base_facts = replace(base_facts, bill_usd=today.value)  # N+1 is not today's spend
    monthly_now = today
    if s.kind == "serving" and base_money.gpu_count is not None:
        monthly_now = Figure(
            base_money.monthly_now,
            "USD/month",
            "computed",
            f"{base_money.gpu_count} x {s.fleet.name} (sized for the busiest window, like the candidates) x "
            f"{base_scn.gpu_rate:.4f} USD/h x {hours} h",
        )
    notes = list(_gpu_notes(s, today, base_money, gpu, base_scn))
    gpu_cpm = None
    if s.kind == "serving" and gpu.throughput is not None and base_scn.gpu_rate is not None:
        gpu_cpm = cost.cost_per_million(float(gpu.throughput.value), base_scn.gpu_rate, util)

    results: list[tuple[CandidateResult, Scenario, Facts]] = []
    for inst, fleet in zip(s.candidates, fl.candidates, strict=True):
        r, priced = candidate_rate(s.catalog, inst.name, s.region, wl.pricing.term)
        blocks = priced.lengths if priced is not None and priced.is_capacity_block else None
        excluded = fl.excluded.get(inst.name)
        thr = fleet.throughput
        scn = replace(
            base_scn,
            cand_rate=r.value if r else None,
            cand_sizer=fl.sizers.get(inst.name),
            cand_block_lengths=blocks,
        )
        if s.kind == "training":
            scn = replace(scn, cand_hours=float(thr.value) if thr is not None else None)
        if thr is None:
            excluded = excluded or "no throughput: nothing projected and no figure given for it"
        if s.kind == "serving" and fleet.meets_slo is False:
            excluded = excluded or (
                "no fleet size meets the SLO: " + _floor_words(fleet)
                if fleet.count is None or (thr is not None and thr.kind == "projected")
                else f"misses the SLO ({_latency_words(fleet)})"
            )
        if r is None:
            excluded = (
                excluded or f"no published {wl.pricing.term} price in {s.region} (unknown, not guessed)"
            )
        money: Money = economics(scn)
        cpm = None
        if s.kind == "serving" and r is not None and thr is not None:
            cpm = cost.cost_per_million(float(thr.value), r.value, util)
        tgt = rules_target(inst.family)
        facts = replace(
            base_facts,
            target=inst.name,
            target_kind=inst.kind,
            meets_slo=fleet.meets_slo,
            readiness_blockers=readiness.for_target(tgt).blockers if readiness.checked else None,
            throughput_assumed=thr is not None and thr.kind == "assumption",
            throughput_label=thr.label if thr is not None and thr.kind in ("projected", "measured") else None,
        )
        block_words = ""
        if blocks is not None and money.monthly_after is not None:
            block_words, caveat = block_caveat(s, scn, money, priced)
            facts = replace(facts, cautions=(*facts.cautions, caveat))
        cand = CandidateResult(
            inst.name,
            inst.kind,
            r,
            thr,
            money.count,
            money.monthly_after,
            cpm,
            money.saving,
            money.saving_pct,
            money.payback_month,
            money.payback_run,
            fleet.meets_slo,
            excluded,
            fleet=fleet,
            term=priced.term if priced is not None else "",
            block=block_words,
        )
        results.append((cand, scn, facts))

    # the pick: the largest monthly saving among priced, fitting, SLO-meeting candidates, preferring those
    # whose
    # readiness target has no predicted blockers; an SLO that is set but not evaluated is never a pass
    viable = [r for r in results if r[0].excluded is None and r[0].saving_usd is not None]
    clean = [r for r in viable if r[2].readiness_blockers == 0]
    pool = clean or viable
    pool = [r for r in pool if r[0].meets_slo is True] or pool
    chosen = max(pool, key=lambda r: r[0].saving_usd or Decimal(0)) if pool else None
    final: list[CandidateResult] = []
    for c, scn, facts in results:
        why, rng = band_check(facts, scn, th, c, gpu) if c.saving_pct is not None else (None, (None, None))
        final.append(replace(c, saving_pct_range=rng))
        if chosen is not None and c is chosen[0]:
            chosen = (final[-1], scn, replace(facts, band_flip=why))
    unmeasured, fixable = unmeasured_candidates(s, traffic, readiness, final, base_money)
    lost = cannot_win(s, traffic, final, base_money)
    if chosen is not None:
        best, scn, facts = chosen
        facts = replace(facts, unmeasured=unmeasured, blockers_fixable=fixable)
        v = evaluate(facts, scn, th)
        if readiness.checked:
            readiness = readiness.for_target(rules_target(s.catalog.instance(best.instance).family))
    else:
        best = None
        scn = base_scn
        facts = replace(
            base_facts,
            no_candidate_why=_no_candidate(s, final, fl),
            unmeasured=unmeasured,
            blockers_fixable=fixable,
            cannot_win=lost,
        )
        v = decide(facts, th)
    return VerdictStage(
        tuple(final),
        best,
        v,
        facts,
        scn,
        monthly_now,
        today,
        fleet_rate,
        gpu_cpm,
        porting,
        readiness,
        base_money.gpu_count,
        tuple(notes),
        gpu,
    )


def _latency_words(fleet: FleetPlan) -> str:
    parts = []
    for name, fig in (("end-to-end p99", fleet.e2e_p99), ("TTFT p99", fleet.ttft_p99)):
        if fig is not None:
            parts.append(f"{name} {float(fig.value):,.0f} ms, {fig.label}")
    return "; ".join(parts) or "no latency figure"


def _no_candidate(s: PlanSetup, cands: list[CandidateResult], fl: FleetsStage) -> str | None:
    slo_out = [c for c in cands if c.excluded and c.excluded.startswith("no fleet size meets the SLO")]
    if slo_out and len(slo_out) == len(cands):
        need = reachable_hint(s, [c.fleet for c in slo_out if c.fleet])
        gpu = fl.gpu
        gpu_words = (
            f"; today's {_floor_words(gpu)} cannot meet it either"
            if gpu.meets_slo is False and (gpu.slo_floor_ms is not None or gpu.slo_blocking)
            else ""
        )
        return (
            f"no fleet size meets the SLO ({_slo_text(s)}) on any candidate: "
            + ", ".join(_floor_words(c.fleet) for c in slo_out if c.fleet)
            + need
            + gpu_words
        )
    if cands and all(c.excluded for c in cands):
        return "no candidate can be chosen: " + "; ".join(f"{c.instance}: {c.excluded}" for c in cands)
    return None


def _redundancy_only(s: PlanSetup, money: Money, scn: Scenario) -> bool:
    """The like-for-like GPU fleet is larger than today's only by the redundancy floor (N+1)."""
    needed, alone = money.gpu_count, _alone(scn)
    n_today = s.workload.fleet.count
    return needed is not None and alone is not None and alone <= n_today < needed


def _alone(scn: Scenario | None) -> int | None:
    """The GPU instances the traffic needs without the redundancy floor (None when not sized that way)."""
    sizer = scn.gpu_sizer if scn is not None else None
    if sizer is None or not hasattr(sizer, "least"):
        return None
    return replace(sizer, least=1).count()  # type: ignore[type-var]


def _gpu_notes(
    s: PlanSetup, today: Figure, money: Money, gpu: FleetPlan, scn: Scenario | None = None
) -> tuple[str, ...]:
    """Today's GPU fleet against the fleet the traffic needs (sized like the candidates). A fleet the SLO
    needs fewer of than the redundancy floor (targets.min_replicas, N+1) is redundancy, not an SLO miss: both
    sizes are priced."""
    if s.kind != "serving":
        return ()
    n_today, needed = s.workload.fleet.count, money.gpu_count
    alone = _alone(scn)
    least = s.workload.targets.min_replicas
    if needed is not None and alone is not None and alone < needed and n_today < needed and alone <= n_today:
        rate = scn.gpu_rate if scn is not None else None
        hours = cost.D(s.workload.fleet.hours_per_month)
        priced = (
            f": {cost.monthly_cost(rate, alone, hours).quantize(Decimal('0.01')):,} USD/month with {alone}, "
            f"{money.monthly_now.quantize(Decimal('0.01')):,} with {needed}"
            if rate is not None
            else ""
        )
        return (
            f"today's {n_today} x {gpu.instance} meets the SLO with {alone}; N+1 asks for {needed} "
            f"(targets.min_replicas = {least}: redundancy, not an SLO miss){priced}; the candidates are held "
            f"to the same floor, so the saving compares with {needed}",
        )
    if gpu.meets_slo is False and needed is None:
        floor = f" (its unloaded latency is {gpu.slo_floor_ms:,.0f} ms)" if gpu.slo_floor_ms else ""
        return (f"no number of {gpu.instance} meets the SLO{floor}: the saving compares with today's bill",)
    if needed is None:
        return ()
    simulated = gpu.throughput is not None and gpu.sizing.startswith("simulated")
    need = (
        "the SLO needs"
        if simulated
        else f"the busiest window needs at {s.workload.utilization:.0%} utilization"
    )
    band = _count_band(gpu.count_range, needed)
    if needed > n_today:
        miss = "misses the SLO at the busiest window" if simulated else "is too small for the busiest window"
        return (
            f"today's GPU fleet {miss}: {n_today} x {gpu.instance}, where {need} {needed}{band}; the saving "
            "compares "
            f"with those {needed} ({money.monthly_now.quantize(Decimal('0.01')):,} USD/month)",
        )
    if needed < n_today and today.value > 0:
        gain = today.value - money.monthly_now
        return (
            f"today's GPU fleet is larger than {need}: {needed} x {gpu.instance} would do{band}, which saves "
            f"{gain.quantize(Decimal('0.01')):,} USD/month ({gain / today.value * 100:.1f}%) without a port; "
            "the saving of a move compares with that right-sized fleet",
        )
    return ()
