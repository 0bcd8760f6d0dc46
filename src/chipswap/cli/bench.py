"""`chipswap bench URL`: replay a trace open-loop against a server and write the measured results.

Parses flags, shows progress, calls chipswap.bench.job.run_bench, prints a table (or JSON) and writes the
chipswap.bench/2 file atomically. Exit 0: every planned request was sent; 1: the run stopped early (server
unreachable, not the protocol asked for) and the partial results were written; 2: bad input.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from chipswap.cli.common import from_flags, maybe_flag, switch

TOKEN_ENV = "CHIPSWAP_BENCH_TOKEN"

HELP = (
    "Measure a server by replaying a traffic trace open-loop (arrival times x --time-scale, or --rate) "
    "against URL: chipswap's own /v1/predict (--protocol predict; trace lengths mapped into the model's "
    "range) or an OpenAI-compatible streaming endpoint such as vLLM, TGI, TensorRT-LLM or NIM (--protocol "
    "completions|chat; prompts of the trace's token lengths, max_tokens = its output lengths; TTFT, "
    "inter-token latency and end to end from the stream). Bounded by --requests and --duration, every "
    "request by --timeout. Reports throughput, p50/p90/p99, error and reject rates, goodput at the SLO, "
    "padding waste and cost per 1M requests at --instance/--term, and writes a chipswap.bench/2 JSON (--out) "
    f"that chipswap plan reads as measured figures. Bearer token: set {TOKEN_ENV}."
)


class _Bar:
    """rich progress on a TTY, a few plain lines otherwise, nothing with --json."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None
        self.total = 0
        self._last_pct = -1

    def start(self, total: int) -> None:
        self.total = total
        if not self.enabled:
            return
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("[bold]bench[/]"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=max(total, 1))
        else:
            sys.stderr.write(f"bench: {total:,} requests planned\n")

    def update(self, sent: int, done: int, ok: int, rejected: int, failed: int) -> None:
        if self.bar is not None:
            self.bar.update(
                self.task,
                completed=done,
                description=f"sent {sent:,} ok {ok:,} 429 {rejected:,} errors {failed:,}",
            )
        elif self.enabled and self.total:
            pct = int(100 * done / self.total) // 25 * 25
            if pct > self._last_pct:
                self._last_pct = pct
                sys.stderr.write(
                    f"bench: {done:,}/{self.total:,} answered"
                    f" (ok {ok:,}, 429 {rejected:,}, errors {failed:,})\n"
                )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}{unit}" if abs(v) >= 10 else f"{v:,.3g}{unit}"
    return f"{v:,}{unit}" if isinstance(v, int) else f"{v}{unit}"


