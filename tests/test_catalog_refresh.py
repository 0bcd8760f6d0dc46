"""`chipswap catalog refresh`: Price List GetProducts responses (botocore Stubber: moto has no Price List API;
each response is checked against the service model) and EC2 spot price history from a moto server on loopback,
into a user catalog file that --catalog and the plan accept, dated today; all or nothing on failure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from chipswap.economics.aws import access as aws_access
from chipswap.economics.aws.access import AwsAccess
from chipswap.economics.aws.capacity import spot_median
from chipswap.economics.aws.prices import PRODUCT_FILTERS, RefreshResult, parse_products, render_refresh
from chipswap.economics.catalog import Rate, diff_rates
from chipswap.economics.catalog_io import load_catalog, parse_catalog
from tests.aws_helpers import (
    STS_IDENTITY,
    Moto,
    Stubs,
    block_internet,
    fake_aws,
    fake_credentials,
    json_error,
    routed_factory,
    sealed,
)
from tests.cli_helpers import run_inproc
from tests.test_cost_cli import WORKED_EXAMPLE

REGIONS = ("us-east-1", "us-west-2")
LOCATIONS = {
    "us-east-1": "US East (N. Virginia)",
    "us-west-2": "US West (Oregon)",
    "eu-north-1": "EU (Stockholm)",
}


def product(instance: str, region: str, usd: str, **attrs: str) -> str:
    """One GetProducts PriceList item, in the format the API returns (a JSON document as a string)."""
    sku = f"SKU{abs(hash((instance, region, usd, tuple(attrs.items())))) % 10**8:08d}"
    attributes = {
        "servicecode": "AmazonEC2",
        "instanceType": instance,
        "instanceFamily": "Accelerated Computing",
        "regionCode": region,
        "location": LOCATIONS.get(region, region),
        "locationType": "AWS Region",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
        "marketoption": "OnDemand",
        "operation": "RunInstances",
        "usagetype": f"BoxUsage:{instance}",
    }
    attributes.update(attrs)
    on_demand = {
        f"{sku}.JRTCKXETXF": {
            "priceDimensions": {
                f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                    "unit": "Hrs",
                    "endRange": "Inf",
                    "description": f"${usd} per On Demand Linux {instance} Instance Hour",
                    "appliesTo": [],
                    "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                    "beginRange": "0",
                    "pricePerUnit": {"USD": usd},
                }
            },
            "sku": sku,
            "effectiveDate": "2026-11-01T00:00:00Z",
            "offerTermCode": "JRTCKXETXF",
            "termAttributes": {},
        }
    }
    reserved = {
        f"{sku}.4NA7Y494T4": {
            "priceDimensions": {
                f"{sku}.4NA7Y494T4.6YS6EN2CT7": {
                    "unit": "Hrs",
                    "pricePerUnit": {"USD": "8.1970000000"},
                    "description": "Linux reserved",
                }
            },
            "termAttributes": {"LeaseContractLength": "3yr", "PurchaseOption": "No Upfront"},
        }
    }
    return json.dumps(
        {
            "product": {"productFamily": "Compute Instance", "attributes": attributes, "sku": sku},
            "serviceCode": "AmazonEC2",
            "terms": {"OnDemand": on_demand, "Reserved": reserved},
            "version": "20261120000000",
            "publicationDate": "2026-11-20T00:00:00Z",
        }
    )


def expected_request(instance: str, token: str | None = None) -> dict:
    filters = [{"Type": "TERM_MATCH", "Field": "instanceType", "Value": instance}] + [
        {"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in PRODUCT_FILTERS
    ]
    req = {"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "Filters": filters, "MaxResults": 100}
    if token:
        req["NextToken"] = token
    return req


def stub_trn1_prices(stubs: Stubs) -> None:
    """trn1 family, in catalog order (trn1.2xlarge, trn1.32xlarge); the second answer comes in two pages."""
    stubs.respond(
        "pricing",
        "us-east-1",
        "GetProducts",
        {
            "FormatVersion": "aws_v1",
            "PriceList": [product("trn1.2xlarge", r, "1.3437500000") for r in REGIONS],
        },
        expected_request("trn1.2xlarge"),
    )
    stubs.respond(
        "pricing",
        "us-east-1",
        "GetProducts",
        {
            "FormatVersion": "aws_v1",
            "PriceList": [product("trn1.32xlarge", "us-east-1", "20.0000000000")],  # snapshot: 21.5
            "NextToken": "page-2",
        },
        expected_request("trn1.32xlarge"),
    )
    stubs.respond(
        "pricing",
        "us-east-1",
        "GetProducts",
        {
            "FormatVersion": "aws_v1",
            "PriceList": [
                product("trn1.32xlarge", "us-west-2", "21.5000000000"),
                product("trn1.32xlarge", "eu-north-1", "23.1200000000"),  # outside the catalog's regions
                product("trn1.32xlarge", "us-east-1", "14.7500000000", marketoption="CapacityBlock"),
            ],
        },
        expected_request("trn1.32xlarge", "page-2"),
    )


@pytest.fixture
def aws(moto: Moto, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Moto, Stubs]]:
    stubs = sealed(monkeypatch)
    monkeypatch.setattr(
        aws_access,
        "access_from_environment",
        lambda no_aws: AwsAccess(client_factory=routed_factory(moto, stubs)),
    )
    yield moto, stubs


def refresh(capsys, out: Path, *extra: str) -> tuple[int, str, str]:
    args = ["catalog", "refresh", "--family", "trn1", "--out", str(out)]
    for r in REGIONS:
        args += ["--region", r]
    return run_inproc(capsys, *args, *extra)


def test_refresh_writes_a_catalog_dated_today_that_loads_and_prices_the_cost_engine(
    aws, tmp_path, capsys
) -> None:
    moto, stubs = aws
    stub_trn1_prices(stubs)
    out = tmp_path / "fresh.toml"
    code, text, err = refresh(capsys, out)
    assert code == 0, err
    stubs.assert_all_used()
    today = date.today().isoformat()
    cat = load_catalog(out)
    rate = cat.rate("trn1.32xlarge", "us-east-1", "on-demand")
    assert (rate.usd_per_hour, rate.source, rate.as_of) == (Decimal("20"), "aws-pricing-api", today)
    assert cat.rate("trn1.32xlarge", "us-west-2").usd_per_hour == Decimal("21.5")
    assert cat.rate("trn1.2xlarge", "us-west-2").as_of == today
    # every price in the file is dated today and comes from AWS
    fresh = [r for r in cat.rates if r.source == "aws-pricing-api"]
    assert fresh and all(r.as_of == today for r in fresh)
    # spot: each AZ's latest price from moto's spot price history, median over AZs (computed independently)
    history = moto.client("ec2", "us-east-1").describe_spot_price_history(InstanceTypes=["trn1.32xlarge"])
    median, detail = spot_median(history["SpotPriceHistory"], "trn1.32xlarge")
    spot = cat.rate("trn1.32xlarge", "us-east-1", "spot")
    assert spot.usd_per_hour == median and spot.source == "aws-pricing-api" and detail in spot.note
    # the diff against the shipped snapshot
    assert "21.5" in text and "20" in text and "-7.0%" in text
    assert "eu-north-1" not in out.read_text()  # priced by AWS but not a catalog region: not added
    # a Capacity Block product is not an on-demand price
    assert "14.75" not in out.read_text()
    # the cost engine takes it through --catalog
    code, text, err = run_inproc(
        capsys, *WORKED_EXAMPLE, "--candidate-term", "on-demand", "--catalog", str(out), "--json"
    )
    assert code == 0, err
    assert "520" in text  # 26 h x $20.00


@pytest.mark.slow
def test_the_plan_accepts_the_refreshed_catalog(aws, tmp_path, capsys, monkeypatch) -> None:
    """Must show: a refreshed catalog the plan accepts, dated today (the file is the plan's catalog)."""
    moto, stubs = aws
    stub_trn1_prices(stubs)
    out = tmp_path / "fresh.toml"
    assert refresh(capsys, out)[0] == 0
    from chipswap import plan as pipeline
    from chipswap.cli.plan import example_path
    from chipswap.plan.workload_file import load_workload

    path = example_path("finetune")
    result = pipeline.run_plan(load_workload(path), path, catalog=load_catalog(out))
    best = result.best
    assert best is not None and best.instance == "trn1.32xlarge"
    assert best.rate is not None and best.rate.value == Decimal("20")
    assert best.rate.source == f"catalog: aws-pricing-api ({date.today().isoformat()})"


def test_parse_products_keeps_one_plain_price_per_region() -> None:
    items = [
        product("inf2.xlarge", "us-east-1", "0.7582000000"),
        product("inf2.xlarge", "us-east-1", "0.7582000000"),  # the same price twice: fine
        product("inf2.xlarge", "us-west-2", "0.7582000000"),
        product("inf2.xlarge", "us-west-2", "0.9000000000"),  # two prices: ambiguous, left out
        product("inf2.xlarge", "eu-west-1", "0.0000000000"),  # zero: left out
        product("inf2.xlarge", "eu-west-2", "0.8", tenancy="Dedicated"),  # not the plain price
        product("inf2.xlarge", "eu-west-3", "0.8", operation="RunInstances:0002"),  # Windows
        product("inf2.xlarge", "ap-south-1", "1e400"),  # outside the catalog bounds
        product("inf2.8xlarge", "us-east-1", "1.9679"),  # another type
        "not json",
        json.dumps([1, 2]),
    ]
    prices, notes = parse_products(items, "inf2.xlarge")
    assert prices == {"us-east-1": Decimal("0.7582")}
    joined = " | ".join(notes)
    for needle in (
        "us-west-2: 2 different prices",
        "eu-west-1: AWS lists a zero price",
        "ap-south-1",
        "not a JSON",
    ):
        assert needle in joined


def test_rendered_file_round_trips_exactly() -> None:
    rates = (
        Rate(Decimal("21.5"), "on-demand", "us-east-1", "aws-pricing-api", "2026-11-30", "trn1.32xlarge"),
        Rate(
            Decimal("0.00001"),
            "spot",
            "us-east-1",
            "aws-pricing-api",
            "2026-11-30",
            "trn1.32xlarge",
            "min 1, max 2 over 2 AZ(s)",
        ),
        Rate(
            Decimal("1.3437512345678901"),
            "on-demand",
            "us-west-2",
            "aws-pricing-api",
            "2026-11-30",
            "trn1.2xlarge",
        ),
    )
    text = render_refresh(RefreshResult("2026-11-30", "1234", rates, ()))
    cat = parse_catalog(text, "<refresh>")
    for r in rates:
        got = cat.rate(r.instance, r.region, r.term)
        assert got.usd_per_hour == r.usd_per_hour and got.as_of == "2026-11-30"
    changes = diff_rates(load_catalog(), rates)
    by_key = {(c.instance, c.region, c.term): c for c in changes}
    assert by_key[("trn1.32xlarge", "us-east-1", "on-demand")].change_pct == 0
    assert by_key[("trn1.2xlarge", "us-west-2", "on-demand")].before is not None


def test_access_denied_midway_writes_nothing_and_keeps_the_old_file(aws, tmp_path, capsys) -> None:
    moto, stubs = aws
    stub_trn1_prices(stubs)
    out = tmp_path / "fresh.toml"
    assert refresh(capsys, out)[0] == 0
    before = out.read_bytes()
    stubs2 = Stubs()
    stubs2.respond(
        "pricing",
        "us-east-1",
        "GetProducts",
        {"FormatVersion": "aws_v1", "PriceList": [product("trn1.2xlarge", "us-east-1", "9.99")]},
    )
    stubs2.fail("pricing", "us-east-1", "GetProducts", "AccessDeniedException", "User is not authorized")
    stubs.clients.update(stubs2.clients)
    stubs._stubs.update(stubs2._stubs)
    code, text, err = refresh(capsys, out)
    assert code == 3 and err.count("\n") == 1
    assert "access denied to pricing:GetProducts (AccessDeniedException)" in err and "nothing written" in err
    assert out.read_bytes() == before  # not half-replaced, not touched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.toml"]  # no temp file left behind


def test_throttled_price_list_is_retried_then_nothing_is_written(tmp_path, capsys, monkeypatch) -> None:
    block_internet(monkeypatch)
    fake_credentials(monkeypatch)
    throttled = (400, json_error("ThrottlingException", "Rate exceeded"), "application/x-amz-json-1.1")
    with fake_aws({"GetCallerIdentity": (200, STS_IDENTITY, "text/xml")}, throttled) as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
        monkeypatch.setattr(aws_access, "access_from_environment", lambda no_aws: AwsAccess(max_attempts=2))
        out = tmp_path / "fresh.toml"
        code, text, err = refresh(capsys, out)
    assert code == 3 and err.count("\n") == 1
    assert "AWS throttled pricing:GetProducts (ThrottlingException) after 2 tries with backoff" in err
    assert server.hits["GetProducts"] == 2
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_offline_refresh_says_so_once_and_writes_nothing(tmp_path, capsys, monkeypatch) -> None:
    block_internet(monkeypatch)
    fake_credentials(monkeypatch, with_keys=False)
    out = tmp_path / "fresh.toml"
    code, text, err = run_inproc(capsys, "catalog", "refresh", "--out", str(out))
    assert code == 3 and err.count("\n") == 1 and err.count("no AWS credentials found") == 1
    assert "nothing written" in err and not out.exists()
    code, text, err = run_inproc(capsys, "catalog", "refresh", "--out", str(out), "--no-aws")
    assert code == 3 and "--no-aws given" in err and not out.exists()


def test_refresh_never_overwrites_a_hand_written_catalog(aws, tmp_path, capsys) -> None:
    moto, stubs = aws
    mine = tmp_path / "mine.toml"
    mine.write_text('[[price]]\ninstance = "trn1.32xlarge"\n')
    code, text, err = refresh(capsys, mine)
    assert code == 2 and "was not written by `chipswap catalog refresh`" in err and "--force" in err
    assert mine.read_text() == '[[price]]\ninstance = "trn1.32xlarge"\n'
    stub_trn1_prices(stubs)
    code, text, err = refresh(capsys, mine, "--force")
    assert code == 0, err
    assert load_catalog(mine).rate("trn1.32xlarge").source == "aws-pricing-api"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--family", "trn9"], "unknown family for --family: 'trn9'"),
        (["--region", "us-esat-1"], "unknown region 'us-esat-1'"),
        (["--term", "3yr"], "--term '3yr' cannot be refreshed"),
    ],
)
def test_bad_refresh_flags_are_usage_errors(aws, tmp_path, capsys, args, needle) -> None:
    code, text, err = run_inproc(capsys, "catalog", "refresh", "--out", str(tmp_path / "x.toml"), *args)
    assert code == 2 and needle in err and err.count("\n") == 1
    assert not (tmp_path / "x.toml").exists()
