"""Fit platform coefficients on published benchmark rows, and measure the error on rows held out of the fit.

What it is for: `chipswap calibrate` (chipswap.projection.calibration) reads the published tables into
`BenchRow`s and
calls `fit_group` for each fit group and phase; the validation functions here re-fit without a model (or a
platform, or a GPU) and predict what was left out, which is where every error band comes from. Predictions go
through chipswap.projection.platform, the same functions the projection uses.

The fit: least squares on log(predicted / published) over every published metric of every row, with a soft-L1
loss (a few anomalous published rows cannot drag the fit) and efficiencies bounded to (0, 1]. Deterministic:
same rows in, same coefficients out (up to floating-point noise, hence the rounding in `round_sig`).

Pure computation (numpy + scipy): no files, no clock, no torch. May not read the reference tables itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chipswap.errors import ChipswapError
from chipswap.projection.platform import (
    Coefficients,
    DeviceSpec,
    encoder_poly,
    llm_poly,
    roofline_encoder_s,
    roofline_llm_poly,
)
from chipswap.projection.work import GiB, ModelWork

# the metrics a published row can carry, with their unit
METRICS = {
    "out_tok_s": "output tokens/s (whole replica)",
    "ttft_s": "time to first token, s",
    "tpot_s": "time per output token, s",
    "enc_per_s": "encoder inferences/s (instance)",
    "enc_latency_s": "encoder call latency, s",
}
SIGNIFICANT = 4  # shipped coefficients are rounded to this many significant digits


@dataclass(frozen=True)
class BenchRow:
    """One published benchmark row, normalised. Built by chipswap.projection.calibration from the reference
    tables.

    phase: "llm" or "encoder". scenario: "static" (fixed batch), "ifb" (in-flight batching,
    the runtime picks the batch: batch == 0), "latency" (batch-1 first token), "data-parallel" (encoder, one
    copy per device). tp: devices per replica. replicas: copies whose throughputs the published
    figure adds up. observed: (metric, value) pairs in METRICS units."""

    row_id: str
    source: str
    stack: str
    family: str
    chip: str
    instance: str
    model: str
    phase: str
    scenario: str
    weight_dtype: str
    compute_dtype: str
    kv_dtype: str
    tp: int
    replicas: int
    batch: int
    input_len: int
    output_len: int
    observed: tuple[tuple[str, float], ...]
    notes: str = ""

    def value(self, metric: str) -> float | None:
        return dict(self.observed).get(metric)


@dataclass(frozen=True)
class FitRules:
    """Benchmark-side settings the published rows imply but do not print (stated assumptions).

    ifb_memory_fraction: share of the memory left after weights that in-flight-batching runs give the KV
    cache (TensorRT-LLM's kv_cache_free_gpu_mem_fraction, 0.95 per the page). ifb_max_batch: the largest
    batch such a run schedules (not published; an assumption). reserve_bytes: memory per device not
    available to weights or KV (runtime, activations)."""

    ifb_memory_fraction: float = 0.95
    ifb_max_batch: int = 2048
    reserve_bytes: float = 2.0 * GiB


def ifb_batch(row: BenchRow, work: ModelWork, device: DeviceSpec, rules: FitRules) -> int:
    """The batch an in-flight-batching run holds: KV memory left after the weights / KV of one sequence."""
    free = device.memory_bytes - rules.reserve_bytes - work.weight_bytes(row.weight_dtype) / row.tp
    per_seq = work.kv_bytes_per_token(row.kv_dtype, row.tp) * (row.input_len + row.output_len)
    if free <= 0 or per_seq <= 0:
        return 1
    return max(1, min(rules.ifb_max_batch, int(rules.ifb_memory_fraction * free // per_seq)))


def _row_layout(row: BenchRow, *, kv: bool = True) -> dict[str, Any]:
    """A published row's tensor-parallel degree and dtypes, as the time models take them."""
    out: dict[str, Any] = {"tp": row.tp, "weight_dtype": row.weight_dtype, "compute_dtype": row.compute_dtype}
    if kv:
        out["kv_dtype"] = row.kv_dtype
    return out


def predict_row(
    row: BenchRow, work: ModelWork, device: DeviceSpec, coef: Coefficients, rules: FitRules
) -> dict[str, float]:
    """The model's value of every metric the row publishes, with `coef` (the same `_times` the fit's
    design is built from, so a fitted prediction and a design prediction cannot disagree)."""
    return {
        metric: (scale / t if inverse else t)
        for metric, (t, scale, inverse) in _times(row, work, device, coef, rules).items()
        if row.value(metric) is not None
    }


def baseline_row(row: BenchRow, work: ModelWork, device: DeviceSpec, rules: FitRules) -> dict[str, float]:
    """The uncalibrated spec-sheet roofline's value of every metric the row publishes (no fitted numbers)."""
    out: dict[str, float] = {}
    if row.phase == "llm":
        comp, mem = roofline_llm_poly(work, device, **_row_layout(row))
        batch = row.batch or ifb_batch(row, work, device, rules)
        prefill = max(comp.prefill_s(batch, row.input_len), mem.prefill_s(batch, row.input_len))
        context = row.input_len + row.output_len // 2
        step = max(comp.decode_step_s(batch, context), mem.decode_step_s(batch, context))
        out = {
            "ttft_s": prefill,
            "tpot_s": step,
            "out_tok_s": batch * row.output_len / (prefill + row.output_len * step) * row.replicas,
        }
    elif row.phase == "encoder":
        t = roofline_encoder_s(work, device, row.batch, row.input_len, weight_dtype=row.weight_dtype)
        out = {"enc_latency_s": t, "enc_per_s": row.replicas * row.batch / t}
    return {m: v for m, v in out.items() if row.value(m) is not None}


# --- fitting ------------------------------------------------------------------------------------

# Every prediction is linear in theta: the fixed times themselves and 1 / every efficiency (see
# chipswap.projection.platform: each term is a work quantity over a rate x an efficiency, or a fixed time).
# So the fit evaluates the core time functions once per row with one coefficient "on" (theta_j = 1) and the
# rest "off" (time 0, efficiency infinite), and a residual evaluation is then one matrix-vector product.

TIME_COEFFICIENTS = ("fixed_s", "prefill_layer_s", "decode_layer_s", "encoder_fixed_s", "encoder_layer_s")
# bounds on theta: times in seconds; efficiencies in [1e-4, 1] so theta = 1/eff in [1, 1e4];
# host_gb_s in [0.01, 1000] GB/s, theta = 1/host_gb_s
_THETA_BOUNDS: dict[str, tuple[float, float, float]] = {
    "fixed_s": (1e-3, 1e-9, 10.0),
    "prefill_layer_s": (1e-4, 1e-9, 1.0),
    "decode_layer_s": (1e-4, 1e-9, 1.0),
    "encoder_fixed_s": (1e-4, 1e-9, 1.0),
    "encoder_layer_s": (1e-5, 1e-9, 1.0),
    "host_gb_s": (0.2, 1e-3, 100.0),
}
_EFF_THETA = (3.0, 1.0, 1e4)


def _theta_bounds(name: str) -> tuple[float, float, float]:
    return _THETA_BOUNDS.get(name, _EFF_THETA)


def _value_of_theta(name: str, theta: float) -> float:
    return theta if name in TIME_COEFFICIENTS else 1.0 / theta


def _basis(phase: str, names: Sequence[str], on: int) -> Coefficients:
    vals = []
    for j, n in enumerate(names):
        if n in TIME_COEFFICIENTS:
            vals.append((n, 1.0 if j == on else 0.0))
        else:
            vals.append((n, 1.0 if j == on else math.inf))
    return Coefficients(phase, tuple(vals))


def round_sig(x: float, digits: int = SIGNIFICANT) -> float:
    """x rounded to `digits` significant digits (what the platform files store)."""
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits - 1}e}")


