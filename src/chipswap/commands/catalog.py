"""`chipswap catalog`: list / filter instance types with their prices, show one instance, list chips."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import typer
from rich.console import Console
from rich.table import Table

from chipswap.catalog_io import load_catalog
from chipswap.core.catalog import TERMS, Catalog, Chip, Instance, Rate
from chipswap.errors import ChipswapError

catalog_app = typer.Typer(
    help="List AWS accelerated instance types (GPU, Inferentia, Trainium) with specs and $/h, or show one.",
    no_args_is_help=False,
    invoke_without_command=True,
    rich_markup_mode=None,
)

CATALOG_HELP = "TOML file with the same schema as the shipped catalog; its entries override the shipped ones."
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


def console() -> Console:
    """A rich console; off a terminal (pipes, CI logs) use a wide fixed width so tables do not wrap."""
    c = Console()
    return c if c.is_terminal else Console(width=160)


def _load(ctx: typer.Context, catalog_file: str | None) -> Catalog:
    chosen = catalog_file or (ctx.obj or {}).get("catalog")
    return load_catalog(chosen)


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
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    catalog_file: str | None = typer.Option(None, "--catalog", metavar="FILE", help=CATALOG_HELP),
) -> None:
    """List instance types (filter by family, accelerator, region); `show NAME` for one; `chips`."""
    ctx.obj = {"catalog": catalog_file, "json": as_json, "region": region}
    if ctx.invoked_subcommand is not None:
        return
    catalog = load_catalog(catalog_file)
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
    price_region = region or DEFAULT_REGION
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
            str(len(i.regions)),
        )
    out = console()
    out.print(table)
    out.print("Spot is one observed crawl (median over AZs). Sources: `chipswap catalog show NAME`.")


@catalog_app.command("show")
def catalog_show(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Instance type, e.g. trn1.32xlarge."),
    region: str | None = typer.Option(None, "--region", metavar="REGION", help="Only prices in this region."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    catalog_file: str | None = typer.Option(None, "--catalog", metavar="FILE", help=CATALOG_HELP),
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
    spec.add_column("value")
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
    out.print(spec)
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
        prices.add_row(r.region, r.term, _fmt(r.usd_per_hour), r.source, r.as_of, mark)
    if rates:
        out.print(prices)
    else:
        out.print(f"no known price for {inst.name}" + (f" in {region}" if region else ""))
    for note, n in notes.items():
        out.print(f"[{n}] {note}", markup=False, highlight=False)
    for key in sorted({r.source for r in rates}):
        out.print(f"{key}: {catalog.source_text(key)}", markup=False, highlight=False)


@catalog_app.command("chips")
def catalog_chips(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    catalog_file: str | None = typer.Option(None, "--catalog", metavar="FILE", help=CATALOG_HELP),
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
    console().print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")
