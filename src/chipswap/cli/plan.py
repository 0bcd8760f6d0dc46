"""`chipswap plan`: the migration verdict for one workload file, with an HTML / JSON / Markdown report.

`chipswap plan` with no argument runs the bundled Llama serving example. `chipswap workload-help` (or
`chipswap plan --explain`) prints the documented workload schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from typing import Any

import typer

from chipswap.cli.common import maybe_flag, switch
from chipswap.errors import ChipswapError, closest

EXAMPLES = {
    "llama-serving": "llama-serving.toml",
    "classifier-serving": "classifier-serving.toml",
    "finetune": "finetune.toml",
    "trn2-serving": "trn2-serving.toml",
}
DEFAULT_EXAMPLE = "llama-serving"
# not a workload: `--example trn2-claims` prints the seed's numeric claims checked (chipswap.plan.claims)
CLAIMS_EXAMPLE = "trn2-claims"


def example_path(name: str) -> Path:
    if name not in EXAMPLES:
        near = closest(name, EXAMPLES)
        hint = f"did you mean {', '.join(near)}?" if near else f"use one of {', '.join(EXAMPLES)}"
        raise ChipswapError(f"unknown example: {name!r}; {hint}")
    return Path(str(resources.files("chipswap.data").joinpath("examples", EXAMPLES[name])))


_COL_FLAG = re.compile(r"name it with --(prompt|output|timestamp)-col COLUMN")


def workload_trace_hint(message: str, path: Path) -> str:
    """A trace error read via a workload: the fix is [traffic.columns], not the `shapes` command's flags."""

    def repl(m: re.Match[str]) -> str:
        field = m.group(1) if m.group(1) == "timestamp" else f"{m.group(1)}_tokens"
        return f'name it in {path} with [traffic.columns] {field} = "COLUMN"'

    return _COL_FLAG.sub(repl, message)


def _require_arrival_rates(result: object, wl: object, path: Path) -> None:
    """A serving trace without timestamps has no arrival rate, so no fleet size: say so, not a verdict."""
    traffic = getattr(result, "traffic", None)
    tr = getattr(wl, "traffic", None)
    if (
        getattr(wl, "kind", None) == "serving"
        and tr is not None
        and getattr(tr, "trace", None) is not None
        and traffic is not None
        and getattr(traffic, "mean_rps", 0) is None
    ):
        raise ChipswapError(
            f"{path}: traffic.trace has no timestamp column, so arrival rates and the fleet size can't be "
            'computed; add [traffic.columns] timestamp = "COLUMN" or give traffic.steady_rps instead'
        )


def _money(v: Decimal | None) -> str:
    return "unknown" if v is None else f"${v.quantize(Decimal('0.01')):,}"


def _pct1(v: Decimal | None) -> str:
    return "?" if v is None else f"{v.quantize(Decimal('0.1'))}%"


def figure_line(fleet: object) -> str:
    """One fleet's figures: throughput, latency, size and serving configuration, each with its source."""
    from chipswap.textsafe import human_number

    parts = []
    thr = getattr(fleet, "throughput", None)
    if thr is not None:
        parts.append(f"{human_number(thr.value)} {thr.unit} ({thr.label})")
    for name in ("e2e_p99", "ttft_p99"):
        fig = getattr(fleet, name, None)
        if fig is not None:
            parts.append(
                f"{'end-to-end' if name == 'e2e_p99' else 'TTFT'} p99 {float(fig.value):,.0f} ms "
                f"({fig.label})"
            )
    others = {k: v for k, v in (getattr(fleet, "objectives", None) or {}).items() if k not in _SHOWN}
    if others:
        shown = ", ".join(f"{_objective_name(k)} {_ms_text(v)}" for k, v in others.items())
        parts.append(shown + " (simulated)")
    goodput = getattr(fleet, "goodput_pct", None)
    if goodput is not None and getattr(fleet, "count", None) is not None:
        parts.append(f"goodput {goodput:.1f}% of requests meet every objective")
    count, (lo, hi) = getattr(fleet, "count", None), getattr(fleet, "count_range", (None, None))
    if count is None and getattr(fleet, "sizing", ""):
        floor = getattr(fleet, "slo_floor_ms", None)
        blocking = getattr(fleet, "slo_blocking", ())
        why = f" ({'; '.join(blocking)})" if blocking else (f" (unloaded {floor:,.0f} ms)" if floor else "")
        parts.append(fleet.sizing + why)  # type: ignore[attr-defined]
    if count is not None:
        band = ""
        if lo is not None and hi is not None and lo != hi:
            band = f" ({lo}-{hi} across the error band)"
        elif lo is not None and hi is None:
            band = f" ({lo} or more across the error band; none meets the SLO at its slow edge)"
        slo = "; misses SLO" if getattr(fleet, "meets_slo", None) is False else ""
        parts.append(f"{count:,} instance{'s' if count != 1 else ''}{band}{slo}")
    cfg = getattr(fleet, "config", None)
    if cfg is not None:
        parts.append(
            f"TP {cfg.tp_degree} x {cfg.replicas} replica{'s' if cfg.replicas != 1 else ''}, batch "
            f"{cfg.max_batch}, {cfg.weight_dtype}"
        )
    lost = getattr(fleet, "overridden", ())
    if lost:
        parts.append("not used: " + ", ".join(f"{human_number(o.value)} {o.unit} ({o.label})" for o in lost))
    return f"{getattr(fleet, 'instance', '?')}: " + ("; ".join(parts) or "no figure")


