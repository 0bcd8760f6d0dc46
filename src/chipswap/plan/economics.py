"""Economics stage: monthly cost now and after, saving and payback, for one candidate in one scenario.

A Scenario holds every number the money depends on, including the knobs the sensitivity and the error band
turn (traffic factor, each side's speed, porting, price terms); `economics` re-sizes BOTH fleets with their
sizers for the scenario's traffic and speeds, so every variation is like for like. Pure: Decimal money through
chipswap.economics.cost; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal

from chipswap.economics import cost
from chipswap.plan.sizing import Sizer
from chipswap.verdict.rules import Facts, Reason, Thresholds, Verdict, decide


@dataclass(frozen=True)
class Scenario:
    """The numbers the money depends on, for one candidate; evaluate() re-runs the verdict on a variation.

    Serving: the GPU fleet needed is gpu_sizer.count(traffic_factor, gpu_speed) x gpu_rate (like for like with
    the candidate); without a GPU sizer the baseline is today's bill. Training: hours per run / speed x rate x
    count x runs per month (x traffic_factor)."""

    kind: str
    monthly_today: Decimal  # what today's fleet costs (the stated bill, or count x rate x hours)
    fleet_count: int  # today's GPU instances
    hours_per_month: Decimal
    gpu_rate: Decimal | None  # USD/h per GPU instance (the stated bill / count / hours when a bill is given)
    cand_rate: Decimal | None
    porting_usd: Decimal
    horizon_months: int
    gpu_sizer: Sizer | None = None
    cand_sizer: Sizer | None = None
    traffic_factor: float = 1.0
    gpu_speed: float = 1.0  # x the GPU figure's throughput (1 = as figured; the band's edges vary it)
    cand_speed: float = 1.0
    mean_rps: float | None = None
    gpu_hours: float | None = None
    cand_hours: float | None = None
    runs_per_month: float | None = None
    overflow_share: float | None = None  # share of requests no compiled shape holds (0..1)
    overflow_policy: str | None = None
    # the candidate bought as EC2 Capacity Blocks: the block lengths its rate is sold in (None: billed per
    # hour). Serving: the horizon as a chain of blocks, renewals at today's rate; training: one block per run
    cand_block_lengths: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Money:
    monthly_now: Decimal  # the baseline: the GPU fleet sized like for like (or today's bill)
    count: int | None
    monthly_after: Decimal | None
    saving: Decimal | None
    saving_pct: Decimal | None
    payback_month: int | None
    payback_run: int | None
    gpu_count: int | None = None  # GPU instances needed (serving), None when the GPU side is not sized


def economics(s: Scenario) -> Money:
    """Monthly cost now and after, saving and payback for one scenario (cost engine of
    chipswap.economics.cost)."""
    run = None
    gpu_count = None
    if s.kind == "serving":
        now = s.monthly_today
        if s.gpu_sizer is not None and s.gpu_rate is not None:
            gpu_count = s.gpu_sizer.count(s.traffic_factor, s.gpu_speed)
            if gpu_count is not None:
                now = cost.monthly_cost(s.gpu_rate, gpu_count, s.hours_per_month)
        count = s.cand_sizer.count(s.traffic_factor, s.cand_speed) if s.cand_sizer is not None else None
        if s.cand_rate is None or count is None:
            return Money(now, count, None, None, None, None, None, gpu_count)
        if s.cand_block_lengths:
            chain = held_as_blocks(s, count)
            after = chain.usd / cost.D(s.horizon_months)
        else:
            after = cost.monthly_cost(s.cand_rate, count, s.hours_per_month)
    else:
        assert s.gpu_hours is not None and s.gpu_rate is not None and s.runs_per_month is not None
        runs = cost.D(s.runs_per_month * s.traffic_factor)
        per_run_now = cost.job_cost(s.gpu_hours / s.gpu_speed, s.gpu_rate, s.fleet_count)
        now = per_run_now * runs
        if s.cand_rate is None or s.cand_hours is None:
            return Money(now, None, None, None, None, None, None)
        count = s.fleet_count
        if s.cand_block_lengths:
            per_run_after = run_as_block(s, s.cand_hours / s.cand_speed).usd
        else:
            per_run_after = cost.job_cost(s.cand_hours / s.cand_speed, s.cand_rate, s.fleet_count)
        after = per_run_after * runs
        run = cost.break_even(s.porting_usd, per_run_now - per_run_after).period
    saving = now - after
    pct = saving / now * 100 if now > 0 else None
    month = cost.break_even(s.porting_usd, saving).period
    return Money(now, count, after, saving, pct, month, run, gpu_count)


def held_as_blocks(s: Scenario, count: int) -> cost.BlockCost:
    """The candidate fleet held for the whole horizon as consecutive Capacity Blocks (today's rate)."""
    assert s.cand_rate is not None and s.cand_block_lengths
    hours = cost.horizon_hours(s.horizon_months)
    return cost.block_chain_cost(hours, s.cand_rate, count, s.cand_block_lengths)


def run_as_block(s: Scenario, hours: float) -> cost.BlockCost:
    """One training run as the shortest Capacity Block covering its hours (a chain when longer than any)."""
    assert s.cand_rate is not None and s.cand_block_lengths
    lengths = s.cand_block_lengths
    if cost.block_days_covering(hours, lengths) is None:
        return cost.block_chain_cost(hours, s.cand_rate, s.fleet_count, lengths)
    return cost.block_job_cost(hours, s.cand_rate, s.fleet_count, lengths)


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


def cautions(s: Scenario) -> tuple[Reason, ...]:
    """Checks outside the seed's screening: requests no compiled shape holds."""
    if s.kind != "serving" or not s.overflow_share:
        return ()
    share = s.overflow_share * 100
    policy = s.overflow_policy or "reject"
    bad = policy == "reject" and share > OVERFLOW_CLOSE_PCT
    return (
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
        ),
    )


def evaluate(base: Facts, s: Scenario, th: Thresholds) -> Verdict:
    """The verdict of one scenario (the sensitivity and the band re-run this on variations)."""
    money = economics(s)
    facts = replace(facts_for(base, s, money), cautions=cautions(s) + base.cautions)
    return decide(facts, th)
