"""`chipswap capacity INSTANCE`: can COUNT instances be launched, and where? Offered AZs, the account's vCPU
quota and usage, spot price, spot placement score and Capacity Block offerings per region, read live from AWS
(read-only) or, offline, the shipped region table labelled "snapshot, not checked".

Thin: parses flags, calls chipswap.economics.aws.capacity.gather_capacity and
chipswap.economics.capacity.screen_capacity,
prints. May not decide anything itself or write files.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import date
from decimal import Decimal

import typer
from rich.table import Table

from chipswap.cli.common import CATALOG_FLAG, JSON_TABLE_FLAG, console, print_table, step_progress
from chipswap.economics.aws import access as aws_access
from chipswap.economics.aws.capacity import CapacityLookup, block_rate_lines, gather_capacity
from chipswap.economics.capacity import (
    CHECK_QUOTA,
    CapacityScreen,
    RegionCapacity,
    quota_class,
    screen_capacity,
)
from chipswap.economics.catalog import BLOCK_DAYS, check_block_days
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line


def _fmt_usd(d: Decimal | None) -> str:
    if d is None:
        return "-"
    if d >= 1:
        return f"${d.quantize(Decimal('0.01')):,}"
    shown = d.quantize(Decimal("0.0001"))
    return f"${(shown if shown else d).normalize():f}"


def _n(v: int | None) -> str:
    return "?" if v is None else f"{v:,}"


def _fit_cell(s: CapacityScreen) -> str:
    if s.status == "fits":
        return "yes"
    if s.status == "not-offered":
        return "no: not offered"
    if s.status == "quota-too-low":
        return f"no: request +{_n(s.increase_vcpus)} vCPUs"
    return f"unknown: {CHECK_QUOTA}"


def _offered_cell(r: RegionCapacity) -> str:
    if r.offered is True:
        return f"yes ({len(r.zones)} AZ{'s' if len(r.zones) != 1 else ''})"
    if r.offered is False:
        return "no"
    return "listed (snapshot)" if not r.checked and r.offered_note.startswith("listed") else "unknown"


def _blocks_cell(r: RegionCapacity) -> str:
    if r.blocks:
        b = r.blocks[0]
        offers = f"{len(r.blocks)} offer{'s' if len(r.blocks) != 1 else ''}"
        return f"{offers}, from {_fmt_usd(b.usd_per_instance_hour)}/instance-h, starts {b.start[:10]}"
    return r.blocks_note if r.blocks_note in ("not sold as Capacity Blocks", "not offered") else "-"


class _Notes:
    """Footnotes: each distinct reason a cell is unknown is printed once, numbered."""

    def __init__(self) -> None:
        self.items: dict[str, int] = {}

    def mark(self, cell: str, note: str) -> str:
        if not note:
            return cell
        return f"{cell} [{self.items.setdefault(note, len(self.items) + 1)}]"


def _row_json(r: RegionCapacity, s: CapacityScreen) -> dict:
    q = r.quota
    return {
        **{k: getattr(r, k) for k in ("region", "checked", "as_of", "offered")},
        "zones": list(r.zones),
        "offered_note": r.offered_note or None,
        "quota": (
            {
                "code": q.code,
                "name": q.name,
                "limit_vcpus": q.limit_vcpus,
                "usage_vcpus": q.usage_vcpus,
                "limit_note": q.limit_note or None,
                "usage_note": q.usage_note or None,
            }
            if q
            else None
        ),
        "quota_note": r.quota_note or None,
        "fits": s.status,
        "outcome": s.outcome,
        "reason": s.text,
        "increase_vcpus": s.increase_vcpus,
        "requested_limit_vcpus": s.requested_limit_vcpus,
        "spot_usd_per_hour": float(r.spot_usd) if r.spot_usd is not None else None,
        "spot_note": r.spot_note or None,
        "spot_placement_score": r.placement_score,
        "spot_placement_note": r.placement_note or None,
        "capacity_blocks": [
            {
                "zone": b.zone,
                "instance_count": b.instance_count,
                "hours": b.hours,
                "upfront_usd": float(b.upfront_usd),
                "usd_per_instance_hour": float(b.usd_per_instance_hour.quantize(Decimal("0.0001"))),
                "start": b.start,
                "end": b.end,
            }
            for b in r.blocks
        ],
        "capacity_blocks_note": r.blocks_note or None,
    }


def lookup_json(found: CapacityLookup, screens: list[CapacityScreen]) -> dict:
    return {
        "instance": found.info.name,
        "count": found.count,
        "vcpus_per_instance": found.info.vcpus,
        "vcpus_needed": found.count * found.info.vcpus,
        "purchase": found.purchase,
        "checked": found.checked,
        "source": "aws" if found.checked else "snapshot, not checked",
        "note": found.note,
        "account": found.account,
        "regions": [_row_json(r, s) for r, s in zip(found.rows, screens, strict=True)],
    }


def _table(found: CapacityLookup, screens: list[CapacityScreen]) -> tuple[Table, _Notes]:
    qc = quota_class(found.info.name)
    qname = f"{qc.quota_name(found.purchase)}, {qc.code(found.purchase)}" if qc else "no quota class read"
    need = found.count * found.info.vcpus
    title = f"{found.count} x {found.info.name} = {need:,} vCPUs ({qname})"
    if not found.checked:
        title += " — snapshot, not checked"
    table = Table(title=title)
    cols = ("region", "offered", "quota vCPUs", "in use", f"{found.count} fit?", "spot $/h", "placement")
    for col in (*cols, "Capacity Blocks"):
        table.add_column(col, justify="right" if col in ("quota vCPUs", "in use", "spot $/h") else "left")
    notes = _Notes()
    for r, s in zip(found.rows, screens, strict=True):
        q = r.quota
        limit = notes.mark(_n(q.limit_vcpus), q.limit_note) if q else notes.mark("-", r.quota_note)
        used = notes.mark(_n(q.usage_vcpus), q.usage_note) if q else "-"
        spot = _fmt_usd(r.spot_usd)
        if (r.spot_usd is None and r.offered is not False) or not r.checked:
            spot = notes.mark(spot, r.spot_note)
        placement = (
            str(r.placement_score) if r.placement_score is not None else notes.mark("-", r.placement_note)
        )
        blocks = _blocks_cell(r)
        if not r.blocks and blocks == "-":
            blocks = notes.mark("-", r.blocks_note)
        offered = notes.mark(_offered_cell(r), r.offered_note)
        table.add_row(r.region, offered, limit, used, _fit_cell(s), spot, placement, blocks)
    return table, notes


def run_capacity(
    instance: str,
    count: int,
    regions: list[str],
    *,
    no_aws: bool,
    spot: bool,
    block_days: int,
    catalog_file: str | None,
    progress: Callable[[str], None] | None = None,
) -> tuple[CapacityLookup, list[CapacityScreen]]:
    """The facts and each region's screening outcome (a plain function; the command only prints it)."""
    if count < 1 or count > 100_000:
        raise ChipswapError(f"--count must be between 1 and 100000, got {count}; pass the fleet size")
    if block_days not in BLOCK_DAYS:
        try:
            check_block_days(block_days)
        except ChipswapError as exc:
            raise ChipswapError(f"--block-days: {exc}") from None
    catalog = load_catalog(catalog_file)
    found = gather_capacity(
        catalog,
        instance,
        regions or None,
        count,
        access=aws_access.access_from_environment(no_aws),
        today=date.today().isoformat(),
        purchase="spot" if spot else "on-demand",
        block_hours=block_days * 24,
        progress=progress,
    )
    screens = [screen_capacity(r, count, found.rows) for r in found.rows]
    return found, screens


