"""Capacity screening: can the fleet a verdict recommends actually be launched in the region?

The seed's procedure ends with "confirm Region capacity": Trainium and Inferentia are offered in fewer
regions than NVIDIA instances, and an account's vCPU quota for Inf / Trn instances is often far below a
recommended fleet. This module is that last step as data plus one pure function:

* QUOTA_CLASSES: which EC2 Service Quotas code (counted in vCPUs) an instance family runs under;
* CAPACITY_BLOCK_FAMILIES: families sold as EC2 Capacity Blocks for ML;
* SCREENING_TABLE: ordered rows, the first whose test holds gives the outcome — offered and fits, not
  offered (with a region that offers it), quota too low (with the vCPU increase to request), or unknown.
  Unknown is never a pass: its words are "check quota before committing".

Pure: takes the facts gathered by chipswap.economics.aws.capacity (or read from the shipped snapshot) and
returns frozen
dataclasses. No network, files, clock or boto3 here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Literal

from chipswap.economics.catalog import BLOCK_DAYS, BLOCK_LENGTHS_TEXT, MAX_BLOCK_DAYS, block_chain
from chipswap.verdict.rules import MOVES, Reason

Outcome = Literal["pass", "fail", "unknown"]
Status = Literal["fits", "not-offered", "quota-too-low", "unknown", "horizon-too-long", "blocks-fit"]
Purchase = Literal["on-demand", "spot"]

CHECK_QUOTA = "check quota before committing"


@dataclass(frozen=True)
class QuotaClass:
    """One EC2 vCPU quota class: the family prefixes it covers and its Service Quotas codes."""

    name: str
    prefixes: tuple[str, ...]  # the letters before the generation digit: "trn" for trn1/trn2, "g" for g5/g6e
    on_demand_code: str
    on_demand_name: str
    spot_code: str
    spot_name: str

    def code(self, purchase: Purchase) -> str:
        return self.on_demand_code if purchase == "on-demand" else self.spot_code

    def quota_name(self, purchase: Purchase) -> str:
        return self.on_demand_name if purchase == "on-demand" else self.spot_name


# Service Quotas codes of service "ec2", each counted in vCPUs. Source: the Service Quotas API
# (ListServiceQuotas --service-code ec2); the G and P codes also appear in skypilot-catalog v5
# aws/instance_quota_mapping.csv (@206e4675). Checked 2026-08 against public tools that read them.
QUOTA_CLASSES: tuple[QuotaClass, ...] = (
    QuotaClass(
        "Trn",
        ("trn",),
        "L-2C3B7624",
        "Running On-Demand Trn instances",
        "L-6B0D517C",
        "All Trn Spot Instance Requests",
    ),
    QuotaClass(
        "Inf",
        ("inf",),
        "L-1945791B",
        "Running On-Demand Inf instances",
        "L-B5D1601B",
        "All Inf Spot Instance Requests",
    ),
    QuotaClass(
        "P",
        ("p",),
        "L-417A185B",
        "Running On-Demand P instances",
        "L-7212CCBC",
        "All P Spot Instance Requests",
    ),
    QuotaClass(
        "G",
        ("g", "vt"),
        "L-DB2E81BA",
        "Running On-Demand G and VT instances",
        "L-3819A6DF",
        "All G and VT Spot Instance Requests",
    ),
)

# Families sold as EC2 Capacity Blocks for ML (EC2 User Guide, "Capacity Blocks for ML", supported instance
# types: p4d, p5, p5e, p5en, trn1, trn2; later versions add p6-b200). The API is the authority: a family
# listed here is asked; one not listed is shown as "not sold as Capacity Blocks".
CAPACITY_BLOCK_FAMILIES: tuple[str, ...] = ("p4d", "p5", "p5e", "p5en", "p6-b200", "trn1", "trn2")
# instance counts one Capacity Block can hold (same page): 1, 2, 4, ... 64
CAPACITY_BLOCK_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)

_FAMILY_LETTERS = re.compile(r"^([a-z]+)")
_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")


def is_instance_type_name(name: str) -> bool:
    """True for names shaped like an EC2 instance type (family.size), e.g. trn1.32xlarge, p6-b200.48xlarge."""
    return bool(_INSTANCE_TYPE.match(name)) and len(name) <= 64


def is_region_name(name: str) -> bool:
    """True for names shaped like an AWS region (us-east-1, ap-southeast-4, us-gov-west-1)."""
    return bool(_REGION.match(name)) and len(name) <= 32


def family_of(instance_type: str) -> str:
    return instance_type.split(".", 1)[0].lower()


def quota_class(instance_type: str) -> QuotaClass | None:
    """The vCPU quota class an instance type counts against, or None outside Inf / Trn / P / G."""
    m = _FAMILY_LETTERS.match(family_of(instance_type))
    letters = m.group(1) if m else ""
    for qc in QUOTA_CLASSES:
        if letters in qc.prefixes:
            return qc
    return None


def sold_as_capacity_blocks(instance_type: str) -> bool:
    return family_of(instance_type) in CAPACITY_BLOCK_FAMILIES


def capacity_block_count(count: int) -> int | None:
    """The smallest Capacity Block size that holds `count` instances, or None when one block cannot."""
    return next((n for n in CAPACITY_BLOCK_COUNTS if n >= count), None)


# ------------------------------------------------------------------------------------------------ the facts


@dataclass(frozen=True)
class Quota:
    """An account's vCPU quota for one class in one region, and the vCPUs in use; None = not readable."""

    code: str
    name: str
    limit_vcpus: int | None
    usage_vcpus: int | None
    limit_note: str = ""  # why the limit is unknown, when it is
    usage_note: str = ""  # why the usage is unknown, when it is


