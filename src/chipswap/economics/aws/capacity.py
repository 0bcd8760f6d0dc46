"""Capacity facts per region: from AWS (read-only calls) or, offline, from the shipped snapshot.

Two sources behind one small interface (CapacitySource.region_capacity): AwsCapacity asks EC2 and
Service Quotas; SnapshotCapacity reads the catalog's region lists and says "snapshot, not checked".
gather_capacity runs one for a list of regions with the automatic offline fallback (one note);
capacity_for_plan gives the plan its screening outcome. May not write files or decide anything
(chipswap.economics.capacity decides).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from chipswap.economics.aws.access import ApiProblem, AwsAccess, AwsOffline
from chipswap.economics.capacity import (
    BlockOffer,
    CapacityScreen,
    Purchase,
    Quota,
    RegionCapacity,
    capacity_block_count,
    is_instance_type_name,
    is_region_name,
    quota_class,
    screen_capacity,
    sold_as_capacity_blocks,
)
from chipswap.economics.catalog import Catalog
from chipswap.errors import ChipswapError, closest

SNAPSHOT_WORDS = "snapshot, not checked"
MAX_REGIONS = 40  # a bound on how many regions one command asks about (AWS has fewer than 40 today)
MAX_BLOCK_OFFERS = 5  # Capacity Block offerings kept per region (the cheapest)
BLOCK_HOURS_DEFAULT = 24


@dataclass(frozen=True)
class TypeInfo:
    """What the capacity rule needs about an instance type: its name and vCPUs, and where they came from."""

    name: str
    vcpus: int
    source: str  # "catalog" or "aws"


class CapacitySource(Protocol):
    """Capacity facts for one instance type in one region."""

    checked: bool

    def region_capacity(
        self, info: TypeInfo, region: str, count: int, purchase: Purchase, *, extras: bool
    ) -> RegionCapacity: ...


# --------------------------------------------------------------------------------------------- offline


class SnapshotCapacity:
    """The shipped catalog's region lists (a lower bound from a dated crawl): nothing here is checked."""

    checked = False

    def __init__(self, catalog: Catalog, reason: str) -> None:
        self.catalog = catalog
        self.reason = reason

    def snapshot_date(self, instance: str) -> str:
        try:
            return self.catalog.instance(instance).as_of or "undated"
        except ChipswapError:
            return "undated"

    def region_capacity(
        self, info: TypeInfo, region: str, count: int, purchase: Purchase, *, extras: bool = True
    ) -> RegionCapacity:
        as_of = self.snapshot_date(info.name)
        try:
            listed = region in self.catalog.instance(info.name).regions
        except ChipswapError:
            listed = False
        try:
            spot = self.catalog.find_rate(info.name, region, "spot")
        except ChipswapError:
            spot = None
        return RegionCapacity(
            instance=info.name,
            region=region,
            vcpus_per_instance=info.vcpus,
            checked=False,
            as_of=as_of,
            offered=None,  # the snapshot is a lower bound: listed is likely, not listed is unknown
            offered_note=(
                f"listed in the shipped region table ({SNAPSHOT_WORDS})"
                if listed
                else f"not listed in the shipped region table, which is a lower bound ({SNAPSHOT_WORDS})"
            ),
            quota=None,
            quota_note=f"quota and usage not read ({SNAPSHOT_WORDS})",
            spot_usd=spot.usd_per_hour if spot else None,
            spot_note=f"catalog {spot.source} ({spot.as_of}), not live"
            if spot
            else "no spot price in the catalog",
            placement_note=f"not read ({SNAPSHOT_WORDS})",
            blocks_note=f"not read ({SNAPSHOT_WORDS})",
        )


# ---------------------------------------------------------------------------------------------- online


