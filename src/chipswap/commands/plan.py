"""`chipswap plan`: the migration verdict for one workload file, with an HTML / JSON / Markdown report.

`chipswap plan` with no argument runs the bundled Llama serving example. `chipswap workload-help` (or
`chipswap plan --explain`) prints the documented workload schema.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path

import typer

from chipswap.errors import ChipswapError, closest

EXAMPLES = {"llama-serving": "llama-serving.toml", "finetune": "finetune.toml"}
DEFAULT_EXAMPLE = "llama-serving"


def example_path(name: str) -> Path:
    if name not in EXAMPLES:
        near = closest(name, EXAMPLES)
        hint = f"did you mean {', '.join(near)}?" if near else f"use one of {', '.join(EXAMPLES)}"
        raise ChipswapError(f"unknown example: {name!r}; {hint}")
    return Path(str(resources.files("chipswap.data").joinpath("examples", EXAMPLES[name])))


def _money(v: Decimal | None) -> str:
    return "unknown" if v is None else f"${v.quantize(Decimal('0.01')):,}"


def summary_lines(result: object) -> list[str]:
    """The lines printed on the terminal (also the head of the Markdown summary)."""
    r = result  # PlanResult
    v = r.verdict  # type: ignore[attr-defined]
    lines = [f"Verdict: {v.verdict} — {v.why}"]
    now = r.monthly_now.value  # type: ignore[attr-defined]
    fleet = f"{r.fleet_count} x {r.fleet_instance}"  # type: ignore[attr-defined]
    lines.append(f"  now:   {fleet}  {_money(now)}/month")
    b = r.best  # type: ignore[attr-defined]
    if b is not None and b.monthly_usd is not None:
        pct = f"{b.saving_pct.quantize(Decimal('0.1'))}%" if b.saving_pct is not None else "?"
        pay = f"month {b.payback_month}" if b.payback_month else "never"
        lines.append(
            f"  after: {b.count} x {b.instance}  {_money(b.monthly_usd)}/month ({pct} saving; porting "
            f"{_money(r.porting.value)}, pays back in {pay})"
        )  # type: ignore[attr-defined]
        if b.payback_run:
            lines[-1] += f"; per run: pays back on run {b.payback_run}"
    lines.append("Reasons:")
    for reason in (*v.reasons, *v.economics):
        lines.append(f"  {reason.line()}")
    flips = [f for f in r.flips if f.value is not None]  # type: ignore[attr-defined]
    if flips:
        lines.append("What would flip it:")
        lines.extend(f"  {f.text}" for f in flips)
    return lines


def _plan(
    workload: Path | None = typer.Argument(
        None,
        help="Workload TOML file (see `chipswap workload-help`). Default: the bundled Llama serving example.",
    ),
    example: str | None = typer.Option(
        None, "--example", help=f"Run a bundled example instead: {', '.join(EXAMPLES)}."
    ),
    out: Path = typer.Option(
        Path("chipswap-report"), "--out", help="Folder for report.html, report.json, report.md."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the full result as JSON instead of the summary."
    ),
    close_margin: str | None = typer.Option(
        None,
        "--close-margin",
        help="Saving (percent of today's monthly cost) under which the answer is a close call, and so a no. "
        "Overrides [verdict].close_margin_pct (default 20).",
    ),
    explain: bool = typer.Option(False, "--explain", help="Print the documented workload schema and exit."),
) -> None:
    """The verdict: stay on GPU, move serving to Inferentia, move to Trainium, or close call — stay."""
    from chipswap.workload import load_workload, schema_help

    if explain:
        typer.echo(schema_help())
        return
    if workload is not None and example is not None:
        raise ChipswapError("give a workload file or --example, not both; drop one of them")
    margin = None
    if close_margin is not None:
        try:
            margin = Decimal(close_margin.rstrip("%"))
        except InvalidOperation:
            raise ChipswapError(
                f"--close-margin must be a percentage, got {close_margin!r}; pass e.g. 20"
            ) from None
        if not margin.is_finite() or margin < 0:
            raise ChipswapError(f"--close-margin must be 0 or more, got {close_margin!r}; pass e.g. 20")
    path = workload if workload is not None else example_path(example or DEFAULT_EXAMPLE)
    label = str(path) if workload is not None else f"example {example or DEFAULT_EXAMPLE}"
    wl = load_workload(path)

    from chipswap.pipeline import run_plan
    from chipswap.report.html import render_html
    from chipswap.report.markdown import render_markdown

    tty = sys.stderr.isatty()

    def progress(msg: str) -> None:
        if tty:
            sys.stderr.write(f"\r\033[K{msg}...")
            sys.stderr.flush()

    result = run_plan(wl, path, close_margin_pct=margin, progress=progress)
    if tty:
        sys.stderr.write("\r\033[K")
    from chipswap.atomic import atomic_write_text

    data = result.to_json()
    data["workload_label"] = label
    atomic_write_text(out / "report.json", json.dumps(data, indent=2, default=str) + "\n")
    atomic_write_text(out / "report.md", render_markdown(result, summary_lines(result)))
    html_path = atomic_write_text(out / "report.html", render_html(result))
    if as_json:
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    typer.echo(f"chipswap plan: {result.title} ({label})")
    for line in summary_lines(result):
        typer.echo(line)
    typer.echo(f"Report: {html_path} (also report.json, report.md) — {result.seconds:.1f} s")


def _workload_help() -> None:
    """Print the documented workload file schema (every key, its type, default and meaning)."""
    from chipswap.workload import schema_help

    typer.echo(schema_help())


def register(app: typer.Typer) -> None:
    app.command("plan")(_plan)
    app.command("workload-help")(_workload_help)