_SHOWN = ("e2e_p99", "ttft_p99")  # objectives figure_line prints as figures (with their source)


def _objective_name(key: str) -> str:
    from chipswap.simulation.fleet import METRICS

    metric, pct = key.rsplit("_p", 1)
    return f"{METRICS.get(metric, metric)} p{pct}"


def _ms_text(ms: float) -> str:
    return f"{ms:,.1f} ms" if ms < 100 else f"{ms:,.0f} ms"


def summary_lines(result: object) -> list[str]:
    """The lines printed on the terminal (also the tail of the Markdown summary). Every line goes through
    textsafe.one_line: a title or name from a file cannot recolour the terminal or add a line."""
    from chipswap.textsafe import one_line

    r = result  # PlanResult
    v = r.verdict  # type: ignore[attr-defined]
    lines = [f"Verdict: {getattr(v, 'headline', v.verdict)} — {v.why}"]
    today = getattr(r, "monthly_today", None)
    now = r.monthly_now.value  # type: ignore[attr-defined]
    fleet = f"{r.fleet_count} x {r.fleet_instance}"  # type: ignore[attr-defined]
    gpu = getattr(r, "gpu_fleet", None)
    needed = getattr(gpu, "count", None) if getattr(r, "kind", "serving") == "serving" else None
    if today is not None and needed is not None and needed != r.fleet_count:  # type: ignore[attr-defined]
        n1 = needed > r.fleet_count and "redundancy" in str(getattr(gpu, "min_count_why", ""))  # type: ignore[attr-defined]
        how = "with N+1 (targets.min_replicas), like the candidates" if n1 else "sized like the candidates"
        lines.append(
            f"  now:   {fleet} today {_money(today.value)}/month; {how}: {needed} x "
            f"{r.fleet_instance} {_money(now)}/month"  # type: ignore[attr-defined]
        )
    else:
        lines.append(f"  now:   {fleet}  {_money(now)}/month")
    from chipswap.report.wording import measure_rows, right_sizing_line

    lines.extend(f"  {row}" for row in measure_rows(r))
    rs = right_sizing_line(r)
    if rs:
        lines.append(f"  {rs}")
    b = r.best  # type: ignore[attr-defined]
    if b is not None and b.monthly_usd is not None:
        pay = f"pays back in month {b.payback_month}" if b.payback_month else "never pays back"
        lo, hi = getattr(b, "saving_pct_range", (None, None))
        from chipswap.report.wording import saving_range_words

        band = f", {saving_range_words(lo, hi)} across the error band" if lo is not None and lo != hi else ""
        from chipswap.report.wording import saving_words

        lines.append(
            f"  after: {'?' if b.count is None else b.count} x {b.instance}  {_money(b.monthly_usd)}/month"
            f" ({saving_words(b.saving_pct, now, b.monthly_usd)}"
            f"{band}; porting {_money(r.porting.value)}, {pay})"  # type: ignore[attr-defined]
        )
        if b.payback_run:
            lines[-1] += f"; per run: pays back on run {b.payback_run}"
        if getattr(b, "block", "") and b.rate is not None:
            lines.append(
                f"    priced: ${b.rate.value}/h, {b.rate.source.removeprefix('catalog: ')}; {b.block}"
            )
    fleets = [f for f in (gpu, *(getattr(c, "fleet", None) for c in getattr(r, "candidates", ()))) if f]
    trains = [str(f.note).split(";")[0] for f in fleets if " trains in " in str(getattr(f, "note", "") or "")]
    if getattr(r, "kind", "serving") == "training" and trains:
        dtypes = {t.split(" trains in ")[1].split(" ")[0] for t in trains}
        head = "like for like" if len(dtypes) == 1 else "dtypes differ"
        lines.append(f"  {head}: " + " vs ".join(trains))
    if fleets:
        lines.append("Figures:")
        from chipswap.report.wording import candidate_reason

        for f in fleets:
            lines.append(f"  {figure_line(f)}{candidate_reason(r, f.instance)}")
            note = str(getattr(getattr(f, "throughput", None), "note", "") or "")
            if note.startswith("run size inferred"):
                lines.append(f"    {note}")
    from chipswap.report.html import reason_rows, report_notes

    lines.append("Reasons:")
    for reason in reason_rows(v):
        lines.append(f"  {reason.line()}")
    notes = report_notes(r)
    if notes:
        lines.append("Notes:")
        lines.extend(f"  {n}" for n in notes)
    from chipswap.report.wording import flip_lines

    flips = flip_lines(r)
    if flips:
        lines.append("What would flip it:")
        lines.extend(f"  {f}" for f in flips)
    return [one_line(line, 2000) for line in lines]


