"""Overload benchmark for `chipswap serve` (issue 19): offer N x its capacity for S seconds and check that it
keeps shedding load.

1. `chipswap serve distilbert-base --eager` (random weights, distilbert-base dimensions, inputs mapped into
   1..--max-length tokens) in its own process, one ONNX/torch thread;
2. capacity: the rate of 200 answers while offered far more than it can do for --probe-s seconds;
3. overload: --factor x capacity (Poisson arrivals, chipswap's own load generator) for --seconds, while a
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.serve_helpers


def _bench(url: str, rate: float, seconds: float, timeout: float, seed: int) -> dict[str, Any]:
    from chipswap.loadgen.job import BenchOptions, run_bench

    return run_bench(
        BenchOptions(
            url=url,
            max_requests=int(rate * seconds) + 1,
            duration_s=seconds,
            rate=rate,
            timeout_s=timeout,
            max_inflight=4096,
            arrivals="poisson",
            seed=seed,
        )
    )


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
        cap_doc = _bench(url, 400.0, args.probe_s, args.timeout, seed=1)
        capacity = cap_doc["counts"]["ok"] / args.probe_s
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
        rss0 = rss_bytes(proc.pid)
        for t in threads:
            t.start()
        t0 = time.monotonic()
        doc = _bench(url, target, args.seconds, 4 * args.timeout, seed=7)
        wall = time.monotonic() - t0
        stop.set()
        for t in threads:
            t.join(5)
        after = httpx.post(f"{url}/v1/predict", json={"input_ids": [101, 2023, 102]}, timeout=60).status_code
        metrics = httpx.get(f"{url}/metrics", timeout=10).text

    c = doc["counts"]
    e2e = doc["latency_ms"]["e2e"]
    sent_rate = c["sent"] / args.seconds
    excess = max(c["sent"] - capacity * args.seconds, 1.0)
    rej = c.get("rejected", 0)
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
        ("capacity (200s/s, saturated probe)", f"{capacity:.1f} req/s"),
        ("offered: target / sent", f"{target:.0f} / {sent_rate:.0f} req/s ({sent_rate / capacity:.1f}x)"),
        ("duration", f"{args.seconds:g} s (wall {wall:.0f} s)"),
        (
            "sent / 200 / 429 / errors / timeouts",
            f"{c['sent']:,} / {c['ok']:,} / {rej:,} / {c.get('errors', 0):,} / {c.get('timeouts', 0):,}",
        ),
        ("429 of which loop_busy (server counter)", loop_busy),
        (
            "admitted p50 / p99 (e2e)",
            f"{(e2e['p50'] or 0) / 1000:.2f} / {(e2e['p99'] or 0) / 1000:.2f} s (timeout {args.timeout:g} s)",
        ),
        ("excess answered 429", f"{100 * rej / excess:.1f} %"),
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