def capacity_command(
    instance: str = typer.Argument(..., help="Instance type, e.g. trn1.32xlarge."),
    count: int = typer.Option(1, "--count", "-n", help="Instances the fleet needs (default 1)."),
    region: list[str] | None = typer.Option(
        None,
        "--region",
        metavar="REGION",
        help="Region to check (repeatable; default: every region the catalog lists the type in).",
    ),
    no_aws: bool = typer.Option(False, "--no-aws", help="Do not call AWS: show the shipped snapshot only."),
    spot: bool = typer.Option(
        False, "--spot", help="Check the spot vCPU quota instead of the on-demand one."
    ),
    block_days: int = typer.Option(
        1, "--block-days", help="Capacity Block length to ask offerings for (days)."
    ),
    as_json: bool = JSON_TABLE_FLAG,
    catalog_file: str | None = CATALOG_FLAG,
) -> None:
    """Whether COUNT x INSTANCE can be launched per region: offered AZs, vCPU quota and usage, spot price and
    placement score, Capacity Blocks. Live from AWS (read-only) when credentials work; else the shipped
    snapshot, labelled "snapshot, not checked"."""
    from chipswap.cli.config import resolve

    given = resolve(catalog=(catalog_file, "--catalog"), region=(region[0] if region else None, "--region"))
    catalog_file = given["catalog"].value
    if not region and not given["region"].builtin:  # a configured region; built-in: every listed region
        region = [given["region"].value]
    out = console()
    with step_progress(out.is_terminal and not as_json, "asking AWS") as step:
        found, screens = run_capacity(
            instance,
            count,
            region or [],
            no_aws=no_aws,
            spot=spot,
            block_days=block_days,
            catalog_file=catalog_file,
            progress=step,
        )
    if as_json:
        if not found.checked:
            sys.stderr.write(f"chipswap: note: {found.note}\n")
        typer.echo(json.dumps(lookup_json(found, screens), indent=2))
        return
    out.print(one_line(found.note), markup=False, highlight=False, soft_wrap=True)
    table, notes = _table(found, screens)
    print_table(out, table)
    for note, n in notes.items.items():
        out.print(f"[{n}] {one_line(note)}", markup=False, highlight=False, soft_wrap=True)
    for line in block_rate_lines(load_catalog(catalog_file), found):
        out.print(one_line(line), markup=False, highlight=False, soft_wrap=True)
    for s in screens:
        if s.status in ("quota-too-low", "not-offered"):
            out.print(one_line(s.text), markup=False, highlight=False, soft_wrap=True)
    if any(s.outcome == "unknown" for s in screens):
        qc = quota_class(found.info.name)
        where = f"the {qc.quota_name(found.purchase)} quota" if qc else "the quota"
        out.print(
            f"unknown is not a pass: {CHECK_QUOTA} ({where} in the Service Quotas console)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def register(app: typer.Typer) -> None:
    app.command("capacity")(capacity_command)
