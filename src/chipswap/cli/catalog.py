"""`chipswap catalog`: list / filter instance types with their prices, show one instance, list chips, and
`refresh` prices live from AWS into a user catalog file (written atomically, never partially).

Thin: parsing, printing, and the one file write of `refresh`; reading AWS lives in
chipswap.economics.aws.prices."""

from __future__ import annotations

import json
import re
from datetime import date
from decimal import Decimal
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from chipswap.cli.common import CATALOG_FLAG, JSON_TABLE_FLAG, console, print_table, step_progress
from chipswap.economics.catalog import (
    CAPACITY_BLOCK,
    TERMS,
    Catalog,
    Chip,
    Instance,
    PriceChange,
    Rate,
    block_terms_text,
    diff_rates,
    term_words,
)
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

catalog_app = typer.Typer(
    help="List AWS accelerated instance types (GPU, Inferentia, Trainium) with specs and $/h, or show one.",
    no_args_is_help=False,
    invoke_without_command=True,
    rich_markup_mode=None,
)

DEFAULT_REGION = "us-east-1"


def _num(d: Decimal | int | None) -> float | int | None:
    if d is None:
        return None
    if isinstance(d, int):
        return d
    return int(d) if d == d.to_integral_value() else float(d)


def _fmt(d: Decimal | int | None) -> str:
    if d is None:
        return "-"
    return f"{d:,}" if isinstance(d, int) else f"{d.normalize():,f}"


def rate_json(r: Rate, catalog: Catalog) -> dict:
    return {
        "instance": r.instance,
        "region": r.region,
        "term": r.term,
        "usd_per_hour": _num(r.usd_per_hour),
        "source": r.source,
        "source_text": catalog.source_text(r.source),
        "as_of": r.as_of,
        "note": r.note,
        **(capacity_block_json(r, catalog) if r.is_capacity_block else {}),
    }


def capacity_block_json(r: Rate, catalog: Catalog) -> dict:
    """The Capacity Block purchase terms of a rate, for --json output."""
    return {
        "term_words": term_words(r),
        "usd_per_accelerator_hour": float(catalog.accelerator_rate(r)),
        "block_days": list(r.lengths),
        "terms": block_terms_text(r),
    }


def instance_json(i: Instance, catalog: Catalog, region: str | None = None) -> dict:
    rates = catalog.rates_for(i.name, region)
    return {
        "name": i.name,
        "family": i.family,
        "kind": i.kind,
        "accelerator": i.accelerator,
        "accelerator_count": i.accelerator_count,
        "accelerator_memory_gib": _num(i.accelerator_memory_gib),
        "neuron_cores": i.neuron_cores,
        "vcpus": i.vcpus,
        "memory_gib": _num(i.memory_gib),
        "network_gbps": _num(i.network_gbps),
        "local_nvme_gb": i.local_nvme_gb,
        "regions": list(i.regions),
        "price_note": i.price_note or None,
        "source": i.source,
        "as_of": i.as_of,
        "prices": [
            rate_json(r, catalog) for r in sorted(rates, key=lambda r: (r.region, TERMS.index(r.term)))
        ],
    }


def chip_json(c: Chip) -> dict:
    return {
        "name": c.name,
        "vendor": c.vendor,
        "kind": c.kind,
        "compute_units": c.compute_units or None,
        "tflops_dense": {k: _num(v) for k, v in c.tflops_dense},
        "memory_gib": _num(c.memory_gib),
        "memory_type": c.memory_type or None,
        "memory_bandwidth_gb_s": _num(c.memory_bandwidth_gb_s),
        "interconnect": c.interconnect or None,
        "interconnect_gb_s": _num(c.interconnect_gb_s),
        "confidence": c.confidence or None,
        "source": c.source,
        "as_of": c.as_of,
        "notes": c.notes or None,
    }


def _price_cell(catalog: Catalog, name: str, region: str, term: str) -> str:
    try:
        return _fmt(catalog.rate(name, region, term).usd_per_hour)
    except ChipswapError:
        return "-"


def check_region(catalog: Catalog, region: str | None, flag: str = "--region") -> None:
    """Unknown region -> one-line error with a did-you-mean, before any price lookup."""
    if region is None or region in catalog.regions:
        return
    from chipswap.errors import closest

    hint = closest(region, catalog.regions, n=1)
    raise ChipswapError(
        f"unknown region {region!r}"
        + (f"; did you mean {', '.join(hint)}?" if hint else "")
        + f" (pass {flag} with one of {', '.join(catalog.regions)})"
    )


