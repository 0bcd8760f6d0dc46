"""`chipswap serve` side by side with the servers a team would otherwise run, in one run (issue 33).

For each model (default: BERT-Mini dimensions, written here, and the bundled encoder presets small enough to
serve on this shared 2-core machine: tiny-bert, tiny-distilbert, tiny-roberta; random weights, fp32, one
thread per model call), four contenders, all up at once and measured in turn, interleaved per repetition:

- chipswap:      `chipswap serve compiled.json --threads 1`: the planned buckets (`chipswap.shapes.shapeplan`,
                 K sequence buckets for the traffic's lengths) x batch sizes 1,4, ONNX Runtime, batching,
                 the connection gate, load shedding and metrics on; workers = cores / threads (the default);
- eager:         `chipswap serve MODEL --eager --threads 1`: eager PyTorch at each request's exact length,
                 batch 1, behind the same HTTP layer;
- plain FastAPI: bench/_plain_fastapi.py, the ~60-line eager server a user writes (pydantic body, a `def`
                 route in FastAPI's thread pool, no batching, no bounds);
- raw ORT loop:  no HTTP: the (batch, seq) calls the saturated chipswap server made, replayed back to back on
                 the same compiled sessions by as many threads as the server has workers, inputs built once.

Traffic: the bundled Azure code trace's prompt lengths mapped into 1..512 (``--length-map scale``), random
token ids. Measured, per model and repetition:
1. throughput at equal p99: each HTTP server's capacity first (closed loop, --clients clients, --sat-s s);
   then `chipswap bench` offers Poisson arrivals for --probe-s s per probe from 0.5x that capacity, up x1.3
   while every request is answered with end-to-end p99 <= P, down x0.6 while not, then one bisection; the
   best passing probe's throughput. P = max(200 ms, 3x the slowest server's unloaded p99), the same for all.
2. runtime efficiency: the chipswap server's closed-loop throughput / the raw ORT loop's at the same calls.
Medians of --reps repetitions; ratios of the medians.

Run: python bench/bench_serve.py [--models bert-mini,tiny-bert,...] [--reps 3] [--probe-s 4]
Compiles are cached in $CHIPSWAP_BENCH_CACHE (default /tmp/chipswap-bench-cache).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

MAX_LEN = 512
BERT_MINI = {  # Turc et al. 2019, BERT-Mini: L=4, H=256, A=4 (FFN 4H)
    "model_type": "bert",
    "_name_or_path": "bert-mini",
    "architectures": ["BertForSequenceClassification"],
    "vocab_size": 30522,
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 1024,
    "max_position_embeddings": MAX_LEN,
    "type_vocab_size": 2,
    "pad_token_id": 0,
}


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}"


def _log(msg: str) -> None:
    sys.stderr.write(f"[bench_serve {time.strftime('%H:%M:%S')}] {msg} ({_load()})\n")
    sys.stderr.flush()


def _plan_and_compile(
    model: str, k: int, batch_sizes: list[int], cache_dir: Path, work: Path
) -> dict[str, Any]:
    """The planned compiled set (K sequence buckets x batch sizes), through the cache."""
    import numpy as np

    from chipswap.bench.schedule import map_lengths
    from chipswap.compile.cache import ArtifactCache
    from chipswap.compile.compiler import compile_plan, plan_from_args, save_compiled_set, target_from_spec
    from chipswap.shapes.shapeplan import plan_shapes
    from chipswap.traffic import bundled_trace_path, read_trace

    trace = read_trace(bundled_trace_path())
    mapped = map_lengths(trace.prompt_tokens, MAX_LEN, "scale")
    plan = plan_shapes(
        dataclasses.replace(trace, prompt_tokens=mapped), mode="encoder", k=k, max_length=MAX_LEN
    )
    seqs = [int(s) for s in plan.sequence_buckets]
    target = target_from_spec(model)
    cache = ArtifactCache(cache_dir)
    flags = {"exporter": "legacy"}  # TorchScript exporter: same ONNX Runtime artifacts, compiles ~4x faster
    out: dict[str, Any] = {}
    _log(f"compiling {model}: seq {seqs} x batch {batch_sizes}")
    rep = compile_plan(target, plan_from_args(seqs, batch_sizes), cache=cache, flags=flags, progress=False)
    assert rep.ok, rep.to_json()
    out["chipswap"] = work / "chipswap.json"
    save_compiled_set(rep, out["chipswap"])
    out["seqs"] = seqs
    out["mean_len"] = float(np.mean(mapped))
    out["padding_plan"] = plan.totals
    return out


def _unloaded(url: str, vocab: int, n: int = 15, seed: int = 5) -> dict[str, Any]:
    """End-to-end latency with one request at a time (no queueing), lengths drawn from the mapped trace."""
    import random

    import httpx

    from chipswap.bench.schedule import map_lengths
    from chipswap.bench.stats import percentiles_ms
    from chipswap.traffic import bundled_trace_path, read_trace

    lengths = map_lengths(read_trace(bundled_trace_path()).prompt_tokens, MAX_LEN, "scale")
    rng = random.Random(seed)
    times = []
    with httpx.Client(base_url=url, timeout=120) as c:
        for i in range(n + 2):
            ids = [rng.randrange(5, vocab) for _ in range(int(lengths[rng.randrange(len(lengths))]))]
            t0 = time.perf_counter()
            r = c.post("/v1/predict", json={"input_ids": ids})
            if i >= 2:  # two warm-up requests
                times.append(time.perf_counter() - t0)
            r.raise_for_status()
    return percentiles_ms(times)


def _bench(url: str, rate: float, seconds: float, seed: int, **kw: Any) -> dict[str, Any]:
    from chipswap.bench.job import BenchOptions, run_bench

    opts = BenchOptions(
        url=url,
        max_requests=int(rate * seconds) + 1,
        duration_s=seconds,
        rate=rate,
        timeout_s=kw.pop("timeout", 60),
        max_inflight=kw.pop("max_inflight", 4096),
        arrivals="poisson",
        seed=seed,
        **kw,
    )
    return run_bench(opts)


def _passes(doc: dict[str, Any], p99_ms: float) -> bool:
    c = doc["counts"]
    p99 = doc["latency_ms"]["e2e"]["p99"]
    return c["ok"] == c["sent"] == c["planned"] and p99 is not None and p99 <= p99_ms


def _search(url: str, p99_ms: float, capacity: float, probe_s: float, seed: int) -> dict[str, Any]:
    """Highest offered rate whose probe answers every request within p99 <= P: from half the closed-loop
    capacity, up x1.3 while passing, down x0.6 while failing (5 probes at most), then one bisection."""
    lo: tuple[float, dict[str, Any]] | None = None
    hi: float | None = None
    r = max(0.5, 0.5 * capacity)
    for _ in range(5):
        doc = _bench(url, r, probe_s, seed)
        ok = _passes(doc, p99_ms)
        _log(f"    {r:7.1f} req/s -> p99 {doc['latency_ms']['e2e']['p99']} ms: {'pass' if ok else 'fail'}")
        if ok:
            lo = (r, doc) if lo is None or r > lo[0] else lo
            if hi is not None:
                break
            r *= 1.3
        else:
            hi = r if hi is None else min(hi, r)
            if lo is not None:
                break
            r *= 0.6
    if lo is not None and hi is not None:
        mid = math.sqrt(lo[0] * hi)
        doc = _bench(url, mid, probe_s, seed)
        ok = _passes(doc, p99_ms)
        _log(f"    {mid:7.1f} req/s -> p99 {doc['latency_ms']['e2e']['p99']} ms: {'pass' if ok else 'fail'}")
        if ok:
            lo = (mid, doc)
    if lo is None:
        return {"rate": 0.0, "throughput": 0.0, "p99_ms": None}
    rate, doc = lo
    return {
        "rate": rate,
        "throughput": doc["throughput"]["requests_per_s"],
        "p99_ms": doc["latency_ms"]["e2e"]["p99"],
    }


def _saturate(url: str, vocab: int, clients: int, seconds: float, seed: int) -> dict[str, Any]:
    """Closed loop: ``clients`` keep-alive connections, each sending its next request as soon as the last is
    answered (the server is never idle); throughput = answers / wall time. A minimal HTTP/1.1 client with
    bodies encoded beforehand, so that the client takes as little as it can of the cores the server and the
    raw loop are compared on. Keeps each answer's (batch, seq, fill)."""
    import asyncio
    import random
    from urllib.parse import urlsplit

    from chipswap.bench.schedule import map_lengths
    from chipswap.traffic import bundled_trace_path, read_trace

    host, port = urlsplit(url).hostname, urlsplit(url).port
    lengths = map_lengths(read_trace(bundled_trace_path()).prompt_tokens, MAX_LEN, "scale")
    rng = random.Random(seed)
    bodies = []
    for _ in range(256):
        ids = [rng.randrange(5, vocab) for _ in range(int(lengths[rng.randrange(len(lengths))]))]
        body = json.dumps({"input_ids": ids}).encode()
        head = f"POST /v1/predict HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        bodies.append(head.encode() + b"content-length: %d\r\n\r\n" % len(body) + body)
    records: list[dict[str, int]] = []
    refused = 0

    async def client(k: int, stop_at: float) -> None:
        nonlocal refused
        reader, writer = await asyncio.open_connection(host, port)
        i = k * 31
        try:
            while time.perf_counter() < stop_at:
                writer.write(bodies[i % len(bodies)])
                i += 1
                status = int((await reader.readline()).split()[1])
                size = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        size = int(value)
                answer = json.loads(await reader.readexactly(size))
                if status != 200:  # e.g. 429: back off, do not spin
                    refused += 1
                    await asyncio.sleep(0.2)
                    continue
                b = answer["bucket"]
                records.append({"batch": b["batch"], "seq": b["seq_len"], "fill": b["fill"]})
        finally:
            writer.close()

    async def main() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(k, t0 + seconds) for k in range(clients)))
        return time.perf_counter() - t0

    elapsed = asyncio.run(main())
    return {"rps": len(records) / elapsed, "refused": refused, "records": records}


