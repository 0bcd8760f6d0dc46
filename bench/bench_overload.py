"""Overload benchmark for `chipswap serve` (issue 19): offer N x its capacity for S seconds and check that it
keeps shedding load.

1. `chipswap serve distilbert-base --eager` (random weights, distilbert-base dimensions, inputs mapped into
   1..--max-length tokens) in its own process, one ONNX/torch thread;
2. capacity: the rate of 200 answers while offered far more than it can do for --probe-s seconds;
3. overload: --factor x capacity (Poisson arrivals, a lean raw-socket HTTP/1.1 client) for --seconds, while a
   prober GETs /healthz once a second with a 1 s timeout and the server's RSS is sampled;
4. prints one Markdown table: admitted p50/p99 vs the configured --timeout, the share of the excess answered
   429, /healthz probes answered within 1 s, RSS at start / peak / end, and whether it serves afterwards.

Run: .venv/bin/python bench/bench_overload.py [--seconds 60] [--factor 20] [--timeout 10]
On a shared 2-core machine the load generator competes with the server for the same cores: the offered rate
is what the generator managed to send, reported beside the target.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.serve_helpers
sys.path.insert(0, str(ROOT / "bench"))  # bench_serve's view of the server's own counters


async def _raw_load(host: str, port: int, rate: float, seconds: float, timeout: float, seed: int) -> dict:
    """A lean open-loop HTTP/1.1 client (asyncio streams, keep-alive connections reused, no HTTP library):
    chipswap's own load generator (httpx) cannot send hundreds of requests a second on a shared 2-core machine
    while the server runs beside it. Poisson arrivals at ``rate``; latency from the moment a request is
    written; ``lag`` = how late the generator wrote each request vs its schedule."""
    import asyncio
    import json as _json
    import random

    rng = random.Random(seed)
    at, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            break
        at.append(t)
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    res: list[tuple[int, float, float]] = []  # (status or 0 = timeout/-1 = error, latency s, lag s)

    async def one(when: float, t0: float) -> None:
        ids = [101] + [rng.randrange(1000, 20000) for _ in range(rng.randrange(6, 60))] + [102]
        body = _json.dumps({"input_ids": ids}).encode()
        req = (
            f"POST /v1/predict HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        conn = idle.pop() if idle else None
        try:
            if conn is None:
                conn = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
            reader, writer = conn
            sent = time.monotonic()
            writer.write(req)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            status = int(head.split(b" ", 2)[1])
            length = 0
            close = False
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v)
                elif k.strip().lower() == b"connection" and v.strip().lower() == b"close":
                    close = True
            await asyncio.wait_for(reader.readexactly(length), timeout)
            res.append((status, time.monotonic() - sent, sent - t0 - when))
            if close:
                writer.close()
            else:
                idle.append(conn)
        except TimeoutError:
            res.append((0, timeout, 0.0))
            if conn is not None:
                conn[1].close()
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            res.append((-1, 0.0, 0.0))
            if conn is not None:
                conn[1].close()

    t0 = time.monotonic()
    tasks = []
    for when in at:
        delay = t0 + when - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(when, t0)))
    await asyncio.gather(*tasks)
    for _, w in idle:
        w.close()
    return {"planned": len(at), "results": res}


def _probe_health(url: str, stop: threading.Event, out: list[float | None]) -> None:
    import httpx

    with httpx.Client(timeout=1.0) as client:
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                ok = client.get(f"{url}/healthz").status_code == 200
                out.append(time.monotonic() - t0 if ok else None)
            except httpx.HTTPError:
                out.append(None)
            stop.wait(max(0.0, 1.0 - (time.monotonic() - t0)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--factor", type=float, default=20.0)
    ap.add_argument("--timeout", type=float, default=10.0, help="the server's --timeout (request timeout)")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--probe-s", type=float, default=8.0)
    args = ap.parse_args()

    import httpx
    from tests.serve_helpers import cli_server, rss_bytes

    serve_args = (
        "distilbert-base",
        "--eager",
        "--max-length",
        str(args.max_length),
        "--threads",
        "1",
        "--timeout",
        f"{args.timeout:g}",
    )
    with cli_server(*serve_args) as (proc, url):
        import asyncio

        host, port = url.removeprefix("http://").rsplit(":", 1)
        probe = asyncio.run(_raw_load(host, int(port), 100.0, args.probe_s, 4 * args.timeout, seed=1))
        capacity = sum(1 for st_, _, _ in probe["results"] if st_ == 200) / args.probe_s
        target = args.factor * capacity
        print(
            f"capacity ~{capacity:.1f} req/s; offering {target:.0f} req/s for {args.seconds:g} s", flush=True
        )
        time.sleep(2 * args.timeout)  # let the probe's backlog finish
        rss: list[int] = []
        health: list[float | None] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                rss.append(rss_bytes(proc.pid))
                stop.wait(0.5)

        threads = [
            threading.Thread(target=sample, daemon=True),
            threading.Thread(target=_probe_health, args=(url, stop, health), daemon=True),
        ]
        from bench_serve import _server_delta, _server_view

        before = _server_view(url)
        rss0 = rss_bytes(proc.pid)
        for t in threads:
            t.start()
        t0 = time.monotonic()
        raw = asyncio.run(_raw_load(host, int(port), target, args.seconds, 4 * args.timeout, seed=7))
        wall = time.monotonic() - t0
        stop.set()
        for t in threads:
            t.join(5)
        after = httpx.post(f"{url}/v1/predict", json={"input_ids": [101, 2023, 102]}, timeout=60).status_code
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        server = _server_delta(before, _server_view(url))

    res = raw["results"]
    ok = sorted(lat for st_, lat, _ in res if st_ == 200)
    rej = sum(1 for st_, _, _ in res if st_ == 429)
    timeouts = sum(1 for st_, _, _ in res if st_ == 0)
    errors = sum(1 for st_, _, _ in res if st_ not in (0, 200, 429))
    other: dict[int, int] = {}
    for st_, _, _ in res:
        if st_ not in (0, 200, 429):
            other[st_] = other.get(st_, 0) + 1  # -1: a transport error (reset, refused)
    lags = sorted(lag for _, _, lag in res)

    def pct(xs: list[float], q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")

    sent_rate = len(res) / args.seconds
    excess = max(len(res) - capacity * args.seconds, 1.0)
    answered = [h for h in health if h is not None]
    within = sum(1 for h in answered if h <= 1.0)
    loop_busy = next(
        (
            ln.split()[-1]
            for ln in metrics.splitlines()
            if 'reason="loop_busy"' in ln and "rejects_total" in ln
        ),
        "0",
    )
    rows = [
        ("capacity (200s/s while saturated)", f"{capacity:.1f} req/s"),
        ("offered: target / sent", f"{target:.0f} / {sent_rate:.0f} req/s ({sent_rate / capacity:.1f}x)"),
        ("duration", f"{args.seconds:g} s (wall {wall:.0f} s)"),
        (
            "sent / 200 / 429 / other / timeouts",
            f"{len(res):,} / {len(ok):,} / {rej:,} / {errors:,} {other or ''} / {timeouts:,}",
        ),
        ("429 of which loop_busy (server counter)", loop_busy),
        (
            "admitted p50 / p99 (client, from write to answer)",
            f"{pct(ok, 0.5):.2f} / {pct(ok, 0.99):.2f} s (timeout {args.timeout:g} s)",
        ),
        (
            "admitted p99, server side (request-time histogram bucket)",
            f"<= {server['p99_le_s']} s ({server['answered_200']:,} answers; "
            f"504s: {server['status'].get('504', 0)})",
        ),
        ("excess answered 429", f"{100 * rej / excess:.1f} %"),
        ("generator lateness p50 / p99", f"{pct(lags, 0.5):.3f} / {pct(lags, 0.99):.3f} s"),
        ("/healthz within 1 s", f"{within} / {len(health)} probes (max {max(answered or [0]):.3f} s)"),
        (
            "RSS start / peak / end",
            f"{rss0 / 2**20:.0f} / {max(rss or [rss0]) / 2**20:.0f} / "
            f"{(rss[-1] if rss else rss0) / 2**20:.0f} MiB",
        ),
        ("serves afterwards", "yes" if after == 200 else f"no ({after})"),
    ]
    print("\n| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