def _default_catalog() -> Any:
    from chipswap.economics.catalog_io import load_catalog

    return load_catalog(None)


def _print_claims(as_json: bool, catalog_file: str | Path | None) -> None:
    """`--example trn2-claims`: the seed's claims, checked (chipswap.plan.claims does the work)."""
    import json

    from chipswap.economics.catalog_io import load_catalog
    from chipswap.plan.claims import as_json as claims_json
    from chipswap.plan.claims import evaluate_claims, render_text

    lines = evaluate_claims(load_catalog(catalog_file))
    if as_json:
        typer.echo(json.dumps(claims_json(lines), indent=2))
        return
    for line in render_text(lines):
        typer.echo(line)


def _capacity_check(catalog: object, no_aws: bool) -> Callable[[str, str, int | None, str], tuple[Any, str]]:
    """The capacity screen of the pick: AWS read-only (or the shipped snapshot when offline / --no-aws)."""
    from datetime import date

    from chipswap.economics.aws import access as aws_access
    from chipswap.economics.aws.capacity import capacity_for_plan, longest_block_for_plan
    from chipswap.economics.catalog_io import load_catalog

    cat = catalog if catalog is not None else load_catalog()
    access = aws_access.access_from_environment(no_aws)
    today = date.today().isoformat()

    class Check:
        def __call__(self, instance: str, region: str, count: int | None, term: str) -> tuple[Any, str]:
            return capacity_for_plan(cat, instance, region, count, term=term, access=access, today=today)

        def blocks(self, instance: str, region: str, count: int | None, days: int) -> tuple[Any, ...]:
            return longest_block_for_plan(
                cat,  # type: ignore[arg-type]  # the same catalog capacity_for_plan gets
                instance,
                region,
                count,
                days,
                access=access,
                today=today,
            )

    return Check()


def _with_train_hours(wl: Any, hours: float) -> Any:
    """The workload with its GPU run time stated and its size dropped (inferred from the projection)."""
    if wl.kind != "training" or wl.job is None:
        raise ChipswapError('--train-hours applies to training workloads (kind = "training"); drop it')
    if not (hours > 0 and hours <= 1e6):
        raise ChipswapError(f"--train-hours must be a number of hours in (0, 1e6], got {hours!r}")
    if wl.model is None:
        raise ChipswapError("--train-hours needs a [model] in the workload to infer the run's size; add one")
    job = wl.job.model_copy(
        update={
            "gpu_hours": hours,
            "gpu_source": "stated",
            "tokens": None,
            "epochs": None,
            "dataset_tokens": None,
        }
    )
    return wl.model_copy(update={"job": job})


def with_slo_flags(wl: Any, items: list[str]) -> Any:
    """The workload with each `--slo OBJECTIVE=MS` set (one-line errors naming the flag and the fix)."""
    from pydantic import ValidationError

    from chipswap.plan.workload import OBJECTIVE_KEYS

    known = [*OBJECTIVE_KEYS, "goodput_pct"]
    slo = wl.slo
    for item in items:
        key, _, value = item.partition("=")
        key = key.strip().removesuffix("_ms")
        if key not in known:
            near = closest(key, known, n=1)
            hint = f"did you mean {near[0]}?" if near else f"use one of {', '.join(known)}"
            raise ChipswapError(f"--slo {item!r}: unknown objective; {hint} (e.g. --slo ttft_p99=3000)")
        try:
            ms = float(value)
            if key == "goodput_pct":
                slo = type(slo).model_validate({**slo.model_dump(), "goodput_pct": ms})
            else:
                slo = slo.with_objective(key, ms)
        except (ValueError, ValidationError) as exc:
            why = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else "expected a number"
            eg = "goodput_pct=99" if key == "goodput_pct" else f"{key}=3000"
            raise ChipswapError(f"--slo {item!r}: {why}; give OBJECTIVE=MS, e.g. --slo {eg}") from None
    return wl.model_copy(update={"slo": slo})