@dataclass(frozen=True)
class BlockOffer:
    """One EC2 Capacity Block offering (DescribeCapacityBlockOfferings)."""

    zone: str
    instance_count: int
    hours: int
    upfront_usd: Decimal
    start: str  # ISO date-time as AWS gives it
    end: str

    @property
    def usd_per_instance_hour(self) -> Decimal:
        return self.upfront_usd / Decimal(self.instance_count * self.hours)


@dataclass(frozen=True)
class RegionCapacity:
    """What is known about one instance type in one region. Display-only readings (spot price, placement
    score, Capacity Blocks) ride along; the screening reads `offered` and `quota` only."""

    instance: str
    region: str
    vcpus_per_instance: int
    checked: bool  # True: read from AWS just now; False: the shipped snapshot
    as_of: str  # the date of the check, or of the snapshot
    offered: bool | None  # None: not known
    zones: tuple[str, ...] = ()
    offered_note: str = ""
    quota: Quota | None = None
    quota_note: str = ""  # why there is no quota reading at all
    spot_usd: Decimal | None = None
    spot_note: str = ""
    placement_score: int | None = None  # 1..10 (EC2 spot placement score), None = not read
    placement_note: str = ""
    blocks: tuple[BlockOffer, ...] = ()
    blocks_note: str = ""


# ------------------------------------------------------------------------------------------------ screening


@dataclass(frozen=True)
class CapacityScreen:
    """The capacity rule's outcome for one candidate, region and fleet size."""

    status: Status
    outcome: Outcome
    instance: str
    region: str
    count: int | None
    vcpus_needed: int | None
    text: str  # one line, the reason as the report shows it
    qualifier: str = ""  # what the verdict line gets after "— but ", empty when nothing to add
    increase_vcpus: int | None = None  # quota-too-low: the increase to request in `region`
    requested_limit_vcpus: int | None = None  # quota-too-low: the quota value to ask for
    quota_code: str = ""
    recommended_region: str | None = None
    block_days_needed: int | None = None  # Capacity Blocks: the days the plan's horizon needs

    @property
    def is_pass(self) -> bool:
        return self.outcome == "pass"