_NOTE_DETAIL = re.compile(r"^(?P<head>.+?);\s*(?P<detail>min \S+,?\s+max \S+ over \d+ AZ\(s\))$", re.S)


def split_note(note: str) -> tuple[str, str]:
    """(shared text, per-row detail): spot notes differ only in their trailing min/max-over-AZs part."""
    m = _NOTE_DETAIL.match(note)
    return (m["head"], m["detail"]) if m else (note, "")


def _load(ctx: typer.Context, catalog_file: str | None) -> Catalog:
    from chipswap.cli.config import resolve

    chosen = catalog_file or (ctx.obj or {}).get("catalog")
    return load_catalog(resolve(catalog=(chosen, "--catalog"))["catalog"].value)


@catalog_app.callback()
def catalog_list(
    ctx: typer.Context,
    family: str | None = typer.Option(
        None, "--family", metavar="FAMILY", help="Only this family, e.g. trn1, inf2, p5, g6e."
    ),
    accelerator: str | None = typer.Option(
        None,
        "--accelerator",
        metavar="CHIP",
        help="Only this accelerator chip, e.g. Trainium, Inferentia2, H100, L4.",
    ),
    region: str | None = typer.Option(
        None,
        "--region",
        metavar="REGION",
        help="Only instances listed in this region; prices are shown for it (default us-east-1).",
    ),
    kind: str | None = typer.Option(None, "--kind", metavar="KIND", help="Only gpu, inferentia or trainium."),
    as_json: bool = JSON_TABLE_FLAG,
    catalog_file: str | None = CATALOG_FLAG,
) -> None:
    """List instance types (filter by family, accelerator, region); `show NAME` for one; `chips`."""
    ctx.obj = {"catalog": catalog_file, "json": as_json, "region": region}
    if ctx.invoked_subcommand is not None:
        return
    catalog = _load(ctx, catalog_file)
    if family and family.lower() not in {f.lower() for f in catalog.families}:
        raise ChipswapError(
            f"unknown family for --family: {family!r}; use one of {', '.join(catalog.families)}"
        )
    if accelerator and accelerator.lower() not in {a.lower() for a in catalog.accelerators}:
        raise ChipswapError(
            f"unknown accelerator for --accelerator: {accelerator!r}; "
            f"use one of {', '.join(catalog.accelerators)}"
        )
    check_region(catalog, region)
    if kind and kind.lower() not in ("gpu", "inferentia", "trainium"):
        raise ChipswapError(f"unknown kind for --kind: {kind!r}; use gpu, inferentia or trainium")
    found = catalog.select(family=family, accelerator=accelerator, region=region, kind=kind)
    from chipswap.cli.config import resolve

    price_region = resolve(region=(region, "--region"))["region"].value  # default: `chipswap config show`
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "region": price_region,
                    "catalog": catalog.origin,
                    "instances": [instance_json(i, catalog, price_region) for i in found],
                },
                indent=2,
            )
        )
        return
    table = Table(title=f"{len(found)} instance types; prices $/h in {price_region} ('-' = no known price)")
    for col, just in (
        ("instance", "left"),
        ("kind", "left"),
        ("accelerator", "left"),
        ("accel GiB", "right"),
        ("NCs", "right"),
        ("vCPU", "right"),
        ("mem GiB", "right"),
        ("on-demand", "right"),
        ("spot", "right"),
        ("cap. block", "right"),
        ("regions", "right"),
    ):
        table.add_column(col, justify=just)
    for i in found:
        table.add_row(
            i.name,
            i.kind,
            f"{i.accelerator_count} x {i.accelerator}",
            _fmt(i.accelerator_memory_gib),
            str(i.neuron_cores or "-"),
            str(i.vcpus),
            _fmt(i.memory_gib),
            _price_cell(catalog, i.name, price_region, "on-demand"),
            _price_cell(catalog, i.name, price_region, "spot"),
            _price_cell(catalog, i.name, price_region, CAPACITY_BLOCK),
            str(len(i.regions)),
        )
    out = console()
    print_table(out, table)
    out.print("Spot is one observed crawl (median over AZs). Sources: `chipswap catalog show NAME`.")
    blocks = sorted({r.as_of for r in catalog.rates if r.is_capacity_block})
    if blocks:
        out.print(
            "cap. block: EC2 Capacity Blocks for ML (booked ahead, paid up front, dynamic price), a dated "
            f"snapshot (as of {', '.join(blocks)}); `chipswap capacity INSTANCE` looks up live offerings.",
            markup=False,
            highlight=False,
        )