def _raw_loop(model: Any, records: list[dict[str, int]], workers: int) -> tuple[float, float]:
    """Requests per second of the compiled ONNX Runtime sessions alone at the calls the server made: each
    batch it ran (answers / fill of each (batch, seq)), inputs built once, `session.run` back to back on
    ``workers`` threads (the server's parallelism), no padding, slicing, queue or HTTP."""
    import numpy as np

    router = model.router
    calls: list[tuple[int, int]] = []
    seen: dict[tuple[int, int], float] = {}
    for r in records:
        seen[(r["batch"], r["seq"])] = seen.get((r["batch"], r["seq"]), 0.0) + 1.0 / r["fill"]
    for shape, n in sorted(seen.items()):
        calls += [shape] * max(1, round(n))
    feeds = {}
    for batch, seq in seen:
        feed = {"input_ids": np.full((batch, seq), 7, dtype=np.int64)}
        feed["attention_mask"] = np.ones((batch, seq), dtype=np.int64)
        feed["token_type_ids"] = np.zeros((batch, seq), dtype=np.int64)
        feeds[(batch, seq)] = {k: v for k, v in feed.items() if k in router.input_names}
    sessions = {shape: router.buckets[shape].extra["session"] for shape in seen}
    for shape in seen:  # warm
        sessions[shape].run(None, feeds[shape])
    lanes = [calls[i::workers] for i in range(workers)]

    def lane(shapes: list[tuple[int, int]]) -> None:
        for shape in shapes:
            sessions[shape].run(None, feeds[shape])

    threads = [threading.Thread(target=lane, args=(ln,)) for ln in lanes]
    t0, c0 = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return len(records) / wall, cpu / max(len(records), 1)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load_compiled(cset_path: Path, cache_dir: Path, threads: int) -> Any:
    from chipswap.compile.cache import ArtifactCache
    from chipswap.serve.served import load_compiled_model, read_compiled_set

    os.environ["CHIPSWAP_ORT_THREADS"] = str(threads)
    return load_compiled_model(read_compiled_set(cset_path), ArtifactCache(cache_dir))


