"""The trial kit on a candidate sold as EC2 Capacity Blocks (trn2): the kit costs the shortest block covering
the trial (whole days, paid up front) beside the same hours per hour, and its README shows how to find and buy
an offering with the AWS CLI (the purchase first with --dry-run). No plan run, no AWS."""

from __future__ import annotations

import math
from dataclasses import replace
from decimal import Decimal

from chipswap.economics.catalog import BLOCK_DAYS
from chipswap.economics.catalog_io import load_catalog
from chipswap.trial.costing import trial_cost
from chipswap.trial.kit import render_kit
from tests.trial_helpers import llm_spec

RATE = load_catalog().rate("trn2.48xlarge", "us-east-2", "capacity-block")


def trn2_spec():
    spec = llm_spec()
    neuron = replace(
        spec.neuron,
        instance="trn2.48xlarge",
        term="capacity-block",
        region="us-east-2",
        rate_usd_h=RATE.usd_per_hour,
        rate_source=f"catalog: Capacity Block only, as of {RATE.as_of}: {RATE.source}",
    )
    return replace(spec, neuron=neuron)


def test_the_trial_costs_the_shortest_block_that_covers_it() -> None:
    spec = trn2_spec()
    cost = trial_cost(spec)
    days = next(d for d in BLOCK_DAYS if d * 24 >= cost.hours)
    assert cost.block_days == days == math.ceil(cost.hours / 24)
    assert cost.usd == (days * 24 * RATE.usd_per_hour).quantize(Decimal("0.01"))
    assert cost.per_hour_usd is not None and cost.per_hour_usd < cost.usd  # a block bills every hour
    line = cost.line("trn2.48xlarge", "capacity-block")
    assert f"one {days}-day Capacity Block, ${cost.usd:,.2f} paid up front" in line
    assert f"Capacity Block only, as of {RATE.as_of}" in line
    # a longer trial needs a longer block
    longer = trial_cost(replace(spec, weights_gib=140.0))
    assert longer.hours > cost.hours and longer.block_days == math.ceil(longer.hours / 24)


def test_the_readme_shows_how_to_find_and_buy_an_offering() -> None:
    spec = trn2_spec()
    files = render_kit(spec, ["Instance: test"], "ContextTokens,GeneratedTokens\n64,8\n")
    readme = next(
        v[0] if isinstance(v, tuple) else v for name, v in files.items() if name.endswith("README.md")
    )
    hours = trial_cost(spec).block_days * 24
    assert (
        "aws ec2 describe-capacity-block-offerings --region us-east-2 --instance-type trn2.48xlarge" in readme
    )
    assert f"--capacity-duration-hours {hours}" in readme
    buy = [line for line in readme.splitlines() if "--instance-platform Linux/UNIX" in line]
    assert buy and buy[0].rstrip().endswith("--dry-run")  # the dry run comes first
    assert "MarketType=capacity-block" in readme
    assert "one 1-day Capacity Block" in readme or "-day Capacity Block" in readme


def test_an_on_demand_candidate_gets_no_booking_steps() -> None:
    files = render_kit(llm_spec(), ["Instance: test"], "ContextTokens,GeneratedTokens\n64,8\n")
    readme = next(
        v[0] if isinstance(v, tuple) else v for name, v in files.items() if name.endswith("README.md")
    )
    assert "purchase-capacity-block" not in readme
