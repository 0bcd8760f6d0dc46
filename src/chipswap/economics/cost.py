"""Cost engine: job cost, baseline-vs-candidate comparison, porting cost and break-even, serving cost.

Pure arithmetic on Decimal (money never passes through float). No files, clock, network or torch; prices
come in as arguments (see chipswap.economics.catalog for where they come from). Round only when printing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from chipswap.economics.catalog import (
    BLOCK_DAYS,
    HOURS_PER_DAY,
    MAX_BLOCK_DAYS,
    block_chain,
    block_days_covering,
    check_block_days,
)
from chipswap.economics.money import D
from chipswap.errors import ChipswapError

DEFAULT_DAY_RATE_USD = Decimal("800")
HOURS_PER_MONTH = 730  # AWS's convention: 8760 h / 12
CENT = Decimal("0.01")


def _positive(value: object, name: str) -> Decimal:
    d = D(value, name)
    if d <= 0:
        raise ChipswapError(f"{name} must be greater than 0, got {value}; pass a positive number")
    return d


def _non_negative(value: object, name: str) -> Decimal:
    d = D(value, name)
    if d < 0:
        raise ChipswapError(f"{name} must not be negative, got {value}; pass 0 or more")
    return d


def usd(value: Decimal) -> Decimal:
    """Round to the cent for display (half-up, as a bill would)."""
    return value.quantize(CENT, rounding="ROUND_HALF_UP")


def job_cost(hours: object, usd_per_hour: object, count: object = 1) -> Decimal:
    """Total cost to finish a job: hours x hourly rate x instance count."""
    h = _positive(hours, "hours")
    r = _non_negative(usd_per_hour, "usd_per_hour")
    n = _positive(count, "count")
    return h * r * n


@dataclass(frozen=True)
class Comparison:
    baseline_usd: Decimal
    candidate_usd: Decimal
    saving_usd: Decimal  # baseline - candidate; negative when the candidate costs more
    saving_pct: Decimal  # saving as a percentage of the baseline


def compare(baseline_usd: object, candidate_usd: object) -> Comparison:
    b = _positive(baseline_usd, "baseline cost")
    c = _non_negative(candidate_usd, "candidate cost")
    saving = b - c
    return Comparison(b, c, saving, saving / b * 100)


def porting_cost(engineer_days: object, day_rate_usd: object = DEFAULT_DAY_RATE_USD) -> Decimal:
    """One-time cost of porting and validating on Neuron: engineer-days x day rate."""
    return _non_negative(engineer_days, "engineer_days") * _non_negative(day_rate_usd, "day_rate_usd")


@dataclass(frozen=True)
class BreakEven:
    one_time_usd: Decimal
    saving_per_period_usd: Decimal
    period: (
        int | None
    )  # 1-based period in which cumulative saving first covers the one-time cost; None = never
    cumulative: tuple[Decimal, ...]  # net position after each period: k x saving - one_time, k = 1..

    @property
    def never(self) -> bool:
        return self.period is None


def break_even(one_time_usd: object, saving_per_period_usd: object, max_periods: int = 1000) -> BreakEven:
    """Which period (run or month) pays the one-time cost back: the first k with k x saving >= one_time.

    `cumulative` runs up to the break-even period, or to max_periods when it never pays back within them.
    """
    c = _non_negative(one_time_usd, "one-time cost")
    s = D(saving_per_period_usd, "saving per period")
    if max_periods < 1:
        raise ChipswapError(f"max_periods must be at least 1, got {max_periods}; pass 1 or more")
    if s > 0:
        period: int | None = max(1, math.ceil(c / s))
    elif c == 0 and s == 0:
        period = 1
    else:
        period = None
    if period is not None and period > max_periods:
        period = None
    length = period if period is not None else max_periods
    cumulative = tuple(k * s - c for k in range(1, length + 1))
    return BreakEven(c, s, period, cumulative)


def cost_per_million(throughput_per_s: object, usd_per_hour: object, utilization: object = 1.0) -> Decimal:
    """USD per 1M requests (or inferences): 1e6 / throughput x hourly rate / 3600, divided by utilization."""
    t = _positive(throughput_per_s, "throughput")
    r = _non_negative(usd_per_hour, "usd_per_hour")
    u = _positive(utilization, "utilization")
    if u > 1:
        raise ChipswapError(f"utilization must be in (0, 1], got {utilization}; pass e.g. 0.6 for 60 %")
    return Decimal(1_000_000) / t * r / Decimal(3600) / u


def monthly_cost(
    usd_per_hour: object, count: object = 1, hours_per_month: object = HOURS_PER_MONTH
) -> Decimal:
    """A fleet's monthly bill: rate x instance count x hours per month (730 by default)."""
    return (
        _non_negative(usd_per_hour, "usd_per_hour")
        * _positive(count, "count")
        * _positive(hours_per_month, "hours_per_month")
    )


def fleet_size(requests_per_s: object, throughput_per_s: object, utilization: object = 1.0) -> int:
    """Instances needed to carry a request rate at a target utilization (at least 1)."""
    rps = _positive(requests_per_s, "requests per second")
    t = _positive(throughput_per_s, "throughput")
    u = _positive(utilization, "utilization")
    return max(1, math.ceil(rps / (t * u)))