class AwsCapacity:
    """Read-only EC2 / Service Quotas calls for the facts of one instance type per region."""

    checked = True

    def __init__(
        self,
        access: AwsAccess,
        today: str,
        *,
        now: datetime | None = None,
        block_hours: int = BLOCK_HOURS_DEFAULT,
    ) -> None:
        self.access = access
        self.today = today
        self.now = now or datetime.now(UTC)
        self.block_hours = block_hours
        self.scores: dict[str, int | str] = {}  # region -> placement score, or the note why not

    # -- single facts ------------------------------------------------------------------------------------
    def offered(self, info: TypeInfo, region: str) -> tuple[bool, tuple[str, ...]]:
        items = self.access.pages(
            "ec2",
            region,
            "DescribeInstanceTypeOfferings",
            "InstanceTypeOfferings",
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [info.name]}],
        )
        zones = tuple(
            sorted({str(o["Location"]) for o in items if str(o.get("InstanceType", "")) == info.name})
        )
        return bool(zones), zones

    def quota_limit(self, code: str, region: str) -> tuple[int, str]:
        try:
            got = self.access.call(
                "service-quotas", region, "GetServiceQuota", ServiceCode="ec2", QuotaCode=code
            )
            note = ""
        except ApiProblem as problem:
            if problem.code != "NoSuchResourceException":
                raise
            got = self.access.call(
                "service-quotas", region, "GetAWSDefaultServiceQuota", ServiceCode="ec2", QuotaCode=code
            )
            note = "the account has no applied value; AWS's default shown"
        value = (got.get("Quota") or {}).get("Value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e9:
            raise ApiProblem(f"service-quotas:GetServiceQuota {code}", "error", "BadValue", repr(value))
        return int(value), note

    def usage(self, info: TypeInfo, region: str, purchase: Purchase) -> int:
        """vCPUs of running / pending instances in the type's quota class (on-demand or spot)."""
        qc = quota_class(info.name)
        assert qc is not None
        reservations = self.access.pages(
            "ec2",
            region,
            "DescribeInstances",
            "Reservations",
            limit=100,
            # the class is picked below, not by an instance-type wildcard: exact and the same everywhere
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}],
            MaxResults=1000,
        )
        counts: dict[str, int] = {}
        for res in reservations:
            for inst in res.get("Instances") or []:
                lifecycle = inst.get("InstanceLifecycle")  # absent = on-demand; spot / capacity-block / ...
                if (purchase == "on-demand" and lifecycle) or (purchase == "spot" and lifecycle != "spot"):
                    continue
                itype = str(inst.get("InstanceType", ""))
                if quota_class(itype) is qc:
                    counts[itype] = counts.get(itype, 0) + 1
        if not counts:
            return 0
        vcpus = self.vcpus_of(sorted(counts), region)
        return sum(n * vcpus[t] for t, n in counts.items())

    def vcpus_of(self, types: Sequence[str], region: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for start in range(0, len(types), 100):
            got = self.access.pages(
                "ec2",
                region,
                "DescribeInstanceTypes",
                "InstanceTypes",
                InstanceTypes=list(types[start : start + 100]),
            )
            for t in got:
                out[str(t["InstanceType"])] = int((t.get("VCpuInfo") or {}).get("DefaultVCpus", 0))
        missing = [t for t in types if t not in out]
        if missing:
            raise ApiProblem("ec2:DescribeInstanceTypes", "error", "Missing", f"no vCPU count for {missing}")
        return out

    def spot_price(self, info: TypeInfo, region: str) -> tuple[Decimal, str]:
        rows = self.access.pages(
            "ec2",
            region,
            "DescribeSpotPriceHistory",
            "SpotPriceHistory",
            limit=5,
            InstanceTypes=[info.name],
            ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
            StartTime=self.now,
        )
        return spot_median(rows, info.name)

    def blocks(self, info: TypeInfo, region: str, count: int) -> tuple[tuple[BlockOffer, ...], str]:
        if not sold_as_capacity_blocks(info.name):
            return (), "not sold as Capacity Blocks"
        size = capacity_block_count(count)
        if size is None:
            return (), f"{count} instances do not fit one Capacity Block (at most 64)"
        rows = self.access.pages(
            "ec2",
            region,
            "DescribeCapacityBlockOfferings",
            "CapacityBlockOfferings",
            limit=5,
            InstanceType=info.name,
            InstanceCount=size,
            CapacityDurationHours=self.block_hours,
        )
        offers = []
        for r in rows:
            try:
                offers.append(
                    BlockOffer(
                        zone=str(r.get("AvailabilityZone", "")),
                        instance_count=int(r["InstanceCount"]),
                        hours=int(r.get("CapacityBlockDurationHours") or self.block_hours),
                        upfront_usd=Decimal(str(r["UpfrontFee"])),
                        start=_iso(r.get("StartDate")),
                        end=_iso(r.get("EndDate")),
                    )
                )
            except (KeyError, ValueError, InvalidOperation):
                continue
        offers = [o for o in offers if o.instance_count > 0 and o.hours > 0 and o.upfront_usd.is_finite()]
        offers.sort(key=lambda o: (o.usd_per_instance_hour, o.start))
        note = (
            f"{len(offers)} offering(s) for {size} x {self.block_hours} h"
            if offers
            else f"no offering for {size} x {self.block_hours} h right now"
        )
        return tuple(offers[:MAX_BLOCK_OFFERS]), note

    def placement_scores(self, info: TypeInfo, regions: Sequence[str], count: int) -> None:
        """One GetSpotPlacementScores call for every region at once (scores 1-10; higher = likelier)."""
        if not regions:
            return
        try:
            rows = self.access.pages(
                "ec2",
                regions[0],
                "GetSpotPlacementScores",
                "SpotPlacementScores",
                limit=5,
                InstanceTypes=[info.name],
                TargetCapacity=count,
                TargetCapacityUnitType="units",
                SingleAvailabilityZone=False,
                RegionNames=list(regions),
            )
        except ApiProblem as problem:
            self.scores = {r: problem.note for r in regions}
            return
        best: dict[str, int] = {}
        for row in rows:
            r, score = str(row.get("Region", "")), row.get("Score")
            if isinstance(score, int) and not isinstance(score, bool) and 1 <= score <= 10:
                best[r] = max(best.get(r, 0), score)
        self.scores = {r: best.get(r, "no score returned for this region") for r in regions}

    # -- one region ----------------------------------------------------------------------------------------
    def region_capacity(
        self, info: TypeInfo, region: str, count: int, purchase: Purchase, *, extras: bool = True
    ) -> RegionCapacity:
        facts = RegionCapacity(
            instance=info.name,
            region=region,
            vcpus_per_instance=info.vcpus,
            checked=True,
            as_of=self.today,
            offered=None,
        )
        try:
            offered, zones = self.offered(info, region)
            facts = replace(facts, offered=offered, zones=zones)
        except ApiProblem as problem:
            facts = replace(facts, offered_note=problem.note)
            if problem.kind == "not-enabled":  # nothing else in this region can be read either
                return replace(
                    facts, quota_note=problem.note, spot_note=problem.note, blocks_note=problem.note
                )
        facts = replace(facts, **self._quota(info, region, purchase))
        if not extras:
            return facts
        if facts.offered is False:
            return replace(
                facts,
                spot_note="not offered",
                blocks_note="not offered",
                placement_note=_score_note(self.scores.get(region)),
                placement_score=_score(self.scores.get(region)),
            )
        try:
            price, detail = self.spot_price(info, region)
            facts = replace(
                facts, spot_usd=price, spot_note=f"EC2 spot price history, median over AZs; {detail}"
            )
        except ApiProblem as problem:
            facts = replace(facts, spot_note=problem.note)
        except ValueError as exc:
            facts = replace(facts, spot_note=str(exc))
        try:
            offers, note = self.blocks(info, region, count)
            facts = replace(facts, blocks=offers, blocks_note=note)
        except ApiProblem as problem:
            facts = replace(facts, blocks_note=problem.note)
        score = self.scores.get(region)
        return replace(facts, placement_score=_score(score), placement_note=_score_note(score))

    def _quota(self, info: TypeInfo, region: str, purchase: Purchase) -> dict[str, Any]:
        qc = quota_class(info.name)
        if qc is None:
            return {
                "quota_note": f"{info.name} is outside the Inf / Trn / P / G quota classes chipswap reads"
            }
        code, name = qc.code(purchase), qc.quota_name(purchase)
        limit: int | None = None
        used: int | None = None
        limit_note = usage_note = ""
        try:
            limit, limit_note = self.quota_limit(code, region)
        except ApiProblem as problem:
            limit_note = problem.note
        try:
            used = self.usage(info, region, purchase)
        except ApiProblem as problem:
            usage_note = problem.note
        return {"quota": Quota(code, name, limit, used, limit_note, usage_note)}


def _score(v: int | str | None) -> int | None:
    return v if isinstance(v, int) else None


def _score_note(v: int | str | None) -> str:
    return "" if isinstance(v, int) else (v or "not read")


def _iso(v: Any) -> str:
    return v.isoformat() if isinstance(v, datetime) else str(v or "")


def spot_median(rows: Sequence[dict[str, Any]], instance: str) -> tuple[Decimal, str]:
    """The median over AZs of each AZ's latest spot price, and "min X, max Y over N AZ(s)" (the catalog's
    spot-note detail format)."""
    latest: dict[str, tuple[str, Decimal]] = {}
    for r in rows:
        if str(r.get("InstanceType", "")) != instance:
            continue
        try:
            price = Decimal(str(r["SpotPrice"]))
        except (KeyError, InvalidOperation):
            continue
        if not price.is_finite() or price <= 0:
            continue
        az, when = str(r.get("AvailabilityZone", "")), _iso(r.get("Timestamp"))
        if az not in latest or when > latest[az][0]:
            latest[az] = (when, price)
    if not latest:
        raise ValueError("no spot price returned")
    prices = sorted(p for _when, p in latest.values())
    median = Decimal(statistics.median(prices)).normalize()
    return median, f"min {prices[0].normalize()}, max {prices[-1].normalize()} over {len(prices)} AZ(s)"


# ------------------------------------------------------------------------------------ gathering with fallback


@dataclass(frozen=True)
class CapacityLookup:
    """Facts for one instance type in each asked region, and how they were obtained."""

    info: TypeInfo
    count: int
    purchase: Purchase
    rows: tuple[RegionCapacity, ...]
    checked: bool  # True: from AWS; False: the shipped snapshot
    note: str  # one line for the user: where the facts came from (offline reason included)
    account: str | None = None


def known_regions(catalog: Catalog, access: AwsAccess | None) -> tuple[str, ...]:
    """Region names botocore knows (every partition, offline data) plus the catalog's."""
    names = set(catalog.regions)
    try:
        import boto3

        session = boto3.Session() if access is None else access.session()
        for partition in session.get_available_partitions():
            names.update(session.get_available_regions("ec2", partition_name=partition))
    except Exception:
        pass  # the catalog's regions alone still catch typos
    return tuple(sorted(names))


def check_regions(regions: Sequence[str], known: Sequence[str]) -> tuple[str, ...]:
    """Usage errors for region names that do not exist (one line, did-you-mean)."""
    out: list[str] = []
    for r in regions:
        r = r.strip()
        if not is_region_name(r) or r not in known:
            near = closest(r, known, n=3)
            raise ChipswapError(
                f"unknown AWS region: {r!r}; "
                + (f"did you mean {', '.join(near)}? " if near else "")
                + "pass --region with a region name like us-east-1"
            )
        if r not in out:
            out.append(r)
    if len(out) > MAX_REGIONS:
        raise ChipswapError(f"{len(out)} regions given; ask about at most {MAX_REGIONS} at a time")
    return tuple(out)


def resolve_type(catalog: Catalog, name: str, access: AwsAccess | None, region: str) -> TypeInfo:
    """The type's vCPUs from the catalog, or (types outside it) from AWS; unknown anywhere -> usage error."""
    name = name.strip().lower()
    try:
        inst = catalog.instance(name)
        return TypeInfo(inst.name, inst.vcpus, "catalog")
    except ChipswapError as exc:
        not_in_catalog = exc
    if not is_instance_type_name(name):
        raise not_in_catalog
    if access is None:
        raise ChipswapError(
            f"{not_in_catalog}; with AWS access chipswap can also check types outside the catalog"
        )
    try:
        got = access.call("ec2", region, "DescribeInstanceTypes", InstanceTypes=[name])
    except ApiProblem as problem:
        if problem.code in ("InvalidInstanceType", "InvalidParameterValue"):
            raise ChipswapError(
                f"AWS does not know instance type {name!r}; {str(not_in_catalog).split('; ')[-1]}"
            ) from None
        raise ChipswapError(f"{not_in_catalog} (and AWS could not be asked: {problem.note})") from None
    types = got.get("InstanceTypes") or []
    if not types:
        raise ChipswapError(f"AWS does not know instance type {name!r}; check the spelling")
    vcpus = int((types[0].get("VCpuInfo") or {}).get("DefaultVCpus", 0))
    if vcpus < 1:
        raise ChipswapError(f"AWS gave no vCPU count for {name!r}; pick a catalog instance type")
    return TypeInfo(name, vcpus, "aws")


def _snapshot_note(catalog: Catalog, info: TypeInfo, reason: str) -> str:
    src = SnapshotCapacity(catalog, reason)
    return (
        f"{reason}; showing the shipped region table ({SNAPSHOT_WORDS}, as of {src.snapshot_date(info.name)})"
    )


def gather_capacity(
    catalog: Catalog,
    instance: str,
    regions: Sequence[str] | None,
    count: int,
    *,
    access: AwsAccess | None,
    today: str,
    purchase: Purchase = "on-demand",
    extras: bool = True,
    block_hours: int = BLOCK_HOURS_DEFAULT,
    progress: Callable[[str], None] | None = None,
) -> CapacityLookup:
    """Facts for `count` x `instance` in each region (default: the regions the catalog lists it in).

    access None (--no-aws) or AWS unusable (no or expired credentials, no network) -> the shipped snapshot
    with one note saying why. Unknown region or instance type -> ChipswapError (usage, exit 2).
    """
    if count < 1 or count > 100_000:
        raise ChipswapError(f"--count must be between 1 and 100000, got {count}; give the fleet size")
    say = progress or (lambda _m: None)
    if regions:
        regions = check_regions(regions, known_regions(catalog, access))
    probe_region = regions[0] if regions else "us-east-1"
    reason = "--no-aws given" if access is None else ""
    account = None
    if access is not None:
        try:
            account = access.probe(probe_region)
        except AwsOffline as off:
            reason, access = f"offline: {off.reason}", None
    info = resolve_type(catalog, instance, access, probe_region)
    if not regions:
        try:
            regions = catalog.instance(info.name).regions
        except ChipswapError:
            regions = (probe_region,)
    if access is not None:
        source = AwsCapacity(access, today, block_hours=block_hours)
        try:
            if extras:
                say("spot placement scores")
                source.placement_scores(info, regions, count)
            rows = []
            for r in regions:
                say(r)
                rows.append(source.region_capacity(info, r, count, purchase, extras=extras))
            note = f"checked with AWS on {today} (account {account}); read-only calls"
            return CapacityLookup(info, count, purchase, tuple(rows), True, note, account)
        except AwsOffline as off:
            reason = f"offline: {off.reason}"
    snap = SnapshotCapacity(catalog, reason)
    rows = [snap.region_capacity(info, r, count, purchase, extras=extras) for r in regions]
    return CapacityLookup(info, count, purchase, tuple(rows), False, _snapshot_note(catalog, info, reason))


PLAN_ALTERNATIVES = 8  # other regions asked when the plan's region cannot host the fleet


def capacity_for_plan(
    catalog: Catalog,
    instance: str,
    region: str,
    count: int | None,
    *,
    term: str,
    access: AwsAccess | None,
    today: str,
) -> tuple[CapacityScreen, str]:
    """The plan's capacity screen for `count` x `instance` in `region`, and a one-line note on where the
    facts came from. When the region cannot host the fleet, up to PLAN_ALTERNATIVES other regions the catalog
    lists are asked, for the region recommendation. `term` "spot" reads the spot quota; every other term the
    on-demand one (reserved instances and savings plans run under it)."""
    purchase: Purchase = "spot" if term == "spot" else "on-demand"
    n = count if count is not None and count >= 1 else 1
    found = gather_capacity(
        catalog, instance, [region], n, access=access, today=today, purchase=purchase, extras=False
    )
    facts = found.rows[0]
    screen = screen_capacity(facts, count)
    if screen.status in ("not-offered", "quota-too-low") or (facts.offered is not True):
        try:
            listed = [r for r in catalog.instance(found.info.name).regions if r != region]
        except ChipswapError:
            listed = []
        if listed:
            more = gather_capacity(
                catalog,
                instance,
                listed[:PLAN_ALTERNATIVES],
                n,
                access=access if found.checked else None,
                today=today,
                purchase=purchase,
                extras=False,
            )
            screen = screen_capacity(facts, count, more.rows)
    return screen, found.note


def longest_block_for_plan(
    catalog: Catalog,
    instance: str,
    region: str,
    count: int | None,
    days: int,
    *,
    access: AwsAccess | None,
    today: str,
) -> tuple[int | None, bool, str, str]:
    """The longest Capacity Block on offer for `count` x `instance` in `region`, asked for the shortest sold
    length covering `days` (at most the longest AWS sells): (days or 0 when none / None when not asked,
    checked with AWS?, as of, one-line note). Offline / --no-aws: (None, False, snapshot date, why)."""
    from chipswap.economics.catalog import BLOCK_DAYS

    want = next((d for d in BLOCK_DAYS if d >= days), BLOCK_DAYS[-1])
    snap = SnapshotCapacity(catalog, "")
    if access is None:
        return (
            None,
            False,
            snap.snapshot_date(instance),
            f"Capacity Block offerings: not read (--no-aws; {SNAPSHOT_WORDS})",
        )
    try:
        account = access.probe(region)
        info = resolve_type(catalog, instance, access, region)
        source = AwsCapacity(access, today, block_hours=want * 24)
        offers, note = source.blocks(info, region, count if count is not None and count >= 1 else 1)
    except AwsOffline as off:
        return None, False, snap.snapshot_date(instance), f"Capacity Block offerings: offline: {off.reason}"
    except ApiProblem as problem:
        return None, False, snap.snapshot_date(instance), f"Capacity Block offerings: {problem.note}"
    longest = max((o.hours // 24 for o in offers), default=0)
    return (
        longest,
        True,
        today,
        f"Capacity Block offerings checked with AWS on {today} (account {account}): {note}",
    )


def block_rate_lines(catalog: Catalog, found: CapacityLookup) -> list[str]:
    """One line per region with a Capacity Block rate in the catalog or a live offering: the live offering's
    rate (per instance-hour and per accelerator-hour) beside the catalog's dated rate, or, unchecked, that the
    catalog's rate is a dated snapshot."""
    from chipswap.economics.catalog import CAPACITY_BLOCK, term_words

    try:
        accel = catalog.instance(found.info.name).accelerator_count
    except ChipswapError:
        accel = None
    out = []
    for row in found.rows:
        try:
            snap = catalog.find_rate(found.info.name, row.region, CAPACITY_BLOCK)
        except ChipswapError:
            snap = None
        have = f"the catalog's ${snap.usd_per_hour}/h ({term_words(snap)}, {snap.source})" if snap else ""
        if row.blocks:
            best = row.blocks[0]
            per = best.usd_per_instance_hour.quantize(Decimal("0.0001"))
            acc = f", ${(per / accel).quantize(Decimal('0.0001'))} per accelerator-hour" if accel else ""
            vs = f"; {have}" if have else ""
            out.append(
                f"Capacity Block in {row.region}: live offering ${per}/instance-h{acc} "
                f"({best.instance_count} x {best.hours} h from {best.start[:10]}, {best.zone}, "
                f"paid up front){vs}"
            )
        elif snap is not None:
            status = "no live offering" if row.checked else f"offerings not read ({SNAPSHOT_WORDS})"
            out.append(f"Capacity Block in {row.region}: {status}; {have} is a dated snapshot")
    return out