@dataclass(frozen=True)
class Problem:
    """What one fit needs: the rows, each row's work and device, the benchmark rules."""

    rows: tuple[BenchRow, ...]
    works: dict[str, ModelWork] = field(hash=False, compare=False)
    devices: dict[str, DeviceSpec] = field(hash=False, compare=False)
    rules: FitRules = FitRules()

    def subset(self, keep: Callable[[BenchRow], bool]) -> Problem:
        return Problem(tuple(r for r in self.rows if keep(r)), self.works, self.devices, self.rules)


@dataclass(frozen=True)
class Design:
    """One line per (row, published metric): value = M @ theta (a time) or c / (M @ theta) (a rate)."""

    rows: tuple[BenchRow, ...]
    metrics: tuple[str, ...]
    matrix: np.ndarray  # (n, k)
    scale: np.ndarray  # c for rates
    inverse: np.ndarray  # True where value = c / (M @ theta)
    observed: np.ndarray

    def predict(self, theta: np.ndarray) -> np.ndarray:
        t = self.matrix @ theta
        return np.where(self.inverse, self.scale / t, t)


def _times(
    row: BenchRow, work: ModelWork, device: DeviceSpec, coef: Coefficients, rules: FitRules
) -> dict[str, tuple[float, float, bool]]:
    """(time-like quantity, scale, inverse) per metric: the metric is the time, or scale / time."""
    if row.phase == "llm":
        poly = llm_poly(work, device, coef, **_row_layout(row), family=row.family)
        batch = row.batch or ifb_batch(row, work, device, rules)
        prefill = poly.prefill_s(batch, row.input_len)
        step = poly.decode_step_s(batch, row.input_len + row.output_len // 2)
        return {
            "ttft_s": (prefill, 1.0, False),
            "tpot_s": (step, 1.0, False),
            "out_tok_s": (prefill + row.output_len * step, batch * row.output_len * row.replicas, True),
        }
    if row.phase == "encoder":
        epoly = encoder_poly(work, device, coef, **_row_layout(row, kv=False), family=row.family)
        t = epoly.encoder_s(row.batch, row.input_len)
        return {"enc_latency_s": (t, 1.0, False), "enc_per_s": (t, float(row.replicas * row.batch), True)}
    return {}


def design(problem: Problem, phase: str, names: Sequence[str]) -> Design:
    """The design of every published metric of every `phase` row of `problem` over the coefficients
    `names`."""
    rows: list[BenchRow] = []
    metrics: list[str] = []
    lines: list[list[float]] = []
    scales: list[float] = []
    inverse: list[bool] = []
    observed: list[float] = []
    bases = [_basis(phase, names, j) for j in range(len(names))]
    for row in problem.rows:
        if row.phase != phase:
            continue
        work = problem.works[row.model]
        device = problem.devices[row.chip]
        per_basis = [_times(row, work, device, b, problem.rules) for b in bases]
        for metric, value in row.observed:
            if metric not in per_basis[0]:
                continue
            rows.append(row)
            metrics.append(metric)
            lines.append([pb[metric][0] for pb in per_basis])
            scales.append(per_basis[0][metric][1])
            inverse.append(per_basis[0][metric][2])
            observed.append(value)
    return Design(
        tuple(rows),
        tuple(metrics),
        np.array(lines, dtype=float).reshape(len(lines), len(names)),
        np.array(scales),
        np.array(inverse, dtype=bool),
        np.array(observed),
    )


def _pairs(
    problem: Problem, coef: Coefficients, *, baseline: bool = False
) -> list[tuple[BenchRow, str, float, float]]:
    """(row, metric, predicted, published) for every published metric of every row, through predict_row."""
    out = []
    for row in problem.rows:
        work = problem.works[row.model]
        device = problem.devices[row.chip]
        pred = (
            baseline_row(row, work, device, problem.rules)
            if baseline
            else predict_row(row, work, device, coef, problem.rules)
        )
        for metric, value in row.observed:
            if metric in pred:
                out.append((row, metric, pred[metric], value))
    return out


def _solve(dz: Design, names: Sequence[str]) -> np.ndarray:
    from scipy.optimize import least_squares

    bounds = [_theta_bounds(n) for n in names]
    x0 = np.log([b[0] for b in bounds])
    lo = np.log([b[1] for b in bounds])
    hi = np.log([b[2] for b in bounds])
    log_obs = np.log(dz.observed)

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(dz.predict(np.exp(x))) - log_obs

    res = least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, max_nfev=5000)
    return np.exp(res.x)


