"""Fleet simulator speed per scheduler policy: the same 1,000,000 LLM requests as bench_simulate.py
(lengths resampled, seeded, from the bundled Azure code trace; Poisson arrivals at 26/s; 20 replicas, round
robin) under each policy the plan can pick, plus the paged KV cache that can fill up and the shared queue.
Target: <= 5 s per policy (issue 21). Runs are interleaved (policy A, B, C, ..., then again) so a change in
the machine's load hits every policy alike; the median of `--repeat` runs is reported.

- prefill-first: GPU rules of TGI; the closed-form engine.
- chunked-prefill: vLLM's default, token budget 8192; the step scheduler.
- chunked-prefill + KV cache: 256 slots and 1,200 blocks of 16 tokens per replica (it binds: preemptions).
- neuron-static-slots: compiled batch 32, prefill and decode buckets; the closed-form engine.
- neuron-static-slots with 1024-token chunked prefill (nxdi-vllm with chunking on); the step scheduler.
- prefill-first behind one shared queue; the step scheduler's event list.
- busy chunked-prefill + KV cache: the plan's capacity searches at a large GPU (issue 38): prompts of 1,024
  and answers of 256 tokens, Poisson at 50/s on 8 replicas of batch 1,024 with 20,000 blocks each (running
  batches of a few hundred, the KV cache binds: preemptions), least loaded.

    python bench/bench_simulate_policies.py [--requests 1000000] [--repeat 3] [--no-write]
    python bench/bench_simulate_policies.py --baseline /tmp/base   # and a baseline tree's src/, same run

With --baseline, every case runs in its own process, alternating this tree and the baseline's sources
(a `git archive` of the commit to compare with), so the shared machine's load hits both alike; the section
then quotes both medians and their ratio.

Writes its section of docs/benchmarks.md via bench/_results.write_section("simulate-policies", ...).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
_SRC = ROOT / "src"
if "--src" in sys.argv:  # a worker timing a baseline tree's sources (--baseline)
    _SRC = Path(sys.argv[sys.argv.index("--src") + 1])
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(_SRC))
import chipswap.simulation.simulate  # noqa: E402,F401  (first: the path changes below cannot swap it)
from _results import write_section  # noqa: E402
from bench_simulate import RATE_RPS, REPLICAS, SEED, GpuLikeStepTimes  # noqa: E402
from chipswap.simulation import simulate as S  # noqa: E402
from chipswap.traffic import bundled_trace_path, read_trace  # noqa: E402

TARGET_S = 5.0
BUCKETS = (512, 1024, 2048, 4096, 8192, 16384)
BUSY = "busy chunked-prefill + KV cache"


def _neuron(chunk: int) -> S.ReplicaSetup:
    """Compiled batch 32 with prefill and decode buckets; `chunk` > 0: chunked prefill of that many tokens."""
    return S.ReplicaSetup(
        max_batch=32,
        batch_sizes=(32,),
        prefill_buckets=BUCKETS,
        decode_buckets=BUCKETS,
        policy="neuron-static-slots",
        token_budget=chunk,
    )


CASES: dict[str, tuple[S.ReplicaSetup, str]] = {
    "prefill-first": (S.ReplicaSetup(max_batch=32, max_length=16384), "round_robin"),
    "chunked-prefill": (
        S.ReplicaSetup(max_batch=32, max_length=16384, policy="chunked-prefill"),
        "round_robin",
    ),
    "chunked-prefill + KV cache": (
        S.ReplicaSetup(max_batch=256, max_length=16384, policy="chunked-prefill", kv_blocks=1200),
        "round_robin",
    ),
    "neuron-static-slots": (_neuron(0), "round_robin"),
    "neuron-static-slots, chunked 1024": (_neuron(1024), "round_robin"),
    "prefill-first, shared queue": (S.ReplicaSetup(max_batch=32, max_length=16384), "shared"),
    BUSY: (
        S.ReplicaSetup(max_batch=1024, max_length=16384, policy="chunked-prefill", kv_blocks=20_000),
        "least_loaded",
    ),
}
BUSY_RATE_RPS, BUSY_REPLICAS = 50.0, 8


def _case(name: str, n: int, bundled: S.Traffic | None = None) -> tuple[S.Traffic, int]:
    """The traffic and replica count of a case: the bundled trace's lengths at RATE_RPS on REPLICAS, or the
    busy case's fixed lengths."""
    rng = np.random.default_rng(SEED)
    if name == BUSY:
        arrivals = S.poisson_arrivals(BUSY_RATE_RPS, rng, n=n)
        return S.make_traffic(arrivals, np.full(n, 1024), np.full(n, 256)), BUSY_REPLICAS
    if bundled is None:
        trace = read_trace(bundled_trace_path())
        bundled = S.make_traffic(trace.timestamps_s, trace.prompt_tokens, trace.output_tokens)
    return S.traffic_with_lengths(S.poisson_arrivals(RATE_RPS, rng, n=n), bundled, rng), REPLICAS


def _worker(name: str, n: int) -> None:
    """Time one case once (in its own process) and print `seconds cpu-seconds utilization preemptions`."""
    big, replicas = _case(name, n)
    setup, dispatch = CASES[name]
    t0, c0 = time.perf_counter(), time.process_time()
    r = S.simulate(big, GpuLikeStepTimes(), setup, replicas, dispatch=dispatch)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{wall:.4f} {cpu:.4f} {r.utilization:.4f} {r.preemptions}")


