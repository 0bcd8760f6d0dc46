"""EC2 Capacity Blocks as a price term: the block lengths AWS sells, a run as one block, a fleet as a chain of
blocks, bad catalog input (one line, exit 2), and the live path (`chipswap capacity`, `catalog refresh`, the
plan's horizon check) against moto on loopback plus botocore Stubbers for DescribeCapacityBlockOfferings (moto
does not implement it). No test reaches the internet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chipswap.economics import cost as C
from chipswap.economics.aws import access as aws_access
from chipswap.economics.aws.access import AwsAccess
from chipswap.economics.aws.capacity import longest_block_for_plan
from chipswap.economics.capacity import screen_block_horizon
from chipswap.economics.catalog import (
    BLOCK_DAYS,
    MAX_BLOCK_DAYS,
    block_chain,
    block_days_covering,
    check_block_days,
)
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from tests.aws_helpers import Moto, Stubs, routed_factory, sealed
from tests.cli_helpers import run_inproc
from tests.test_cost_cli import TRN2_JOB

SNAP = load_catalog().rate("trn2.48xlarge", "us-east-2", "capacity-block")


# ------------------------------------------------------------------------------------------ pure rules


def test_the_lengths_sold_are_daily_to_14_then_weekly_to_182() -> None:
    steps = [b - a for a, b in zip(BLOCK_DAYS, BLOCK_DAYS[1:], strict=False)]
    assert BLOCK_DAYS[0] == 1 and BLOCK_DAYS[13] == 14 and MAX_BLOCK_DAYS == 182 == 26 * 7
    assert set(steps[:13]) == {1} and set(steps[13:]) == {7}
    for bad in (0, 15, 20, 183, -1):
        with pytest.raises(ChipswapError) as exc:
            check_block_days(bad)
        assert "not sold" in str(exc.value) and "\n" not in str(exc.value)


@given(st.decimals(min_value=Decimal("0.01"), max_value=Decimal(MAX_BLOCK_DAYS * 24), places=2))
def test_the_shortest_covering_block_covers_and_nothing_shorter_does(hours: Decimal) -> None:
    days = block_days_covering(hours)
    assert days is not None and days * 24 >= hours
    assert all(d * 24 < hours for d in BLOCK_DAYS if d < days)


@given(st.integers(min_value=1, max_value=5 * 365))
def test_a_chain_covers_the_days_with_sold_blocks_and_at_most_one_partial(days: int) -> None:
    chain = block_chain(days)
    assert sum(chain) >= days and all(d in BLOCK_DAYS for d in chain)
    assert sum(chain) - days < 7  # the tail is rounded up to a sold length: at most one weekly step over
    assert all(d == MAX_BLOCK_DAYS for d in chain[:-1])


def test_a_run_is_one_block_of_whole_days_and_a_horizon_a_chain() -> None:
    rate = SNAP.usd_per_hour
    run = C.block_job_cost(26, rate, 1)
    assert run.blocks == (2,) and run.usd == 48 * rate and run.per_hour_usd == 26 * rate
    year = C.block_chain_cost(C.horizon_hours(12), rate, 3)
    assert year.blocks == (182, 182, 1) and year.usd == 365 * 24 * rate * 3
    with pytest.raises(ChipswapError, match="does not cover"):
        C.block_job_cost(26, rate, 1, days=1)
    with pytest.raises(ChipswapError, match="longest Capacity Block"):
        C.block_job_cost(183 * 24, rate, 1)


def test_the_horizon_rule_fails_past_the_longest_block_with_the_fix() -> None:
    long = screen_block_horizon("trn2.48xlarge", "us-east-2", 2, 12, None, checked=False, as_of="2026-07-15")
    assert long.outcome == "fail" and long.block_days_needed == 365
    assert "182 + 182 + 1" in long.text and "horizon_months = 5" in long.text and "fix:" in long.text
    short = screen_block_horizon("trn2.48xlarge", "us-east-2", 2, 5, None, checked=False, as_of="x")
    assert short.outcome == "pass" and short.block_days_needed == 153  # 5 x 730 h / 24, rounded up
    live = screen_block_horizon("trn2.48xlarge", "us-east-2", 2, 3, 28, checked=True, as_of="2026-12-01")
    assert live.outcome == "fail" and "28 days" in live.text and "checked with AWS" in live.text
    none = screen_block_horizon("trn2.48xlarge", "us-east-2", 2, 3, 0, checked=True, as_of="2026-12-01")
    assert none.outcome == "fail" and "no Capacity Block offering" in none.text


# ----------------------------------------------------------------------------------- bad catalog input

PRICE = '[[price]]\ninstance = "trn2.48xlarge"\nusd_per_hour = {usd}\nsource = "me"\nas_of = "2026-12-01"\n'


@pytest.mark.parametrize(
    ("extra", "usd", "needle"),
    [
        (
            'region = "us-east-2"\nterm = "capacity-block"\nblock_days = [7, 15]\n',
            "35",
            "15 days is not sold",
        ),
        ('region = "us-east-2"\nterm = "capacity-block"\n', "-3", "must be > 0"),
        ('region = "us-east-2"\n', "35", "missing field 'term'"),
        ('region = "mars-north"\nterm = "capacity-block"\n', "35", "not an AWS region name"),
        (
            'region = "us-east-2"\nterm = "on-demand"\nblock_days = [7]\n',
            "35",
            "only for term capacity-block",
        ),
    ],
)
def test_bad_capacity_block_prices_are_one_line_exit_2(capsys, tmp_path: Path, extra, usd, needle) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(PRICE.format(usd=usd) + extra)
    code, out, err = run_inproc(capsys, "catalog", "show", "trn2.48xlarge", "--catalog", str(f))
    assert code == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


def test_unknown_region_and_unsold_block_on_the_command_line(capsys) -> None:
    code, _, err = run_inproc(
        capsys, "cost", "serve", "--instance", "trn2.48xlarge", "--throughput", "5", "--region", "us-east-9"
    )
    assert code == 2 and "unknown region" in err and err.count("\n") == 1
    code, _, err = run_inproc(capsys, "capacity", "trn2.48xlarge", "--no-aws", "--block-days", "15")
    assert code == 2 and "not sold" in err and err.count("\n") == 1


def test_a_user_block_price_with_its_lengths_prices_the_cost_engine(capsys, tmp_path: Path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text(
        PRICE.format(usd="30") + 'region = "us-east-2"\nterm = "capacity-block"\nblock_days = [7, 14]\n'
    )
    args = [*TRN2_JOB, "--candidate-hours", "26", "--catalog", str(f), "--json"]
    code, out, err = run_inproc(capsys, *args)
    assert code == 0, err
    block = json.loads(out)["candidates"][1]
    assert block["hours"] == 7 * 24 and block["cost_usd"] == 7 * 24 * 30  # the shortest of ITS lengths


# ---------------------------------------------------------------------------------------- live (Stubber)


@pytest.fixture
def aws(moto: Moto, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Moto, Stubs]]:
    stubs = sealed(monkeypatch)
    factory = routed_factory(moto, stubs)
    monkeypatch.setattr(
        aws_access, "access_from_environment", lambda no_aws: AwsAccess(client_factory=factory)
    )
    yield moto, stubs
    moto.terminate_all()


def offering(instance: str, count: int, hours: int, upfront: str, zone: str = "us-east-2a") -> dict:
    start = datetime(2026, 12, 14, 11, 30, tzinfo=UTC)
    return {
        "CapacityBlockOfferingId": "cbr-0123456789abcdef0",
        "InstanceType": instance,
        "AvailabilityZone": zone,
        "InstanceCount": count,
        "StartDate": start,
        "EndDate": start + timedelta(hours=hours),
        "CapacityBlockDurationHours": hours,
        "UpfrontFee": upfront,
        "CurrencyCode": "USD",
        "Tenancy": "default",
    }


def stub_offers(stubs: Stubs, instance: str, count: int, hours: int, offers: list[dict]) -> None:
    stubs.respond(
        "ec2",
        "us-east-2",
        "DescribeCapacityBlockOfferings",
        {"CapacityBlockOfferings": offers},
        {"InstanceType": instance, "InstanceCount": count, "CapacityDurationHours": hours},
    )


def test_capacity_shows_the_live_offering_beside_the_dated_rate(aws, capsys) -> None:
    moto, stubs = aws
    stubs.respond("ec2", "us-east-2", "GetSpotPlacementScores", {"SpotPlacementScores": []})
    stub_offers(stubs, "trn2.48xlarge", 1, 168, [offering("trn2.48xlarge", 1, 168, "6007.80")])
    code, out, err = run_inproc(
        capsys, "capacity", "trn2.48xlarge", "--region", "us-east-2", "--block-days", "7"
    )
    assert code == 0, err
    per = (Decimal("6007.80") / 168).quantize(Decimal("0.0001"))
    assert f"live offering ${per}/instance-h" in out.replace("\n", " ")
    assert f"${(per / 16).quantize(Decimal('0.0001'))} per accelerator-hour" in out.replace("\n", " ")
    assert f"the catalog's ${SNAP.usd_per_hour}/h (Capacity Block, as of {SNAP.as_of}" in out.replace(
        "\n", " "
    )


def test_offline_capacity_says_the_rate_is_a_dated_snapshot(capsys) -> None:
    code, out, _ = run_inproc(capsys, "capacity", "trn2.48xlarge", "--no-aws")
    assert code == 0 and f"Capacity Block, as of {SNAP.as_of}" in out and "is a dated snapshot" in out


def test_refresh_reads_trn2_capacity_blocks_and_the_cost_engine_prices_it_live(aws, tmp_path, capsys) -> None:
    moto, stubs = aws
    stubs.respond("pricing", "us-east-1", "GetProducts", {"FormatVersion": "aws_v1", "PriceList": []})
    fee = "840.0000"  # 35 USD an instance-hour: not the snapshot rate
    stub_offers(stubs, "trn2.48xlarge", 1, 24, [offering("trn2.48xlarge", 1, 24, fee)])
    out = tmp_path / "fresh.toml"
    args = ["catalog", "refresh", "--family", "trn2", "--region", "us-east-2", "--out", str(out)]
    code, text, err = run_inproc(capsys, *args)
    assert code == 0, err
    stubs.assert_all_used()
    today = date.today().isoformat()
    live = load_catalog(out).rate("trn2.48xlarge", "us-east-2", "capacity-block")
    assert live.usd_per_hour == Decimal(fee) / 24 and live.as_of == today and live.source == "aws-pricing-api"
    code, text, err = run_inproc(
        capsys, "cost", "serve", "--instance", "trn2.48xlarge", "--throughput", "5", "--catalog", str(out)
    )
    assert code == 0, err
    assert f"Capacity Block, as of {today}" in text
    code, text, err = run_inproc(
        capsys,
        "cost",
        "serve",
        "--instance",
        "trn2.48xlarge",
        "--throughput",
        "5",
        "--catalog",
        str(out),
        "--json",
    )
    assert json.loads(text)["fleets"][0]["monthly_usd"] == float(
        (Decimal(fee) / 24 * 730).quantize(Decimal("0.01"))
    )


def test_the_plans_horizon_check_asks_for_the_horizons_block(aws) -> None:
    moto, stubs = aws
    stub_offers(stubs, "trn2.48xlarge", 2, 182 * 24, [])  # a 12-month horizon: asks for the longest block
    access = aws_access.access_from_environment(False)
    longest, checked, as_of, note = longest_block_for_plan(
        load_catalog(), "trn2.48xlarge", "us-east-2", 2, 365, access=access, today="2026-12-01"
    )
    assert (longest, checked, as_of) == (0, True, "2026-12-01") and "no offering" in note
    stub_offers(stubs, "trn2.48xlarge", 2, 28 * 24, [offering("trn2.48xlarge", 2, 28 * 24, "48000")])
    longest, checked, _, _ = longest_block_for_plan(
        load_catalog(), "trn2.48xlarge", "us-east-2", 2, 28, access=access, today="2026-12-01"
    )
    assert (longest, checked) == (28, True)
    offline = longest_block_for_plan(
        load_catalog(), "trn2.48xlarge", "us-east-2", 2, 28, access=None, today="x"
    )
    assert offline[:2] == (None, False) and "not read" in offline[3]


# ------------------------------------------------------------------------------ the plan's money (pure)


def test_the_plans_money_on_blocks_serving_chain_and_training_one_block_per_run() -> None:
    from chipswap.plan.economics import Scenario, economics

    class Fixed:
        def __init__(self, n: int) -> None:
            self.n = n

        def count(self, traffic: float = 1.0, speed: float = 1.0) -> int:
            return self.n

    rate = SNAP.usd_per_hour
    base = dict(
        monthly_today=Decimal(50_000),
        fleet_count=2,
        hours_per_month=Decimal(730),
        gpu_rate=Decimal(60),
        cand_rate=rate,
        porting_usd=Decimal(0),
        horizon_months=7,
        cand_block_lengths=BLOCK_DAYS,
    )
    serving = economics(Scenario(kind="serving", cand_sizer=Fixed(3), **base))
    days = sum(block_chain(-(-7 * 730 // 24)))  # 213 days -> 182 + 35 (the shortest weekly block covering 31)
    assert days == 182 + 35
    assert serving.monthly_after == days * 24 * rate * 3 / 7
    per_hour = economics(
        Scenario(kind="serving", cand_sizer=Fixed(3), **{**base, "cand_block_lengths": None})
    )
    assert per_hour.monthly_after == 730 * rate * 3 and serving.monthly_after > per_hour.monthly_after
    train = dict(base, fleet_count=1)
    run = economics(Scenario(kind="training", gpu_hours=20.0, cand_hours=30.0, runs_per_month=4.0, **train))
    assert run.monthly_after == 4 * 48 * rate  # each 30 h run is one 2-day block
