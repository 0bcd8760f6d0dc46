"""The knee (saturation rate) of each serving stack under load, held out by source: for every published
run that measures a layout's capacity under load (guidellm's "throughput" rows of optimum-neuron TGI and
vLLM on NxD Inference), the physical model is fitted without that run's source (the projection's own costs,
chipswap.projection.fitting.physfit.fit), and the fleet simulator, given those costs, the stack's live slots
and its scheduling rules (data/platforms/stack_load.toml), is driven past saturation; the completions per
second it sustains are compared with the published requests/s.

What it is for: bench/bench_knee.py (the table in docs/benchmarks.md and the knee errors written into
stack_load.toml), tests/test_stack_load.py. The decode-batch rule is chosen here by held-out knee error:
"compiled" (a step costs the compiled batch's step whatever is live, the Neuron graph) against "live" (the
step of the sequences in flight, as a GPU's continuous batching).

Reads the published runs (chipswap.projection.fitting.rows); writes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from chipswap.projection.fitting.physfit import Context, Fitted, fit, load_context, padded, schedule_for
from chipswap.projection.fitting.rows import Run, read_runs
from chipswap.projection.projected import ProjectedServiceTimes
from chipswap.projection.serving.physics import phys_poly, replica_rps
from chipswap.simulation.policies import NEURON_STATIC_SLOTS
from chipswap.simulation.servicetime import charged_context, decode_steps, live_slots
from chipswap.simulation.simulate import ReplicaSetup, make_traffic, simulate

DECODE_BATCH_RULES = ("compiled", "live")
PER_REPLICA = 1500  # requests per replica of one saturation run (enough for the slots' cohorts to mix)
OVERLOAD = 2.0  # arrivals at this many times the projected capacity
CHUNK = 1024  # optimum-neuron's published chunked-prefill setting
ADMISSION_OCCUPANCY = 1.0  # static slots, FIFO at each step boundary: every compiled slot runs at saturation
# the per-live-sequence step terms tried (seconds per live sequence per decode step), chosen by held-out
# error (knees and loaded/idle TPOT ratios of the other sources, both NxD Inference stacks: the TGI sweeps
# alone cannot tell the term apart, the 70B one moving under 3 % across the grid)
LIVE_STEP_GRID = (0.0, 1e-4, 2e-4, 2.5e-4, 3e-4, 3.5e-4, 4e-4, 5e-4, 6e-4, 8e-4)
GRID_PER_REPLICA = 500  # requests per replica of a saturation run inside the grid search


@dataclass(frozen=True)
class Knee:
    """One published capacity under load against the simulator's saturation rate, held out by source."""

    source: str
    stack: str
    row_id: str
    layout: str
    published_rps: float
    projected_rps: float  # `project`'s capacity rule with the held-out costs (replica_rps)
    simulated: tuple[tuple[str, float], ...]  # decode-batch rule -> simulated saturation, requests/s
    model: str = ""
    prompt: int = 0
    batch: int = 0  # compiled batch (Neuron) or concurrency (a GPU sweep)
    live_step_s: float = 0.0  # the step's growth per live sequence, fitted without this run's source

    def error(self, rule: str = "compiled") -> float:
        sims = dict(self.simulated)
        return sims.get(rule, next(iter(sims.values()))) / self.published_rps - 1.0


def knee_runs(runs: list[Run]) -> list[Run]:
    """The runs that publish a layout's capacity under load on a Neuron stack."""
    return [r for r in runs if r.scenario == "throughput" and r.stack in ("nxdi-tgi", "nxdi-vllm")]


def _chunk(run: Run) -> int:
    return CHUNK if "chunked" in run.where.lower() or "chunk" in run.row_id else 0