def _side_by_side(args: argparse.Namespace) -> None:
    """Each case in a fresh process, this tree and the baseline alternating; medians (wall and CPU) and the
    CPU ratio (CPU seconds are the figure that load on a shared machine disturbs least)."""
    import subprocess

    base_src = str(Path(args.baseline) / "src")
    times: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    extra: dict[str, str] = {}
    load_before = os.getloadavg()[0]
    for _ in range(args.repeat):
        for name in CASES:
            for tree, src in (("this", []), ("baseline", ["--src", base_src])):
                cmd = [sys.executable, __file__, "--one", name, "--requests", str(args.requests), *src]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
                times.setdefault((name, tree), []).append(float(out[0]))
                cpus.setdefault((name, tree), []).append(float(out[1]))
                if tree == "this":
                    extra[name] = f"utilization {float(out[2]):.2f}, {int(out[3]):,} preemptions"
                print(f"{name} [{tree}]: {float(out[0]):.2f} s wall, {float(out[1]):.2f} s CPU", flush=True)
    load_after = os.getloadavg()[0]
    scale = args.requests / 1_000_000
    lines = [
        f"{args.requests:,} requests, {REPLICAS} replicas, stated GPU-like step times; each run in its own "
        f"process, this tree and the baseline (`{args.baseline_label}`) alternating, median of "
        f"{args.repeat}. Target {TARGET_S * scale:g} s per policy"
        + ("" if scale == 1 else f" at this scale ({TARGET_S:g} s at 1 M)")
        + ".",
        "",
        "| policy | dispatch | this tree: wall / CPU | baseline: wall / CPU | CPU ratio | target (CPU) | "
        "result |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (_setup, dispatch) in CASES.items():
        mine, base = (statistics.median(times[(name, tree)]) for tree in ("this", "baseline"))
        mine_cpu, base_cpu = (statistics.median(cpus[(name, tree)]) for tree in ("this", "baseline"))
        verdict = "meets" if mine_cpu <= TARGET_S * scale else "MISSES"
        lines.append(
            f"| {name} | {dispatch} | {mine:.2f} s / {mine_cpu:.2f} s | {base:.2f} s / {base_cpu:.2f} s | "
            f"{mine_cpu / base_cpu:.2f} | {verdict} | {extra[name]} |"
        )
    lines += [
        "",
        f"1-minute load average of this 2-core machine (shared by other work): {load_before:.1f} before, "
        f"{load_after:.1f} after: read the ratio, measured side by side, rather than the wall times.",
    ]
    body = "\n".join(lines)
    if not args.no_write:
        write_section(
            "simulate-policies",
            "Fleet simulator per scheduler policy",
            f"python bench/bench_simulate_policies.py --requests {args.requests} --repeat {args.repeat} "
            f"--baseline {args.baseline_label}",
            body,
        )
    print(body)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--baseline", help="a tree whose src/ to time side by side (e.g. a git archive)")
    ap.add_argument("--baseline-label", default="", help="how to name the baseline in the section")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--src", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        _worker(args.one, args.requests)
        return
    if args.baseline:
        args.baseline_label = args.baseline_label or args.baseline
        _side_by_side(args)
        return
    trace = read_trace(bundled_trace_path())
    bundled = S.make_traffic(trace.timestamps_s, trace.prompt_tokens, trace.output_tokens)
    service = GpuLikeStepTimes()
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in CASES}
    results: dict[str, S.SimResult] = {}
    for _ in range(args.repeat):
        for name, (setup, dispatch) in CASES.items():
            big, replicas = _case(name, args.requests, bundled)
            t0 = time.perf_counter()
            results[name] = S.simulate(big, service, setup, replicas, dispatch=dispatch)
            times[name].append(time.perf_counter() - t0)
            print(f"{name}: {times[name][-1]:.2f} s", flush=True)
    load_after = os.getloadavg()[0]
    scale = args.requests / 1_000_000
    lines = [
        f"{args.requests:,} requests ({'full scale' if scale == 1 else f'{scale:g}x the 1 M target scale'}), "
        f"{REPLICAS} replicas, stated GPU-like step times; median of {args.repeat} interleaved runs. "
        f"Target {TARGET_S:g} s per policy at 1 M requests"
        + ("" if scale == 1 else f" (here: {TARGET_S * scale:.2f} s at this scale, time grows linearly)")
        + ".",
        "",
        "| policy | dispatch | median | min | max | target | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (_setup, dispatch) in CASES.items():
        ts, r = times[name], results[name]
        med = statistics.median(ts)
        verdict = "meets" if med <= TARGET_S * scale else "MISSES"
        lines.append(
            f"| {name} | {dispatch} | {med:.2f} s | {min(ts):.2f} s | {max(ts):.2f} s | {verdict} | "
            f"utilization {r.utilization:.2f}, TTFT p99 {r.ttft.p99:.2f} s, e2e p99 {r.e2e.p99:.2f} s, "
            f"{r.preemptions:,} preemptions |"
        )
    lines += [
        "",
        f"1-minute load average on this 2-core machine (shared): {load_before:.1f} before, {load_after:.1f} "
        "after; wall times grow with it (compare the policies with each other, measured side by side).",
    ]
    body = "\n".join(lines)
    if not args.no_write:
        write_section(
            "simulate-policies",
            "Fleet simulator per scheduler policy",
            f"python bench/bench_simulate_policies.py --requests {args.requests} --repeat {args.repeat}",
            body,
        )
    print(body)


if __name__ == "__main__":
    main()
