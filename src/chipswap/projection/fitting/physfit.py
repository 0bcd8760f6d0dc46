"""Fit the physical serving model's free parameters per chip family across shapes, and measure how well it
holds off the fitted shape: leave-one-source-out and four extrapolation tests that hold out a whole region
(long prompts, TP 4, models of 7 B and up, one chip family's stack). The bands the serving room prints are
the held-out errors of these tests (chipswap.projection.serving.coverage).

What it is for: `chipswap calibrate` (writes data/platforms/physics.toml; `--check` compares),
bench/bench_extrapolation.py and tests/test_physics_fit.py. Reads the published runs through
chipswap.projection.fitting.rows, the shipped presets and the catalog; writes only physics.toml, and only
when asked to. The calibration driver (full fit and every held-out test, in worker processes) is
chipswap.projection.fitting.physcal.

The fit: a robust least squares (soft-L1) on log(predicted / published) of every figure of every run, the
parameters in log space within PARAMS' bounds; the families of one vendor share the parameters, each
family's own log-offset on the efficiencies and fixed costs is pulled to 0 by a ridge term (so a family
with no rows is predicted from its vendor's parameters on its own spec sheet). Deterministic (fixed start,
no randomness), a second or two per fit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chipswap.projection.fitting.rows import METRICS, Run, Skip
from chipswap.projection.platform import DeviceSpec
from chipswap.projection.serving.physics import (
    PARAMS,
    STACK_ABSOLUTE,
    Physics,
    Schedule,
    base_stack,
    loaded_itl,
    loaded_ttft,
    phys_poly,
    replica_rps,
    with_stack,
)
from chipswap.projection.work import ModelWork

VENDOR = {
    "Trainium2": "neuron", "Inferentia2": "neuron", "Trainium": "neuron",
    "H100": "nvidia", "H200": "nvidia", "L40S": "nvidia", "A100": "nvidia", "B200": "nvidia",
}  # fmt: skip
FAMILY_PARAMS = (
    "mm_eff",
    "attn_eff",
    "bw_eff",
    "kv_bw_eff",
    "step_fixed_s",
    "prefill_fixed_s",
    "collective_s",
)
VENDOR_PARAMS = {
    "neuron": tuple(k for k in PARAMS if k != "moe_dispatch_s"),
    "nvidia": tuple(k for k in PARAMS if k not in ("lnc1_eff", "host_sample_s_per_logit", "moe_dispatch_s")),
}
STACK_OCCUPANCY = ("nxdi-vllm", "nxdi-tgi")
# stacks whose version runs the same chips at other efficiencies than the stacks the product assumes (NxD
# Inference on Neuron, vLLM on GPUs): Transformers NeuronX on SDK 2.18 and TensorRT-LLM 0.9, 0.15 and 1.0
# (their own kernels and schedulers) each get their own log-offset on these terms, pulled to 0 by the
# ridge; the physics (and the family's parameters the product uses) is shared
# MoE serving runs its own kernels (expert dispatch, expert parallelism; vLLM's dynamic fp8 its own
# quantization): its stack key (rows.moe_stack) gets multipliers on the efficiencies down to 1 % and the
# MoE dispatch term (absolute, STACK_ABSOLUTE), fitted on the MoE rows only
_EFFS = ("mm_eff", "attn_eff", "bw_eff", "kv_bw_eff")
_MOE_TERMS = tuple((k, 0.01, 10.0) for k in _EFFS) + (("moe_dispatch_s", *PARAMS["moe_dispatch_s"][1:]),)
_VERSION_TERMS = tuple((k, 0.1, 10.0) for k in (*_EFFS, "prefill_fixed_s", "step_fixed_s"))
STACK_TERMS: dict[str, tuple[tuple[str, float, float], ...]] = {
    "tnx-2.18": _VERSION_TERMS,
    "vllm": _VERSION_TERMS,
    "trtllm-0.9": _VERSION_TERMS,
    "trtllm-0.15": _VERSION_TERMS,
    "trtllm-1.0": _VERSION_TERMS,
    "nxdi-vllm-moe": _MOE_TERMS,
    "vllm-moe": _MOE_TERMS,
    "vllm-moe-fp8": _MOE_TERMS,
}

# parameters fitted only when a training run exercises them; otherwise they keep their physical default
# (serving.physics.OPTIONAL): LNC=1 logical cores are one physical core each, whose halved rates the spec
# sheet already gives, so without an LNC=1 run the efficiency ratio is 1 (left free it wandered to its
# lower bound in the Inferentia2-only fit, slowing every Trainium2 LNC=1 prediction 10x)
EXERCISED: dict[str, Callable[[Run], bool]] = {
    "lnc1_eff": lambda r: r.lnc == 1,
    "collective_s": lambda r: r.tp > 1,  # GPUs: the TP 8 MoE rows are the only ones
    "link_eff": lambda r: r.tp > 1,
}
RIDGE = 0.5  # weight of a family's log-offset residual (pulls it to the vendor's value)
START = {
    "mm_eff": 0.4, "attn_eff": 0.2, "attn_tile_tokens": 1024.0, "bw_eff": 0.5, "kv_bw_eff": 0.5,
    "link_eff": 0.3, "collective_s": 5e-6,
    "prefill_fixed_s": 0.01, "step_fixed_s": 2e-3, "step_row_s": 1e-4, "lnc1_eff": 0.6,
    "host_sample_s_per_logit": 5e-9, "gqa_expand": 0.1,
}  # fmt: skip
BAND_QUANTILE = 0.8
THROUGHPUT = ("requests_per_s", "out_tok_s")  # one quantity for the bands (PhysCalibration.band)
# the kinds a figure's band is at least (chipswap.projection.serving.coverage). Leave one model out: with
# cold folds, leaving one source out is +-251 % on Trainium2 throughput (its one long-prompt source held
# out) and would refuse every Trainium2 figure; the product keeps the leave-one-model-out band and the
# docs print leave-one-source-out beside it ("loso" here makes it the default)
BAND_KINDS = ("lomo",)
MAX_NFEV = 100  # iterations of a fit (every fit, full or held-out, starts cold from START)
FAMILY_BAND_MIN = 3  # models a family's held-out figures need for a band of its own (else its vendor's pool)
OUTSIDE_BAND = 1.0  # no honest band under +-100 %: the figure is refused ("outside what it covers")
TARGETS = {"median": 0.25, "coverage": 0.80, "half_width": 0.60, "long_prompt": 0.30}


def padded(prompt: int) -> int:
    """The compiled context bucket of a prompt on Neuron: the next power of two from 128."""
    return max(128, 1 << max(0, (prompt - 1).bit_length()))


@dataclass
class Context:
    """The fit's inputs. fits: vendor fits already made, by their training rows (a held-out fold that
    leaves a vendor's rows unchanged gets the same fit, so it reuses it; every fit starts cold)."""

    works: dict[str, ModelWork]
    devices: dict[tuple[str, int], DeviceSpec]  # (chip, lnc) -> one logical device
    fits: dict[tuple[str, ...], Fitted] = field(default_factory=dict)