def saturation_rps(service: object, setup: ReplicaSetup, replicas: int, rate: float, prompt: int,
                   output: int, per_replica: int = PER_REPLICA) -> float:  # fmt: skip
    """Completions per second in the steady middle half of a run with arrivals evenly spaced at `rate`
    (above capacity): the saturation rate of the layout."""
    n = per_replica * replicas
    arrivals = np.arange(n) / rate
    res = simulate(make_traffic(arrivals, [prompt] * n, [output] * n), service, setup, replicas)  # type: ignore[arg-type]
    done = np.sort(arrivals + res.e2e_s)
    return (n // 2) / float(done[3 * n // 4] - done[n // 4])


@dataclass(frozen=True)
class _Layout:
    """A published Neuron layout under held-out costs: the projection's polynomials behind the ServiceTimes
    seam, the stack's live slots, the buckets the simulator charges."""

    poly: object
    service: ProjectedServiceTimes
    sched: object
    live: int
    pad: int
    dec: int

    def setup(self, run: Run, rule: str, chunk: int = 0) -> ReplicaSetup:
        compiled = (run.batch,) if rule == "compiled" else ()
        return ReplicaSetup(
            max_batch=self.live, batch_sizes=compiled, prefill_buckets=(self.pad,),
            decode_buckets=(self.dec,), policy=NEURON_STATIC_SLOTS, token_budget=chunk,
            live_step_s=self.sched.live_step_s,  # type: ignore[attr-defined]
        )  # fmt: skip


def _layout(ctx: Context, run: Run, fitted: Fitted, output: int, live_step_s: float = 0.0,
            admission: bool = False) -> _Layout:  # fmt: skip
    # admission (issue 40's joint fit): occupancy by the stack's admission rule (a freed compiled slot takes
    # the queue's head at the next step boundary, so a saturated replica runs every slot); otherwise the
    # physical fit's occupancy. The step grows by live_step_s per live sequence
    sched = schedule_for(run, fitted)
    occ = ADMISSION_OCCUPANCY if admission else sched.occupancy
    sched = replace(sched, occupancy=occ, live_step_s=live_step_s)
    live = live_slots(run.batch, sched.occupancy)
    sched = replace(sched, occupancy=live / run.batch)  # the whole slots the simulator runs, as `project`
    pad = padded(run.prompt)
    poly = phys_poly(
        ctx.works[run.model], ctx.devices[(run.chip, run.lnc)], fitted.for_family(run.family), tp=run.tp,
        lnc=run.lnc, batch=run.batch, prompt=pad, schedule=sched,
    )  # fmt: skip
    # a decode bucket at the mean request's last position (what a shape plan compiles for one length)
    dec = charged_context(run.prompt, output, (int(math.ceil(run.prompt + output - 1)),))
    return _Layout(poly, ProjectedServiceTimes(poly, None, 0.0), sched, live, pad, dec)


def knee_of(ctx: Context, run: Run, fitted: Fitted, chunk: int = 0, live_step_s: float = 0.0,
            rules: tuple[str, ...] = DECODE_BATCH_RULES, per_replica: int = PER_REPLICA,
            admission: bool = False) -> Knee:  # fmt: skip
    """The run's capacity from the simulator with `fitted` costs, under each decode-batch rule."""
    output = max(2, int(round(run.output)))
    lay = _layout(ctx, run, fitted, output, live_step_s, admission)
    live, service = lay.live, lay.service
    projected = run.replicas * replica_rps(
        lay.poly, run.batch, run.prompt, output, lay.pad, lay.sched, context=lay.dec,  # type: ignore[arg-type]
        steps=decode_steps(output),
    )  # fmt: skip
    sims = []
    for rule in rules:
        rate = OVERLOAD * projected
        setup = lay.setup(run, rule, chunk)
        sims.append(
            (rule, saturation_rps(service, setup, run.replicas, rate, run.prompt, output, per_replica))
        )
    words = (
        f"{run.replicas} x TP{run.tp} batch {run.batch} ({live} live)"
        + (f", chunks of {chunk}" if chunk else "")
        + (", CPU sampling" if run.sampling == "cpu" else "")
    )
    return Knee(run.source, run.stack, run.row_id, words, float(run.value("requests_per_s") or 0.0),
                projected, tuple(sims), run.model, run.prompt, run.batch, live_step_s)  # fmt: skip


def held_out_knees(reference: str | None = None) -> list[Knee]:
    """Every knee run, each predicted with the physical model and the stack's per-live-sequence step term
    fitted without its source."""
    return held_out(reference).knees


def _chunked_rows(reference: str | None) -> set[str]:
    """Row ids of the published runs with chunked prefill turned on (their notes say so)."""
    import csv
    from pathlib import Path

    from chipswap.projection.fitting.rows import DEFAULT_REFERENCE, MODERN

    path = Path(reference or DEFAULT_REFERENCE) / MODERN
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {f"llm_serving.csv:{i + 2}" for i, r in enumerate(rows) if "chunked prefill (1024)" in r["notes"]}


@dataclass(frozen=True)
class StackKnee:
    """A stack's held-out knee errors under one decode-batch rule."""

    stack: str
    rule: str
    runs: int
    sources: int
    median_abs: float
    max_abs: float


def per_stack(knees: list[Knee], rule: str) -> list[StackKnee]:
    out = []
    for stack in sorted({k.stack for k in knees}):
        errs = [abs(k.error(rule)) for k in knees if k.stack == stack]
        out.append(
            StackKnee(
                stack,
                rule,
                len(errs),
                len({k.source for k in knees if k.stack == stack}),
                float(np.median(errs)),
                max(errs),
            )  # fmt: skip
        )
    return out


# --- vLLM on GPUs: the H100 concurrency sweeps -----------------------------------------------------------

GPU_SOURCE = "qwen-small-h100"
VLLM_BUDGET, VLLM_SEQS = (
    8192,
    1024,
)  # vLLM's online defaults on an H100 (stated, chipswap.simulation.policies)


def gpu_knee_of(ctx: Context, run: Run, coef: object) -> Knee:
    """One H100 vLLM run (`batch` requests sent at once, `vllm bench serve` with num-prompts = concurrency):
    the GPU table fit's costs (the product's GPU calibration, fitted on TensorRT-LLM rows only: this source
    is held out by construction), the simulator's chunked prefill with the paged KV cache the memory
    leaves; requests/s = requests / the last one's completion."""
    from chipswap.projection.fitting.physfit import GPU_ACTIVATION_RESERVE, GPU_MEMORY_UTILIZATION
    from chipswap.projection.platform import llm_poly
    from chipswap.simulation.policies import CHUNKED_PREFILL

    work = ctx.works[run.model]
    dev = ctx.devices[(run.chip, run.lnc)]
    poly = llm_poly(work, dev, coef, tp=run.tp, weight_dtype="bf16", compute_dtype="bf16")  # type: ignore[arg-type]
    free = (
        dev.memory_bytes * GPU_MEMORY_UTILIZATION
        - work.weight_bytes("bf16") / run.tp
        - GPU_ACTIVATION_RESERVE
    )
    blocks = int(max(0.0, free) // work.kv_bytes_per_token("bf16", run.tp)) // 16
    output = max(2, int(round(run.output)))
    setup = ReplicaSetup(
        max_batch=VLLM_SEQS, max_length=run.prompt + output, policy=CHUNKED_PREFILL, token_budget=VLLM_BUDGET,
        kv_blocks=blocks,
    )  # fmt: skip
    n = run.batch
    service = ProjectedServiceTimes(poly, None, 0.0)
    res = simulate(make_traffic(np.zeros(n), [run.prompt] * n, [output] * n), service, setup, 1)
    rps = n / float(np.nanmax(res.e2e_s))
    words = f"TP{run.tp}, {run.prompt:,} + {output} tokens, {n} at once"
    return Knee(run.source, run.stack, run.row_id, words, float(run.value("requests_per_s") or 0.0), rps,
                (("live", rps),), run.model, run.prompt, run.batch)  # fmt: skip


def saturation_points(knees: list[Knee]) -> list[Knee]:
    """Of a concurrency sweep, the run at the highest concurrency of each model and prompt length (the
    knee: the sweep's requests/s flattens there)."""
    best: dict[tuple[str, int], Knee] = {}
    for k in knees:
        key = (k.model, k.prompt)
        if key not in best or k.batch > best[key].batch:
            best[key] = k
    return list(best.values())


def gpu_knees(reference: str | None = None) -> list[Knee]:
    from chipswap.economics.catalog_io import load_catalog
    from chipswap.projection.platforms import platform_for

    runs, _ = read_runs(reference)
    sel = [r for r in runs if r.source == GPU_SOURCE and r.scenario == "closed"]
    ctx = load_context(sel)
    coef = platform_for("H100", load_catalog()).phase("llm")
    return [gpu_knee_of(ctx, r, coef) for r in sel]


# --- the decode step under load: TPOT at the published Poisson rates --------------------------------------


@dataclass(frozen=True)
class LoadedTpot:
    """Mean time per output token at a published rate, held out by source: published, and simulated under
    each decode-batch rule (idle: one request at a time on the same layout)."""

    source: str
    stack: str
    rate: float
    published_idle_s: float
    published_s: float
    simulated: tuple[tuple[str, float, float], ...]  # rule, idle TPOT, loaded TPOT
    live_step_s: float = 0.0  # the step term fitted without this source


def _mean_tpot(service: object, setup: ReplicaSetup, replicas: int, rate: float, prompt: int,
               output: int) -> float:  # fmt: skip
    n = max(200, int(rate * 600))
    arrivals = (np.arange(n) + 0.5) / rate  # guidellm's constant-rate sweep
    res = simulate(make_traffic(arrivals, [prompt] * n, [output] * n), service, setup, replicas)  # type: ignore[arg-type]
    keep = slice(n // 5, n)  # after the warm-up
    return float(np.mean((res.e2e_s[keep] - res.ttft_s[keep]) / (output - 1)))


@dataclass(frozen=True)
class _Sweep:
    """One published Poisson-rate row of an optimum-neuron sweep, with its layout's runs."""

    source: str
    stack: str
    rate: float
    output: int
    lay: Run  # the layout's throughput run
    idle_s: float  # the published idle TPOT (the sync run)
    loaded_s: float  # the published mean TPOT at `rate`

    @property
    def ratio(self) -> float:
        return self.loaded_s / self.idle_s


def _sweeps(reference: str | None, runs: list[Run]) -> list[_Sweep]:
    """The Poisson-rate rows of the optimum-neuron sweeps (the physical fit skips them)."""
    import csv
    from pathlib import Path

    from chipswap.projection.fitting.rows import DEFAULT_REFERENCE, MODERN

    with open(Path(reference or DEFAULT_REFERENCE) / MODERN, newline="") as f:
        rows = list(csv.DictReader(f))
    out: list[_Sweep] = []
    for row in rows:
        rate = float(row["request_rate_rps"] or 0)
        if "asynchronous" not in row["scenario"] or not rate:
            continue
        src, batch = row["source_id"], int(row["batch_size"])
        lay = next(
            (r for r in runs if r.source == src and r.batch == batch and r.scenario == "throughput"), None
        )
        idle = next((r for r in runs if r.source == src and r.batch == batch and r.scenario == "sync"), None)
        if lay is None or idle is None:
            continue
        output = max(2, int(round(float(row["output_tok_s_total"]) / float(row["requests_per_s"]))))
        out.append(_Sweep(src, lay.stack, rate, output, lay, float(idle.value("tpot_s") or 0.0),
                          float(row["tpot_ms_mean"]) / 1e3))  # fmt: skip
    return out


def _sweep_tpots(ctx: Context, sw: _Sweep, fitted: Fitted, live_step_s: float,
                 rules: tuple[str, ...] = DECODE_BATCH_RULES,
                 admission: bool = False) -> tuple[tuple[str, float, float], ...]:  # fmt: skip
    """(rule, idle TPOT, loaded TPOT) simulated on the sweep's layout."""
    this = _layout(ctx, sw.lay, fitted, sw.output, live_step_s, admission)
    sims = []
    for rule in rules:
        setup = this.setup(sw.lay, rule)
        quiet = _mean_tpot(this.service, setup, 1, 1e-3, sw.lay.prompt, sw.output)
        loaded = _mean_tpot(this.service, setup, sw.lay.replicas, sw.rate, sw.lay.prompt, sw.output)
        sims.append((rule, quiet, loaded))
    return tuple(sims)


@dataclass(frozen=True)
class HeldOut:
    """The knees and the loaded TPOTs of the shared sweeps, each with the physical model and the stack's
    per-live-sequence step term fitted without its source; live_step: each stack's term fitted on all of its
    sources (what stack_load.toml ships)."""

    knees: list[Knee]
    tpots: list[LoadedTpot]
    live_step: dict[str, float]


def held_out(reference: str | None = None, joint: bool = False) -> HeldOut:
    """The knees and loaded TPOTs held out by source. joint=False: the physical fit's occupancy and a step
    that does not grow with the live batch (what stack_load.toml ships). joint=True, the joint held-out fit
    of issue 40 (measured, not shipped: see docs/simulation.md): occupancy follows the admission rule
    (every compiled slot live at saturation); the step grows by live_step_s per live sequence, chosen on
    LIVE_STEP_GRID by the summed squared log errors of the knees (compiled rule) and of the loaded/idle TPOT
    ratios of the OTHER sources (of both Neuron stacks: the runtime's per-sequence host work; the TGI sweeps
    alone do not identify it), each of those predicted with its own held-out physical fit. The shipped term
    (live_step) is the same choice over every source."""
    runs, _ = read_runs(reference)
    ctx = load_context(runs)
    chunked = _chunked_rows(reference)
    knee_set = knee_runs(runs)
    sources = sorted({r.source for r in knee_set})
    stack_of = {r.source: r.stack for r in knee_set}
    fits = _held_out_fits(reference, tuple(sources))
    sweeps = [w for w in _sweeps(reference, runs) if w.source in fits]
    cost: dict[tuple[str, float], float] = {}
    for s in sources if joint else ():
        for h in LIVE_STEP_GRID:
            errs = [
                math.log1p(
                    knee_of(
                        ctx,
                        r,
                        fits[s],
                        CHUNK if r.row_id in chunked else 0,
                        h,
                        ("compiled",),
                        GRID_PER_REPLICA,
                        True,
                    ).error("compiled")
                )  # fmt: skip
                for r in knee_set
                if r.source == s
            ]
            for w in (w for w in sweeps if w.source == s):
                ((_, quiet, loaded),) = _sweep_tpots(ctx, w, fits[s], h, ("compiled",), True)
                errs.append(math.log(loaded / quiet / w.ratio))
            cost[(s, h)] = sum(e * e for e in errs)

    def best(stack: str, without: str | None) -> float:
        train = [s for s in sources if s != without]  # `stack`: every Neuron stack shares the term
        if not joint or not train:
            return 0.0
        return min(LIVE_STEP_GRID, key=lambda h: sum(cost[(s, h)] for s in train))

    knees = [
        knee_of(
            ctx,
            r,
            fits[r.source],
            CHUNK if r.row_id in chunked else 0,
            best(r.stack, r.source),
            admission=joint,
        )  # fmt: skip
        for r in knee_set
    ]
    tpots = []
    for w in sweeps:
        h = best(w.stack, w.source)
        tpots.append(LoadedTpot(w.source, w.stack, w.rate, w.idle_s, w.loaded_s,
                                _sweep_tpots(ctx, w, fits[w.source], h, admission=joint), h))  # fmt: skip
    return HeldOut(knees, tpots, {st: best(st, None) for st in sorted(set(stack_of.values()))})


@lru_cache(maxsize=2)
def _held_out_fits(reference: str | None, sources: tuple[str, ...]) -> dict[str, Fitted]:
    """The physical model fitted without each source (the slow part; shared by both held_out modes)."""
    runs, _ = read_runs(reference)
    ctx = load_context(runs)
    return {s: fit(ctx, [r for r in runs if r.source != s]) for s in sources}


def loaded_tpots(reference: str | None = None) -> list[LoadedTpot]:
    """The Poisson-rate rows of the optimum-neuron sweeps (the physical fit skips them): each simulated on
    its source's layout with the physical model and the step term fitted without that source."""
    return held_out(reference).tpots