# --- the whole job comparison (the seed's worked example) ---------------------------------------------------
@dataclass(frozen=True)
class JobOption:
    label: str  # e.g. "on-demand", "3yr"
    instance: str
    hours: Decimal
    count: int
    usd_per_hour: Decimal
    cost_usd: Decimal


@dataclass(frozen=True)
class JobLine:
    option: JobOption
    comparison: Comparison
    per_run: BreakEven
    per_month: BreakEven | None  # only when runs per month are given


@dataclass(frozen=True)
class JobComparison:
    baseline: JobOption
    lines: tuple[JobLine, ...]
    porting_usd: Decimal
    engineer_days: Decimal
    day_rate_usd: Decimal
    runs_per_month: Decimal | None


def job_option(label: str, instance: str, hours: object, usd_per_hour: object, count: int = 1) -> JobOption:
    h = _positive(hours, "hours")
    r = _non_negative(usd_per_hour, "usd_per_hour")
    return JobOption(label, instance, h, count, r, job_cost(h, r, count))


def compare_jobs(
    baseline: JobOption,
    candidates: tuple[JobOption, ...] | list[JobOption],
    engineer_days: object = 0,
    day_rate_usd: object = DEFAULT_DAY_RATE_USD,
    runs_per_month: object | None = None,
    max_periods: int = 1000,
) -> JobComparison:
    """Baseline job vs each candidate option: saving per run, and the run (and month) porting pays back."""
    days = _non_negative(engineer_days, "engineer_days")
    rate = _non_negative(day_rate_usd, "day_rate_usd")
    one_time = porting_cost(days, rate)
    rpm = _positive(runs_per_month, "runs per month") if runs_per_month is not None else None
    lines = []
    for cand in candidates:
        cmp = compare(baseline.cost_usd, cand.cost_usd)
        per_run = break_even(one_time, cmp.saving_usd, max_periods)
        per_month = break_even(one_time, cmp.saving_usd * rpm, max_periods) if rpm is not None else None
        lines.append(JobLine(cand, cmp, per_run, per_month))
    return JobComparison(baseline, tuple(lines), one_time, days, rate, rpm)


# --- Capacity Blocks: a reservation of whole days, paid up front ------------------------------------------
@dataclass(frozen=True)
class BlockCost:
    """What a run or a horizon costs as EC2 Capacity Blocks: the blocks (days each), the hours billed (every
    hour of each block, used or not) and the total paid up front."""

    blocks: tuple[int, ...]
    count: int
    usd_per_hour: Decimal
    used_hours: Decimal

    @property
    def days(self) -> int:
        return sum(self.blocks)

    @property
    def billed_hours(self) -> int:
        return self.days * HOURS_PER_DAY

    @property
    def usd(self) -> Decimal:
        return Decimal(self.billed_hours) * self.usd_per_hour * self.count

    @property
    def per_hour_usd(self) -> Decimal:
        """The same hours priced per hour (what the block would cost if only the used hours were billed)."""
        return self.used_hours * self.usd_per_hour * self.count

    @property
    def words(self) -> str:
        if len(self.blocks) == 1:
            return f"one {self.blocks[0]}-day Capacity Block"
        return f"a chain of {len(self.blocks)} Capacity Blocks ({' + '.join(map(str, self.blocks))} days)"


def block_job_cost(
    hours: object,
    usd_per_hour: object,
    count: object = 1,
    lengths: tuple[int, ...] = BLOCK_DAYS,
    days: int | None = None,
) -> BlockCost:
    """One run as one Capacity Block: the shortest sold block covering `hours` (whole days), or the given
    `days` (it must be sold and cover the hours). Longer than the longest block: ChipswapError, with
    the fix."""
    h = _positive(hours, "hours")
    r = _non_negative(usd_per_hour, "usd_per_hour")
    n = int(_positive(count, "count"))
    if days is not None:
        check_block_days(days, lengths)
        if days * HOURS_PER_DAY < h:
            raise ChipswapError(
                f"a {days}-day Capacity Block does not cover {h.normalize():f} h; "
                f"use at least {block_days_covering(h, lengths) or MAX_BLOCK_DAYS} days"
            )
        return BlockCost((days,), n, r, h)
    need = block_days_covering(h, lengths)
    if need is None:
        raise ChipswapError(
            f"{h.normalize():f} h is longer than the longest Capacity Block ({lengths[-1]} days); "
            "split the run, or price it as a chain of blocks"
        )
    return BlockCost((need,), n, r, h)


def block_chain_cost(
    hours: object, usd_per_hour: object, count: object = 1, lengths: tuple[int, ...] = BLOCK_DAYS
) -> BlockCost:
    """A fleet held for `hours` as consecutive Capacity Blocks (block_chain), each renewed at today's rate."""
    h = _positive(hours, "hours")
    r = _non_negative(usd_per_hour, "usd_per_hour")
    n = int(_positive(count, "count"))
    whole_days = int((h / HOURS_PER_DAY).to_integral_value(rounding="ROUND_CEILING"))
    return BlockCost(block_chain(whole_days, lengths), n, r, h)


def horizon_hours(months: object) -> Decimal:
    """Hours in a horizon of `months` (730 h a month, AWS's convention)."""
    return _positive(months, "months") * HOURS_PER_MONTH