@catalog_app.command("show")
def catalog_show(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Instance type, e.g. trn1.32xlarge."),
    region: str | None = typer.Option(None, "--region", metavar="REGION", help="Only prices in this region."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    catalog_file: str | None = CATALOG_FLAG,
) -> None:
    """One instance: specs, its chip, and every known price with source and date."""
    catalog = _load(ctx, catalog_file)
    inst = catalog.instance(name)
    region = region or (ctx.obj or {}).get("region")
    check_region(catalog, region)
    as_json = as_json or (ctx.obj or {}).get("json", False)
    chip = (
        catalog.chip(inst.accelerator)
        if inst.accelerator.lower() in {c.name.lower() for c in catalog.chips}
        else None
    )
    if as_json:
        out = instance_json(inst, catalog, region)
        out["chip"] = chip_json(chip) if chip else None
        typer.echo(json.dumps(out, indent=2))
        return
    out = console()
    spec = Table(title=inst.name, show_header=False)
    spec.add_column("field")
    spec.add_column("value", overflow="fold")  # wraps at 60 columns; a field list needs no cards
    rows = [
        ("family / kind", f"{inst.family} / {inst.kind}"),
        (
            "accelerator",
            f"{inst.accelerator_count} x {inst.accelerator}, {_fmt(inst.accelerator_memory_gib)} GiB total",
        ),
        ("NeuronCores", str(inst.neuron_cores)),
        ("vCPU / memory", f"{inst.vcpus} / {_fmt(inst.memory_gib)} GiB"),
        ("network", f"{_fmt(inst.network_gbps)} Gbps"),
        ("regions", ", ".join(inst.regions)),
        ("spec source", f"{inst.source} (as of {inst.as_of})"),
    ]
    if inst.price_note:
        rows.append(("unknown prices", inst.price_note))
    if chip:
        tf = ", ".join(f"{k} {_fmt(v)}" for k, v in chip.tflops_dense)
        rows += [
            ("chip", f"{chip.name} ({chip.vendor}{', ' + chip.compute_units if chip.compute_units else ''})"),
            ("chip dense TFLOPS", tf or "-"),
            (
                "chip memory",
                f"{_fmt(chip.memory_gib)} GiB {chip.memory_type}, {_fmt(chip.memory_bandwidth_gb_s)} GB/s",
            ),
            ("chip source", f"{chip.source} (as of {chip.as_of}; confidence {chip.confidence or '-'})"),
        ]
    for k, v in rows:
        spec.add_row(k, v)
    print_table(out, spec)
    rates = sorted(catalog.rates_for(inst.name, region), key=lambda r: (r.region, TERMS.index(r.term)))
    prices = Table(title=f"prices for {inst.name}" + (f" in {region}" if region else "") + " ($/h)")
    for col in ("region", "term", "$/h", "source", "as of", "note"):
        prices.add_column(col, justify="right" if col == "$/h" else "left")
    notes: dict[str, int] = {}
    for r in rates:
        mark = ""
        if r.note:
            head, detail = split_note(r.note)
            mark = f"[{notes.setdefault(head, len(notes) + 1)}]" + (f" {detail}" if detail else "")
        prices.add_row(r.region, term_words(r), _fmt(r.usd_per_hour), r.source, r.as_of, mark)
    if rates:
        print_table(out, prices)
    else:
        out.print(f"no known price for {inst.name}" + (f" in {region}" if region else ""))
    for r in rates:
        if r.is_capacity_block:
            out.print(
                f"{r.region} Capacity Block: ${_fmt(r.usd_per_hour)}/h per instance = "
                f"${catalog.accelerator_rate(r).quantize(Decimal('0.0001')).normalize():f} per "
                f"{inst.accelerator} accelerator-hour; {block_terms_text(r)}; a dated snapshot: "
                f"`chipswap capacity {inst.name}` looks up live offerings",
                markup=False,
                highlight=False,
            )
    for note, n in notes.items():
        out.print(f"[{n}] {note}", markup=False, highlight=False)
    for key in sorted({r.source for r in rates}):
        out.print(f"{key}: {catalog.source_text(key)}", markup=False, highlight=False)


@catalog_app.command("chips")
def catalog_chips(
    ctx: typer.Context,
    as_json: bool = JSON_TABLE_FLAG,
    catalog_file: str | None = CATALOG_FLAG,
) -> None:
    """Accelerator chips: peak dense TFLOPS per dtype, memory and bandwidth, with source."""
    catalog = _load(ctx, catalog_file)
    as_json = as_json or (ctx.obj or {}).get("json", False)
    if as_json:
        typer.echo(json.dumps([chip_json(c) for c in catalog.chips], indent=2))
        return
    table = Table(title="accelerator chips (peak dense TFLOPS; '-' = not published)")
    cols = ("chip", "vendor", "bf16", "fp8", "fp32", "mem GiB", "GB/s", "confidence", "as of")
    for col in cols:
        table.add_column(col, justify="left" if col in ("chip", "vendor", "confidence", "as of") else "right")
    for c in catalog.chips:
        table.add_row(
            c.name,
            c.vendor,
            _fmt(c.tflops("bf16")),
            _fmt(c.tflops("fp8")),
            _fmt(c.tflops("fp32")),
            _fmt(c.memory_gib),
            _fmt(c.memory_bandwidth_gb_s),
            c.confidence or "-",
            c.as_of,
        )
    print_table(console(), table)


REFRESH_HEADER = "# chipswap catalog refresh:"
DEFAULT_REFRESH_OUT = "chipswap-catalog.toml"


def _refresh_scope(catalog: Catalog, families: list[str], regions: list[str]) -> tuple[list[str], list[str]]:
    """The instance names and regions to refresh; unknown names are usage errors (exit 2)."""
    known_fam = {f.lower(): f for f in catalog.families}
    for fam in families:
        if fam.lower() not in known_fam:
            raise ChipswapError(
                f"unknown family for --family: {fam!r}; use one of {', '.join(catalog.families)}"
            )
    for r in regions:
        check_region(catalog, r)
    wanted = {f.lower() for f in families}
    names = [i.name for i in catalog.instances if not wanted or i.family.lower() in wanted]
    if regions:
        names = [n for n in names if set(catalog.instance(n).regions) & set(regions)]
    if not names:
        raise ChipswapError(
            f"no catalog instance type of {', '.join(families) or 'any family'} is listed in "
            f"{', '.join(regions)}; drop --region or --family"
        )
    return names, list(dict.fromkeys(regions))


def _check_target(out_path: Path, force: bool) -> None:
    """Never overwrite a file the user wrote by hand: only an earlier refresh output, or with --force."""
    if not out_path.exists() or force:
        return
    if out_path.is_file():
        with out_path.open("rb") as fh:
            head = fh.read(len(REFRESH_HEADER)).decode("utf-8", "replace")
        if head == REFRESH_HEADER:
            return
    raise ChipswapError(
        f"--out {out_path} exists and was not written by `chipswap catalog refresh`; "
        "choose another path, or pass --force to replace it"
    )


def _change_json(c: PriceChange) -> dict:
    return {
        "instance": c.instance,
        "region": c.region,
        "term": c.term,
        "before_usd_per_hour": _num(c.before.usd_per_hour) if c.before else None,
        "before_source": c.before.source if c.before else None,
        "before_as_of": c.before.as_of if c.before else None,
        "after_usd_per_hour": _num(c.after.usd_per_hour),
        "after_source": c.after.source,
        "after_as_of": c.after.as_of,
        "change_pct": float(round(c.change_pct, 2)) if c.change_pct is not None else None,
    }


@catalog_app.command("refresh")
def catalog_refresh(
    ctx: typer.Context,
    out_file: str = typer.Option(
        DEFAULT_REFRESH_OUT,
        "--out",
        metavar="FILE",
        help="User catalog file to write (use it with --catalog).",
    ),
    family: list[str] | None = typer.Option(
        None,
        "--family",
        metavar="FAMILY",
        help="Only this family (repeatable; default: every catalog family).",
    ),
    region: list[str] | None = typer.Option(
        None,
        "--region",
        metavar="REGION",
        help="Only this region (repeatable; default: the catalog's regions).",
    ),
    term: list[str] | None = typer.Option(
        None,
        "--term",
        metavar="TERM",
        help="on-demand, spot and/or capacity-block (repeatable; default on-demand and spot, plus "
        "capacity-block for types sold only that way, e.g. trn2).",
    ),
    no_aws: bool = typer.Option(False, "--no-aws", help="Do not call AWS (refresh then has nothing to do)."),
    force: bool = typer.Option(False, "--force", help="Replace --out even if it was not written by refresh."),
    as_json: bool = typer.Option(False, "--json", help="Print the diff as JSON."),
) -> None:
    """Pull current prices from AWS (Price List API on-demand, EC2 spot price history) for the catalog's
    families and regions into a user catalog file, dated today, and show the diff against the shipped
    snapshot. All or nothing: on any AWS failure nothing is written (exit 3)."""
    from chipswap.atomic import atomic_write_text
    from chipswap.economics.aws import access as aws_access
    from chipswap.economics.aws.prices import (
        DEFAULT_TERMS,
        TERMS_REFRESHED,
        AwsPriceSource,
        refresh_prices,
        render_refresh,
    )
    from chipswap.economics.catalog_io import parse_catalog

    as_json = as_json or (ctx.obj or {}).get("json", False)
    terms = list(dict.fromkeys(term or DEFAULT_TERMS))
    bad = [t for t in terms if t not in TERMS_REFRESHED]
    if bad:
        raise ChipswapError(f"--term {bad[0]!r} cannot be refreshed; use {', '.join(TERMS_REFRESHED)}")
    snapshot = load_catalog()
    names, regions = _refresh_scope(snapshot, family or [], region or [])
    out_path = Path(out_file)
    _check_target(out_path, force)
    as_of = min((r.as_of for r in snapshot.rates if r.term == "on-demand"), default="undated")
    stays = f"nothing written; the shipped snapshot (prices as of {as_of} or later) stays in use"
    access = aws_access.access_from_environment(no_aws)
    if access is None:
        raise aws_access.AwsUnavailableError(f"--no-aws given: catalog refresh needs AWS; {stays}")
    try:
        account = access.probe("us-east-1")
    except aws_access.AwsOffline as off:
        raise aws_access.AwsUnavailableError(
            f"offline: {off.reason}; catalog refresh needs AWS; {stays}"
        ) from None
    out = console()
    with step_progress(out.is_terminal and not as_json, "reading prices") as step:
        result = refresh_prices(
            snapshot,
            AwsPriceSource(access),
            date.today().isoformat(),
            instances=names,
            regions=regions or None,
            terms=terms,
            block_instances=[] if term else [n for n in names if snapshot.capacity_block_only(n)],
            account=account,
            progress=step,
        )
    if not result.rates:
        raise aws_access.AwsUnavailableError(
            f"AWS returned no price for the asked types and regions; {stays}"
        )
    text = render_refresh(result)
    parse_catalog(text, str(out_path))  # what is written must load as a catalog: check before writing
    atomic_write_text(out_path, text)
    changes = diff_rates(snapshot, result.rates)
    got = {(r.instance, r.region, r.term) for r in result.rates}
    missing = [a for a in result.asked if a not in got]
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "written": str(out_path),
                    "as_of": result.today,
                    "source": "aws-pricing-api",
                    "account": result.account,
                    "prices": len(result.rates),
                    "changes": [_change_json(c) for c in changes],
                    "not_returned": [{"instance": i, "region": r, "term": t} for i, r, t in missing],
                    "priced_outside_catalog_regions": [
                        {"instance": i, "region": r} for i, r in result.elsewhere
                    ],
                    "notes": list(result.notes),
                },
                indent=2,
            )
        )
        return
    _print_refresh(out, out_path, result, changes, missing)