def _n(v: int) -> str:
    return f"{v:,}"


def _zones(f: RegionCapacity) -> str:
    return f"{len(f.zones)} AZ{'s' if len(f.zones) != 1 else ''}" if f.zones else "AZs not listed"


def _free_and_fitting(f: RegionCapacity, need: int) -> bool:
    q = f.quota
    return (
        f.offered is True
        and q is not None
        and q.limit_vcpus is not None
        and q.usage_vcpus is not None
        and q.limit_vcpus - q.usage_vcpus >= need
    )


def recommend_region(
    instance: str, need: int | None, alternatives: Sequence[RegionCapacity], exclude: str
) -> RegionCapacity | None:
    """A region that offers the type: one where the fleet fits the quota first, else the first offering it
    (in the order given: callers list cheaper or nearer regions first)."""
    offering = [
        a
        for a in alternatives
        if a.region != exclude and a.instance.lower() == instance.lower() and a.offered is True
    ]
    if need is not None:
        fitting = [a for a in offering if _free_and_fitting(a, need)]
        if fitting:
            return fitting[0]
    return offering[0] if offering else None


@dataclass(frozen=True)
class _Case:
    facts: RegionCapacity
    count: int | None
    need: int | None
    alternatives: tuple[RegionCapacity, ...]

    @property
    def q(self) -> Quota | None:
        return self.facts.quota

    @property
    def in_use(self) -> int:
        if self.q is None or self.q.usage_vcpus is None:
            return 0
        return self.q.usage_vcpus

    @property
    def short_by(self) -> int:
        """vCPUs the quota lacks for the fleet (usage counted when known)."""
        assert self.q is not None and self.q.limit_vcpus is not None and self.need is not None
        return self.need + self.in_use - self.q.limit_vcpus


def _where(c: _Case) -> str:
    f = c.facts
    return f"{f.instance} in {f.region}"


def _snapshot(c: _Case) -> str:
    return "" if c.facts.checked else f" (shipped snapshot {c.facts.as_of}, not checked)"


def _why_unknown(c: _Case) -> str:
    f, q = c.facts, c.q
    if c.need is None:
        return "the fleet size is not known"
    if f.offered is None:
        return f"whether AWS offers {_where(c)} is not known{_snapshot(c)}" + (
            f": {f.offered_note}" if f.offered_note else ""
        )
    if q is None:
        return f"no quota reading for {_where(c)}" + (f": {f.quota_note}" if f.quota_note else "")
    if q.limit_vcpus is None:
        return f"the {q.name} quota ({q.code}) in {f.region} is not known" + (
            f": {q.limit_note}" if q.limit_note else ""
        )
    return (
        f"the {q.name} quota in {f.region} is {_n(q.limit_vcpus)} vCPUs and the fleet needs {_n(c.need)}, "
        "but the vCPUs already in use are not known" + (f": {q.usage_note}" if q.usage_note else "")
    )


def _not_offered(c: _Case) -> tuple[str, str, str | None]:
    alt = recommend_region(c.facts.instance, c.need, c.alternatives, c.facts.region)
    head = f"{c.facts.instance} is not offered in {c.facts.region}"
    if alt is None:
        return (
            f"capacity: {head}; no other checked region offers it",
            f"{head}; find a region that offers it",
            None,
        )
    fits = " and the fleet fits its quota" if c.need is not None and _free_and_fitting(alt, c.need) else ""
    return (
        f"capacity: {head}; {alt.region} offers it ({_zones(alt)}){fits}",
        f"{head}: run it in {alt.region}",
        alt.region,
    )