def fit_group(
    problem: Problem, phase: str, free: Sequence[str], group: str = "", *, dz: Design | None = None
) -> Coefficients:
    """Least-squares fit of the `free` coefficients of `phase` on every row of `problem` of that phase."""
    names = list(free)
    dz = dz if dz is not None else design(problem, phase, names)
    if not len(dz.rows):
        raise ChipswapError(f"no published {phase} rows to fit group {group!r} on; nothing to calibrate")
    theta = _solve(dz, names)
    values = tuple((n, round_sig(_value_of_theta(n, float(t)))) for n, t in zip(names, theta, strict=True))
    rounded = Coefficients(phase, values, group)
    rows = tuple(dict.fromkeys(dz.rows))
    sub = Problem(rows, problem.works, problem.devices, problem.rules)
    errors = [abs(p / o - 1) for _, _, p, o in _pairs(sub, rounded)]
    return Coefficients(
        phase=phase,
        values=values,
        group=group,
        rows=tuple(r.row_id for r in rows),
        stacks=tuple(sorted({r.stack for r in rows})),
        fit_error=round_sig(float(np.median(errors)), 3) if errors else 0.0,
    )


# --- validation ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeldOut:
    """One published metric predicted by coefficients fitted without its row's model / platform."""

    row: BenchRow
    metric: str
    predicted: float
    published: float
    baseline: float
    left_out: str  # what was held out when predicting this row (model, architecture, platform)

    @property
    def error(self) -> float:
        return abs(self.predicted / self.published - 1)

    @property
    def log_error(self) -> float:
        return abs(math.log(self.predicted / self.published))

    @property
    def baseline_error(self) -> float:
        return abs(self.baseline / self.published - 1)


