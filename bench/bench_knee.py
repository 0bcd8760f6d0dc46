"""The knee (saturation rate) of each serving stack on the shared rate sweeps, held out by source: the
physical model fitted without the run's source (the projection's own costs), the fleet simulator driven past
saturation under the stack's rules, against the published capacity under load. Writes the section "knee" of
docs/benchmarks.md; with --write also the knee figures of src/chipswap/data/platforms/stack_load.toml (the
rules in that file are kept as written). About 1 minute (five fits of the physical model).

    python bench/bench_knee.py            # table + docs/benchmarks.md section
    python bench/bench_knee.py --write    # and stack_load.toml's knee figures
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import replace

import _results  # noqa: F401  (puts src/ on the path)
from _results import write_section
from chipswap.projection.fitting import knee as K
from chipswap.projection.platforms import shipped_dir
from chipswap.projection.stack_load import STACK_LOAD_FILE, load_stack_load, stack_load_text

COMMAND = "python bench/bench_knee.py --write"
TARGETS = {"nxdi-tgi": 0.50, "nxdi-vllm": 0.15}  # issue 30: median held-out knee |error|
HEADER = open(shipped_dir() / STACK_LOAD_FILE).read().split("\nschema")[0].replace("# ", "").replace("#", "")


def _pct(x: float) -> str:
    return f"{x * 100:+.0f} %"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true", help="write the knee figures into stack_load.toml")
    ap.add_argument("--no-doc", action="store_true", help="do not touch docs/benchmarks.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    knees = K.held_out_knees()
    gpu = K.gpu_knees()
    wall = time.perf_counter() - t0
    data = load_stack_load()
    lines = [
        "Held out by source: the physical model is fitted without the run's source (its costs and the "
        "stack's slot occupancy), the simulator runs the layout's live slots past saturation (arrivals at "
        f"{K.OVERLOAD:g}x the projected capacity, {K.PER_REPLICA:,} requests per replica, completions per "
        "second in the steady middle half) under each decode-batch rule: `compiled` (a step costs the "
        "compiled batch's step whatever is live; the rule the calibration assumes) and `live` (the step of "
        "the sequences in flight). `project` is the capacity `project` states with the same held-out costs.",
        "",
        "| source | stack | layout | published req/s | project | simulated, compiled | error | "
        "simulated, live | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for k in knees:
        sim = dict(k.simulated)
        lines.append(
            f"| {k.source} | {k.stack} | {k.layout} | {k.published_rps:.3f} | {k.projected_rps:.3f} | "
            f"{sim['compiled']:.3f} | {_pct(k.error('compiled'))} | {sim['live']:.3f} | "
            f"{_pct(k.error('live'))} |"
        )
    lines += [
        "",
        "| stack | rule in stack_load.toml | runs | sources | median abs error | largest | "
        "median, other rule | target (median) | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    stacks = dict(data.stacks)
    medians = []
    for stack in sorted({k.stack for k in knees}):
        rule = stacks[stack].decode_batch
        other = next(r for r in K.DECODE_BATCH_RULES if r != rule)
        own = next(s for s in K.per_stack(knees, rule) if s.stack == stack)
        alt = next(s for s in K.per_stack(knees, other) if s.stack == stack)
        medians.append(own.median_abs)
        target = TARGETS.get(stack)
        met = "" if target is None else ("yes" if own.median_abs <= target else "**no**")
        lines.append(
            f"| {stack} | {rule} | {own.runs} | {own.sources} | {own.median_abs:.1%} | {own.max_abs:.1%} | "
            f"{alt.median_abs:.1%} ({other}) | {'' if target is None else f'{target:.0%}'} | {met} |"
        )
        stacks[stack] = replace(
            stacks[stack], validated=True, knee_runs=own.runs, knee_sources=own.sources,
            knee_median=round(own.median_abs, 3), knee_max=round(own.max_abs, 3),
            knee_median_other=round(alt.median_abs, 3),
        )  # fmt: skip
    sat = K.saturation_points(gpu)
    g_med = statistics.median(abs(k.error("live")) for k in sat)
    g_max = max(abs(k.error("live")) for k in sat)
    g_all = statistics.median(abs(k.error("live")) for k in gpu)
    medians.append(g_med)
    lines.append(
        f"| vllm (GPU) | live | {len(sat)} | 1 | {g_med:.1%} | {g_max:.1%} | {g_all:.1%} (every concurrency "
        f"of the sweep, {len(gpu)} runs) | | |"
    )
    stacks["vllm"] = replace(
        stacks["vllm"], validated=True, knee_runs=len(sat), knee_sources=1, knee_median=round(g_med, 3),
        knee_max=round(g_max, 3), knee_median_other=round(g_all, 3),
    )  # fmt: skip
    lines += [
        "",
        f"vLLM on GPUs: the {len(gpu)} H100 runs of `{K.GPU_SOURCE}` (vLLM 0.17.1 defaults, TP1, "
        "`vllm bench serve` with num-prompts = concurrency, 8-256, prompts 3.7K-59.5K + 300 tokens), each "
        "simulated as that many requests at once with the GPU table fit's costs (the product's GPU "
        "calibration, fitted on TensorRT-LLM rows only, so this source is held out by construction), "
        "chunked prefill (budget 8,192) and the paged KV cache the memory leaves; requests/s = requests / "
        "the last completion. The knee is each model and prompt length at concurrency 256:",
        "",
        "| model | prompt | published req/s | simulated | error |",
        "|---|---|---|---|---|",
    ]
    for k in sat:
        lines.append(
            f"| {k.model} | {k.prompt:,} | {k.published_rps:.2f} | {dict(k.simulated)['live']:.2f} | "
            f"{_pct(k.error('live'))} |"
        )
    tpots = K.loaded_tpots()
    lines += [
        "",
        "The decode step under load: mean TPOT at each published Poisson rate (guidellm's constant-rate "
        "sweep, 600 s), held out by source, under each decode-batch rule; idle = one request at a time on "
        "the same layout.",
        "",
        "| source | stack | rate | published idle / loaded ms | x | compiled: idle / loaded ms | x | error | "
        "live: idle / loaded ms | x | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in tpots:
        cells = []
        for _rule, idle, loaded in x.simulated:
            err = _pct(loaded / x.published_s - 1)
            cells.append(f"{idle * 1e3:.1f} / {loaded * 1e3:.1f} | {loaded / idle:.2f} | {err}")
        pub = f"{x.published_idle_s * 1e3:.1f} / {x.published_s * 1e3:.1f}"
        lines.append(
            f"| {x.source} | {x.stack} | {x.rate:g} | {pub} | {x.published_s / x.published_idle_s:.2f} | "
            + " | ".join(cells)
            + " |"
        )
    validated = {k.stack for k in knees} | {"vllm"}
    widening = math.ceil(max(medians) * 100) / 100 if medians else data.widening
    for name, s in stacks.items():
        if name not in validated:
            stacks[name] = replace(s, validated=False)
    not_validated = ", ".join(n for n, s in stacks.items() if not s.validated)
    lines += [
        "",
        f"Not validated under load by the shared sweeps: {not_validated} (no published rate sweep of "
        f"theirs in ../shared/reference that the simulator can replay). `project` widens the band of their "
        f"capacity figure by {widening:.0%}, the largest median held-out knee error of a validated stack.",
        "",
        f"Wall time of the held-out fits and simulations: {wall:.0f} s.",
    ]
    body = "\n".join(lines)
    print(body)
    if not args.no_doc:
        write_section("knee", "Knee (saturation rate) per stack, held out by source", COMMAND, body)
    if args.write:
        new = replace(data, stacks=stacks, widening=widening)
        (shipped_dir() / STACK_LOAD_FILE).write_text(stack_load_text(new, HEADER.rstrip()) + "\n")
        print(f"wrote {shipped_dir() / STACK_LOAD_FILE}")


if __name__ == "__main__":
    main()