def _too_low(c: _Case) -> tuple[str, str]:
    assert c.q is not None and c.q.limit_vcpus is not None and c.need is not None and c.count is not None
    q, f, limit = c.q, c.facts, c.q.limit_vcpus
    usage = f"{_n(q.usage_vcpus)} in use" if q.usage_vcpus is not None else "usage not readable, counted as 0"
    at_least = "" if q.usage_vcpus is not None else "at least "
    text = (
        f"capacity: {c.count} x {f.instance} need {_n(c.need)} vCPUs; the {q.name} quota ({q.code}) in "
        f"{f.region} is {_n(limit)} vCPUs ({usage}): request a quota increase of {at_least}"
        f"{_n(c.short_by)} vCPUs, to {_n(limit + c.short_by)}"
    )
    return text, f"request a quota increase of {at_least}{_n(c.short_by)} vCPUs in {f.region} first"


def _fits(c: _Case) -> str:
    assert c.q is not None and c.q.limit_vcpus is not None and c.need is not None
    return (
        f"capacity: {_where(c)} is offered ({_zones(c.facts)}) and {c.count} instances "
        f"({_n(c.need)} vCPUs) fit the {c.q.name} quota ({_n(c.q.limit_vcpus)} vCPUs, {_n(c.in_use)} in use)"
    )


# Ordered: the first row whose test holds gives the outcome. (name, test, status, outcome)
SCREENING_TABLE: tuple[tuple[str, Callable[[_Case], bool], Status, Outcome], ...] = (
    ("fleet-size-unknown", lambda c: c.need is None, "unknown", "unknown"),
    ("not-offered", lambda c: c.facts.offered is False, "not-offered", "fail"),
    ("offered-unknown", lambda c: c.facts.offered is None, "unknown", "unknown"),
    ("quota-unknown", lambda c: c.q is None or c.q.limit_vcpus is None, "unknown", "unknown"),
    ("quota-too-low", lambda c: c.short_by > 0, "quota-too-low", "fail"),
    ("usage-unknown", lambda c: c.q is not None and c.q.usage_vcpus is None, "unknown", "unknown"),
    ("fits", lambda c: True, "fits", "pass"),
)


def screen_capacity(
    facts: RegionCapacity, count: int | None, alternatives: Sequence[RegionCapacity] = ()
) -> CapacityScreen:
    """The capacity outcome for `count` instances of `facts.instance` in `facts.region`.

    `alternatives` are the same type's facts in other regions, for the region recommendation when this region
    does not offer it. `count` None (fleet size not known) is unknown, never a pass.
    """
    if count is not None and count < 1:
        raise ValueError(f"fleet size must be >= 1, got {count}")
    need = count * facts.vcpus_per_instance if count is not None else None
    c = _Case(facts, count, need, tuple(alternatives))
    status, outcome = next((s, o) for _name, test, s, o in SCREENING_TABLE if test(c))
    q = facts.quota
    base = CapacityScreen(
        status, outcome, facts.instance, facts.region, count, need, text="", quota_code=q.code if q else ""
    )
    if status == "not-offered":
        text, qualifier, alt = _not_offered(c)
        return replace(base, text=text, qualifier=qualifier, recommended_region=alt)
    if status == "quota-too-low":
        text, qualifier = _too_low(c)
        assert q is not None and q.limit_vcpus is not None
        return replace(
            base,
            text=text,
            qualifier=qualifier,
            increase_vcpus=c.short_by,
            requested_limit_vcpus=q.limit_vcpus + c.short_by,
        )
    if status == "fits":
        return replace(base, text=_fits(c))
    alt = None
    if facts.offered is not True:
        found = recommend_region(facts.instance, need, alternatives, facts.region)
        alt = found.region if found else None
    text = f"capacity: {CHECK_QUOTA}: {_why_unknown(c)}; unknown is not a pass"
    return replace(base, text=text, qualifier=CHECK_QUOTA, recommended_region=alt)


# ------------------------------------------------------------------------------ Capacity Blocks vs horizon

EXTEND_WORDS = (
    "an extension can be requested up to 56 days before a block ends, in the same day/week steps, and is "
    "granted only if capacity is available (EC2 User Guide, 'Extend Capacity Blocks')"
)