def run_work(model: str) -> ModelWork:
    """The work of a run's model: a shipped preset, else (the GPU tables' GPT-J 6B and Falcon 180B) its
    entry in benchmark_models.toml."""
    from chipswap.models import preset_names
    from chipswap.projection.api import model_work

    if model in preset_names():
        return model_work(model)
    return _benchmark_works()[model]


@functools.lru_cache(maxsize=1)
def _benchmark_works() -> dict[str, ModelWork]:
    """benchmark_models.toml's works, read once per process (run_work asks per model)."""
    from chipswap.projection.platforms import shipped_dir
    from chipswap.projection.reference_tables import _Models

    return _Models(shipped_dir()).works


def load_context(runs: list[Run]) -> Context:
    from chipswap.economics.catalog_io import load_catalog
    from chipswap.projection.platforms import device_spec

    cat = load_catalog()
    works = {m: run_work(m) for m in sorted({r.model for r in runs})}
    devices = {}
    for r in runs:
        key = (r.chip, r.lnc)
        if key not in devices:
            per_chip = {"Trainium2": 8 // r.lnc, "Inferentia2": 2, "Trainium": 2}.get(r.chip, 1)
            devices[key] = device_spec(cat.chip(r.chip), per_chip)
    return Context(works, devices)


@dataclass(frozen=True)
class Fitted:
    """The fitted parameters: per family (vendor value x family offset), the stacks' occupancy and the
    STACK_TERMS stacks' multipliers on their family's terms."""

    physics: dict[str, Physics]
    occupancy: dict[str, float]
    stacks: dict[str, dict[str, float]] = field(default_factory=dict)

    def for_family(self, family: str, stack: str = "") -> Physics:
        if family in self.physics:
            p = self.physics[family]
        else:
            vendor = VENDOR.get(family, "neuron")
            base = self.physics.get(f"_{vendor}")
            if base is None:
                raise KeyError(family)
            p = Physics(family, base.values)
        base = base_stack(stack)
        if base != stack:  # a MoE stack's terms on top of its dense stack's
            p = with_stack(p, self.stacks.get(base))
        return with_stack(p, self.stacks.get(stack))


def schedule_for(run: Run, fitted: Fitted) -> Schedule:
    gpu = VENDOR.get(run.family) == "nvidia"
    occ = 1.0
    if run.scenario == "throughput":
        occ = fitted.occupancy.get(run.stack, 1.0)
    return Schedule(
        run.stack, static_batch=not gpu, prefill_pauses_decode=True, occupancy=occ,
        host_sampling=run.sampling == "cpu",
    )  # fmt: skip


def predict(ctx: Context, run: Run, fitted: Fitted, table: Any = None) -> dict[str, float]:
    """Every figure the run publishes, predicted through the serving room's functions (table: a chip
    family's table-fit Coefficients to use instead of the physical parameters, for the GPU stack test)."""
    p = (
        fitted.for_family(run.family, run.stack)
        if table is None
        else Physics(run.family, (("prefill_fixed_s", 0.0),))
    )
    sched = schedule_for(run, fitted)
    work = ctx.works[run.model]
    gpu = not sched.static_batch
    pad = run.prompt if gpu else padded(run.prompt)
    step_batch = 1 if (gpu and run.scenario == "sync") else run.batch
    if table is None:
        poly = phys_poly(
            work, ctx.devices[(run.chip, run.lnc)], p, tp=run.tp, lnc=run.lnc, batch=step_batch,
            prompt=pad, schedule=sched, weight_dtype=run.weight_dtype, compute_dtype=run.compute_dtype,
            kv_dtype=run.kv_dtype,
        )  # fmt: skip
    else:
        from chipswap.projection.platform import llm_poly

        poly = llm_poly(
            work,
            ctx.devices[(run.chip, run.lnc)],
            table,
            tp=run.tp,
            weight_dtype="bf16",
            compute_dtype="bf16",
        )
    context = int(run.prompt + run.output / 2)
    out: dict[str, float] = {}
    if run.scenario == "static":
        # one compiled batch: its prompts prefilled together, then decoded together to the end
        ttft = poly.prefill_s(run.batch, pad)
        tpot = poly.decode_step_s(run.batch, context)
        out = {"ttft_s": ttft, "tpot_s": tpot, "requests_per_s": run.batch / (ttft + (run.output - 1) * tpot)}
    elif run.scenario == "sync":
        ttft = poly.prefill_s(1, pad)
        tpot = poly.decode_step_s(step_batch, context)
        out = {"ttft_s": ttft, "tpot_s": tpot, "requests_per_s": 1.0 / (ttft + (run.output - 1) * tpot)}
    elif gpu:
        # continuous batching: as many sequences run as the KV cache holds; the rest queue for a slot
        live = max(1, min(run.batch, _kv_slots(ctx, run)))
        rr = replica_rps(poly, live, run.prompt, run.output, pad, sched)
        groups = run.batch / live
        fixed = p.get("prefill_fixed_s")
        first = fixed + (poly.prefill_s(1, pad) - fixed) * (live + 1) / 2.0  # prefills batched per step
        out = {
            "requests_per_s": rr,
            "tpot_s": poly.decode_step_s(live, context),
            "ttft_s": first + (groups - 1.0) / 2.0 * live / rr,
        }
    elif run.concurrency and run.concurrency < run.batch:
        # fewer users than the compiled batch: every step costs the compiled batch; the users' prefills
        # (all arriving at once) run in series before their decode
        users = run.concurrency
        step = poly.decode_step_s(run.batch, context)
        rr = users / (users * poly.prefill_s(1, pad) + run.output * step)
        out = {"requests_per_s": rr, "tpot_s": step, "ttft_s": loaded_ttft(poly, rr, pad, users, 1.0)}
    else:
        rr = replica_rps(poly, run.batch, run.prompt, run.output, pad, sched)
        out = {
            "requests_per_s": run.replicas * rr,
            "tpot_s": loaded_itl(poly, run.batch, context, rr, pad, sched),
        }
        if run.scenario == "closed":
            out["ttft_s"] = loaded_ttft(poly, rr, pad, run.batch, run.waves)
    out["out_tok_s"] = out["requests_per_s"] * run.output
    return {m: v for m, v in out.items() if run.value(m) is not None}


GPU_MEMORY_UTILIZATION = 0.95  # vLLM's --gpu-memory-utilization of the H100 runs
GPU_ACTIVATION_RESERVE = 2.0 * 2**30  # activations and CUDA graphs (assumption, as the product's reserve)


def _kv_slots(ctx: Context, run: Run) -> int:
    """Sequences of the run's length whose KV cache fits next to the weights on the GPU(s)."""
    work = ctx.works[run.model]
    dev = ctx.devices[(run.chip, run.lnc)]
    free = (
        dev.memory_bytes * GPU_MEMORY_UTILIZATION
        - work.weight_bytes(run.weight_dtype) / run.tp
        - GPU_ACTIVATION_RESERVE
    )
    per_seq = work.kv_bytes_per_token(run.kv_dtype, run.tp) * (run.prompt + run.output)
    if per_seq <= 0:
        return run.batch
    return int(max(0.0, free) // per_seq)


# --- the fit -----------------------------------------------------------------------------------------


@dataclass
class _Layout:
    """Where each free parameter sits in the fit vector."""

    names: list[str] = field(default_factory=list)
    lo: list[float] = field(default_factory=list)
    hi: list[float] = field(default_factory=list)
    x0: list[float] = field(default_factory=list)
    ridge: list[int] = field(default_factory=list)

    def add(self, name: str, lo: float, hi: float, x0: float, ridge: bool = False) -> None:
        self.names.append(name)
        self.lo.append(math.log(lo))
        self.hi.append(math.log(hi))
        self.x0.append(min(max(math.log(x0), math.log(lo) + 1e-6), math.log(hi) - 1e-6))
        if ridge:
            self.ridge.append(len(self.names) - 1)


def _layout(runs: list[Run]) -> _Layout:
    lay = _Layout()
    vendors = sorted({VENDOR[r.family] for r in runs})
    for v in vendors:
        for k in VENDOR_PARAMS[v]:
            if k in EXERCISED and not any(EXERCISED[k](r) for r in runs if VENDOR[r.family] == v):
                continue
            _, lo, hi = PARAMS[k]
            lay.add(f"_{v}:{k}", lo, hi, START[k])
    fams = sorted({r.family for r in runs})
    for fam in fams if len(fams) > 1 else ():
        for k in FAMILY_PARAMS:
            if k in VENDOR_PARAMS[VENDOR[fam]]:
                lay.add(f"{fam}:{k}", 0.1, 10.0, 1.0, ridge=True)
    for s in STACK_OCCUPANCY:
        if any(r.stack == s and r.scenario == "throughput" for r in runs):
            lay.add(f"occ:{s}", 0.05, 1.0, 0.7)
    for s, terms in STACK_TERMS.items():
        if any(r.stack == s for r in runs) and any(r.stack != s for r in runs):
            for k, lo, hi in terms:
                if k in STACK_ABSOLUTE:
                    lay.add(f"stack:{s}:{k}", lo, hi, 1e-3)
                else:  # a version's offset is pulled to 0; MoE kernels are only what their rows say
                    lay.add(f"stack:{s}:{k}", lo, hi, 1.0, ridge=not s.endswith(("-moe", "-fp8")))
    return lay


def _unpack(lay: _Layout, x: np.ndarray, families: set[str]) -> Fitted:
    vals = dict(zip(lay.names, (float(math.exp(v)) for v in x), strict=True))
    physics: dict[str, Physics] = {}
    for v in sorted({VENDOR[f] for f in families}):
        base = {k: vals[f"_{v}:{k}"] for k in VENDOR_PARAMS[v] if f"_{v}:{k}" in vals}
        physics[f"_{v}"] = Physics(f"_{v}", tuple(base.items()))
        for fam in sorted(f for f in families if VENDOR[f] == v):
            own = {k: base[k] * vals.get(f"{fam}:{k}", 1.0) for k in base}
            own = {k: min(val, PARAMS[k][2]) for k, val in own.items()}
            physics[fam] = Physics(fam, tuple(own.items()))
    occ = {n.split(":", 1)[1]: vals[n] for n in lay.names if n.startswith("occ:")}
    stacks: dict[str, dict[str, float]] = {}
    for n in lay.names:
        if n.startswith("stack:"):
            _, st, k = n.split(":", 2)
            stacks.setdefault(st, {})[k] = vals[n]
    return Fitted(physics, occ, stacks)


def _weight(metric: str) -> float:
    # requests/s and output tok/s carry the same information (their ratio is the realized output)
    return 0.7 if metric in ("requests_per_s", "out_tok_s") else 1.0


def fit(ctx: Context, runs: list[Run]) -> Fitted:
    """The parameters of every family in `runs` (and its vendors' shared values); vendors are fitted
    separately (they share nothing)."""
    physics: dict[str, Physics] = {}
    occupancy: dict[str, float] = {}
    stacks: dict[str, dict[str, float]] = {}
    for vendor in sorted({VENDOR[r.family] for r in runs}):
        mine = [r for r in runs if VENDOR[r.family] == vendor]
        key = tuple(r.row_id for r in mine)
        got = ctx.fits.get(key)
        if got is None:
            got = ctx.fits[key] = fit_vendor(ctx, mine)
        physics.update(got.physics)
        occupancy.update(got.occupancy)
        stacks.update(got.stacks)
    return Fitted(physics, occupancy, stacks)


def _touches(name: str, r: Run) -> bool:
    """Whether the fit parameter `name` can move run `r`'s predictions (_layout's names: a vendor's
    values move every run of the vendor; a family's offset its family's runs; a stack's terms and
    occupancy its stack's runs)."""
    head, _, rest = name.partition(":")
    if head == "occ":
        return r.stack == rest and r.scenario == "throughput"
    if head == "stack":
        st = rest.split(":", 1)[0]
        return r.stack == st or base_stack(r.stack) == st
    if head.startswith("_"):
        return True
    return r.family == head


def fit_vendor(ctx: Context, runs: list[Run]) -> Fitted:
    """One vendor's parameters, from the same cold start (START, the layout's defaults) whatever rows it
    is given: a held-out fold never starts from values fitted on its held-out rows. The Jacobian is taken
    by forward differences over the runs each parameter touches only (_touches), the rest of its column
    being 0 exactly; the ridge rows are analytic."""
    from scipy.optimize import least_squares

    lay = _layout(runs)
    families = {r.family for r in runs}
    start = _unpack(lay, np.array(lay.x0), families)
    published = [
        [(m, _weight(m), math.log(r.value(m))) for m in predict(ctx, r, start)]  # type: ignore[arg-type]
        for r in runs
    ]
    starts = np.cumsum([0] + [len(p) for p in published])
    n_rows = int(starts[-1])
    touched = [[i for i, r in enumerate(runs) if _touches(n, r)] for n in lay.names]

    def block(fitted: Fitted, i: int) -> list[float]:
        pred = predict(ctx, runs[i], fitted)
        return [w * (math.log(max(pred[m], 1e-12)) - logv) for m, w, logv in published[i]]

    def residuals(x: np.ndarray) -> np.ndarray:
        fitted = _unpack(lay, x, families)
        res = [v for i in range(len(runs)) for v in block(fitted, i)]
        return np.array(res + [RIDGE * x[i] for i in lay.ridge])

    lo, hi = np.array(lay.lo), np.array(lay.hi)

    def jacobian(x: np.ndarray) -> np.ndarray:
        base = residuals(x)
        jac = np.zeros((len(base), len(x)))
        for j, rows in enumerate(touched):
            h = math.sqrt(np.finfo(float).eps) * max(1.0, abs(x[j])) * (1.0 if x[j] >= 0 else -1.0)
            if not lo[j] <= x[j] + h <= hi[j]:
                h = -h
            xp = x.copy()
            xp[j] += h
            fitted = _unpack(lay, xp, families)
            for i in rows:
                a, b = starts[i], starts[i + 1]
                jac[a:b, j] = (np.array(block(fitted, i)) - base[a:b]) / h
        for k, j in enumerate(lay.ridge):
            jac[n_rows + k, j] = RIDGE
        return jac

    sol = least_squares(
        residuals, np.array(lay.x0), jac=jacobian, bounds=(lo, hi), loss="soft_l1", f_scale=0.15,
        x_scale=1.0, max_nfev=MAX_NFEV, method="trf", xtol=1e-5, ftol=1e-5,
    )  # fmt: skip
    fitted = _unpack(lay, sol.x, families)
    return Fitted(
        {k: Physics(p.family, tuple((n, _sig(v)) for n, v in p.values)) for k, p in fitted.physics.items()},
        {k: _sig(v) for k, v in fitted.occupancy.items()},
        {s: {k: _sig(v) for k, v in t.items()} for s, t in fitted.stacks.items()},
    )


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits - 1}e}") if x else 0.0


