"""Live prices for `chipswap catalog refresh`: on-demand from the AWS Price List API, spot from EC2 spot price
history, for the catalog's instance types and regions.

One small interface (PriceSource) with one AWS implementation; refresh_prices turns its answers into
catalog price rows (source "aws-pricing-api", as_of today) and render_refresh into the text of a user catalog
file. May not write files (the command writes atomically after the text parses back as a catalog) or call
anything but read-only APIs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from chipswap.economics.aws.access import ApiProblem, AwsAccess, AwsOffline, AwsUnavailableError
from chipswap.economics.aws.capacity import spot_median
from chipswap.economics.capacity import sold_as_capacity_blocks
from chipswap.economics.catalog import Catalog, Rate
from chipswap.economics.catalog_io import NUMBER_BOUNDS, price_groups_toml, toml_value

SOURCE_KEY = "aws-pricing-api"
PRICING_REGION = "us-east-1"  # the Price List API answers from us-east-1 (also eu-central-1, ap-south-1)
TERMS_REFRESHED = ("on-demand", "spot", "capacity-block")
# capacity-block is read by default only for instances the snapshot prices only that way (trn2); asking for it
# with --term reads it for every family sold as Capacity Blocks
DEFAULT_TERMS = ("on-demand", "spot")
BLOCK_QUOTE_HOURS = 24  # the offering length a Capacity Block rate is quoted for (one day, one instance)

# Price List attributes that pick the plain Linux, shared-tenancy, on-demand hourly price of an instance type
PRODUCT_FILTERS = (
    ("operatingSystem", "Linux"),
    ("tenancy", "Shared"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
    ("licenseModel", "No License required"),
)
MAX_PRODUCT_BYTES = 1_000_000  # one Price List product is a few KB; a larger one is not a product


def _source_text(today: str) -> str:
    return (
        "AWS Price List API (pricing:GetProducts, service AmazonEC2; Linux, shared tenancy, no pre-installed "
        "software, on-demand hourly), EC2 DescribeSpotPriceHistory (Linux/UNIX; each AZ's latest price, "
        "median over AZs) and EC2 DescribeCapacityBlockOfferings (the cheapest offering for one instance for "
        f"24 h), read by `chipswap catalog refresh` on {today}"
    )


GROUP_NOTES = {
    "on-demand": "on-demand hourly price from the AWS Price List API",
    "spot": "spot: each AZ's latest price in EC2 spot price history, median over AZs",
    "capacity-block": "EC2 Capacity Block: the cheapest offering's upfront fee / (instances x hours) for one "
    "instance for 24 h (DescribeCapacityBlockOfferings); booked ahead, paid up front, dynamic price",
}


class PriceSource(Protocol):
    """Where live prices come from."""

    def on_demand(self, instance: str) -> tuple[dict[str, Decimal], list[str]]:
        """Region -> USD/h for one instance type, and notes on products that were skipped."""
        ...

    def spot(self, region: str, instances: Sequence[str]) -> dict[str, tuple[Decimal, str]]:
        """Instance -> (median USD/h over AZs, note) for the types with a spot price in `region`."""
        ...

    def capacity_block(self, region: str, instance: str) -> tuple[Decimal, str] | None:
        """(USD per instance-hour of the cheapest Capacity Block offering, note), or None when none."""
        ...


class AwsPriceSource:
    def __init__(self, access: AwsAccess, *, now: datetime | None = None) -> None:
        self.access = access
        self.now = now or datetime.now(UTC)

    def on_demand(self, instance: str) -> tuple[dict[str, Decimal], list[str]]:
        filters = [{"Type": "TERM_MATCH", "Field": "instanceType", "Value": instance}] + [
            {"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in PRODUCT_FILTERS
        ]
        items = self.access.pages(
            "pricing",
            PRICING_REGION,
            "GetProducts",
            "PriceList",
            ServiceCode="AmazonEC2",
            FormatVersion="aws_v1",
            Filters=filters,
            MaxResults=100,
        )
        return parse_products(items, instance)

    def spot(self, region: str, instances: Sequence[str]) -> dict[str, tuple[Decimal, str]]:
        rows = self.access.pages(
            "ec2",
            region,
            "DescribeSpotPriceHistory",
            "SpotPriceHistory",
            InstanceTypes=list(instances),
            ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
            StartTime=self.now,
        )
        out = {}
        for name in instances:
            try:
                out[name] = spot_median(rows, name)
            except ValueError:
                continue
        return out

    def capacity_block(self, region: str, instance: str) -> tuple[Decimal, str] | None:
        from chipswap.economics.aws.capacity import AwsCapacity, TypeInfo

        source = AwsCapacity(self.access, self.now.date().isoformat(), block_hours=BLOCK_QUOTE_HOURS)
        offers, _note = source.blocks(TypeInfo(instance, 1, "catalog"), region, 1)
        if not offers:
            return None
        best = offers[0]
        note = (
            f"cheapest of {len(offers)} offering(s): {best.instance_count} x {best.hours} h from "
            f"{best.start[:10]} in {best.zone}, {best.upfront_usd} USD up front"
        )
        return best.usd_per_instance_hour.quantize(Decimal("0.000001")).normalize(), note


def _product(item: Any) -> dict[str, Any] | None:
    if isinstance(item, dict):
        return item
    if not isinstance(item, str) or len(item) > MAX_PRODUCT_BYTES:
        return None
    try:
        got = json.loads(item)
    except (ValueError, RecursionError):
        return None
    return got if isinstance(got, dict) else None


def _hourly_usd(product: dict[str, Any]) -> Decimal | None:
    """The single on-demand hourly USD price of a product, or None when it has none or several."""
    terms = (product.get("terms") or {}).get("OnDemand") or {}
    found: list[Decimal] = []
    for offer in terms.values() if isinstance(terms, dict) else []:
        dims = (offer or {}).get("priceDimensions") or {}
        for dim in dims.values() if isinstance(dims, dict) else []:
            if not isinstance(dim, dict) or str(dim.get("unit", "")).lower() not in ("hrs", "hours"):
                continue
            try:
                found.append(Decimal(str((dim.get("pricePerUnit") or {})["USD"])))
            except (KeyError, TypeError, InvalidOperation):
                continue
    return found[0] if len(found) == 1 and found[0].is_finite() else None


def parse_products(items: Sequence[Any], instance: str) -> tuple[dict[str, Decimal], list[str]]:
    """Region -> on-demand USD/h from Price List GetProducts items (JSON strings); notes on skipped ones."""
    seen: dict[str, set[Decimal]] = {}
    notes: list[str] = []
    want = dict(PRODUCT_FILTERS)
    for item in items:
        product = _product(item)
        if product is None:
            notes.append("a Price List item that is not a JSON product was skipped")
            continue
        attrs = (product.get("product") or {}).get("attributes") or {}
        if not isinstance(attrs, dict) or attrs.get("instanceType") != instance:
            continue
        if any(k in attrs and attrs[k] != v for k, v in want.items()):
            continue
        if attrs.get("marketoption", "OnDemand") != "OnDemand":
            continue  # Capacity Block products carry their own market option
        if attrs.get("operation", "RunInstances") != "RunInstances":
            continue
        region = attrs.get("regionCode")
        if not isinstance(region, str) or not region:
            notes.append(f"a product for {instance} without a regionCode was skipped")
            continue
        price = _hourly_usd(product)
        if price is None:
            notes.append(f"{instance} in {region}: no single hourly USD price in the product; skipped")
            continue
        seen.setdefault(region, set()).add(price)
    out: dict[str, Decimal] = {}
    lo, hi = NUMBER_BOUNDS["usd_per_hour"]
    for region, prices in sorted(seen.items()):
        if len(prices) > 1:
            notes.append(f"{instance} in {region}: {len(prices)} different prices; left unrefreshed")
            continue
        price = next(iter(prices))
        if price <= 0:
            notes.append(f"{instance} in {region}: AWS lists a zero price; left unrefreshed")
            continue
        if not lo <= price <= hi:
            notes.append(f"{instance} in {region}: price {price} outside the catalog's bounds; skipped")
            continue
        out[region] = price.normalize()
    return out, notes


@dataclass(frozen=True)
class RefreshResult:
    """Price rows read from AWS, what was asked, and what could not be refreshed (with why)."""

    today: str
    account: str | None
    rates: tuple[Rate, ...]
    asked: tuple[tuple[str, str, str], ...]  # (instance, region, term) asked for
    notes: tuple[str, ...] = ()
    elsewhere: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # priced by AWS outside the catalog


def _fail(problem: ApiProblem) -> AwsUnavailableError:
    fix = {
        "denied": "allow it in the IAM policy, or refresh only the other term with --term",
        "throttled": "try again in a few minutes",
    }.get(problem.kind, "try again, or refresh only the other term with --term")
    return AwsUnavailableError(f"catalog refresh stopped: {problem.note}; nothing written; {fix}")


def refresh_prices(
    catalog: Catalog,
    source: PriceSource,
    today: str,
    *,
    instances: Sequence[str],
    regions: Sequence[str] | None,
    terms: Sequence[str] = DEFAULT_TERMS,
    block_instances: Sequence[str] = (),
    account: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> RefreshResult:
    """Live prices for `instances` in the regions the catalog lists them in (or only `regions`).

    AWS unusable or an API denied / throttled -> AwsUnavailableError (exit 3): a refresh is all or nothing.
    A region the account has not enabled is skipped with a note (its snapshot prices stay in effect).
    """
    say = progress or (lambda _m: None)
    wanted_regions = set(regions) if regions else None
    rates: list[Rate] = []
    asked: list[tuple[str, str, str]] = []
    notes: list[str] = []
    elsewhere: list[tuple[str, str]] = []
    listed = {
        name: [r for r in catalog.instance(name).regions if not wanted_regions or r in wanted_regions]
        for name in instances
    }
    try:
        if "on-demand" in terms:
            for name in instances:
                say(f"on-demand {name}")
                prices, skipped = source.on_demand(name)
                notes.extend(skipped)
                for region in listed[name]:
                    asked.append((name, region, "on-demand"))
                    if region in prices:
                        rates.append(Rate(prices[region], "on-demand", region, SOURCE_KEY, today, name))
                elsewhere.extend(
                    (name, r)
                    for r in sorted(prices)
                    if r not in catalog.instance(name).regions and (not wanted_regions or r in wanted_regions)
                )
        if "spot" in terms:
            by_region: dict[str, list[str]] = {}
            for name in instances:
                for region in listed[name]:
                    by_region.setdefault(region, []).append(name)
            for region, names in sorted(by_region.items()):
                say(f"spot {region}")
                asked.extend((n, region, "spot") for n in names)
                try:
                    got = source.spot(region, names)
                except ApiProblem as problem:
                    if problem.kind != "not-enabled":
                        raise
                    notes.append(f"spot in {region}: {problem.note}; snapshot prices stay in effect")
                    continue
                for n in names:
                    if n in got:
                        price, detail = got[n]
                        rates.append(Rate(price, "spot", region, SOURCE_KEY, today, n, detail))
        blocks = [n for n in instances if "capacity-block" in terms or n in block_instances]
        for name in blocks:
            if not sold_as_capacity_blocks(name):
                continue
            for region in listed[name]:
                say(f"capacity block {name} {region}")
                asked.append((name, region, "capacity-block"))
                try:
                    got_block = source.capacity_block(region, name)
                except ApiProblem as problem:
                    if problem.kind != "not-enabled":
                        raise
                    notes.append(
                        f"capacity blocks in {region}: {problem.note}; snapshot prices stay in effect"
                    )
                    continue
                if got_block is None:
                    notes.append(f"no Capacity Block offering for {name} in {region} today")
                    continue
                price, detail = got_block
                rates.append(Rate(price, "capacity-block", region, SOURCE_KEY, today, name, detail))
    except AwsOffline as off:
        raise AwsUnavailableError(
            f"offline: {off.reason}; catalog refresh needs AWS, so nothing was written and the shipped "
            "snapshot stays in use"
        ) from None
    except ApiProblem as problem:
        raise _fail(problem) from None
    return RefreshResult(today, account, tuple(rates), tuple(asked), tuple(notes), tuple(elsewhere))


def render_refresh(result: RefreshResult) -> str:
    """The refreshed prices as a user catalog file (the shipped schema; entries override shipped ones)."""
    head = [
        f"# chipswap catalog refresh: prices read from AWS on {result.today}"
        + (f" (account {result.account})" if result.account else "")
        + ".",
        "# Use it with --catalog FILE; its prices replace the shipped snapshot's for the same instance,",
        "# region and term. Generated: run `chipswap catalog refresh` again to update it.",
        "schema = 1",
        "",
        "[sources]",
        f"{toml_value(SOURCE_KEY)} = {toml_value(_source_text(result.today))}",
        "",
    ]
    rows = [
        {
            "instance": r.instance,
            "region": r.region,
            "term": r.term,
            "usd_per_hour": r.usd_per_hour,
            "source": r.source,
            "as_of": r.as_of,
            "note": r.note,
        }
        for r in sorted(result.rates, key=lambda r: (r.term != "on-demand", r.instance, r.region))
    ]
    return "\n".join(head) + "\n" + "\n".join(price_groups_toml(rows, GROUP_NOTES))