def screen_block_horizon(
    instance: str,
    region: str,
    count: int | None,
    horizon_months: int,
    longest_days: int | None,
    *,
    checked: bool,
    as_of: str,
) -> CapacityScreen:
    """Can `count` x `instance` be held for the plan's horizon on Capacity Blocks?

    `longest_days`: the longest block on offer — from AWS's offerings when `checked`, else (None) the
    longest AWS sells (MAX_BLOCK_DAYS, a snapshot fact); 0 = no offering found. A horizon longer than the
    longest block is a fail with the fix (a chain of blocks, each booked or extended ahead, or a shorter
    horizon)."""
    days = -(-horizon_months * 730 // 24)  # 730 h a month, whole days
    offered = longest_days if longest_days is not None else MAX_BLOCK_DAYS
    where = f"{count if count is not None else 'the'} x {instance} in {region}"
    source = (
        f"offerings checked with AWS on {as_of}"
        if checked
        else f"the longest block AWS sells ({BLOCK_LENGTHS_TEXT}); offerings not checked (snapshot {as_of})"
    )
    base = CapacityScreen(
        "blocks-fit", "pass", instance, region, count, None, text="", block_days_needed=days
    )
    if offered >= days:
        return replace(
            base,
            text=f"capacity: the {horizon_months}-month horizon ({days:,} days) fits one Capacity Block for "
            f"{where}; the longest on offer is {offered} days ({source})",
        )
    if offered <= 0:
        return replace(
            base,
            status="horizon-too-long",
            outcome="fail",
            text=f"capacity: no Capacity Block offering for {where} right now ({source}); the "
            f"{horizon_months}-month horizon needs {days:,} block-days each",
            qualifier="find a Capacity Block offering first (`chipswap capacity "
            f"{instance} --block-days N`: another length, date or region)",
        )
    chain = block_chain(days, tuple(d for d in BLOCK_DAYS if d <= offered) or (offered,))
    fit_months = max(1, offered * 24 // 730)
    blocks = " + ".join(map(str, chain))
    return replace(
        base,
        status="horizon-too-long",
        outcome="fail",
        text=f"capacity: the {horizon_months}-month horizon needs {days:,} days of Capacity Blocks for "
        f"{where}, more than the longest block on offer ({offered} days; {source}): it is a chain of "
        f"{len(chain)} blocks ({blocks} days), each a new booking at the price of its day and none "
        f"guaranteed; fix: book the first block and extend or re-book each one before it ends "
        f"({EXTEND_WORDS}), or set horizon_months = {fit_months} to fit one block, or price another term",
        qualifier=f"book {len(chain)} consecutive Capacity Blocks (or extend each before it ends) first",
    )


def qualify_verdict(verdict: str, screen: CapacityScreen) -> str:
    """The verdict line with the capacity rule applied: a move that cannot launch as-is gets
    "— but <what to do> first"; stay / close-call verdicts are returned unchanged."""
    if verdict not in MOVES or not screen.qualifier:
        return verdict
    return f"{verdict} — but {screen.qualifier}"


def capacity_reason(screen: CapacityScreen) -> Reason:
    """The screen as a verdict Reason (rule id "capacity"), so reports list it beside the seed's rules."""
    favours: Literal["neuron", "gpu"] | None = None
    if screen.outcome != "unknown":
        favours = "neuron" if screen.outcome == "pass" else "gpu"
    if screen.block_days_needed is not None:
        return Reason(
            "capacity",
            screen.outcome,
            favours,
            screen.text,
            "Capacity Block days needed",
            screen.block_days_needed,
            "the horizon fits the longest Capacity Block on offer",
        )
    threshold = "within the region's vCPU quota and offered there"
    return Reason(
        "capacity",
        screen.outcome,
        favours,
        screen.text,
        "vCPUs needed",
        screen.vcpus_needed,
        threshold,
    )