def _sig_up(x: float, digits: int = 3) -> float:
    """`x` rounded up to `digits` significant digits (a band rounded down would uncover its own edge)."""
    if not x or not math.isfinite(x):
        return x
    scale = 10.0 ** (math.floor(math.log10(abs(x))) - digits + 1)
    return _sig(math.ceil(x / scale - 1e-9) * scale, digits)


# --- held-out and extrapolation tests ------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    run: Run
    metric: str
    predicted: float
    published: float

    @property
    def ratio(self) -> float:
        return self.predicted / self.published

    @property
    def log_error(self) -> float:
        return abs(math.log(self.ratio))


@dataclass(frozen=True)
class Split:
    """One held-out test: the figures predicted by parameters fitted without them."""

    kind: str
    title: str
    figures: tuple[Figure, ...]
    folds: int = 1


def predict_all(ctx: Context, runs: list[Run], fitted: Fitted) -> list[Figure]:
    """The figures of `runs` under `fitted`, but for a MoE run under a stack `fitted` has no MoE terms for
    (a fold that holds out every MoE run of the stack): the product refuses that figure (serving.coverage:
    no MoE serving run fitted), so it is not one a band promises anything about."""
    out = []
    for r in runs:
        if ctx.works[r.model].is_moe and r.stack not in fitted.stacks:
            continue
        for m, v in predict(ctx, r, fitted).items():
            out.append(Figure(r, m, v, r.value(m)))  # type: ignore[arg-type]
    return out


