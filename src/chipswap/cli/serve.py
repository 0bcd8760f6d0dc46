"""`chipswap serve SOURCE`: serve compiled buckets over HTTP with dynamic batching and backpressure.

Parses flags, builds the model loader (a compiled set, a model compiled through the cache first, or the eager
reference), and calls chipswap.serve.server.run_server. No serving logic here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import typer

from chipswap.cli.common import (  # the same --seq-len / --batch-sizes parsing as compile
    flag_ints,
    maybe_flag,
    switch,
)
from chipswap.errors import ChipswapError

TOKEN_ENV = "CHIPSWAP_SERVE_TOKEN"

HELP = (
    "Serve a model's compiled buckets over HTTP: POST /v1/predict with token ids (or text, with "
    "--tokenizer), per-bucket dynamic batching (compiled batch sizes, --max-batch-delay-ms), a bounded queue "
    "that answers 429 with Retry-After, per-request timeouts, a body-size limit, connection caps (per client "
    "and in all) and header/body read timeouts, /healthz, /readyz (200 once "
    "every bucket is loaded and warmed), Prometheus /metrics, and a graceful drain on SIGTERM. SOURCE is a "
    "compiled set (chipswap compile --out compiled.json), or a model (preset, config.json) with "
    "--plan/--seq-len to compile first through the cache, or a model with --eager (a benchmark reference: "
    "eager PyTorch at each request's exact length, no batching). Binds 127.0.0.1 unless --host says "
    "otherwise; set CHIPSWAP_SERVE_TOKEN (or --token-file) to require a bearer token."
)


def _token(token_file: Path | None) -> str | None:
    if token_file is not None:
        from chipswap.datafile import read_text

        tok = read_text(token_file, "token file", max_bytes=4096).strip()
        if not tok or "\n" in tok:
            raise ChipswapError(
                f"token file {token_file} must hold one non-empty line; write the token alone"
            )
        return tok
    env = os.environ.get(TOKEN_ENV)
    if env is not None and not env.strip():
        raise ChipswapError(f"{TOKEN_ENV} is set but empty; unset it or set a token")
    return env.strip() if env else None


def _serve(
    source: str = typer.Argument(
        ..., help="compiled.json (chipswap compile --out), or a model with --plan/--seq-len or --eager."
    ),
    plan: Path | None = maybe_flag("--plan", help="Compile SOURCE (a model) for this shape plan first."),
    seq_len: str | None = maybe_flag("--seq-len", help="Or compile these sequence buckets, e.g. 64,128."),
    batch_sizes: str | None = maybe_flag("--batch-sizes", help="Compiled batch sizes, e.g. 1,4,8."),
    backend: str = typer.Option("onnxruntime", "--backend", help="Backend when compiling first."),
    cache_dir: Path | None = maybe_flag("--cache-dir", help="Artifact cache (default: $CHIPSWAP_CACHE_DIR)."),
    eager: bool = switch(
        "--eager", help="Reference server: eager PyTorch at each request's exact length, batch 1."
    ),
    max_length: int | None = maybe_flag("--max-length", help="With --eager: longest input accepted."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Interface to bind (0.0.0.0 exposes it to the network)."
    ),
    port: int = typer.Option(8000, "--port", help="TCP port; 0 picks a free one (printed at start)."),
    max_batch_delay_ms: float = typer.Option(
        5.0, "--max-batch-delay-ms", help="Longest the first request of a batch waits for others."
    ),
    max_queue: int = typer.Option(64, "--max-queue", help="Waiting requests per bucket before 429."),
    max_queue_total: int = typer.Option(256, "--max-queue-total", help="Waiting requests in all before 429."),
    max_queue_wait_ms: float = typer.Option(
        2000.0, "--max-queue-wait-ms", help="429 when a new request's estimated wait is longer."
    ),
    timeout_s: float = typer.Option(30.0, "--timeout", help="Seconds a request may take before 504."),
    workers: int | None = maybe_flag(
        "--workers",
        help="Batches run at once; default: the cores over --threads (1 without --threads: one call uses"
        " every core).",
    ),
    max_body_bytes: int = typer.Option(1024 * 1024, "--max-body-bytes", help="Larger bodies get 413."),
    tokenizer: str | None = maybe_flag(
        "--tokenizer", help="tokenizer.json for {\"text\": ...} requests, or 'example' (the shipped one)."
    ),
    truncate: bool = switch("--truncate", help="Cut over-long inputs to the largest bucket (else 422)."),
    policy: str = typer.Option("first_fit", "--policy", help="Bucket choice: first_fit, second_fit or max."),
    drain_timeout_s: float = typer.Option(
        30.0, "--drain-timeout", help="On SIGTERM, seconds to finish work."
    ),
    threads: int | None = maybe_flag(
        "--threads", help="Threads per model call (ONNX Runtime / PyTorch); default: the libraries' own."
    ),
    token_file: Path | None = maybe_flag(
        "--token-file", help=f"File holding the bearer token (or set {TOKEN_ENV})."
    ),
    max_connections: int = typer.Option(
        2048, "--max-connections", help="Open connections in all; over it only /healthz and /readyz answer."
    ),
    max_per_client: int = typer.Option(
        1024, "--max-connections-per-client", help="Open connections from one client address."
    ),
    header_timeout_s: float = typer.Option(
        10.0, "--header-timeout", help="Seconds from connect to the end of the request head (else 408)."
    ),
    body_timeout_s: float = typer.Option(
        30.0, "--body-timeout", help="Seconds from the end of the head to the end of the body (else 408)."
    ),
    keep_alive_s: float = typer.Option(
        5.0, "--keep-alive-timeout", help="Seconds an idle keep-alive connection stays open."
    ),
    health_port: int | None = maybe_flag(
        "--health-port", help="Also answer /healthz and /readyz (only) on this port; 0 picks a free one."
    ),
    health_host: str = typer.Option(
        "127.0.0.1", "--health-host",
        help="Interface the health port binds (a Kubernetes probe reaches the pod IP: pass 0.0.0.0).",
    ),
    as_json: bool = switch("--json", help="Start/stop announcements as JSON lines on stderr."),
) -> int:
    from chipswap.serve.batcher import BatcherConfig
    from chipswap.serve.gate import ConnectionLimits
    from chipswap.serve.router import POLICIES
    from chipswap.serve.server import ServeConfig, ServingEngine, run_server

    if policy not in POLICIES:
        raise ChipswapError(f"unknown --policy {policy!r}; use one of {', '.join(POLICIES)}")
    if eager and (plan is not None or seq_len is not None):
        raise ChipswapError("--eager serves the model as it is; drop --plan/--seq-len")
    if plan is not None and seq_len is not None:
        raise ChipswapError("give either --plan or --seq-len, not both")
    if max_length is not None and not eager:
        raise ChipswapError("--max-length goes with --eager; compiled buckets set the longest input")
    if threads is not None:
        if not 1 <= threads <= 1024:
            raise ChipswapError(f"--threads must be 1..1024, got {threads}")
        os.environ["CHIPSWAP_ORT_THREADS"] = str(threads)  # read when each ONNX Runtime session is created
        import torch

        torch.set_num_threads(threads)
    if drain_timeout_s <= 0 or drain_timeout_s > 3600:
        raise ChipswapError(f"--drain-timeout must be in (0, 3600] s, got {drain_timeout_s}")
    if workers is None:
        from chipswap.serve.batcher import default_workers

        workers = default_workers(len(os.sched_getaffinity(0)), threads)
    batcher = BatcherConfig(
        max_batch_delay_s=max_batch_delay_ms / 1000.0,
        max_queue=max_queue,
        max_queue_total=max_queue_total,
        max_queue_wait_s=max_queue_wait_ms / 1000.0,
        request_timeout_s=timeout_s,
        workers=workers,
    )
    config = ServeConfig(
        host=host,
        port=port,
        token=_token(token_file),
        max_body_bytes=max_body_bytes,
        drain_timeout_s=drain_timeout_s,
        batcher=batcher,
        connections=ConnectionLimits(
            max_connections=max_connections,
            max_per_client=max_per_client,
            header_timeout_s=header_timeout_s,
            body_timeout_s=body_timeout_s,
            keep_alive_s=keep_alive_s,
        ),
        health_port=health_port,
        health_host=health_host,
    )
    tok = None
    if tokenizer is not None:
        from chipswap.serve.tokenizer import load_tokenizer

        tok = load_tokenizer(tokenizer)
    name, loader = _loader(
        source, plan, seq_len, batch_sizes, backend, cache_dir, eager, max_length, policy, truncate
    )

    def announce(line: str) -> None:
        if as_json:
            line = json.dumps({"event": "serve", "message": line.removeprefix("chipswap serve: ")})
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    engine = ServingEngine(name, loader, config, tokenizer=tok, truncate=truncate)
    return run_server(engine, announce=announce)


def _loader(
    source: str,
    plan: Path | None,
    seq_len: str | None,
    batch_sizes: str | None,
    backend: str,
    cache_dir: Path | None,
    eager: bool,
    max_length: int | None,
    policy: str,
    truncate: bool,
):  # -> (name, loader)
    from chipswap.compile.cache import ArtifactCache
    from chipswap.serve.served import eager_exact_model, load_compiled_model, read_compiled_set

    if eager:
        from chipswap import models

        ref = models.resolve_model(source)  # fail fast on an unknown model, before binding the port
        mpe = ref.config.get("max_position_embeddings")
        if max_length is not None and (max_length < 1 or (mpe is not None and max_length > int(mpe))):
            raise ChipswapError(
                f"--max-length {max_length} is outside 1..{mpe} ({ref.name}'s max_position_embeddings);"
                f" pass --max-length {mpe} or less"
            )
        return ref.name, lambda: eager_exact_model(source, max_length=max_length)
    if plan is None and seq_len is None:
        if not source.endswith(".json") or not Path(source).exists():
            raise ChipswapError(
                f"{source!r} is not a compiled set file; pass compiled.json from chipswap compile --out,"
                " or a model with --plan plan.json or --seq-len 128"
            )
        cset = read_compiled_set(source)
        cache = ArtifactCache(cache_dir)
        return str(cset["model"]), lambda: load_compiled_model(cset, cache, policy=policy, truncate=truncate)
    from chipswap.compile.compiler import (
        check_model_against_plan,
        compile_plan,
        load_plan,
        plan_from_args,
        target_from_spec,
    )

    if plan is not None:
        bp = load_plan(plan)
        if batch_sizes:  # --batch-sizes overrides the plan's
            sizes = tuple(sorted(set(flag_ints(batch_sizes, "--batch-sizes"))))
            bp = dataclasses.replace(bp, batch_buckets=sizes)
    else:
        seqs, sizes = flag_ints(seq_len or "", "--seq-len"), flag_ints(batch_sizes or "1", "--batch-sizes")
        bp = plan_from_args(seqs, sizes)
    target = target_from_spec(source)
    check_model_against_plan(target.config, bp, target.name, seq_flag=plan is None)
    cache = ArtifactCache(cache_dir)
    cache.ensure_writable()
    report = compile_plan(target, bp, backend=backend, cache=cache, progress=True)
    if not report.ok:
        bad = ", ".join(f"{b.batch}x{b.seq}" for b in report.buckets if not b.ok)
        raise ChipswapError(
            f"buckets {bad} differ from eager PyTorch beyond the tolerance; check with chipswap compile"
        )
    cset = dict(report.compiled_set)
    return target.name, lambda: load_compiled_model(cset, cache, policy=policy, truncate=truncate)


def register(app: typer.Typer) -> None:
    app.command("serve", help=HELP)(_serve)