@contextlib.contextmanager
def _plain_server(spec: str, threads: int) -> Any:
    """bench/_plain_fastapi.py in a child process on a free loopback port; yields (process, URL)."""
    import socket

    import httpx
    from tests.serve_helpers import stop_process

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = Path(__file__).with_name("_plain_fastapi.py")
    cmd = [sys.executable, str(script), spec, str(port), "--threads", str(threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the plain FastAPI server exited"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            time.sleep(0.3)
        yield proc, url
    finally:
        stop_process(proc)


def _fmt(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def _model_spec(name: str, work: Path) -> tuple[str, str, int]:
    """(spec chipswap resolves, label, vocabulary) of a --models entry."""
    if name == "bert-mini":
        path = work / "config.json"  # work is the model's own folder
        path.write_text(json.dumps(BERT_MINI, indent=1))
        return str(path), "BERT-Mini (4 layers, hidden 256)", BERT_MINI["vocab_size"]
    from chipswap import models

    ref = models.resolve_model(name)
    return name, name, int(ref.config["vocab_size"])


def _run_model(name: str, args: argparse.Namespace, cache_dir: Path) -> dict[str, Any]:
    from tests.serve_helpers import cli_server

    work = cache_dir / "serve" / name
    work.mkdir(parents=True, exist_ok=True)
    spec, label, vocab = _model_spec(name, work)
    built = _plan_and_compile(spec, args.k, [int(x) for x in args.batch_sizes.split(",")], cache_dir, work)
    threads = ("--threads", str(args.threads))
    chipswap_args = (str(built["chipswap"]), "--cache-dir", str(cache_dir), *threads)
    eager_args = (spec, "--eager", "--max-length", str(MAX_LEN), *threads, "--max-batch-delay-ms", "0")
    out: dict[str, Any] = {"label": label, "seqs": built["seqs"], "mean_len": built["mean_len"]}
    with contextlib.ExitStack() as stack:
        procs = {
            "chipswap": stack.enter_context(cli_server(*chipswap_args, ready_timeout=600)),
            "eager": stack.enter_context(cli_server(*eager_args, ready_timeout=600)),
            "plain FastAPI": stack.enter_context(_plain_server(spec, args.threads)),
        }
        low = {n: _unloaded(url, vocab) for n, (_, url) in procs.items()}
        p99_ms = max(200.0, math.ceil(3 * max(v["p99"] for v in low.values()) / 50.0) * 50)
        shown = ", ".join(f"{n} {v['p99']:.0f}" for n, v in low.items())
        _log(f"{name}: unloaded p99 (ms) {shown}; P {p99_ms:g} ms")
        compiled = _load_compiled(built["chipswap"], cache_dir, args.threads)
        workers = max(1, len(os.sched_getaffinity(0)) // args.threads)
        res: dict[str, list[dict[str, Any]]] = {n: [] for n in procs}
        eff: list[dict[str, float]] = []
        order = list(procs)
        for rep in range(args.reps):
            for n in order[rep % len(order) :] + order[: rep % len(order)]:  # rotate who goes first
                proc, url = procs[n]
                cpu0 = _cpu_s(proc.pid)
                sat = _saturate(url, vocab, args.clients, args.sat_s, seed=rep)
                cpu = (_cpu_s(proc.pid) - cpu0) / max(len(sat["records"]), 1)
                _log(f"  rep {rep + 1} {n}: closed loop {sat['rps']:.1f} req/s, {cpu * 1000:.2f} ms CPU/req")
                found = _search(url, p99_ms, sat["rps"], args.probe_s, seed=rep)
                res[n].append(found | {"closed_loop": sat["rps"], "cpu_ms": cpu * 1000})
                if n == "chipswap":
                    raw, raw_cpu = _raw_loop(compiled, sat["records"], workers)
                    eff.append(
                        {
                            "served": sat["rps"],
                            "raw": raw,
                            "ratio": sat["rps"] / raw,
                            "cpu_ms": cpu * 1000,
                            "raw_cpu_ms": raw_cpu * 1000,
                            "cpu_ratio": raw_cpu / cpu if cpu else 0.0,
                        }
                    )
                    _log(f"  rep {rep + 1} raw ORT loop {raw:.1f} req/s, {raw_cpu * 1000:.2f} ms CPU/request")
    out.update(low=low, p99_ms=p99_ms, results=res, efficiency=eff, workers=workers)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="bert-mini,tiny-bert,tiny-distilbert,tiny-roberta")
    ap.add_argument("--k", type=int, default=8, help="sequence buckets of the plan")
    ap.add_argument("--batch-sizes", default="1,4")
    ap.add_argument("--clients", type=int, default=8, help="closed-loop clients (capacity, efficiency)")
    ap.add_argument("--threads", type=int, default=1, help="per model call, every server")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--probe-s", type=float, default=4.0)
    ap.add_argument("--sat-s", type=float, default=4.0)
    ap.add_argument("--no-write", action="store_true", help="print, do not write docs/benchmarks.md")
    args = ap.parse_args()
    from _results import write_section

    cache_dir = Path(os.environ.get("CHIPSWAP_BENCH_CACHE", "/tmp/chipswap-bench-cache"))
    t_start, load_start = time.time(), _load()
    per_model = {m: _run_model(m, args, cache_dir) for m in args.models.split(",")}
    body = _report(args, per_model, time.time() - t_start, load_start)
    (cache_dir / "serve" / "bench_serve.json").write_text(json.dumps(per_model, indent=1, default=str))
    print(body)
    if not args.no_write:
        cmd = "python bench/bench_serve.py" + (f" --reps {args.reps}" if args.reps != 3 else "")
        if args.models != ap.get_default("models"):
            cmd += f" --models {args.models}"
        write_section(
            "serve", "Serving: chipswap serve vs eager, plain FastAPI and a raw ONNX Runtime loop", cmd, body
        )


def _report(args: argparse.Namespace, per_model: dict[str, Any], elapsed: float, load_start: str) -> str:
    lines = [
        f"Every server runs one thread per model call (`--threads {args.threads}`) on this 2-core machine,"
        f" which other jobs share (load average at the start {load_start}, at the end {_load()};"
        f" {elapsed / 60:.0f} min in all); the load generator (`chipswap bench`, open loop) runs beside them."
        " Traffic: the bundled Azure code trace's prompt lengths scaled into 1..512, random token ids."
        f" chipswap: the planned buckets x batch sizes {args.batch_sizes}; eager: `chipswap serve --eager`"
        " (PyTorch, exact length, batch 1); plain FastAPI: `bench/_plain_fastapi.py`; raw ORT loop: the"
        " chipswap server's own calls replayed on its sessions without HTTP. Medians of"
        f" {args.reps} interleaved repetitions; probes of {args.probe_s:g} s.",
        "",
        "### Throughput at equal p99 (every request answered, end-to-end p99 <= P)",
        "",
        "CPU per request: the server process's CPU time (user + system, /proc) over the answers of its"
        " closed-loop run, median of the reps: the work it does per request, whatever share of the shared"
        " cores it got.",
        "",
        "| model | P (ms) | server | unloaded p50 / p99 (ms) | req/s at P, per rep | median"
        " | chipswap / it | CPU ms / request |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for m, r in per_model.items():
        med = {n: statistics.median(x["throughput"] for x in rs) for n, rs in r["results"].items()}
        for n, rs in r["results"].items():
            ratio = med["chipswap"] / med[n] if med[n] else None
            low = f"{_fmt(r['low'][n]['p50'], 0)} / {_fmt(r['low'][n]['p99'], 0)}"
            cpu = statistics.median(x["cpu_ms"] for x in rs)
            lines.append(
                f"| {r['label']} | {r['p99_ms']:g} | {n} | {low}"
                f" | {', '.join(_fmt(x['throughput']) for x in rs)} | **{_fmt(med[n])}** |"
                f" {'-' if n == 'chipswap' else (f'**{ratio:.2f}x**' if ratio else 'n/a')} | {cpu:.2f} |"
            )
            if n != "chipswap":
                verdicts.append((m, n, ratio))
    lines += [""]
    for m, n, ratio in verdicts:
        ok = ratio is not None and ratio >= 1.0
        lines.append(
            f"- {m}: chipswap vs {n} **{_fmt(ratio, 2)}x** (target >= 1x): {'met' if ok else '**missed**'}"
        )
    lines += [
        "",
        "### Runtime efficiency at saturation: chipswap serve vs a raw ONNX Runtime loop, same calls",
        "",
        f"Closed loop, {args.clients} clients, {args.sat_s:g} s (a minimal keep-alive HTTP/1.1 client, bodies"
        " encoded beforehand); the raw loop replays the calls the server made (answers / fill per (batch,"
        " seq)) on the same sessions, on as many threads as it has workers, right after. Two ratios: wall"
        " (served req/s / raw req/s: on this shared machine it also measures which process got more of the"
        " cores, so it can pass 100 %) and CPU (raw CPU per request / the server's CPU per request: the share"
        " of the server's work that is the model's own).",
        "",
        "| model | workers | served req/s | raw loop req/s | wall ratio, per rep | server CPU ms / request |"
        " raw loop CPU ms / request | CPU ratio, per rep | median CPU ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in per_model.values():
        e = r["efficiency"]
        med_cpu = statistics.median(x["cpu_ratio"] for x in e)
        walls = ", ".join(f"{x['ratio']:.0%}" for x in e)
        cpus = ", ".join(f"{x['cpu_ratio']:.0%}" for x in e)
        served_cpu = ", ".join(_fmt(x["cpu_ms"], 2) for x in e)
        raw_cpu = ", ".join(_fmt(x["raw_cpu_ms"], 2) for x in e)
        lines.append(
            f"| {r['label']} | {r['workers']} | {', '.join(_fmt(x['served']) for x in e)} |"
            f" {', '.join(_fmt(x['raw']) for x in e)} | {walls} | {served_cpu} | {raw_cpu} | {cpus} |"
            f" **{med_cpu:.1%}** ({'met' if med_cpu >= 0.9 else '**missed**'}, target >= 90 %) |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