def gpu_table_fit(ctx: Context, runs: list[Run]) -> list[Figure]:
    """H100 vLLM runs held out as a stack: predicted with the NVIDIA table fit (TensorRT-LLM rows; the
    product's GPU calibration) through the same harness."""
    from chipswap.economics.catalog_io import load_catalog
    from chipswap.projection.platforms import platform_for

    coef = platform_for("H100", load_catalog()).phase("llm")
    out = []
    for r in runs:
        for m, v in predict(ctx, r, Fitted({}, {}), table=coef).items():
            out.append(Figure(r, m, v, r.value(m)))  # type: ignore[arg-type]
    return out


def folds(runs: list[Run], key: Callable[[Run], str]) -> list[tuple[list[Run], list[Run]]]:
    """(train, test) of each held-out value of `key`."""
    return [
        ([r for r in runs if key(r) != fold], [r for r in runs if key(r) == fold])
        for fold in sorted({key(r) for r in runs})
    ]


HELD_OUT_KEYS: dict[str, Callable[[Run], str]] = {
    "loso": lambda r: r.source,
    "lomo": lambda r: r.model,
    "family": lambda r: r.family,
}


def held_out(ctx: Context, runs: list[Run], key: Callable[[Run], str]) -> list[Figure]:
    out: list[Figure] = []
    for train, test in folds(runs, key):
        gpu_test = [r for r in test if VENDOR[r.family] == "nvidia"]
        if gpu_test and not any(VENDOR[r.family] == "nvidia" for r in train):
            out += gpu_table_fit(ctx, gpu_test)
            test = [r for r in test if r not in gpu_test]
        if test:
            out += predict_all(ctx, test, fit(ctx, train))
    return out


