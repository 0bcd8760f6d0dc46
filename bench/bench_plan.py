"""`chipswap plan` on a Llama-3-70B serving workload with a day of traffic: whole-run wall clock (target <= 2
minutes on the 2-core dev machine), against the same workload on the one-hour trace in the same session.

The day: the bundled one-hour Azure LLM code trace played back 24 times (each hour starts one mean gap after
the
previous ends), scale 10, written to a temporary CSV; the workload asks for Llama-3-70B on 2 x p5.48xlarge
today with inf2.48xlarge and trn1.32xlarge as candidates. Each run is a fresh `python -m chipswap plan`
process (imports, trace reading, shapes, the 2-layer readiness export, projection, simulation, sensitivity and
the report), so the figure is what a user waits for.

    python bench/bench_plan.py [--runs 3] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT  # noqa: E402  (first: it puts src/ on the path)

WORKLOAD = """
title = "Llama 3 70B serving, {what}"
kind = "serving"
[model]
preset = "llama-3-70b"
task = "causal-lm"
[traffic]
trace = "{trace}"
scale = 10.0
mode = "llm"
[fleet]
instance = "p5.48xlarge"
count = 2
[slo]
ttft_p99_ms = 3000
p99_ms = 30000
[targets]
candidates = ["inf2.48xlarge", "trn1.32xlarge"]
[porting]
engineer_days = 30
"""


def day_trace(folder: Path) -> Path:
    """The bundled hour, 24 times back to back, as a CSV (timestamps in seconds)."""
    import numpy as np

    from chipswap.traffic import bundled_trace_path, read_trace

    hour = read_trace(bundled_trace_path())
    t = np.asarray(hour.timestamps_s, dtype=float)
    t = t - t.min()
    gap = (t.max() - t.min()) / max(t.size - 1, 1)
    period = t.max() + gap
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for k in range(24):
        for ts, p, o in zip(t + k * period, hour.prompt_tokens, hour.output_tokens, strict=True):
            rows.append(f"{ts:.3f},{int(p)},{int(o)}")
    path = folder / "day.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def run_once(workload: Path, out: Path) -> tuple[float, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "chipswap", "plan", str(workload), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"chipswap plan failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return secs, json.loads((out / "report.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        day = day_trace(folder)
        wl_day = folder / "day.toml"
        wl_day.write_text(WORKLOAD.format(what="a day of traffic", trace=day.name))
        from chipswap.traffic import bundled_trace_path

        wl_hour = folder / "hour.toml"
        wl_hour.write_text(WORKLOAD.format(what="one hour", trace=str(bundled_trace_path())))
        times: dict[str, list[float]] = {"day": [], "hour": []}
        reports: dict[str, dict] = {}
        for i in range(args.runs):
            for name, wl in (("day", wl_day), ("hour", wl_hour)):  # interleaved: same load on both
                secs, rep = run_once(wl, folder / f"out-{name}-{i}")
                times[name].append(secs)
                reports[name] = rep
    med = {k: statistics.median(v) for k, v in times.items()}
    day_rep = reports["day"]
    stages = day_rep.get("stage_seconds", {})
    requests = day_rep["traffic"]["requests"]
    lines = [
        "| workload | requests in the trace | median wall clock (s) | runs (s) | ratio |",
        "|---|---|---|---|---|",
        f"| Llama-3-70B, a day of the bundled trace x10 | {requests:,} | {med['day']:.1f} | "
        + ", ".join(f"{x:.1f}" for x in times["day"])
        + f" | {med['day'] / med['hour']:.2f}x |",
        f"| the same, one hour (baseline) | {reports['hour']['traffic']['requests']:,} | {med['hour']:.1f} | "
        + ", ".join(f"{x:.1f}" for x in times["hour"])
        + " | 1.00x |",
        "",
        "Stages of the last day run (seconds, in-process): "
        + ", ".join(f"{k} {v:.1f}" for k, v in stages.items())
        + f". Verdict: {day_rep['verdict']['verdict']}. Target: whole run <= 120 s "
        + ("(met)." if med["day"] <= 120 else "(NOT met).")
        + f" Load average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; on a"
        " shared machine the absolute times are pessimistic. The day costs about as much as the hour: only"
        " the busiest window (plus warm-up and cool-down) is simulated.",
    ]
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        from _results import write_section

        write_section(
            "plan70b",
            "chipswap plan: Llama-3-70B with a day of traffic",
            f"python bench/bench_plan.py --runs {args.runs}",
            body,
        )


if __name__ == "__main__":
    main()
