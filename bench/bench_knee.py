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
    ap.add_argument("--joint", action="store_true",
                    help="ship issue 40's joint fit (every compiled slot live, the step growing per live "
                         "sequence) instead of the physical fit's occupancy")  # fmt: skip
    args = ap.parse_args()
    t0 = time.perf_counter()
    ho = K.held_out(joint=args.joint)
    other_fit = None if args.joint else K.held_out(joint=True)
    knees = ho.knees
    gpu = K.gpu_knees()
    wall = time.perf_counter() - t0
    data = load_stack_load()
    lines = [
        (
            "Held out by source: the physical model is fitted without the run's source (its costs), and so "
            "is the per-live-sequence decode-step term (issue 40's joint fit, shipped: column `+ms/seq`), "
            "and every compiled slot runs at saturation (the admission rule: a freed slot takes the "
            "queue's head at the next step boundary). "
            if args.joint
            else "Held out by source: the physical model is fitted without the run's source (its costs and "
            "the stack's slot occupancy; no per-live-sequence step term: `+ms/seq` is 0; issue 40's joint "
            "fit is "
            "the section after the TPOT table). "
        )
        + "The simulator runs the layout's live slots past saturation (arrivals at "
        f"{K.OVERLOAD:g}x the projected capacity, {K.PER_REPLICA:,} requests per replica, completions per "
        "second in the steady middle half) under each decode-batch rule: `compiled` (a step costs the "
        "compiled batch's step whatever is live; the rule the calibration assumes) and `live` (the step of "
        "the sequences in flight). `project` is the capacity `project` states with the same held-out costs.",
        "",
        "| source | stack | layout | +ms/seq | published req/s | project | simulated, compiled | error | "
        "simulated, live | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k in knees:
        sim = dict(k.simulated)
        lines.append(
            f"| {k.source} | {k.stack} | {k.layout} | {k.live_step_s * 1e3:g} | {k.published_rps:.3f} | "
            f"{k.projected_rps:.3f} | "
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
    tpots = ho.tpots
    lines += [
        "",
        "The decode step under load: mean TPOT at each published Poisson rate (guidellm's constant-rate "
        "sweep, 600 s), held out by source (as the knees above), under each decode-batch rule; idle "
        "= one request at a time on the same layout; `x` = loaded / idle, its error against the published "
        "ratio (issue 40's target: within 25 % on every sweep, under the stack's rule).",
        "",
        "| source | stack | rate | +ms/seq | published idle / loaded ms | x | compiled: idle / loaded ms | "
        "x | error of x | live: idle / loaded ms | x | error of x |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratio_err: dict[str, list[float]] = {}
    for x in tpots:
        cells = []
        pub_x = x.published_s / x.published_idle_s
        for rule, idle, loaded in x.simulated:
            err = loaded / idle / pub_x - 1
            if rule == stacks[x.stack].decode_batch:
                ratio_err.setdefault(x.stack, []).append(err)
            cells.append(f"{idle * 1e3:.1f} / {loaded * 1e3:.1f} | {loaded / idle:.2f} | {_pct(err)}")
        pub = f"{x.published_idle_s * 1e3:.1f} / {x.published_s * 1e3:.1f}"
        lines.append(
            f"| {x.source} | {x.stack} | {x.rate:g} | {x.live_step_s * 1e3:g} | {pub} | {pub_x:.2f} | "
            + " | ".join(cells)
            + " |"
        )
    for stack, errs in ratio_err.items() if args.joint else ():
        stacks[stack] = replace(
            stacks[stack], live_step_s=ho.live_step[stack], tpot_sweeps=len(errs),
            tpot_within=sum(abs(e) <= 0.25 for e in errs), tpot_worst=round(max(abs(e) for e in errs), 3),
        )  # fmt: skip
    for stack, h in ho.live_step.items() if args.joint else ():
        if stack not in ratio_err:
            stacks[stack] = replace(stacks[stack], live_step_s=h)
    if other_fit is not None:
        lines += ["", *_joint_section(other_fit)]
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


def _joint_section(jo: K.HeldOut) -> list[str]:
    """Issue 40's joint fit, measured beside the shipped rule: every compiled slot live (the admission rule)
    and the step growing per live sequence, the term held out by source."""
    lines = [
        "**Issue 40's joint fit (measured; shipped only with `--joint`)**: every compiled slot live at "
        "saturation (the admission rule) and each decode step growing by a per-live-sequence term, chosen "
        f"on {', '.join(f'{h * 1e3:g}' for h in K.LIVE_STEP_GRID)} ms by the summed squared log errors of "
        "the knees and loaded/idle TPOT ratios of the other sources (both NxD Inference stacks), each with "
        f"its own held-out physical fit. Fitted on every source: "
        + ", ".join(f"`{st}` {h * 1e3:g} ms" for st, h in jo.live_step.items())
        + ".",
        "",
        "| stack | knee runs | median abs error | largest | loaded/idle TPOT within 25 % | ratio errors |",
        "|---|---|---|---|---|---|",
    ]
    for sk in K.per_stack(jo.knees, "compiled"):
        errs = []
        for x in jo.tpots:
            if x.stack == sk.stack:
                ((_, idle, loaded),) = (t for t in x.simulated if t[0] == "compiled")
                errs.append(loaded / idle / (x.published_s / x.published_idle_s) - 1)
        lines.append(
            f"| {sk.stack} | {sk.runs} | {sk.median_abs:.1%} | {sk.max_abs:.1%} | "
            f"{sum(abs(e) <= 0.25 for e in errs)} of {len(errs)} | {', '.join(_pct(e) for e in errs)} |"
        )
    lines += ["", "| source | layout | +ms/seq | published req/s | project | simulated | error |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for k in jo.knees:
        lines.append(
            f"| {k.source} | {k.layout} | {k.live_step_s * 1e3:g} | {k.published_rps:.3f} | "
            f"{k.projected_rps:.3f} | {dict(k.simulated)['compiled']:.3f} | {_pct(k.error('compiled'))} |"
        )
    return lines


if __name__ == "__main__":
    main()