def region(
    ctx: Context, runs: list[Run], train: Callable[[Run], bool], test: Callable[[Run], bool]
) -> list[Figure]:
    """Fit on the runs `train` keeps, predict the ones `test` keeps (the rest are in neither)."""
    tr = [r for r in runs if train(r)]
    te = [r for r in runs if test(r)]
    return predict_all(ctx, te, fit(ctx, tr)) if te else []


def params_b(ctx: Context, r: Run) -> float:
    return ctx.works[r.model].params / 1e9


# the four extrapolation kinds: (kind, title, train, test, dimension, fitted edge, tested edge)
def extrapolations(ctx: Context) -> list[tuple[str, str, Callable[[Run], bool], Callable[[Run], bool]]]:
    return [
        ("prompt", "fit on prompts <= 7.4K, test 14.8K-59.5K", lambda r: r.prompt <= 7400,
         lambda r: r.prompt >= 14800),
        ("tp", "fit on TP <= 2, test TP 4", lambda r: r.tp <= 2, lambda r: r.tp == 4),
        ("params", "fit on models <= 1.7 B, test 7 B and up", lambda r: params_b(ctx, r) <= 1.8,
         lambda r: params_b(ctx, r) >= 7.0),
        _size_batch(ctx, "size_batch", 8, (32, 64)),
        # the same two-way hold-out at the batches the shared sources hold for 30 B and up (none at 32-64)
        _size_batch(ctx, "size_batch_shared", 2, (4, 8)),
    ]  # fmt: skip


