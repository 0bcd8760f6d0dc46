"""Trace ingestion and planning at scale, side by side with a plain pyarrow + numpy script in the same run.

1. 10 M-row heavy-tailed trace (lognormal prompt and output lengths up to 128 k tokens, Azure schema), as CSV
and
   as Parquet: `chipswap shapes FILE --mode encoder|llm` end to end in a fresh process (wall time, peak RSS)
   against bench/_plain_histogram.py on the same file. Targets: <= 2x the plain script, <= 500 MB RSS.
2. 100 M rows as a folder of Parquet files: `chipswap shapes DIR --mode llm`, against the plain script reading
the
   folder batch by batch. Target: <= 1 GB RSS; time reported.
3. The planning step alone (plan_shapes on the aggregated 10 M-request histograms, llm mode, K = 6): target
   <= 1 s; with, for reference, the same DP through the pure-Python integer hull (the previous planner).

Data are generated (seeded) under build/bench-traces/ (ignored by git; --data-dir to move it) and reused when
present. Every figure is the median of --repeats runs (default 3), each in a fresh process; the plain baseline
runs interleaved with chipswap in the same loop, so load from other work hits both. The load average is
printed
and written next to the figures. Writes its section of docs/benchmarks.md via bench/_results.write_section.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _results import (
    ROOT,  # noqa: E402  (first: it puts src/ on the path)
    write_section,  # noqa: E402
)

SEED = 20240611
ROWS_10M = 10_000_000
ROWS_100M = 100_000_000
FILES_100M = 20
MAX_TOKENS = 131_072
TARGET_RATIO = 2.0
TARGET_RSS_MB = 500
TARGET_RSS_100M_MB = 1024
TARGET_PLAN_S = 1.0
PY = sys.executable


def _chunk(rng: np.random.Generator, n: int, t0: float) -> tuple[dict[str, np.ndarray], float]:
    """n requests: Poisson arrivals at 1,000 req/s, lognormal prompt (median ~1.1 k) and output (~150)."""
    prompt = np.clip(np.rint(rng.lognormal(7.0, 1.4, n)), 1, MAX_TOKENS).astype(np.int64)
    output = np.clip(np.rint(rng.lognormal(5.0, 1.5, n)), 0, MAX_TOKENS).astype(np.int64)
    t = t0 + np.cumsum(rng.exponential(1e-3, n))
    return {"t": t, "ContextTokens": prompt, "GeneratedTokens": output}, float(t[-1])


def _table(cols: dict[str, np.ndarray]):  # noqa: ANN202
    import pyarrow as pa

    epoch = np.datetime64("2024-06-11T00:00:00", "us")
    ts = epoch + (cols["t"] * 1e6).astype("timedelta64[us]")
    return pa.table(
        {"TIMESTAMP": ts, "ContextTokens": cols["ContextTokens"], "GeneratedTokens": cols["GeneratedTokens"]}
    )


def generate(data: Path) -> dict[str, Path]:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    data.mkdir(parents=True, exist_ok=True)
    out = {"csv": data / "trace_10m.csv", "parquet": data / "trace_10m.parquet", "dir": data / "trace_100m"}
    if not (out["csv"].exists() and out["parquet"].exists()):
        print("generating 10 M rows ...", flush=True)
        cols, _ = _chunk(np.random.default_rng(SEED), ROWS_10M, 0.0)
        table = _table(cols)
        pq.write_table(table, out["parquet"].with_suffix(".tmp"))
        os.replace(out["parquet"].with_suffix(".tmp"), out["parquet"])
        pacsv.write_csv(table, out["csv"].with_suffix(".tmp"))
        os.replace(out["csv"].with_suffix(".tmp"), out["csv"])
    parts = sorted(out["dir"].glob("*.parquet")) if out["dir"].exists() else []
    if len(parts) != FILES_100M:
        print("generating 100 M rows ...", flush=True)
        out["dir"].mkdir(exist_ok=True)
        rng = np.random.default_rng(SEED + 1)
        t0 = 0.0
        for i in range(FILES_100M):
            cols, t0 = _chunk(rng, ROWS_100M // FILES_100M, t0)
            target = out["dir"] / f"part-{i:03d}.parquet"
            pq.write_table(_table(cols), target.with_suffix(".tmp"))
            os.replace(target.with_suffix(".tmp"), target)
    return out


def measure(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS MB) of one fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def side_by_side(label: str, chipswap: list[str], plain: list[str], repeats: int) -> dict[str, float]:
    runs: dict[str, list[tuple[float, float, float]]] = {"chipswap": [], "plain": []}
    for _ in range(repeats):
        runs["plain"].append(measure(plain))
        runs["chipswap"].append(measure(chipswap))
    res = {}
    for key, tag in (("chipswap", ""), ("plain", "_plain")):
        res["t" + tag] = statistics.median(w for w, _, _ in runs[key])
        res["cpu" + tag] = statistics.median(c for _, c, _ in runs[key])
        res["rss" + tag] = max(r for _, _, r in runs[key])
    res["ratio"] = res["t"] / res["t_plain"]
    res["cpu_ratio"] = res["cpu"] / res["cpu_plain"]
    print(
        f"{label}: chipswap {res['t']:.2f} s ({res['cpu']:.2f} s CPU) {res['rss']:.0f} MB; plain "
        f"{res['t_plain']:.2f} s ({res['cpu_plain']:.2f} s CPU) {res['rss_plain']:.0f} MB; ratio "
        f"{res['ratio']:.2f} (CPU {res['cpu_ratio']:.2f})",
        flush=True,
    )
    return res


def planning_step(parquet: Path, repeats: int) -> dict[str, float]:
    from chipswap import shapes as B
    from chipswap.shapes import buckets as dp
    from chipswap.shapes.shapeplan import plan_shapes
    from chipswap.traffic import aggregate_trace

    hists = aggregate_trace(parquet, mode="llm")
    times, cpus = [], []
    plan = None
    for _ in range(max(repeats, 5)):
        t0, c0 = time.perf_counter(), time.process_time()
        plan = plan_shapes(hists, mode="llm", k=6, keep_histogram=False)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    assert plan is not None
    dhist = hists.decode_histogram(plan.max_length, "reject")
    # the previous planner's DP (pure-Python integer hull) on the same decode histogram, for reference
    cands = B.candidate_edges(dhist, B.tokens_cost(), max_length=dhist.max_length, policy="reject")
    t0 = time.perf_counter()
    dp._dp_layers_hull(cands.prefix.tolist(), cands.costs.tolist(), None, 6)
    hull_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    dp._dp_layers(cands.prefix, cands.costs, None, 6)
    dc_s = time.perf_counter() - t0
    out = {
        "t": statistics.median(times),
        "cpu": statistics.median(cpus),
        "tmin": min(times),
        "tmax": max(times),
        "prompt_distinct": int(hists.prompt.lengths.size),
        "decode_distinct": int(dhist.lengths.size),
        "hull_s": hull_s,
        "dc_s": dc_s,
        "requests": hists.requests,
    }
    print(
        f"planning step: median {out['t']:.3f} s ({out['cpu']:.3f} s CPU); decode DP {dc_s:.3f} s vs "
        f"Python hull {hull_s:.3f} s",
        flush=True,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=ROOT / "build" / "bench-traces")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-100m", action="store_true")
    args = ap.parse_args()
    files = generate(args.data_dir)
    load0 = os.getloadavg()
    plan_out = args.data_dir / "plan.json"
    cli = [PY, "-m", "chipswap", "shapes"]
    plain = [PY, str(ROOT / "bench" / "_plain_histogram.py")]
    rows = []
    for fmt in ("csv", "parquet"):
        for mode in ("encoder", "llm"):
            res = side_by_side(
                f"10M {fmt} {mode}",
                [*cli, str(files[fmt]), "--mode", mode, "-k", "6", "--out", str(plan_out)],
                [*plain, str(files[fmt]), mode],
                args.repeats,
            )
            rows.append((fmt, mode, res))
    big = None
    if not args.skip_100m:
        big = side_by_side(
            "100M parquet llm",
            [*cli, str(files["dir"]), "--mode", "llm", "-k", "6", "--out", str(plan_out)],
            [*plain, str(files["dir"]), "llm", "--stream"],
            args.repeats,
        )
    step = planning_step(files["parquet"], args.repeats)
    load1 = os.getloadavg()
    write(rows, big, step, load0, load1, args.repeats)


def _ok(met: bool) -> str:
    return "meets" if met else "MISSES"


def write(rows: list, big: dict | None, step: dict, load0: tuple, load1: tuple, repeats: int) -> None:
    lines = [
        f"Load average (1/5/15 min) at start {load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f}, at end "
        f"{load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f}: the machine is shared, so compare the ratios (both "
        "sides run interleaved in the same loop).",
        "",
        f"### 10 M requests, CLI end to end vs a plain pyarrow + numpy script (median of {repeats} fresh "
        "processes)",
        "",
        "Data: lognormal prompt (median ~1.1 k) and output (median ~150) lengths clipped at 128 k tokens, "
        "Azure schema (TIMESTAMP, ContextTokens, GeneratedTokens), seed "
        f"{SEED}. chipswap: `python -m chipswap shapes FILE --mode MODE -k 6 --out plan.json` (DuckDB scan "
        "with every value validated, counts per length: a GROUP BY in the engine, or for a CSV in llm "
        "mode the "
        "engine's keys streamed to np.bincount; the exact plan, all baselines, the plan file). Plain: "
        "`python "
        "bench/_plain_histogram.py FILE MODE` (pyarrow read of the needed columns + np.bincount, no "
        "validation, "
        "no plan).",
        "",
        "| file | mode | chipswap wall (CPU) | plain script wall (CPU) | ratio wall (CPU) | RSS chipswap "
        f"| RSS plain | target (<= {TARGET_RATIO:g}x wall, <= {TARGET_RSS_MB} MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for fmt, mode, r in rows:
        met = r["ratio"] <= TARGET_RATIO and r["rss"] <= TARGET_RSS_MB
        lines.append(
            f"| {fmt} | {mode} | {r['t']:.2f} s ({r['cpu']:.2f} s) | {r['t_plain']:.2f} s "
            f"({r['cpu_plain']:.2f} s) | {r['ratio']:.2f}x ({r['cpu_ratio']:.2f}x) | {r['rss']:.0f} MB "
            f"| {r['rss_plain']:.0f} MB | {_ok(met)} |"
        )
    if big is not None:
        lines += [
            "",
            f"### 100 M requests: a folder of {FILES_100M} Parquet files (generated, not committed)",
            "",
            "chipswap: `python -m chipswap shapes build/bench-traces/trace_100m --mode llm -k 6 --out "
            "plan.json`. "
            "Plain: `python bench/_plain_histogram.py build/bench-traces/trace_100m llm --stream` (pyarrow "
            "batches, counts accumulated; reading the folder whole would need several GB).",
            "",
            "| | chipswap wall (CPU) | plain script, streaming (CPU) | ratio | peak RSS chipswap "
            "| peak RSS plain | target |",
            "|---|---|---|---|---|---|---|",
            f"| 100 M rows, llm | {big['t']:.1f} s ({big['cpu']:.1f} s) | {big['t_plain']:.1f} s "
            f"({big['cpu_plain']:.1f} s) | {big['ratio']:.2f}x | "
            f"{big['rss']:.0f} MB | {big['rss_plain']:.0f} MB | {_ok(big['rss'] <= TARGET_RSS_100M_MB)} <= "
            f"{TARGET_RSS_100M_MB} MB |",
        ]
    lines += [
        "",
        "### Planning step, llm mode, 10 M heavy-tailed requests",
        "",
        f"`plan_shapes` on the aggregated histograms of trace_10m.parquet ({step['requests']:,} requests: "
        f"{step['prompt_distinct']:,} distinct prompt lengths, {step['decode_distinct']:,} distinct decode "
        "lengths), K = 6, exact DP for prefill and decode plus every baseline; median of 5 in one "
        "process. The "
        "CPU seconds are the step's own cost; the wall time also includes waiting for one of the 2 "
        "cores shared "
        "with other work (load average above).",
        "",
        "| planning step (median wall) | CPU | min | max | target (wall) | decode DP alone (vectorised "
        "divide "
        "and conquer) | same DP, pure-Python integer hull (previous planner) |",
        "|---|---|---|---|---|---|---|",
        f"| {step['t']:.3f} s | {step['cpu']:.3f} s | {step['tmin']:.3f} s | {step['tmax']:.3f} s | "
        f"{_ok(step['t'] <= TARGET_PLAN_S)} <= {TARGET_PLAN_S:g} s | {step['dc_s']:.3f} s | "
        f"{step['hull_s']:.3f} s |",
    ]
    body = "\n".join(lines)
    write_section("traces", "Traces at scale", ".venv/bin/python bench/bench_traces.py", body)
    print(body)


if __name__ == "__main__":
    main()
