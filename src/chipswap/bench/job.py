"""One `chipswap bench` run as a plain function: options in, a chipswap.bench/2 document out.

Checks every option before any request is sent (trace, URL, rate, SLO, instance/term price), builds the
schedule, runs the open-loop driver, summarizes, prices the result at the instance and term when given. The
command layer only parses flags, shows progress and writes the file. May not write files or print.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from chipswap.bench.schedule import LENGTH_MAPS, Schedule, build_schedule
from chipswap.bench.stats import Slo, summarize
from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

PROTOCOL_CHOICES = ("predict", "completions", "chat")


@dataclass(frozen=True)
class BenchOptions:
    """What to replay against which URL, and how to price it."""

    url: str  # base URL of the server, e.g. http://127.0.0.1:8000
    protocol: str = "predict"  # predict (chipswap serve), completions or chat (OpenAI-compatible, streaming)
    trace: str | None = None  # CSV/JSONL/Parquet trace; None = the bundled Azure code trace
    max_requests: int = 1000  # send at most this many requests
    duration_s: float = 60.0  # send only requests planned before this many seconds
    time_scale: float | None = None  # multiply the trace's inter-arrival times (0.5 = twice as fast)
    rate: float | None = None  # or: scale arrivals to this mean rate (requests/s); Poisson without timestamps
    arrivals: str = "trace"  # "trace" (the trace's gaps) or "poisson" (steady random arrivals at --rate)
    length_map: str = "scale"  # predict: fit trace lengths into the model's range (scale, clip, none)
    max_length: int | None = None  # predict: the range to map into (default: the server's largest bucket)
    model: str | None = None  # OpenAI: model name (default: the first one /v1/models lists)
    tokenizer: str | None = None  # OpenAI: the server's tokenizer.json, for prompts of exact token length
    extra_body: dict[str, Any] = field(default_factory=dict)  # OpenAI: extra request fields, e.g. ignore_eos
    timeout_s: float = 60.0  # per request
    max_inflight: int = 512
    slo: Slo = field(default_factory=Slo)
    instance: str | None = None  # the instance type the server runs on, for cost per 1M requests
    term: str = "on-demand"
    region: str = "us-east-1"
    catalog: str | None = None
    seed: int = 0
    token: str | None = None  # bearer token for the server (from the environment, never a flag)
    command: str = "chipswap bench"


def check_url(url: str) -> str:
    """The server URL, parsed once (every later reading goes through the string returned here): http(s), a
    host (a bracketed one a real IPv6 address), a port in range, no credentials, no spaces; one error line
    otherwise."""
    text = url.strip()
    example = "e.g. http://127.0.0.1:8000 or http://[::1]:8000"
    blank = any(c.isspace() or not c.isprintable() for c in text)  # it goes into launch scripts as is
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port  # urlsplit and .port raise ValueError on a bad host or port
    except ValueError:
        raise ChipswapError(
            f"URL {one_line(url, 200)!r} has a bad host or port (a bracketed host must be an IPv6 address); "
            f"{example}"
        ) from None
    if parts.scheme not in ("http", "https") or not host or blank:
        raise ChipswapError(f"URL must be http(s)://host[:port] with no spaces, got {url!r}; {example}")
    if parts.username or parts.password:
        raise ChipswapError("put no credentials in the URL; set CHIPSWAP_BENCH_TOKEN for a bearer token")
    bracketed = parts.netloc.rpartition("@")[2].startswith("[")
    if bracketed:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise ChipswapError(
                f"URL host [{one_line(host, 80)}] is not an IPv6 address; {example}"
            ) from None
    if port == 0:
        raise ChipswapError(f"URL has port 0: {url!r}; {example}")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]  # people paste the OpenAI base URL
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _price(opts: BenchOptions) -> dict[str, Any] | None:
    if opts.instance is None:
        return None
    from chipswap.economics.catalog import TERMS
    from chipswap.economics.catalog_io import load_catalog

    if opts.term not in TERMS:
        raise ChipswapError(f"unknown --term {opts.term!r}; use one of {', '.join(TERMS)}")
    catalog = load_catalog(opts.catalog)
    inst = catalog.instance(opts.instance)
    rate = catalog.rate(inst.name, opts.region, opts.term)
    return {
        "name": inst.name,
        "term": rate.term,
        "region": rate.region,
        "usd_per_hour": str(rate.usd_per_hour),
        "price_source": rate.source,
        "price_as_of": rate.as_of,
    }


def _cost(instance: dict[str, Any] | None, result: dict[str, Any]) -> dict[str, Any] | None:
    if instance is None:
        return None
    from chipswap.economics.cost import cost_per_million

    usd_h = Decimal(instance["usd_per_hour"])
    good = result.get("goodput")
    rps, basis = result["throughput"]["requests_per_s"], "throughput"
    if good is not None:
        rps, basis = good["requests_per_s"], "goodput at the SLO"
    out: dict[str, Any] = {
        "per_million_requests_usd": None,
        "basis": basis,
        "per_million_output_tokens_usd": None,
    }
    if rps and rps > 0:
        out["per_million_requests_usd"] = str(
            cost_per_million(Decimal(str(rps)), usd_h).quantize(Decimal("0.0001"))
        )
    tps = result["throughput"].get("output_tokens_per_s")
    if tps and tps > 0:
        out["per_million_output_tokens_usd"] = str(
            cost_per_million(Decimal(str(tps)), usd_h).quantize(Decimal("0.0001"))
        )
    return out


def _trace(opts: BenchOptions) -> Any:
    from chipswap.traffic import bundled_trace_path, read_trace

    return read_trace(opts.trace or bundled_trace_path())


def _client(opts: BenchOptions) -> Any:
    from chipswap.bench.clients import OpenAIClient, PredictClient

    if opts.protocol == "predict":
        return PredictClient(seed=opts.seed)
    tok = None
    if opts.tokenizer is not None:
        from chipswap.serve.tokenizer import load_tokenizer

        tok = load_tokenizer(opts.tokenizer)
    return OpenAIClient(
        kind=opts.protocol, model=opts.model, tokenizer=tok, seed=opts.seed, extra_body=opts.extra_body
    )


def prepare(opts: BenchOptions) -> tuple[str, Any, Any, dict[str, Any] | None]:
    """Everything checked before a request is sent: (url, trace, client, instance price)."""
    if opts.protocol not in PROTOCOL_CHOICES:
        raise ChipswapError(f"unknown --protocol {opts.protocol!r}; use one of {', '.join(PROTOCOL_CHOICES)}")
    if opts.length_map not in LENGTH_MAPS:
        raise ChipswapError(f"unknown --length-map {opts.length_map!r}; use one of {', '.join(LENGTH_MAPS)}")
    if opts.max_length is not None and not 1 <= opts.max_length <= 1_000_000:
        raise ChipswapError(f"--max-length must be 1..1000000, got {opts.max_length}")
    for name, v in (
        ("--slo-ms", opts.slo.e2e_ms),
        ("--slo-ttft-ms", opts.slo.ttft_ms),
        ("--slo-itl-ms", opts.slo.itl_ms),
    ):
        if v is not None and not 0 < v <= 3_600_000:
            raise ChipswapError(f"{name} must be > 0 milliseconds, got {v}")
    url = check_url(opts.url)
    trace = _trace(opts)
    instance = _price(opts)
    return url, trace, _client(opts), instance


# the BenchOptions fields that build_schedule takes under the same names, as they are
_SCHEDULE_OPTIONS = ("max_requests", "duration_s", "time_scale", "rate", "seed", "arrivals")


async def _run(opts: BenchOptions, progress: Any = None) -> dict[str, Any]:
    from chipswap.bench.runner import RunLimits, RunOutcome, run_load

    url, trace, client, instance = prepare(opts)
    limits = RunLimits(timeout_s=opts.timeout_s, max_inflight=opts.max_inflight)
    headers = {"authorization": f"Bearer {opts.token}"} if opts.token else {}

    schedule_box: dict[str, Schedule] = {}
    predict = opts.protocol == "predict"

    def schedule(length_map: str, max_length: int | None) -> Schedule:
        given = {k: getattr(opts, k) for k in _SCHEDULE_OPTIONS}
        return build_schedule(
            trace.prompt_tokens,
            trace.output_tokens,
            trace.timestamps_s,
            **given,
            length_map=length_map,
            max_length=max_length,
        )

    def make_schedule(_server: dict[str, Any]) -> Schedule:
        """After the probe: the predict client now knows the model's largest bucket (the mapping range)."""
        max_len = opts.max_length or getattr(client, "max_length", None)
        schedule_box["s"] = schedule(opts.length_map if predict else "none", max_len if predict else None)
        return schedule_box["s"]

    schedule("none", None)  # the options against the trace before anything is sent: a bad --rate fails fast
    outcome: RunOutcome = await run_load(
        url, make_schedule, client, limits=limits, headers=headers, progress=progress
    )
    sched = schedule_box.get("s")
    result = summarize(outcome.records, opts.slo)
    target = {
        "url": url,
        "protocol": {
            "predict": "chipswap-predict",
            "completions": "openai-completions",
            "chat": "openai-chat",
        }[opts.protocol],
        "model": getattr(client, "model", None),
        "server": outcome.server,
    }
    load = {
        "trace": opts.trace or "bundled:azure_llm_2023_code.csv",
        "requests_in_trace": len(trace),
        "arrivals": sched.arrivals if sched else None,
        "time_scale": sched.time_scale if sched else opts.time_scale,
        "offered_rps": round(sched.offered_rps, 4) if sched else None,
        "length_map": sched.length_map if sched else opts.length_map,
        "max_length": sched.max_length if sched else opts.max_length,
        "max_requests": opts.max_requests,
        "duration_limit_s": opts.duration_s,
        "timeout_s": opts.timeout_s,
        "max_inflight": opts.max_inflight,
        "seed": opts.seed,
        "extra_body": opts.extra_body or None,
    }
    from chipswap.bench.host import detect_host, is_beside
    from chipswap.bench.identity import build_identity
    from chipswap.bench.results import build_results

    identity = build_identity(
        info=getattr(client, "info", None),
        headers=getattr(client, "headers", {}),
        declared_instance=instance["name"] if instance else None,
        host=detect_host() if is_beside(url, getattr(client, "peer", None)) else None,
        prompt_tokens=sched.prompt_tokens if sched else (),
        output_tokens=sched.output_tokens if sched and not predict else (),
        max_length=sched.max_length if sched else None,
    )
    from chipswap.bench.evidence import evidence_block

    identity["evidence"] = evidence_block(
        getattr(client, "info", None), outcome.records, getattr(client, "tokenizer", None)
    )
    return build_results(
        identity=identity,
        outcome_result=result,
        target=target,
        load=load,
        slo=opts.slo.to_json(),
        complete=outcome.complete,
        stop_reason=outcome.stop_reason,
        command=opts.command,
        instance=instance,
        cost=_cost(instance, result),
    )


def run_bench(opts: BenchOptions, progress: Any = None) -> dict[str, Any]:
    """Run one benchmark (blocking) and return its chipswap.bench/2 document."""
    return asyncio.run(_run(opts, progress))


def parse_extra_body(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ChipswapError(
            f"--extra-body is not JSON ({exc}); e.g. --extra-body '{{\"ignore_eos\": true}}'"
        ) from None
    if not isinstance(obj, dict):
        raise ChipswapError("--extra-body must be a JSON object; e.g. --extra-body '{\"ignore_eos\": true}'")
    reserved = {"model", "prompt", "messages", "max_tokens", "stream"} & set(obj)
    if reserved:
        raise ChipswapError(
            f"--extra-body may not set {', '.join(sorted(reserved))}; bench sets those from the trace"
        )
    return obj


def bench_out_path(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        raise ChipswapError(f"--out {p} is a folder; give a file name, e.g. --out {p / 'bench.json'}")
    return p