def _print(doc: dict[str, Any], out: Path | None) -> None:
    from rich.table import Table

    from chipswap.cli.common import console, print_table

    con = console()
    t = doc["target"]
    c = doc["counts"]
    con.print(
        f"[bold]{t['protocol']}[/] {t['url']} model {t.get('model') or '?'}:"
        f" {c['sent']:,} sent, {c['ok']:,} ok,"
        f" {c['rejected']:,} rejected (429), {c['errors']:,} errors in {doc['duration_s']:.1f} s"
    )
    lat = Table(title="latency (ms), answered requests", title_justify="left")
    for col in ("", "n", "p50", "p90", "p99", "mean", "max"):
        lat.add_column(col, justify="left" if not col else "right")
    for name, block in doc["latency_ms"].items():
        if block is not None:
            lat.add_row(name, *(_fmt(block[k]) for k in ("n", "p50", "p90", "p99", "mean", "max")))
    print_table(con, lat)
    thr = doc["throughput"]
    lines = [
        f"throughput: {_fmt(thr['requests_per_s'])} req/s, {_fmt(thr['input_tokens_per_s'])} input tokens/s"
        + (f", {_fmt(thr['output_tokens_per_s'])} output tokens/s" if thr.get("output_tokens_per_s") else ""),
        f"error rate {doc['rates']['error']:.2%}, reject rate {doc['rates']['reject']:.2%}",
    ]
    if doc.get("goodput"):
        slo = ", ".join(f"{k} <= {v:g}" for k, v in doc["slo"].items() if v is not None)
        lines.append(
            f"goodput at the SLO ({slo}): {_fmt(doc['goodput']['requests_per_s'])} req/s"
            f" ({doc['goodput']['fraction_of_sent']:.1%} of sent)"
        )
    if doc.get("padding"):
        lines.append(f"padding waste: {doc['padding']['waste_fraction']:.1%} of computed token slots")
    if doc.get("cost") and doc["cost"].get("per_million_requests_usd"):
        from chipswap.cli.common import money, rate_text

        inst = doc["instance"]
        lines.append(
            f"cost per 1M requests on {inst['name']} ({inst['term']}, {rate_text(inst['usd_per_hour'])}/h):"
            f" {money(doc['cost']['per_million_requests_usd'])} (basis: {doc['cost']['basis']})"
        )
    lag = doc.get("send_lag_ms") or {}
    if lag.get("p99") is not None and lag["p99"] > 50:
        lines.append(
            f"note: the load generator sent late (p99 {lag['p99']:.0f} ms behind plan); it was overloaded"
        )
    for e in doc.get("errors", [])[:5]:
        lines.append(f"{e['count']:,} x {e['kind']}: {e['message']}")
    lines.extend(_identity_lines(doc))
    for line in lines:
        con.print(line, markup=False, highlight=False)
    if doc.get("buckets"):
        bt = Table(title="per bucket", title_justify="left")
        for col in ("seq len", "requests", "share", "e2e p99 ms", "batch ms p50", "fill", "padding"):
            bt.add_column(col, justify="right")
        for b in doc["buckets"]:
            bt.add_row(
                str(b["seq_len"]),
                f"{b['requests']:,}",
                f"{b['share']:.1%}",
                _fmt(b["e2e_ms"]["p99"]),
                _fmt(b["batch_model_ms_p50"]),
                f"{b['mean_fill']:.0%}",
                f"{b['padding_waste']:.1%}",
            )
        print_table(con, bt)
    if out is not None:
        con.print(f"results written to {out}", markup=False, highlight=False)


def _identity_lines(doc: dict[str, Any]) -> list[str]:
    """What was measured and where (the file's identity block), and a warning when the machine beside the
    server cannot be the --instance given (chipswap plan would refuse the file)."""
    from chipswap.bench.identity import host_mismatch, parse_identity

    try:
        ident = parse_identity(doc.get("identity") or {}, "results")
    except Exception:  # noqa: BLE001 - the summary never fails on its own output
        return []
    model = ident.model_name or "unnamed model"
    if ident.parameters:
        model += f" ({ident.parameters:,} parameters" + (f", {ident.dtype})" if ident.dtype else ")")
    out = [f"measured: {model}, server {ident.software or 'unknown'}, host {ident.host_text()}"]
    inst = doc.get("instance") or {}
    if inst.get("name"):
        from chipswap.economics.catalog_io import load_catalog

        try:
            i = load_catalog().instance(inst["name"])
        except Exception:  # noqa: BLE001 - a catalog given with --catalog may name it; nothing to check then
            return out
        why = host_mismatch(ident, i.name, i.kind, i.accelerator, int(i.accelerator_count))
        if why:
            out.append(f"warning: {why}; chipswap plan will refuse this file for {i.name}")
    return out


_FLAGS = (
    "protocol",
    "trace",
    "requests",
    "duration",
    "time_scale",
    "rate",
    "arrivals",
    "length_map",
    "max_length",
    "model",
    "tokenizer",
    "extra_body",
    "timeout",
    "max_inflight",
    "slo_ms",
    "slo_ttft_ms",
    "slo_itl_ms",
    "instance",
    "term",
    "region",
    "catalog",
    "seed",
    "out",
)


