"""Write a synthetic chat trace of the Azure LLM conversation trace's shape (docs/plan.md's gpt-oss-20b case).

Columns as the Azure traces (TIMESTAMP, ContextTokens, GeneratedTokens); Poisson arrivals; prompt and output
lengths log-normal around a chat service's medians (prompt ~1,000 tokens, output ~130). Seeded: the same file
every run. No published figure is read or copied; the shape is stated here, not fitted.

    python scripts/make_chat_trace.py OUT.csv [--requests 19000] [--seconds 360] [--seed 39]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--requests", type=int, default=19000)
    ap.add_argument("--seconds", type=float, default=360.0)
    ap.add_argument("--seed", type=int, default=39)
    a = ap.parse_args()
    if not 1 <= a.requests <= 10_000_000 or not 0 < a.seconds <= 30 * 86400:
        raise SystemExit("make_chat_trace: error: --requests 1..10,000,000 and --seconds up to 30 days")
    rng = np.random.default_rng(a.seed)
    t = np.cumsum(rng.exponential(a.seconds / a.requests, a.requests))
    prompt = np.clip(rng.lognormal(np.log(1020), 0.9, a.requests).astype(int), 10, 8000)
    output = np.clip(rng.lognormal(np.log(130), 0.8, a.requests).astype(int), 1, 2000)
    t0 = dt.datetime(2023, 11, 16, 18, 0, 0)
    with open(a.out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for s, p, o in zip(t, prompt, output, strict=True):
            w.writerow([(t0 + dt.timedelta(seconds=float(s))).isoformat(sep=" "), int(p), int(o)])


if __name__ == "__main__":
    main()