def _size_batch(
    ctx: Context, kind: str, fit_batch: int, test_batches: tuple[int, int]
) -> tuple[str, str, Callable[[Run], bool], Callable[[Run], bool]]:
    """Fit on dense models <= 8 B at batch <= fit_batch, test dense 30 B and up at batches in test_batches."""
    lo, hi = test_batches

    def dense(r: Run) -> bool:
        return not ctx.works[r.model].is_moe

    return (kind, SPLITS_DOC[kind],
            lambda r: params_b(ctx, r) <= 8.1 and r.batch <= fit_batch and dense(r),
            lambda r: params_b(ctx, r) >= 30.0 and lo <= r.batch <= hi and dense(r))  # fmt: skip


# how far each test reaches beyond its training data, in doublings (the distance a band is valid to)
REACH = {"prompt": math.log2(59500 / 7400), "tp": 1.0, "params": math.log2(70.6 / 1.72)}


def family_out(ctx: Context, runs: list[Run]) -> list[Figure]:
    return held_out(ctx, runs, key=HELD_OUT_KEYS["family"])


@dataclass
class PhysCalibration:
    runs: list[Run]
    skipped: list[Skip]
    fitted: Fitted
    splits: list[Split]
    in_sample: list[Figure]

    def split(self, kind: str) -> Split:
        return next(s for s in self.splits if s.kind == kind)

    def band(self, kind: str, vendor: str, metric: str, family: str = "") -> float:
        """80th percentile of |log error| of the kind's held-out figures of this vendor (or of `family`,
        where they span at least FAMILY_BAND_MIN models) and metric, as a relative half-width (inf when the
        test has no such figure). Requests/s and output tok/s are one throughput (a run's predicted and
        published ratio differ only by its realized output), so their figures are pooled: a source that
        publishes only tokens/s (the SDK tables) measures the requests/s band too."""
        same = THROUGHPUT if metric in THROUGHPUT else (metric,)
        figs = [f for f in self.split(kind).figures if VENDOR[f.run.family] == vendor and f.metric in same]
        own = [f for f in figs if f.run.family == family]
        sel = [f.log_error for f in (own if len({f.run.model for f in own}) >= FAMILY_BAND_MIN else figs)]
        if not sel:
            return float("inf")
        return _sig_up(math.expm1(float(np.quantile(sel, BAND_QUANTILE, method="higher"))), 3)