def _command(url: str, given: dict[str, Any]) -> str:
    """The command line that reproduces this run (recorded in the results file; no token in it)."""
    parts = ["chipswap", "bench", url]
    for name in _FLAGS:
        value = given.get(name)
        if value is not None:
            parts += ["--" + name.replace("_", "-"), str(value)]
    return " ".join(shlex.quote(p) for p in parts)


def _bench(
    url: str = typer.Argument(..., help="Base URL of the server, e.g. http://127.0.0.1:8000."),
    protocol: str = typer.Option(
        "predict", "--protocol", help="predict (chipswap serve), completions or chat."
    ),
    trace: str | None = maybe_flag("--trace", help="CSV/JSONL/Parquet trace (default: the bundled one)."),
    requests: int = typer.Option(1000, "--requests", help="Send at most this many requests."),
    duration: float = typer.Option(
        60.0, "--duration", help="Send only requests planned within these seconds."
    ),
    time_scale: float | None = maybe_flag(
        "--time-scale", help="Multiply inter-arrival times (0.5 = 2x faster)."
    ),
    rate: float | None = maybe_flag("--rate", help="Or scale arrivals to this mean rate (requests/s)."),
    arrivals: str = typer.Option(
        "trace", "--arrivals", help="trace (replay its gaps) or poisson (steady random arrivals at --rate)."
    ),
    length_map: str = typer.Option(
        "scale", "--length-map", help="predict: scale, clip or none (see docs/serve.md)."
    ),
    max_length: int | None = maybe_flag(
        "--max-length", help="predict: map lengths into 1..N (default: server's)."
    ),
    model: str | None = maybe_flag("--model", help="OpenAI: model name (default: first in /v1/models)."),
    tokenizer: str | None = maybe_flag(
        "--tokenizer", help="OpenAI: the server's tokenizer.json (exact prompts)."
    ),
    extra_body: str | None = maybe_flag(
        "--extra-body", help='OpenAI: extra JSON fields, e.g. {"ignore_eos": true}.'
    ),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds per request (connect to last byte)."),
    max_inflight: int = typer.Option(512, "--max-inflight", help="Open requests at once; more are not sent."),
    slo_ms: float | None = maybe_flag("--slo-ms", help="Goodput: end-to-end latency target (ms)."),
    slo_ttft_ms: float | None = maybe_flag("--slo-ttft-ms", help="Goodput: time-to-first-token target (ms)."),
    slo_itl_ms: float | None = maybe_flag(
        "--slo-itl-ms", help="Goodput: p99 inter-token latency target (ms)."
    ),
    instance: str | None = maybe_flag("--instance", help="Instance type the server runs on (for cost)."),
    term: str = typer.Option("on-demand", "--term", help="Price term for the cost."),
    region: str = typer.Option("us-east-1", "--region", help="Region for the price."),
    catalog: str | None = maybe_flag("--catalog", help="Catalog file overriding the shipped one."),
    seed: int = typer.Option(0, "--seed", help="Seed for token ids, prompts and Poisson arrivals."),
    out: Path | None = typer.Option(
        Path("chipswap-bench.json"), "--out", help="Results file (chipswap.bench/2)."
    ),
    as_json: bool = switch("--json", help="Print the results JSON instead of tables."),
) -> int:
    from chipswap.atomic import atomic_write_text
    from chipswap.bench.job import BenchOptions, bench_out_path, parse_extra_body, run_bench
    from chipswap.bench.stats import Slo
    from chipswap.textsafe import one_line

    if out is not None:
        out = bench_out_path(out)
    token = os.environ.get(TOKEN_ENV) or None
    opts = from_flags(
        BenchOptions,
        locals(),  # every flag named like a BenchOptions field goes in as given; the rest:
        max_requests=requests,
        duration_s=duration,
        extra_body=parse_extra_body(extra_body),
        timeout_s=timeout,
        slo=Slo(slo_ms, slo_ttft_ms, slo_itl_ms),
        command=_command(url, locals()),
    )
    bar = _Bar(enabled=not as_json)
    try:
        doc = run_bench(opts, progress=bar)
    finally:
        bar.close()
    if out is not None:
        atomic_write_text(out, json.dumps(doc, indent=1) + "\n")
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        _print(doc, out)
    if not doc["complete"]:
        where = f"; partial results in {out}" if out is not None else ""
        sys.stderr.write(f"chipswap: error: the run stopped early: {one_line(doc['stop_reason'])}{where}\n")
        return 1
    return 0


