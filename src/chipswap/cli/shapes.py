"""`chipswap shapes TRACE`: optimal fixed-shape buckets from a request trace, compared with the fixed rules.

Parses flags, reads the trace through chipswap.traffic (aggregate_trace for a raw trace of any size,
read_histogram
for --histogram), calls chipswap.shapes.shapeplan.plan_shapes, prints tables (rich) or JSON, and writes the
plan file
and
the SVG plot atomically. No planning logic here.
"""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from chipswap.cli.common import console as shared_console
from chipswap.cli.common import maybe_flag, print_table, switch
from chipswap.errors import ChipswapError

HELP = (
    "Plan the fixed input shapes (buckets) Neuron will compile, from your own traffic: the exact "
    "minimum-padding "
    "bucket edges for K buckets, compared with powers of two and other fixed rules, with "
    "ready-to-paste NxDI, "
    "vLLM-neuron and optimum-neuron settings. TRACE is a CSV/TSV, JSONL or Parquet file (optionally "
    ".gz/.zst), a "
    "folder of them or a glob; it is aggregated inside DuckDB, so its size does not matter (Azure LLM trace "
    "columns TIMESTAMP,ContextTokens,GeneratedTokens are recognised; map others with --prompt-col etc.). "
    "--histogram FILE plans from a pre-aggregated histogram instead (see docs/shapes.md for the "
    "warehouse SQL). "
    "Without either, the bundled Azure code trace is used."
)