SPLITS_DOC = {
    "loso": "leave one source out",
    "lomo": "leave one model out (the band of a projection inside the fitted shapes)",
    "prompt": "fit on prompts <= 7.4K, test 14.8K-59.5K",
    "tp": "fit on TP <= 2, test TP 4",
    "params": "fit on models <= 1.7 B, test 7 B and up",
    "family": "fit without the chip family's stack, test it",
    "moe": "leave one MoE model out (fit on the other MoE model and every dense run)",
    "size_batch": "fit on dense models <= 8 B at batch <= 8, test dense 30 B and up at batch 32-64",
    "size_batch_shared": "fit on dense models <= 8 B at batch <= 2, test dense 30 B and up at batch 4-8",
    "gpu_table": "the GPU table fit (TensorRT-LLM rows; GPU encoders, and LLMs before issue 37) on the "
    "published H100 vLLM runs",
}
# the splits whose errors are bands (physics.toml [bands]); gpu_table measures the other time model
BAND_SPLITS = tuple(k for k in SPLITS_DOC if k != "gpu_table")


# --- summaries -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    figures: int
    median_abs: float
    signed_median: float
    coverage: float
    half_width: float


def summarize(cal: PhysCalibration, kind: str, family: str, metric: str) -> Summary | None:
    """Median |error|, signed median, coverage by the kind's band and the median band half-width."""
    sel = [f for f in cal.split(kind).figures if f.run.family == family and f.metric == metric]
    if not sel:
        return None
    band = cal.band(kind, VENDOR[family], metric, family)
    errs = [f.ratio - 1 for f in sel]
    cov = sum(f.log_error <= math.log1p(band) + 1e-12 for f in sel) / len(sel)
    return Summary(len(sel), float(np.median(np.abs(errs))), float(np.median(errs)), cov, band)


def long_prompt_errors(cal: PhysCalibration) -> dict[str, float]:
    """Trainium2, prompts 14.8K-59.5K, fitted without them: median |error| of TTFT and output tok/s."""
    out = {}
    for m in ("ttft_s", "out_tok_s"):
        sel = [
            abs(f.ratio - 1)
            for f in cal.split("prompt").figures
            if f.run.family == "Trainium2" and f.metric == m
        ]
        out[m] = float(np.median(sel)) if sel else float("nan")
    return out


# --- the shipped file ----------------------------------------------------------------------------------

PHYSICS_FILE = "physics.toml"