IMPORT_HELP = (
    "chipswap bench import FILE: convert a benchmark a team already has -- `vllm bench serve` result JSON, "
    "guidellm's benchmarks JSON, GenAI-Perf's profile_export_genai_perf.json, LLMPerf's *_summary.json -- to "
    "chipswap.bench/2 with the identity the file has (its model name; the instance from vLLM --metadata "
    "instance=NAME or guidellm --label instance=NAME, else --instance). chipswap plan --bench reads the "
    "same files directly when they name their instance."
)


def _import(
    file: Path = typer.Argument(..., help="The peer's results file (JSON)."),
    instance: str | None = maybe_flag(
        "--instance", help="Instance type it ran on (when the file does not say)."
    ),
    term: str | None = maybe_flag("--term", help="Price term of that instance, e.g. on-demand."),
    region: str | None = maybe_flag("--region", help="Region of that instance, e.g. us-east-1."),
    catalog: str | None = maybe_flag("--catalog", help="Catalog file overriding the shipped one."),
    out: Path = typer.Option(
        Path("chipswap-bench.json"), "--out", help="The chipswap.bench/2 file to write."
    ),
    as_json: bool = switch("--json", help="Print the converted JSON instead of a summary."),
) -> int:
    from chipswap.atomic import atomic_write_text
    from chipswap.bench.importers import convert, detect
    from chipswap.bench.job import bench_out_path
    from chipswap.bench.results import parse_bench_results
    from chipswap.datafile import read_json
    from chipswap.economics.catalog_io import load_catalog
    from chipswap.errors import ChipswapError

    out = bench_out_path(out)
    doc = read_json(file, "bench results")
    fmt = detect(doc)
    converted = convert(doc, str(file), instance)
    named = converted["instance"]["name"]
    if instance is not None and named != instance:
        raise ChipswapError(
            f"{file} says it ran on {named}, not --instance {instance}; drop --instance or fix the file"
        )
    inst = load_catalog(catalog).instance(named)  # an unknown instance is one line naming the catalog
    converted["instance"] = {"name": inst.name, "term": term, "region": region}
    converted["identity"]["host"]["declared_instance"] = inst.name
    res = parse_bench_results(converted, str(file))  # what plan --bench will read, checked now
    text = json.dumps(converted, indent=1) + "\n"
    atomic_write_text(out, text)
    if as_json:
        sys.stdout.write(text)
    else:
        sys.stdout.write(
            f"{fmt}: {res.ok:,} of {res.sent:,} requests ok, {res.requests_per_s:.4g} requests/s"
            + (f", e2e p99 {res.e2e_p99_ms:,.0f} ms" if res.e2e_p99_ms is not None else "")
            + f" on {inst.name}, model {res.model or '?'} (identity as the file states) -> {out}\n"
        )
    return 0


def register(app: typer.Typer) -> None:
    app.command("bench", help=HELP + " Also: `chipswap bench import FILE` (see its --help).")(_bench)
    # `chipswap bench import FILE` (cli.main routes it here: a URL is never the word "import")
    app.command("bench-import", help=IMPORT_HELP, hidden=True)(_import)