@contextmanager
def _progress(label: str) -> Iterator[Callable[[float], None] | None]:
    """A rich progress bar for the trace scan on a terminal; nothing when output is piped."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=1.0)
        yield lambda done: bar.update(task, completed=done)


def _read_latency_table(path: Path) -> dict[int, float]:
    """Latency table: JSON {"shape": seconds}, a JSON list of {"shape", "latency_s"}, or CSV shape,latency.

    Read through chipswap.datafile (size-capped, UTF-8, no NaN); shapes are integers in 1..MAX_LENGTH and
    latencies finite numbers >= 0, so nothing sized by the table can grow beyond those bounds."""
    from chipswap.datafile import parse_json, read_text, strict_int
    from chipswap.ranges import Spec, data_number
    from chipswap.shapes.histogram import MAX_LENGTH

    what = "latency table"
    if not path.exists():
        raise ChipswapError(f"latency table not found: {path}; give a JSON or CSV file of shape -> latency")
    text = read_text(path, what)

    def pair(shape: object, latency: object, where: str) -> tuple[int, float]:
        return (
            strict_int(shape, f"{path}: {where} shape", lo=1, hi=MAX_LENGTH),
            data_number(latency, f"{path}: {where} latency", Spec("seconds", zero=True), "fix the table"),
        )

    if path.suffix.lower() == ".csv":
        rows = [r for r in csv.reader(text.splitlines()) if r and any(x.strip() for x in r)]
        if rows and not rows[0][0].strip().isdigit():
            rows = rows[1:]
        if not rows:
            raise ChipswapError(f"{path}: no 'shape,latency' rows; two numbers per row")
        table = {}
        for i, r in enumerate(rows, start=1):
            try:
                shape, latency = int(r[0]), float(r[1])
            except (ValueError, IndexError):
                raise ChipswapError(
                    f"{path}: row {i} {r!r} is not 'shape,latency'; two numbers per row"
                ) from None
            k, v = pair(shape, latency, f"row {i}")
            table[k] = v
        return table
    data = parse_json(text, what, str(path))
    if isinstance(data, dict):
        data = data.get("latency_s", data.get("latencies", data))
    entries: list[tuple[object, object, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            try:
                entries.append((int(key), value, f"entry {key!r}"))
            except (TypeError, ValueError):
                raise ChipswapError(
                    f'{path}: keys must be shapes and values latencies, e.g. {{"128": 0.004}}; got {key!r}'
                ) from None
    elif isinstance(data, list):
        for i, row in enumerate(data):
            shape = row.get("shape", row.get("sequence_length")) if isinstance(row, dict) else None
            lat = row.get("latency_s", row.get("latency")) if isinstance(row, dict) else None
            if shape is None or lat is None:
                raise ChipswapError(f"{path}: entry {i} lacks 'shape' and 'latency_s'; give both")
            entries.append((shape, lat, f"entry {i}"))
    else:
        raise ChipswapError(f"{path}: expected an object or list of shape/latency pairs")
    return dict(pair(shape, lat, where) for shape, lat, where in entries)


def _fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def _print_tables(console: Console, plan: Any) -> None:
    console.print(
        f"[bold]{plan.requests:,} requests[/bold] from {plan.source_trace} · mode {plan.mode} · cost model "
        f"{plan.cost_model} · overflow policy {plan.overflow_policy} "
        f"(share above {plan.max_length}: {100 * plan.overflow_share:.2f}%)"
    )
    if plan.cost_coefficients.get("kind") == "attention":
        c = plan.cost_coefficients
        console.print(f"attention cost: a={c['a']:,} b={c['b']:,} FLOPs ({c['source']})")
    if plan.note:
        console.print(f"note: {plan.note}")
    sections = [("prefill" if plan.mode == "llm" else "sequence", plan.buckets, plan.totals, plan.baselines)]
    if plan.mode == "llm":
        sections.append(
            ("decode (running total length)", plan.decode_table, plan.decode_totals, plan.decode_baselines)
        )
    for label, rows, totals, baselines in sections:
        unit = "decode steps" if label.startswith("decode") else "requests"
        t = Table(
            title=f"{label} buckets: padding overhead {totals['overhead_pct']:.1f}%", title_justify="left"
        )
        t.add_column("bucket", justify="right")
        t.add_column("lengths", justify="right")
        t.add_column(f"share of {unit}", justify="right")
        t.add_column("padding overhead", justify="right")
        for r in rows:
            t.add_row(
                str(r["upper"]),
                f"{r['lower_exclusive'] + 1}..{r['upper']}",
                f"{100 * r['share']:.1f}%",
                f"{r['padding_overhead_pct']:.1f}%",
            )
        print_table(console, t)
        b = Table(title=f"{label}: optimal vs baselines", title_justify="left")
        b.add_column("plan", no_wrap=True)
        for col in ("K", "overhead", "waste (tokens)", "optimal saves"):
            b.add_column(col, justify="right", no_wrap=True)
        b.add_column("edges", overflow="fold")  # every edge: a cut list would hide the buckets
        b.add_row(
            "optimal",
            str(totals["k"]),
            f"{totals['overhead_pct']:.1f}%",
            _fmt_int(totals["waste_tokens"]),
            "-",
            _edges(totals["edges"]),
        )
        for name, row in baselines.items():
            b.add_row(
                name,
                str(row["k"]),
                f"{row['overhead_pct']:.1f}%",
                _fmt_int(row["waste_tokens"]),
                saving_cell(row, totals["k"]),
                _edges(row["edges"]),
            )
        print_table(console, b)
    if plan.outlier:
        console.print(f"[bold yellow]warning:[/bold yellow] {plan.outlier['message']}", highlight=False)
    if plan.batch:
        console.print(
            f"batch buckets {plan.batch_buckets} for {plan.batch['arrival_rate_rps']:.3g} req/s in "
            f"{1000 * plan.batch['window_s']:g} ms windows (max batch {plan.batch['max_batch']})"
        )


def saving_cell(row: dict, plan_k: int) -> str:
    """'optimal saves' only compares plans with the same number of buckets; another K is not comparable."""
    if int(row["k"]) != int(plan_k):
        return f"n/a (K={row['k']})"
    return f"{row['waste_reduction_pct']:.1f}%"


def _edges(edges: list[int]) -> str:
    return ", ".join(map(str, edges))  # spaces: a wrapped list breaks between edges, never inside one


# Budgets are seconds and GiB: anything beyond these is a typo, and inf/NaN would poison the planner's math.
_FLAG_LIMIT = 1e9


def _finite_flags(flags: dict[str, float | None]) -> None:
    """Each budget flag is a finite number in [0, 1e9], or one error line naming the flag."""
    for flag, value in flags.items():
        if value is None:
            continue
        if not math.isfinite(value) or value < 0 or value > _FLAG_LIMIT:
            raise ChipswapError(
                f"{flag} must be a finite number from 0 to {_FLAG_LIMIT:,.0f}, got {value}; e.g. {flag} 10"
            )


def _bounded_int_flags(flags: dict[str, tuple[int | None, int | None, int]]) -> None:
    """Each count flag within [lo, hi] (issue 19: --max-buckets 1000000000 ran 118 s and took 1.46 GB).
    lo None: only the upper bound here (the planner explains a value below 1). Length flags (--max-length,
    ...) are bounded by chipswap.traffic (MAX_LENGTH)."""
    for flag, (value, lo, hi) in flags.items():
        if value is None:
            continue
        if lo is None and value > hi:
            raise ChipswapError(f"{flag} must be at most {hi:,}, got {value:,}; give a smaller value")
        if lo is not None and not lo <= value <= hi:
            raise ChipswapError(
                f"{flag} must be from {lo:,} to {hi:,}, got {value:,}; give a value in that range"
            )


def _count_flags(**v: int | None) -> None:
    from chipswap.shapes.planfile import MAX_BATCH_BUCKET, MAX_BUCKETS

    big = 1 << 20  # model sizes (hidden, layers, heads): far above any real model
    _bounded_int_flags(
        {
            # each bucket is a compiled graph: a handful are planned; the planner's work grows with the count
            # (--decode-k 1e9 ran 23 s before this bound: the trace's thousands of decode lengths as buckets)
            "--max-buckets": (v["max_buckets"], None, MAX_BUCKETS),
            "-k": (v["k"], None, MAX_BUCKETS),  # below 1, or above the trace's lengths: the planner says so
            "--decode-k": (v["decode_k"], None, MAX_BUCKETS),
            "--align": (v["align"], 1, 65_536),
            "--max-batch": (v["max_batch"], 1, MAX_BATCH_BUCKET),
            "--hidden-size": (v["hidden_size"], 1, big),
            "--num-layers": (v["num_layers"], 1, 100_000),
            "--intermediate-size": (v["intermediate_size"], 1, 4 * big),
            "--heads": (v["heads"], 1, 65_536),
            "--kv-heads": (v["kv_heads"], 1, 65_536),
            "--bucket-memory-per-token": (v["bucket_memory_per_token"], 0, 1 << 40),
        }
    )


def register(app: typer.Typer) -> None:
    @app.command("shapes", help=HELP)
    def shapes(
        trace: str | None = typer.Argument(
            None,
            help="trace file, folder or glob (.csv/.tsv/.jsonl/.json/.parquet, .gz/.zst); default: bundled",
        ),
        histogram: str | None = maybe_flag(
            "--histogram",
            help="plan from a pre-aggregated histogram file/folder/glob: prompt length + count columns "
            "(llm: + output length)",
        ),
        mode: str = typer.Option(
            "llm", "--mode", help="encoder (one length per request) or llm (prefill+decode)"
        ),
        k: int | None = maybe_flag("-k", "--k", help="exactly K buckets (default: up to --max-buckets)"),
        max_buckets: int = typer.Option(6, "--max-buckets", help="at most this many buckets"),
        decode_k: int | None = maybe_flag("--decode-k", help="decode buckets (llm; default: as -k)"),
        cost_model: str = typer.Option("tokens", "--cost-model", help="tokens | attention | measured"),
        max_length: int | None = maybe_flag("--max-length", help="largest bucket (default: longest prompt)"),
        max_total_length: int | None = maybe_flag(
            "--max-total-length", help="largest decode bucket (llm; default: longest total)"
        ),
        max_positions: int | None = maybe_flag(
            "--max-positions", help="the model's maximum positions: longer requests are an error"
        ),
        policy: str = typer.Option(
            "reject", "--policy", help="requests above --max-length: reject | truncate"
        ),
        align: int = typer.Option(1, "--align", help="bucket edges are multiples of this (e.g. 128)"),
        out: Path | None = maybe_flag("--out", help="write the plan JSON here (read by chipswap compile)"),
        plot: Path | None = maybe_flag("--plot", help="write histogram + bucket edges as SVG here"),
        as_json: bool = switch("--json", help="print the plan as JSON"),
        prompt_col: str | None = maybe_flag("--prompt-col", help="column with prompt/input token counts"),
        output_col: str | None = maybe_flag("--output-col", help="column with generated token counts"),
        time_col: str | None = maybe_flag("--time-col", help="column with arrival times"),
        count_col: str | None = maybe_flag(
            "--count-col", help="--histogram: column with the number of requests per row"
        ),
        hidden_size: int | None = maybe_flag("--hidden-size", help="attention model: hidden size"),
        num_layers: int | None = maybe_flag("--num-layers", help="attention model: layers"),
        intermediate_size: int | None = maybe_flag("--intermediate-size", help="attention model: MLP"),
        heads: int | None = maybe_flag("--heads", help="attention model: attention heads"),
        kv_heads: int | None = maybe_flag("--kv-heads", help="attention model: key/value heads"),
        gated_mlp: bool = switch("--gated-mlp", help="attention model: gated MLP (Llama style)"),
        latency_table: Path | None = maybe_flag(
            "--latency-table", help="measured model: JSON/CSV of shape -> latency"
        ),
        listed_only: bool = switch(
            "--listed-only", help="measured model: buckets only at measured shapes (no interpolation)"
        ),
        max_compile_s: float | None = maybe_flag("--max-compile-s", help="budget: total compile seconds"),
        compile_s_per_bucket: float | None = maybe_flag(
            "--compile-s-per-bucket", help="compile-time estimate per bucket (seconds)"
        ),
        compile_s_per_token: float = typer.Option(
            0.0, "--compile-s-per-token", help="extra compile seconds per token of bucket length"
        ),
        device_memory_gib: float | None = maybe_flag(
            "--device-memory-gib", help="budget: device memory per bucket (GiB)"
        ),
        bucket_memory_gib: float = typer.Option(
            0.0, "--bucket-memory-gib", help="per-bucket fixed memory (GiB)"
        ),
        bucket_memory_per_token: int = typer.Option(
            0, "--bucket-memory-per-token", help="per-bucket memory bytes per token of length"
        ),
        arrival_rate: str | None = maybe_flag(
            "--arrival-rate", help="plan batch buckets for RPS (a number, or 'trace')"
        ),
        batch_window_ms: float = typer.Option(50.0, "--batch-window-ms", help="batching window"),
        max_batch: int = typer.Option(8, "--max-batch", help="largest batch size"),
        model: str = typer.Option("MODEL_ID", "--model", help="model id used in the printed snippets"),
        follow_symlinks: bool = switch(
            "--follow-symlinks",
            help="read trace files in a folder/glob that are symlinks to outside it (default: refused)",
        ),
    ) -> None:
        from chipswap.shapes.buckets import Budgets
        from chipswap.shapes.shapeplan import config_snippets, max_length_for_reading, plan_shapes
        from chipswap.traffic import aggregate_trace, bundled_trace_path, read_histogram
        from chipswap.traffic.source import FOLLOW_LINKS

        FOLLOW_LINKS.set(follow_symlinks)
        mode = mode.strip().lower()
        _count_flags(
            max_buckets=max_buckets,
            k=k,
            decode_k=decode_k,
            align=align,
            max_batch=max_batch,
            hidden_size=hidden_size,
            num_layers=num_layers,
            intermediate_size=intermediate_size,
            heads=heads,
            kv_heads=kv_heads,
            bucket_memory_per_token=bucket_memory_per_token,
        )
        _finite_flags(
            {
                "--max-compile-s": max_compile_s,
                "--compile-s-per-bucket": compile_s_per_bucket,
                "--compile-s-per-token": compile_s_per_token,
                "--device-memory-gib": device_memory_gib,
                "--bucket-memory-gib": bucket_memory_gib,
                "--batch-window-ms": batch_window_ms,
            }
        )
        if decode_k is not None and mode == "encoder":
            raise ChipswapError(
                f"--decode-k {decode_k} applies only to --mode llm (decode buckets); drop --decode-k or pass"
                " --mode llm"
            )
        if trace is not None and histogram is not None:
            raise ChipswapError(
                f"give a trace ({trace}) or --histogram ({histogram}), not both; the histogram replaces "
                "the trace"
            )
        if count_col is not None and histogram is None:
            raise ChipswapError("--count-col applies only to --histogram FILE; drop it or pass --histogram")
        columns = {
            f: c
            for f, c in (
                ("prompt_tokens", prompt_col),
                ("output_tokens", output_col),
                ("timestamp", time_col),
                ("count", count_col),
            )
            if c
        }
        dims = None
        if hidden_size is not None or num_layers is not None:
            if hidden_size is None or num_layers is None:
                raise ChipswapError("attention model dims need both --hidden-size and --num-layers")
            dims = {
                "hidden_size": hidden_size,
                "num_layers": num_layers,
                "intermediate_size": intermediate_size,
                "num_attention_heads": heads,
                "num_key_value_heads": kv_heads,
                "gated_mlp": gated_mlp,
            }
        table = _read_latency_table(latency_table) if latency_table else None
        budgets = None
        if max_compile_s is not None or device_memory_gib is not None or compile_s_per_bucket is not None:
            budgets = Budgets(
                max_buckets=None,
                max_compile_s=max_compile_s,
                compile_fixed_s=compile_s_per_bucket,
                compile_per_token_s=compile_s_per_token,
                device_memory_bytes=None if device_memory_gib is None else int(device_memory_gib * 2**30),
                memory_fixed_bytes=int(bucket_memory_gib * 2**30),
                memory_per_token_bytes=bucket_memory_per_token,
            )
        rate: float | str | None = None
        if arrival_rate is not None:
            if arrival_rate == "trace":
                rate = "trace"
                if histogram is not None:
                    raise ChipswapError(
                        "--arrival-rate trace needs arrival times, which a histogram does not have; pass "
                        "--arrival-rate RPS"
                    )
            else:
                try:
                    rate = float(arrival_rate)
                except ValueError:
                    raise ChipswapError(
                        f"--arrival-rate {arrival_rate!r} is not a number; give requests per second or "
                        "'trace'"
                    ) from None
        cut = max_length_for_reading(
            cost_model, max_length, measured_table=table, measured_interpolate=not listed_only
        )
        reading = dict(mode=mode, columns=columns or None, max_length=cut, policy=policy)
        if histogram is not None:
            with _progress("reading histogram") as progress:
                tr: Any = read_histogram(histogram, progress=progress, **reading)
        else:
            path = trace if trace is not None else str(bundled_trace_path())
            with _progress("aggregating trace") as progress:
                tr = aggregate_trace(path, times=rate == "trace", progress=progress, **reading)
        plan = plan_shapes(
            tr,
            mode=mode,
            k=k,
            max_buckets=max_buckets,
            decode_k=decode_k,
            cost_model=cost_model,
            max_length=max_length,
            max_total_length=max_total_length,
            policy=policy,
            align=align,
            model_dims=dims,
            measured_table=table,
            measured_interpolate=not listed_only,
            budgets=budgets,
            arrival_rate_rps=rate,
            batch_window_s=batch_window_ms / 1000.0,
            max_batch=max_batch,
            max_positions=max_positions,
        )
        if out is not None:
            plan.save(out)
        if plot is not None:
            from chipswap.atomic import atomic_write_text
            from chipswap.report.shapes_plot import histogram_svg

            pow2 = plan.baselines.get("powers_of_two_natural", {}).get("edges")
            atomic_write_text(plot, histogram_svg(plan, plan.sequence_buckets, compare_edges=pow2))
        if as_json:
            if plan.outlier:
                typer.echo(f"chipswap: warning: {plan.outlier['message']}", err=True)
            typer.echo(plan.to_json(), nl=False)
            return
        console = shared_console()
        _print_tables(console, plan)
        snippets = config_snippets(plan, model=model)
        for name, text in snippets.items():
            console.print(f"[bold]{name}[/bold]")
            console.print(text, markup=False, highlight=False, soft_wrap=True)
        if out is not None:
            console.print(f"plan written to {out}")
        if plot is not None:
            console.print(f"plot written to {plot}")