def physics_text(cal: PhysCalibration) -> str:
    lines = [
        "# Physical serving model: fitted parameters per chip family and the bands of each kind of",
        "# extrapolation. GENERATED by `chipswap calibrate` (make calibrate) from",
        "# ../shared/reference/neuron-benchmarks-modern/ and the Neuron SDK decoder tables; do not edit by",
        "# hand. The time model is",
        "# chipswap.projection.serving.physics; the fit chipswap.projection.fitting.physfit.",
        "schema = 1",
        f"runs = {len(cal.runs)}",
        f"skipped = {len(cal.skipped)}",
        f"sources = {_toml_list(sorted({r.source for r in cal.runs}))}",
        "# the kinds every figure's band is at least (physfit.BAND_KINDS; loso: leave one source out,",
        "# lomo: leave one model out)",
        f"band_kinds = {_toml_list(list(BAND_KINDS))}",
    ]
    for fam, p in sorted(cal.fitted.physics.items()):
        lines += ["", f'[families."{fam}"]']
        lines += [f"{k} = {v!r}" for k, v in p.values]
    gap = summarize(cal, "gpu_table", "H100", "out_tok_s")
    lines += [
        "",
        "[gpu]  # the GPU table fit (TensorRT-LLM rows) on the published H100 vLLM runs: median |error|",
        f"vllm_gap = {_sig(gap.median_abs, 3) if gap else 0.15!r}",
    ]
    for st, terms in sorted(cal.fitted.stacks.items()):
        lines += [
            "",
            f"[stacks.\"{st}\"]  # a stack's terms on its family's (multipliers; moe_dispatch_s: seconds)",
        ]
        lines += [f"{k} = {v!r}" for k, v in sorted(terms.items())]
    lines += ["", "[occupancy]"]
    lines += [f'"{k}" = {v!r}' for k, v in sorted(cal.fitted.occupancy.items())]
    groups = [(v, v, "") for v in ("neuron", "nvidia")] + [
        (f"{VENDOR[f]}.{f}", VENDOR[f], f) for f in sorted({r.family for r in cal.runs})
    ]
    for name, vendor, fam in groups:
        lines += [
            "",
            f"[bands.{name}]  # relative half-width: 80th percentile of the kind's held-out |log error|",
        ]
        for s in cal.splits:
            if s.kind not in BAND_SPLITS:
                continue
            vals = {m: cal.band(s.kind, vendor, m, fam) for m in METRICS}
            lines.append(
                f"{s.kind} = {{ "
                + ", ".join(f"{m} = {v!r}" for m, v in vals.items() if math.isfinite(v))
                + " }"
            )
    lines += ["", "[reach]  # doublings beyond the training data each extrapolation test reached"]
    lines += [f"{k} = {_sig(v, 3)!r}" for k, v in REACH.items()]
    env = _envelope(cal)
    lines += ["", "[envelope]  # ranges of the fitted runs, per vendor"]
    for vendor, rng in sorted(env.items()):
        fams = _toml_list(sorted({r.family for r in cal.runs if VENDOR[r.family] == vendor}))
        lines.append(
            f"{vendor} = {{ "
            + ", ".join(f"{k} = [{lo!r}, {hi!r}]" for k, (lo, hi) in rng.items())
            + f", families = {fams} }}"
        )
    return "\n".join(lines) + "\n"


def _toml_list(xs: list[str]) -> str:
    return "[" + ", ".join(f'"{x}"' for x in xs) + "]"


def _envelope(cal: PhysCalibration) -> dict[str, dict[str, tuple[float, float]]]:
    ctx_params = {m: round(run_work(m).params / 1e9, 3) for m in {r.model for r in cal.runs}}
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for vendor in sorted({VENDOR[r.family] for r in cal.runs}):
        sel = [r for r in cal.runs if VENDOR[r.family] == vendor]
        out[vendor] = {
            "prompt": (float(min(r.prompt for r in sel)), float(max(r.prompt for r in sel))),
            "tp": (float(min(r.tp for r in sel)), float(max(r.tp for r in sel))),
            "params": (min(ctx_params[r.model] for r in sel), max(ctx_params[r.model] for r in sel)),
            "batch": (float(min(r.batch for r in sel)), float(max(r.batch for r in sel))),
        }
    return out


def write_physics(cal: PhysCalibration, folder: str | Path | None = None) -> Path:
    from chipswap.atomic import atomic_write_text
    from chipswap.projection.platforms import shipped_dir

    path = Path(folder or shipped_dir()) / PHYSICS_FILE
    atomic_write_text(path, physics_text(cal))
    return path


def physics_differ(cal: PhysCalibration, folder: str | Path | None = None) -> bool:
    import tomllib

    from chipswap.projection.calibration import _same
    from chipswap.projection.platforms import shipped_dir

    path = Path(folder or shipped_dir()) / PHYSICS_FILE
    if not path.is_file():
        return True
    try:
        return not _same(tomllib.loads(path.read_text()), tomllib.loads(physics_text(cal)), 2e-3)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return True


def as_dict(cal: PhysCalibration) -> dict[str, Any]:
    return {
        "families": {k: dict(p.values) for k, p in cal.fitted.physics.items()},
        "occupancy": cal.fitted.occupancy,
    }
