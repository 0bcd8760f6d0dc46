"""Cost engine (chipswap.economics.cost): exact Decimal math, break-even, serving cost, property tests."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chipswap.economics import cost as C
from chipswap.economics.catalog import ReservedTerm, effective_reserved_rate
from chipswap.errors import ChipswapError

money = st.decimals(min_value="0.01", max_value="100000", places=2)
hours = st.decimals(min_value="0.01", max_value="10000", places=2)
rates = st.decimals(min_value="0", max_value="200", places=5)


def test_seed_worked_example_numbers() -> None:
    gpu = C.job_cost(20, Decimal("55.04"))
    trn = C.job_cost(26, Decimal("21.50"))
    trn_3yr = C.job_cost(26, Decimal("8.20"))
    assert C.usd(gpu) == Decimal("1100.80")
    assert C.usd(trn) == Decimal("559.00")
    assert C.usd(trn_3yr) == Decimal("213.20")
    cmp = C.compare(gpu, trn)
    assert cmp.saving_usd == Decimal("541.80")
    assert round(cmp.saving_pct) == 49  # "close to a 49 percent cut"
    be = C.break_even(C.porting_cost(3), cmp.saving_usd)
    assert be.period == 5  # "by the fifth identical run it is"
    assert be.cumulative[0] < 0  # "the first run is not cheaper"
    assert be.cumulative[3] < 0 <= be.cumulative[4]


def test_job_cost_is_hours_times_rate_times_count_exactly() -> None:
    assert C.job_cost("0.1", "0.2", 3) == Decimal("0.06")  # no float drift
    assert C.job_cost(2.5, 1.1) == Decimal("2.75")


@pytest.mark.parametrize("bad", [0, -1, "-0.5", "abc", float("nan")])
def test_job_cost_rejects_bad_hours(bad: object) -> None:
    with pytest.raises(ChipswapError, match="hours"):
        C.job_cost(bad, 10)


def test_compare_negative_saving_when_candidate_costs_more() -> None:
    cmp = C.compare(100, 150)
    assert cmp.saving_usd == Decimal(-50)
    assert cmp.saving_pct == Decimal(-50)


def test_porting_cost_default_day_rate_is_800() -> None:
    assert C.porting_cost(3) == Decimal(2400)
    assert C.porting_cost("1.5", 1000) == Decimal(1500)


def test_break_even_never_when_no_saving() -> None:
    be = C.break_even(2400, 0, max_periods=10)
    assert be.period is None and be.never
    assert len(be.cumulative) == 10 and all(x == -2400 for x in be.cumulative)
    assert C.break_even(2400, -5, max_periods=3).period is None
    assert C.break_even(10**6, 1, max_periods=100).period is None  # beyond the horizon


def test_break_even_with_no_one_time_cost_is_first_period() -> None:
    assert C.break_even(0, 1).period == 1
    assert C.break_even(0, 0).period == 1
    assert C.break_even(0, -1, max_periods=5).period is None


def test_cost_per_million_matches_neuron_pages_formula() -> None:
    # 1e6 / 1000 req/s x $0.7582/h / 3600
    got = C.cost_per_million(1000, Decimal("0.7582"))
    assert abs(got - Decimal(1000) * Decimal("0.7582") / Decimal(3600)) < Decimal("1e-20")
    assert C.cost_per_million(1000, Decimal("0.7582"), 0.5) == got * 2
    with pytest.raises(ChipswapError, match="throughput"):
        C.cost_per_million(0, 1)
    with pytest.raises(ChipswapError, match="utilization"):
        C.cost_per_million(10, 1, 1.5)


def test_monthly_cost_and_fleet_size() -> None:
    assert C.monthly_cost(Decimal("0.7582"), 4) == Decimal("0.7582") * 4 * 730
    assert C.fleet_size(2000, 900, "0.6") == 4  # 2000 / 540 = 3.7 -> 4
    assert C.fleet_size(1, 1000) == 1


def test_effective_reserved_rate() -> None:
    term = ReservedTerm(Decimal("8760"), Decimal("1.5"), 1)
    assert effective_reserved_rate(term) == Decimal("2.5")
    term3 = ReservedTerm(Decimal("26280"), Decimal("0"), 3)
    assert effective_reserved_rate(term3) == Decimal(1)
    with pytest.raises(ChipswapError, match="1 or 3"):
        ReservedTerm(Decimal(0), Decimal(1), 2)


# --- properties ---------------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(h1=hours, h2=hours, r=rates, n=st.integers(1, 64))
def test_job_cost_monotone_in_hours(h1: Decimal, h2: Decimal, r: Decimal, n: int) -> None:
    lo, hi = sorted((h1, h2))
    assert C.job_cost(lo, r, n) <= C.job_cost(hi, r, n)


@settings(max_examples=150, deadline=None)
@given(h=hours, r1=rates, r2=rates, n=st.integers(1, 64))
def test_job_cost_monotone_in_rate(h: Decimal, r1: Decimal, r2: Decimal, n: int) -> None:
    lo, hi = sorted((r1, r2))
    assert C.job_cost(h, lo, n) <= C.job_cost(h, hi, n)


@settings(max_examples=150, deadline=None)
@given(
    tp1=st.decimals(min_value="0.01", max_value="1e5", places=2),
    tp2=st.decimals(min_value="0.01", max_value="1e5", places=2),
    r=rates,
)
def test_cost_per_million_falls_as_throughput_rises(tp1: Decimal, tp2: Decimal, r: Decimal) -> None:
    lo, hi = sorted((tp1, tp2))
    assert C.cost_per_million(hi, r) <= C.cost_per_million(lo, r)


@settings(max_examples=300, deadline=None)
@given(
    one_time=st.decimals(min_value="0", max_value="50000", places=2),
    saving=st.decimals(min_value="-1000", max_value="5000", places=2),
)
def test_break_even_consistent_with_cumulative_savings(one_time: Decimal, saving: Decimal) -> None:
    be = C.break_even(one_time, saving, max_periods=500)
    # cumulative[k-1] is the net position after k periods
    for k, net in enumerate(be.cumulative, 1):
        assert net == k * saving - one_time
    if be.period is None:
        assert len(be.cumulative) == 500
        assert all(net < 0 for net in be.cumulative)  # never covered within the horizon
    else:
        assert len(be.cumulative) == be.period
        assert be.cumulative[-1] >= 0  # paid back in that period ...
        assert all(net < 0 for net in be.cumulative[:-1])  # ... and not before


@settings(max_examples=150, deadline=None)
@given(b=money, c=money)
def test_compare_saving_adds_up(b: Decimal, c: Decimal) -> None:
    cmp = C.compare(b, c)
    assert cmp.saving_usd + c == b
    assert (cmp.saving_pct > 0) == (c < b)