def _plan(
    workload: Path | None = typer.Argument(
        None,
        help="Workload TOML file (see `chipswap workload-help`). Default: the bundled Llama serving example.",
    ),
    example: str | None = maybe_flag(
        "--example",
        help=f"Run a bundled example instead: {', '.join(EXAMPLES)}; or {CLAIMS_EXAMPLE}: the seed's numeric "
        "claims checked with chipswap's projection and bands (docs/claims.md).",
    ),
    out: Path = typer.Option(
        Path("chipswap-report"), "--out", help="Folder for report.html, report.json, report.md."
    ),
    as_json: bool = switch("--json", help="Print the full result as JSON instead of the summary."),
    close_margin: str | None = maybe_flag(
        "--close-margin",
        metavar="PERCENT",
        show_default=False,
        help="Saving (percent of today's monthly cost) under which the answer is a close call, and so a no, "
        "e.g. 20 or 12.5%. Overrides [verdict].close_margin_pct (default 20).",
    ),
    bench: list[Path] = typer.Option(
        [],
        "--bench",
        metavar="FILE",
        help="A `chipswap bench` result file (JSON): its instance's measured throughput and latency outrank "
        "the projection. Repeat for several instances; adds to the workload's bench_results.",
    ),
    accept_bench_mismatch: bool = switch(
        "--accept-bench-mismatch",
        help="Use a --bench file even when it measured another model or a machine that cannot be its "
        "instance; the figure is then labelled with the mismatch.",
    ),
    catalog_file: Path | None = maybe_flag(
        "--catalog",
        metavar="FILE",
        help="Price with this catalog (e.g. written by `chipswap catalog refresh --out FILE`) instead of the "
        "shipped one.",
    ),
    no_aws: bool = switch(
        "--no-aws", help="Do not ask AWS about capacity and quotas: use the shipped snapshot (unchecked)."
    ),
    explain: bool = switch("--explain", help="Print the documented workload schema and exit."),
    train_hours: float | None = maybe_flag(
        "--train-hours",
        metavar="HOURS",
        help="Training: the hours one run takes on the GPU fleet (stated). Replaces the job's size: the "
        "tokens are inferred from the GPU's projected throughput and each candidate's hours follow "
        "(labelled).",
    ),
    slo: list[str] = typer.Option(
        [],
        "--slo",
        metavar="OBJECTIVE=MS",
        help="Set a latency objective over the workload's [slo], e.g. --slo ttft_p99=3000 --slo tpot_p99=80; "
        "objectives: ttft, tpot, e2e at p50, p90, p99 (ms), or goodput_pct=99. Repeat for several.",
    ),
    quiet: bool = switch(
        "--quiet", "-q", help="No progress on stderr (default: a line per stage, a spinner on a terminal)."
    ),
    print_example: str | None = maybe_flag(
        "--print-example",
        metavar="NAME",
        help=f"Print a bundled example workload TOML ({', '.join(EXAMPLES)}) to start from, and exit.",
    ),
) -> None:
    """The verdict: stay on GPU, move serving to Inferentia, move to Trainium, or close call — stay."""
    from chipswap.plan.workload_file import load_workload

    if explain:
        typer.echo(_schema_text())
        return
    if print_example is not None:
        typer.echo(example_path(print_example).read_text(encoding="utf-8"), nl=False)
        return
    if workload is not None and workload.is_dir():
        raise ChipswapError(f"workload {workload} is a directory; pass a workload .toml file")
    try:
        out_is_file = out.exists() and not out.is_dir()
    except OSError as exc:  # ENAMETOOLONG, ELOOP, EACCES: before anything runs
        from chipswap.textsafe import one_line

        raise ChipswapError(
            f"--out {one_line(str(out), 120)}: {exc.strerror or exc}; pass a shorter, accessible folder path"
        ) from None
    if out_is_file:
        raise ChipswapError(f"--out {out} is a file; pass a folder (it is created if missing)")
    if workload is not None and example is not None:
        raise ChipswapError("give a workload file or --example, not both; drop one of them")
    if example == CLAIMS_EXAMPLE:
        _print_claims(as_json, catalog_file)
        return
    if accept_bench_mismatch and not bench:
        raise ChipswapError("--accept-bench-mismatch applies to --bench files; add --bench FILE or drop it")
    margin = None
    if close_margin is not None:
        try:
            margin = Decimal(close_margin.rstrip("%"))
        except InvalidOperation:
            raise ChipswapError(
                f"--close-margin must be a percentage, got {close_margin!r}; pass e.g. 20"
            ) from None
        if not margin.is_finite() or margin < 0 or margin > 100:
            raise ChipswapError(
                f"--close-margin must be 0 to 100 (percent), got {close_margin!r}; pass e.g. 20"
            )
    path = workload if workload is not None else example_path(example or DEFAULT_EXAMPLE)
    label = str(path) if workload is not None else f"example {example or DEFAULT_EXAMPLE}"
    from chipswap.cli.config import settings, workload_defaults

    found = settings({"catalog": catalog_file, "catalog:flag": "--catalog"})
    catalog = None
    if found["catalog"].value is not None:
        from chipswap.economics.catalog_io import load_catalog

        catalog = load_catalog(found["catalog"].value)
    wl = load_workload(path, catalog, defaults=workload_defaults(found))
    if train_hours is not None:
        wl = _with_train_hours(wl, train_hours)
    if slo:
        wl = with_slo_flags(wl, slo)

    from chipswap.cli.stages import StageProgress
    from chipswap.plan import open_workers, run_plan
    from chipswap.report.html import render_html
    from chipswap.report.markdown import render_markdown

    pool = open_workers()  # before the spinner's thread: the workers fork only in a one-thread process
    bar = StageProgress("chipswap plan", quiet=quiet)
    bar.say("reading the workload and the bench files")
    progress = bar.say
    try:
        result = run_plan(
            wl,
            path,
            close_margin_pct=margin,
            progress=progress,
            bench=tuple(bench),
            catalog=catalog,
            capacity_check=_capacity_check(catalog, no_aws),
            accept_bench_mismatch=accept_bench_mismatch,
            pool=pool,
        )
    except ChipswapError as exc:
        raise ChipswapError(workload_trace_hint(str(exc), path)) from None
    finally:
        bar.close()
        pool.close()
    _require_arrival_rates(result, wl, path)
    if getattr(result.verdict, "measure", None) is not None:
        import shlex

        from chipswap.cli.trialkit import measure_quote

        named = example or DEFAULT_EXAMPLE
        arg = shlex.quote(str(workload)) if workload is not None else f"--example {named}"
        result = measure_quote(result, wl, path, catalog or _default_catalog(), arg)
    from chipswap.report.publish import publish_report_set
    from chipswap.textsafe import one_line

    data = result.to_json()
    data["workload_label"] = label
    text = json.dumps(data, indent=2, default=str) + "\n"
    publish_report_set(
        out,
        {
            "report.json": text,
            "report.md": render_markdown(result, summary_lines(result)),
            "report.html": render_html(result),
        },
    )
    if as_json:
        typer.echo(text, nl=False)
        return
    typer.echo(one_line(f"chipswap plan: {result.title} ({label})", 2000))
    for line in summary_lines(result):
        typer.echo(line)
    typer.echo(
        one_line(
            f"Report: {out / 'report.html'} (also report.json, report.md) — {result.seconds:.1f} s", 2000
        )
    )


