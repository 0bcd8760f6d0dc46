"""The instance / price / chip catalog as frozen dataclasses, with lookups that explain what is missing.

Pure: builds nothing from files (chipswap.economics.catalog_io does that), never reads the clock, the network
or torch.
An unknown price is absent, never guessed; looking up a missing price raises ChipswapError naming where one
exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from chipswap.economics.money import D
from chipswap.errors import ChipswapError, closest

KINDS = ("gpu", "inferentia", "trainium")
# Catalog terms. 1yr/3yr are effective hourly rates of a commitment; ri-effective is the Neuron
# benchmark pages' "RI-Effective hourly rate", whose term (1 or 3 years) and payment option are not stated.
# capacity-block: EC2 Capacity Blocks for ML, a reservation booked ahead and paid up front at a price AWS
# sets on a schedule (the rate is per instance-hour, for a block of one of BLOCK_DAYS lengths).
TERMS = ("on-demand", "spot", "1yr", "3yr", "ri-effective", "capacity-block")
CAPACITY_BLOCK = "capacity-block"
HOURS_PER_YEAR = 8760
HOURS_PER_DAY = 24

# Block lengths AWS sells: 1-14 days in 1-day steps, then 7-day steps up to 182 days (26 weeks). Source:
# the EC2 API reference, DescribeCapacityBlockOfferings CapacityDurationHours ("You must specify the duration
# in 1-day increments up 14 days, and in 7-day increments up to 182 days"), and the EC2 User Guide page
# "Extend Capacity Blocks" (same steps), both read 2026-12-01.
BLOCK_DAYS: tuple[int, ...] = tuple(range(1, 15)) + tuple(range(21, 183, 7))
MAX_BLOCK_DAYS = BLOCK_DAYS[-1]
BLOCK_DAYS_SOURCE = (
    "EC2 API reference, DescribeCapacityBlockOfferings CapacityDurationHours, and EC2 User Guide "
    "'Extend Capacity Blocks' (read 2026-12-01)"
)
BLOCK_WORDS = "booked ahead, paid up front, dynamic price"
BLOCK_LENGTHS_TEXT = "1-14 days in 1-day steps, then 7-day steps up to 182 days"


@dataclass(frozen=True)
class Instance:
    name: str
    family: str
    kind: str  # 'gpu' | 'inferentia' | 'trainium'
    accelerator: str  # chip name, a key of Catalog.chip()
    accelerator_count: int
    accelerator_memory_gib: Decimal  # total over all accelerators
    neuron_cores: int  # 0 for GPUs
    vcpus: int
    memory_gib: Decimal
    regions: tuple[str, ...]  # where the instance is listed (a lower bound)
    network_gbps: Decimal | None = None
    local_nvme_gb: int | None = None
    price_note: str = ""  # why some price is unknown, when one is
    source: str = ""
    as_of: str = ""

    @property
    def is_neuron(self) -> bool:
        return self.kind != "gpu"


@dataclass(frozen=True)
class Chip:
    name: str
    vendor: str
    kind: str
    tflops_dense: tuple[tuple[str, Decimal], ...]  # (dtype, peak dense TFLOPS); a dtype not listed is unknown
    memory_gib: Decimal
    memory_bandwidth_gb_s: Decimal
    source: str
    as_of: str
    compute_units: str = ""
    memory_type: str = ""
    interconnect: str = ""
    interconnect_gb_s: Decimal | None = None
    confidence: str = ""
    sparse_note: str = ""
    notes: str = ""

    def tflops(self, dtype: str) -> Decimal | None:
        """Peak dense TFLOPS (TOPS for int8) for a dtype, or None when no figure is published."""
        return dict(self.tflops_dense).get(dtype.lower())


@dataclass(frozen=True)
class Rate:
    usd_per_hour: Decimal
    term: str
    region: str
    source: str
    as_of: str
    instance: str = ""
    note: str = ""
    block_days: tuple[int, ...] = ()  # capacity-block: the block lengths this price is sold for (() = all)

    @property
    def is_capacity_block(self) -> bool:
        return self.term == CAPACITY_BLOCK

    @property
    def lengths(self) -> tuple[int, ...]:
        """Block lengths (days) this rate can be bought in: its own list, or every length AWS sells."""
        return self.block_days or BLOCK_DAYS


def term_words(rate: Rate) -> str:
    """How a price is bought, as the tables show it: "Capacity Block, as of 2026-07-15"; other terms as is."""
    if rate.is_capacity_block:
        return f"Capacity Block, as of {rate.as_of}"
    return rate.term


def block_terms_text(rate: Rate) -> str:
    """The Capacity Block purchase terms in one clause, for assumption lines."""
    return f"{BLOCK_WORDS} (as of {rate.as_of}); blocks of {BLOCK_LENGTHS_TEXT} ({BLOCK_DAYS_SOURCE})"


def check_block_days(days: int, lengths: tuple[int, ...] = BLOCK_DAYS) -> int:
    """`days` when a Capacity Block of that length is sold, else one error line naming the nearest lengths."""
    if isinstance(days, bool) or not isinstance(days, int) or days not in lengths:
        below = [d for d in lengths if isinstance(days, int) and d < days]
        above = [d for d in lengths if isinstance(days, int) and d > days]
        near = [str(x) for x in (below[-1:] + above[:1])] or [str(lengths[0])]
        raise ChipswapError(
            f"a Capacity Block of {days!r} days is not sold; blocks are {BLOCK_LENGTHS_TEXT}: "
            f"use {' or '.join(near)} days"
        )
    return days


def block_days_covering(hours: object, lengths: tuple[int, ...] = BLOCK_DAYS) -> int | None:
    """The shortest sold block (days) that covers `hours` (rounded up to whole days); None when no single
    block is that long."""
    h = D(hours, "hours")
    if h <= 0:
        raise ChipswapError(f"hours must be greater than 0, got {hours}; pass a positive number")
    whole = int((h / HOURS_PER_DAY).to_integral_value(rounding="ROUND_CEILING"))
    return next((d for d in lengths if d >= whole), None)


def block_chain(days: int, lengths: tuple[int, ...] = BLOCK_DAYS) -> tuple[int, ...]:
    """Consecutive blocks covering `days`: the longest block as often as it fits, then the shortest sold
    block that covers the rest (each renewal is a new booking; none is guaranteed)."""
    if days < 1:
        raise ChipswapError(f"a Capacity Block chain must cover at least 1 day, got {days}; pass 1 or more")
    longest = lengths[-1]
    full, rest = divmod(days, longest)
    tail = () if rest == 0 else (next(d for d in lengths if d >= rest),)
    return (longest,) * full + tail


@dataclass(frozen=True)
class ReservedTerm:
    """A user-supplied reservation: effective hourly = upfront / hours_in_term + hourly."""

    upfront_usd: Decimal
    hourly_usd: Decimal
    years: int

    def __post_init__(self) -> None:
        if self.years not in (1, 3):
            raise ChipswapError(f"reserved term must be 1 or 3 years, got {self.years}; use 1 or 3")
        if Decimal(self.upfront_usd) < 0 or Decimal(self.hourly_usd) < 0:
            raise ChipswapError(
                f"reserved upfront/hourly must not be negative: {self.upfront_usd}/{self.hourly_usd}; "
                "give amounts in USD >= 0"
            )

    @property
    def hours_in_term(self) -> int:
        return self.years * HOURS_PER_YEAR

    @property
    def label(self) -> str:
        return f"reserved {self.years}yr (upfront ${self.upfront_usd} + ${self.hourly_usd}/h)"


def effective_reserved_rate(term: ReservedTerm) -> Decimal:
    """Effective hourly rate of a reservation: upfront / hours in the term + hourly."""
    return D(term.upfront_usd, "upfront") / Decimal(term.hours_in_term) + D(term.hourly_usd, "hourly")


@dataclass(frozen=True)
class Catalog:
    instances: tuple[Instance, ...]
    chips: tuple[Chip, ...] = ()
    rates: tuple[Rate, ...] = ()
    sources: tuple[tuple[str, str], ...] = ()  # (source key, full citation)
    origin: str = "shipped"
    _by_name: dict[str, Instance] = field(default_factory=dict, init=False, repr=False, compare=False)
    _chips: dict[str, Chip] = field(default_factory=dict, init=False, repr=False, compare=False)
    _rates: dict[tuple[str, str, str], Rate] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self._by_name.update({i.name.lower(): i for i in self.instances})
        self._chips.update({c.name.lower(): c for c in self.chips})
        self._rates.update({(r.instance.lower(), r.region, r.term): r for r in self.rates})

    # --- lookups -------------------------------------------------------------------------------------------
    def instance(self, name: str) -> Instance:
        found = self._by_name.get(name.strip().lower())
        if found is None:
            names = [i.name for i in self.instances]
            near = closest(name.strip().lower(), names)
            hint = f"did you mean {', '.join(near)}?" if near else "run 'chipswap catalog' to list them"
            raise ChipswapError(f"unknown instance type: {name!r}; {hint}")
        return found

    def chip(self, name: str) -> Chip:
        found = self._chips.get(name.strip().lower())
        if found is None:
            near = closest(name, [c.name for c in self.chips]) or [c.name for c in self.chips]
            raise ChipswapError(f"unknown accelerator chip: {name!r}; known chips include {', '.join(near)}")
        return found

    def source_text(self, key: str) -> str:
        return dict(self.sources).get(key, key)

    def rates_for(self, instance: str, region: str | None = None) -> tuple[Rate, ...]:
        inst = self.instance(instance)
        return tuple(
            r
            for r in self.rates
            if r.instance.lower() == inst.name.lower() and (region is None or r.region == region)
        )

    def rate(self, instance: str, region: str = "us-east-1", term: str | ReservedTerm = "on-demand") -> Rate:
        inst = self.instance(instance)
        if isinstance(term, ReservedTerm):
            return Rate(
                effective_reserved_rate(term),
                f"reserved-{term.years}yr",
                region,
                "user-supplied",
                "user input",
                inst.name,
                term.label,
            )
        if term not in TERMS:
            raise ChipswapError(f"unknown price term: {term!r}; use one of {', '.join(TERMS)}")
        found = self._rates.get((inst.name.lower(), region, term))
        if found is not None:
            return found
        mine = self.rates_for(inst.name)
        same_term = sorted({r.region for r in mine if r.term == term})
        same_region = [t for t in TERMS if any(r.term == t and r.region == region for r in mine)]
        parts = [f"no {term} price for {inst.name} in {region}"]
        if region not in inst.regions:
            listed = "" if same_term else f" (listed in {', '.join(inst.regions)})"
            parts.append(f"it is not listed in {region}{listed}")
        if same_term:
            parts.append(f"{term} prices exist in: {', '.join(same_term)}")
        else:
            parts.append(f"it has no {term} price in any region")
        if inst.price_note and term == "on-demand":
            parts.append(inst.price_note)
        if same_region:
            parts.append(f"terms priced in {region}: {', '.join(same_region)}")
        parts.append("pick a region or term that has a price, or supply your own $/h rate")
        raise ChipswapError("; ".join(parts))

    def find_rate(self, instance: str, region: str = "us-east-1", term: str = "on-demand") -> Rate | None:
        """Like rate() but None when no price is known (an unknown instance or term still raises)."""
        inst = self.instance(instance)
        if term not in TERMS:
            raise ChipswapError(f"unknown price term: {term!r}; use one of {', '.join(TERMS)}")
        return self._rates.get((inst.name.lower(), region, term))

    def accelerator_rate(self, rate: Rate) -> Decimal:
        """The rate per accelerator-hour (instance rate / accelerators)."""
        return rate.usd_per_hour / Decimal(self.instance(rate.instance).accelerator_count)

    def capacity_block_only(self, instance: str) -> bool:
        """True when `instance` has a Capacity Block rate and no committed or on-demand price (on-demand,
        1yr, 3yr, ri-effective): it is bought as Capacity Blocks (a spot price, if any, is not a plan)."""
        terms = {r.term for r in self.rates_for(instance)}
        return CAPACITY_BLOCK in terms and not terms & {"on-demand", "1yr", "3yr", "ri-effective"}

    def purchase_rate(self, instance: str, region: str, term: str) -> Rate | None:
        """The price at `term`, or, for an instance sold only as Capacity Blocks, its Capacity Block rate in
        `region` (callers say "Capacity Block only" beside it); None when neither is known."""
        found = self.find_rate(instance, region, term)
        if found is None and self.capacity_block_only(instance):
            found = self.find_rate(instance, region, CAPACITY_BLOCK)
        return found

    # --- filters -------------------------------------------------------------------------------------------
    def select(
        self,
        family: str | None = None,
        accelerator: str | None = None,
        region: str | None = None,
        kind: str | None = None,
    ) -> tuple[Instance, ...]:
        """Instances matching every given filter (case-insensitive); an empty result is not an error here."""
        out = []
        for i in self.instances:
            if family and i.family.lower() != family.lower():
                continue
            if accelerator and i.accelerator.lower() != accelerator.lower():
                continue
            if region and region not in i.regions:
                continue
            if kind and i.kind != kind.lower():
                continue
            out.append(i)
        return tuple(out)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i.family for i in self.instances))

    @property
    def accelerators(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i.accelerator for i in self.instances))

    @property
    def regions(self) -> tuple[str, ...]:
        return tuple(sorted({r for i in self.instances for r in i.regions}))


def validate(catalog: Catalog) -> list[str]:
    """Consistency problems as messages (empty = fine): unknown chips, orphan prices, bad values."""
    problems = []
    names = {i.name.lower() for i in catalog.instances}
    chips = {c.name.lower() for c in catalog.chips}
    for i in catalog.instances:
        if i.kind not in KINDS:
            problems.append(f"instance {i.name}: kind {i.kind!r} is not one of {', '.join(KINDS)}")
        if chips and i.accelerator.lower() not in chips:
            problems.append(f"instance {i.name}: accelerator {i.accelerator!r} has no [[chip]] entry")
        if i.accelerator_count < 1:
            problems.append(f"instance {i.name}: accelerator_count must be >= 1")
    for r in catalog.rates:
        if r.instance.lower() not in names:
            problems.append(f"price for unknown instance {r.instance!r} ({r.region}, {r.term})")
        if r.term not in TERMS:
            problems.append(
                f"price {r.instance} {r.region}: term {r.term!r} is not one of {', '.join(TERMS)}"
            )
        if r.usd_per_hour <= 0:
            problems.append(f"price {r.instance} {r.region} {r.term}: usd_per_hour must be > 0")
        if not r.source or not r.as_of:
            problems.append(f"price {r.instance} {r.region} {r.term}: source and as_of are required")
        if r.block_days and not r.is_capacity_block:
            problems.append(f"price {r.instance} {r.region} {r.term}: block_days is for capacity-block only")
        unsold = [d for d in r.block_days if d not in BLOCK_DAYS]
        if unsold:
            problems.append(
                f"price {r.instance} {r.region} {r.term}: block length {unsold[0]} days is not sold "
                f"({BLOCK_LENGTHS_TEXT})"
            )
    return problems


@dataclass(frozen=True)
class PriceChange:
    """One refreshed price beside the snapshot's price for the same instance, region and term (None: new)."""

    instance: str
    region: str
    term: str
    before: Rate | None
    after: Rate

    @property
    def change_pct(self) -> Decimal | None:
        if self.before is None:
            return None
        return (self.after.usd_per_hour - self.before.usd_per_hour) / self.before.usd_per_hour * 100


def diff_rates(snapshot: Catalog, fresh: tuple[Rate, ...] | list[Rate]) -> tuple[PriceChange, ...]:
    """Each fresh rate against the snapshot's rate with the same key, ordered by instance, region, term."""
    out = []
    for r in fresh:
        try:
            before = snapshot.find_rate(r.instance, r.region, r.term)
        except ChipswapError:
            before = None
        out.append(PriceChange(r.instance, r.region, r.term, before, r))
    order = {t: n for n, t in enumerate(TERMS)}
    return tuple(sorted(out, key=lambda c: (c.instance, c.region, order.get(c.term, 99))))