def held_out(
    problem: Problem,
    phase: str,
    free: Sequence[str],
    key: Callable[[BenchRow], str],
    *,
    group: str = "",
    unpredictable: list[tuple[str, str]] | None = None,
) -> list[HeldOut]:
    """For each value k of `key`, fit on the rows whose key is not k and predict the rows whose key is k.
    Nothing about a held-out row reaches its fit: the design lines of the fold's rows are dropped.

    A held-out row that needs a coefficient no remaining row informs (e.g. the only GPU with FP4 rows held
    out) cannot be predicted from the others; it is left out of the result and listed in `unpredictable`
    as (row id, why) instead of being scored against a coefficient that was never fitted."""
    names = list(free)
    full = design(problem, phase, names)
    keys = np.array([key(r) for r in full.rows])
    out: list[HeldOut] = []
    for k in sorted(set(keys.tolist())):
        train = keys != k
        if not train.any():
            continue
        part = Design(
            tuple(r for r, t in zip(full.rows, train, strict=True) if t),
            tuple(m for m, t in zip(full.metrics, train, strict=True) if t),
            full.matrix[train],
            full.scale[train],
            full.inverse[train],
            full.observed[train],
        )
        coef = fit_group(problem, phase, names, group, dz=part)
        informed = (part.matrix != 0).any(axis=0)
        blind: set[int] = set()
        for i in np.flatnonzero(~train):
            missing = [n for j, n in enumerate(names) if full.matrix[i, j] != 0 and not informed[j]]
            if missing:
                blind.add(id(full.rows[i]))
                if unpredictable is not None:
                    unpredictable.append(
                        (full.rows[i].row_id, f"no row left to fit {', '.join(missing)} when {k} is held out")
                    )
        test_rows = tuple(
            dict.fromkeys(r for r, t in zip(full.rows, train, strict=True) if not t and id(r) not in blind)
        )
        test = Problem(test_rows, problem.works, problem.devices, problem.rules)
        base = {(id(r), m): p for r, m, p, _ in _pairs(test, coef, baseline=True)}
        for r, m, p, o in _pairs(test, coef):
            out.append(HeldOut(r, m, p, o, base[(id(r), m)], k))
    return out


def in_sample(problem: Problem, coef: Coefficients) -> list[HeldOut]:
    """Predictions of the rows the coefficients were fitted on (for the in-sample column of the tables)."""
    sub = problem.subset(lambda r: r.phase == coef.phase)
    base = {(id(r), m): p for r, m, p, _ in _pairs(sub, coef, baseline=True)}
    return [HeldOut(r, m, p, o, base[(id(r), m)], "") for r, m, p, o in _pairs(sub, coef)]


def median_error(
    items: Iterable[HeldOut], metric: str | None = None, *, baseline: bool = False
) -> float | None:
    errs = [h.baseline_error if baseline else h.error for h in items if metric is None or h.metric == metric]
    return float(np.median(errs)) if errs else None


def band_of(items: Iterable[HeldOut], metric: str | None = None, quantile: float = 0.8) -> float | None:
    """Relative half-width covering `quantile` of the held-out rows: exp(q-quantile of |ln(pred/pub)|) - 1."""
    logs = [h.log_error for h in items if metric is None or h.metric == metric]
    if not logs:
        return None
    return round_sig(float(math.exp(np.quantile(logs, quantile)) - 1), 3)


def architecture_key(works: dict[str, ModelWork]) -> Callable[[BenchRow], str]:
    """Rows of models with the same layer sizes (e.g. Llama-2-13B and CodeLlama-13B) share a key, so a
    leave-one-architecture-out split cannot learn a model from its twin."""

    def sizes(model: str) -> tuple[int, ...]:
        d = works[model].dims
        return (d.hidden, d.layers, d.heads, d.kv_heads, d.intermediate)

    names: dict[tuple[int, ...], str] = {}
    for m in sorted(works):
        names.setdefault(sizes(m), m)
    return lambda row: names[sizes(row.model)]