def _print_refresh(
    out: Console, out_path: Path, result, changes: tuple[PriceChange, ...], missing: list
) -> None:
    moved = [c for c in changes if c.before is None or c.after.usd_per_hour != c.before.usd_per_hour]
    same = len(changes) - len(moved)
    table = Table(title=f"prices that differ from the shipped snapshot ({len(moved)} of {len(changes)})")
    for col in ("instance", "region", "term", "snapshot $/h", "as of", f"AWS {result.today} $/h", "change"):
        table.add_column(col, justify="right" if "$" in col or col == "change" else "left")
    for c in moved:
        pct = c.change_pct
        table.add_row(
            c.instance,
            c.region,
            c.term,
            _fmt(c.before.usd_per_hour) if c.before else "-",
            c.before.as_of if c.before else "new",
            _fmt(c.after.usd_per_hour),
            f"{pct:+.1f}%" if pct is not None else "new",
        )
    if moved:
        print_table(out, table)
    out.print(
        f"wrote {out_path}: {len(result.rates)} prices dated {result.today} (source aws-pricing-api); "
        f"{same} unchanged, {len(moved)} changed or new; use it with --catalog {out_path}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if missing:
        shown = ", ".join(f"{i} {r} {t}" for i, r, t in missing[:6])
        more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
        out.print(
            f"not returned by AWS (the snapshot's price stays in effect): {shown}{more}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    for note in result.notes[:10]:
        out.print(f"note: {one_line(note)}", markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")