def _workload_help(
    as_json: bool = switch(
        "--json", help="Print the workload file's JSON schema (every key, type, default, meaning)."
    ),
    example: str | None = maybe_flag(
        "--example",
        metavar="NAME",
        help=f"Print a bundled example workload TOML to start from ({', '.join(EXAMPLES)}), e.g. "
        "`chipswap workload-help --example llama-serving > my.toml`.",
    ),
) -> None:
    """Print the documented workload file schema (every key, its type, default and meaning)."""
    from chipswap.plan.workload import Workload

    if example is not None:
        typer.echo(example_path(example).read_text(encoding="utf-8"), nl=False)
        return
    if as_json:
        typer.echo(json.dumps(Workload.model_json_schema(), indent=2, default=str))
        return
    typer.echo(_schema_text())


def _schema_text() -> str:
    """The documented schema, opened and closed by where to start: a bundled example to edit."""
    from chipswap.plan.workload_file import schema_help

    start = (
        "Start from a bundled example: chipswap plan --print-example NAME > my.toml"
        f" ({', '.join(EXAMPLES)}), "
        "edit it, then chipswap plan my.toml."
    )
    return f"{start}\n\n{schema_help()}\n\n{start}"


def register(app: typer.Typer) -> None:
    app.command("plan")(_plan)
    app.command("workload-help")(_workload_help)
