"""Serving-stack calibration: fit the NxD Inference stacks (nxdi-vllm, nxdi-tgi) on the published modern
Neuron
serving runs, measure every figure leave-one-source-out, fit the envelope widening rule, and write
src/chipswap/data/platforms/stacks.toml.

What it is for: `chipswap calibrate` / `make calibrate` (after the chip families' fit, whose hardware
efficiencies these stack terms sit on), bench/bench_stacks.py and tests/test_stack_calibration.py. Reads only
../shared/reference/neuron-benchmarks-modern/llm_serving.csv (or a folder given), the shipped presets, catalog
and platform files; writes only stacks.toml (atomically), and only when asked to.

The fit (see chipswap.projection.stackmodel for the time model): the stack terms enter the time of a
synchronous
run's TTFT and TPOT linearly, so they are a non-negative least-squares fit of (published - hardware time) on
those rows, weighted by 1 / published (relative error). slot_occupancy is then the median, over the stack's
throughput runs, of the occupancy that reproduces the published requests/s. Poisson-load ("asynchronous")
runs measure the offered rate and queueing, not capacity: they are left out, with that reason.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from chipswap.datafile import read_text
from chipswap.errors import ChipswapError
from chipswap.projection.platform import Coefficients, DeviceSpec
from chipswap.projection.stackmodel import (
    DIMENSIONS,
    Envelope,
    StackTerms,
    loaded_tpot,
    stack_poly,
    steady_rps,
)
from chipswap.projection.work import ModelWork

DEFAULT_REFERENCE = Path("../shared/reference")
MODERN = "neuron-benchmarks-modern/llm_serving.csv"
STACKS_FILE = "stacks.toml"
HARDWARE_FAMILY = "Inferentia2"  # the family whose hardware efficiencies (neuron-v2 fit) the stacks sit on
FIT_STACKS = ("nxdi-vllm", "nxdi-tgi")
SHARED_TERMS = (
    "step_fixed_s",
    "step_layer_s",
    "step_layer_tp_s",
    "step_row_s",
    "cpu_sample_s_per_logit",
    "prefill_fixed_s",
    "prefill_layer_s",
)
PER_STACK_TERMS: tuple[str, ...] = ()
METRICS = ("requests_per_s", "out_tok_s", "ttft_s", "tpot_s")
BAND_QUANTILE = 0.8
# the targets of issue 20, leave-one-source-out median |predicted/published - 1|
TARGETS = {"requests_per_s": 0.20, "out_tok_s": 0.20, "ttft_s": 0.25, "tpot_s": 0.20}
COVERAGE_TARGET = 0.80
# the published model names -> shipped presets (same layer sizes)
MODELS = {
    "meta-llama-3.1-8b-instruct": "llama-3.1-8b",
    "llama-3.1-8b-instruct": "llama-3.1-8b",
    "deepseek-r1-distill-llama-70b (llama-3.3-70b architecture)": "llama-3.3-70b",
    "qwen3-32b": "qwen3-32b",
}
INSTANCES = {"inf2.48xlarge": "inf2.48xlarge", "trn2 (size not stated)": "trn2.48xlarge"}


@dataclass(frozen=True)
class ServingRow:
    """One published serving run, normalised. output: the realized mean output length (published output
    tok/s / requests/s; the runs asked for 250 and stopped early). replicas: copies behind the balancer."""

    row_id: str
    source: str
    source_url: str
    as_of: str
    stack: str
    chip: str
    instance: str
    model: str
    tp: int
    batch: int
    replicas: int
    sampling: str
    scenario: str  # "sync" or "throughput"
    prompt: int
    output: float
    observed: tuple[tuple[str, float], ...]

    def value(self, metric: str) -> float | None:
        return dict(self.observed).get(metric)


@dataclass(frozen=True)
class Skipped:
    row_id: str
    reason: str


def _stack_of(framework: str) -> str:
    return "nxdi-tgi" if "TGI" in framework else "nxdi-vllm"


def read_rows(reference: str | Path | None = None) -> tuple[list[ServingRow], list[Skipped]]:
    """The usable rows of llm_serving.csv and the skipped ones with their reason."""
    path = Path(reference or DEFAULT_REFERENCE) / MODERN
    if not path.is_file():
        raise ChipswapError(
            f"modern Neuron serving table not found: {path}; run from the repository root or pass "
            "--reference DIR"
        )
    text = read_text(path, "benchmark table", max_bytes=4 * 1024 * 1024)
    rows: list[ServingRow] = []
    skipped: list[Skipped] = []
    for i, r in enumerate(csv.DictReader(text.splitlines())):
        rid = f"llm_serving.csv:{i + 2}"
        scen = r["scenario"]
        if "asynchronous" in scen:
            skipped.append(
                Skipped(rid, "Poisson-load run: measures the offered rate and queueing, not capacity")
            )
            continue
        model = MODELS.get(r["model"].strip().lower())
        inst = INSTANCES.get(r["instance_type"].strip())
        if model is None or inst is None:
            skipped.append(Skipped(rid, f"model {r['model']!r} / instance {r['instance_type']!r} not mapped"))
            continue
        rps = float(r["requests_per_s"])
        tok = float(r["output_tok_s_total"])
        notes = r["notes"]
        replicas = 3 if ("3 replicas" in r["framework"] or "DP=3" in notes) else 1
        observed = [("requests_per_s", rps), ("out_tok_s", tok), ("tpot_s", float(r["tpot_ms_mean"]) / 1e3)]
        sync = "synchronous" in scen
        if sync:
            observed.append(("ttft_s", float(r["ttft_ms_mean"]) / 1e3))
        rows.append(
            ServingRow(
                row_id=rid,
                source=r["source_id"],
                source_url=f"{r['source_url_or_repo_path']} @ {r['source_commit_or_version']}",
                as_of=r["as_of"],
                stack=_stack_of(r["framework"]),
                chip=r["accelerator"],
                instance=inst,
                model=model,
                tp=int(r["tp"]),
                batch=int(r["batch_size"]),
                replicas=replicas,
                sampling="cpu" if "CPU sampling" in notes else "device",
                scenario="sync" if sync else "throughput",
                prompt=int(r["input_len"]),
                output=tok / rps,
                observed=tuple(observed),
            )
        )
    return rows, skipped


@dataclass
class Context:
    """Works, devices and the hardware coefficients the stack terms sit on."""

    works: dict[str, ModelWork]
    devices: dict[str, DeviceSpec]
    hardware: Coefficients
    hardware_family: str = HARDWARE_FAMILY


def load_context(rows: list[ServingRow]) -> Context:
    from chipswap.economics.catalog_io import load_catalog
    from chipswap.projection.api import model_work
    from chipswap.projection.platforms import platform_for, platform_for_instance

    cat = load_catalog()
    works = {m: model_work(m) for m in sorted({r.model for r in rows})}
    devices = {}
    for r in rows:
        if r.chip not in devices:
            devices[r.chip] = platform_for_instance(cat.instance(r.instance), cat).device(r.chip)
    return Context(works, devices, platform_for(HARDWARE_FAMILY, cat).phase("llm"))


def padded(prompt: int) -> int:
    return max(128, 1 << max(0, (prompt - 1).bit_length()))


def _poly(ctx: Context, row: ServingRow, terms: StackTerms) -> Any:
    return stack_poly(
        ctx.works[row.model], ctx.devices[row.chip], ctx.hardware, terms, tp=row.tp, weight_dtype="bf16",
        compute_dtype="bf16", sampling=row.sampling, family=ctx.hardware_family,
    )  # fmt: skip


def predict(ctx: Context, row: ServingRow, terms: StackTerms) -> dict[str, float]:
    """Every metric the row publishes, predicted with `terms` (the projection's own functions)."""
    poly = _poly(ctx, row, terms)
    pad = padded(row.prompt)
    context = int(row.prompt + row.output / 2)
    ttft = poly.prefill_s(1, pad)
    step = poly.decode_step_s(row.batch, context)
    if row.scenario == "sync":
        rps = 1.0 / (ttft + (row.output - 1) * step)
        out = {"ttft_s": ttft, "tpot_s": step, "requests_per_s": rps}
    else:
        per_replica = steady_rps(poly, row.batch, row.prompt, row.output, pad, terms.get("slot_occupancy"))
        rps = row.replicas * per_replica
        out = {"requests_per_s": rps, "tpot_s": loaded_tpot(poly, row.batch, context, per_replica, pad)}
    out["out_tok_s"] = out["requests_per_s"] * row.output
    return {m: v for m, v in out.items() if row.value(m) is not None}


def _zero(stack: str) -> StackTerms:
    return StackTerms(stack, ())


def fit(ctx: Context, rows: list[ServingRow]) -> dict[str, StackTerms]:
    """Stack terms of every stack in FIT_STACKS from `rows` (a stack without rows gets the shared terms and
    the pooled per-stack terms of the others)."""
    from scipy.optimize import nnls

    stacks = [s for s in FIT_STACKS if any(r.stack == s for r in rows)]
    names = list(SHARED_TERMS) + [f"{t}@{s}" for s in stacks for t in PER_STACK_TERMS]
    lines: list[list[float]] = []
    target: list[float] = []
    for row in rows:
        if row.scenario != "sync":
            continue
        base = predict(ctx, row, _zero(row.stack))
        for metric in ("ttft_s", "tpot_s"):
            obs = row.value(metric)
            if obs is None:
                continue
            line = []
            for n in names:
                term, _, st = n.partition("@")
                if st and st != row.stack:
                    line.append(0.0)
                    continue
                one = predict(ctx, row, StackTerms(row.stack, ((term, 1e-3),)))
                line.append((one[metric] - base[metric]) / 1e-3 / obs)
            lines.append(line)
            target.append((obs - base[metric]) / obs)
    theta = nnls(np.array(lines), np.array(target))[0] if lines else np.zeros(len(names))
    values = dict(zip(names, (float(t) for t in theta), strict=True))
    out: dict[str, StackTerms] = {}
    for s in FIT_STACKS:
        own: dict[str, float] = {}
        for t in PER_STACK_TERMS:
            v = values.get(f"{t}@{s}")
            if v is None:  # no rows of this stack: the mean of the fitted stacks
                v = float(np.mean([values[f"{t}@{o}"] for o in stacks])) if stacks else 0.0
            own[t] = v
        vals = {t: values[t] for t in SHARED_TERMS} | own
        out[s] = StackTerms(s, tuple((k, _sig(v)) for k, v in vals.items()))
    occ = {s: _occupancy(ctx, [r for r in rows if r.stack == s], out[s]) for s in FIT_STACKS}
    pooled = [o for o in occ.values() if o is not None]
    for s in FIT_STACKS:
        found = occ[s]
        o = found if found is not None else (float(np.median(pooled)) if pooled else 1.0)
        out[s] = replace(out[s], values=out[s].values + (("slot_occupancy", _sig(min(1.0, o))),))
    return out


def _occupancy(ctx: Context, rows: list[ServingRow], terms: StackTerms) -> float | None:
    """Median occupancy of the compiled slots that reproduces the published throughput runs."""
    found = []
    for row in rows:
        if row.scenario != "throughput":
            continue
        poly = _poly(ctx, row, terms)
        pad = padded(row.prompt)
        step = poly.decode_step_s(row.batch, int(row.prompt + row.output / 2))
        spare = row.replicas / row.value("requests_per_s") - poly.prefill_s(1, pad)  # type: ignore[operator]
        if spare > 0:
            found.append(row.output * step / (row.batch * spare))
    return float(np.median(found)) if found else None


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits - 1}e}") if x else 0.0


def envelope_of(ctx: Context, rows: list[ServingRow]) -> Envelope:
    if not rows:
        return Envelope()
    vals: dict[str, list[float]] = {
        "tp": [r.tp for r in rows],
        "batch": [r.batch for r in rows],
        "prompt": [r.prompt for r in rows],
        "params": [ctx.works[r.model].params / 1e9 for r in rows],
    }
    return Envelope(
        tuple((d, min(vals[d]), max(vals[d])) for d, _ in DIMENSIONS),
        tuple(sorted({r.chip for r in rows})),
        tuple(sorted({r.sampling for r in rows})),
    )


@dataclass(frozen=True)
class HeldOutFigure:
    """One published figure predicted without its fold; distance / why: how far outside the fold's envelope
    the row lies, and in which dimensions."""

    row: ServingRow
    metric: str
    predicted: float
    published: float
    distance: float
    why: tuple[str, ...]

    @property
    def ratio(self) -> float:
        return self.predicted / self.published

    @property
    def error(self) -> float:
        """|predicted / published - 1|"""
        return abs(self.ratio - 1)

    @property
    def log_error(self) -> float:
        return abs(math.log(self.ratio))


def held_out(
    ctx: Context, rows: list[ServingRow], key: Callable[[ServingRow], str] = lambda r: r.source
) -> list[HeldOutFigure]:
    """Every figure of every row predicted by terms fitted without its fold (default: its source)."""
    out = []
    for fold in sorted({key(r) for r in rows}):
        train = [r for r in rows if key(r) != fold]
        terms = fit(ctx, train)
        env = envelope_of(ctx, train)  # the terms are shared by the NxD Inference stacks
        for row in (r for r in rows if key(r) == fold):
            d, why = _distance(ctx, row, env, train)
            for metric, pred in predict(ctx, row, terms[row.stack]).items():
                out.append(HeldOutFigure(row, metric, pred, row.value(metric), d, why))  # type: ignore[arg-type]
    return out


def _distance(
    ctx: Context, row: ServingRow, env: Envelope, train: list[ServingRow]
) -> tuple[float, tuple[str, ...]]:
    d, why = env.distance(
        tp=row.tp, batch=row.batch, prompt=row.prompt, params=ctx.works[row.model].params, chip=row.chip,
        sampling=row.sampling,
    )  # fmt: skip
    if not any(r.stack == row.stack for r in train):
        d += 1.0
        why = (*why, f"no {row.stack} rows in the fit")
    return d, why


def bands_and_widen(items: list[HeldOutFigure]) -> tuple[dict[str, float], float]:
    """Base band per metric (80th percentile of |ln(pred/pub)| of held-out figures inside their fold's
    envelope; all figures where a metric has none inside) and the widening per unit of envelope distance that
    brings 80 % of the figures outside it inside their band."""
    bands: dict[str, float] = {}
    for m in METRICS:
        sel = [h for h in items if h.metric == m]
        inside = [h.log_error for h in sel if h.distance == 0] or [h.log_error for h in sel]
        if inside:
            q = float(np.quantile(inside, BAND_QUANTILE, method="higher"))
            bands[m] = _sig(math.expm1(q) * 1.001, 3)
    need = sorted(
        max(0.0, h.log_error - math.log1p(bands[h.metric])) / h.distance for h in items if h.distance > 0
    )
    widen = _sig(float(np.quantile(need, BAND_QUANTILE, method="higher")), 3) if need else 0.0
    # the rule's one parameter is raised until the held-out figures as a whole are covered 80 % of the time
    for w in [widen, *need]:
        if w >= widen and sum(covered(h, bands, w) for h in items) >= COVERAGE_TARGET * len(items):
            return bands, _sig(w * 1.001, 3)
    return bands, widen


def covered(h: HeldOutFigure, bands: dict[str, float], widen: float) -> bool:
    return h.log_error <= math.log1p(bands[h.metric]) + widen * h.distance + 1e-12


@dataclass
class StackCalibration:
    rows: list[ServingRow]
    skipped: list[Skipped]
    terms: dict[str, StackTerms]
    held: list[HeldOutFigure]
    fitted: list[HeldOutFigure] = field(default_factory=list)

    def median(
        self, metric: str, *, stack: str | None = None, items: list[HeldOutFigure] | None = None
    ) -> float:
        sel = [h.error for h in (items or self.held) if h.metric == metric and (stack in (None, h.row.stack))]
        return float(np.median(sel)) if sel else float("nan")

    def coverage(self, *, stack: str | None = None) -> float:
        t = next(iter(self.terms.values()))
        bands, widen = dict(t.bands), t.widen
        sel = [h for h in self.held if stack in (None, h.row.stack)]
        return sum(covered(h, bands, widen) for h in sel) / len(sel) if sel else float("nan")


def calibrate_stacks(reference: str | Path | None = None) -> StackCalibration:
    rows, skipped = read_rows(reference)
    ctx = load_context(rows)
    terms = fit(ctx, rows)
    held = held_out(ctx, rows)
    bands, widen = bands_and_widen(held)
    final = {}
    for s, t in terms.items():  # the terms are shared: every source calibrates both stacks
        own = [r for r in rows if r.stack == s]
        final[s] = replace(
            t,
            envelope=envelope_of(ctx, rows),
            bands=tuple(sorted(bands.items())),
            widen=widen,
            rows=tuple(r.row_id for r in own),
            sources=tuple(
                sorted({f"{r.source} ({r.as_of}) {r.source_url.split(' @ ')[-1][:10]}" for r in rows})
            ),
        )
    fitted = []
    for row in rows:
        for metric, pred in predict(ctx, row, final[row.stack]).items():
            fitted.append(HeldOutFigure(row, metric, pred, row.value(metric), 0.0, ()))  # type: ignore[arg-type]
    return StackCalibration(rows, skipped, final, held, fitted)


def _toml(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(v)


def stacks_text(cal: StackCalibration) -> str:
    lines = [
        "# Serving-stack terms of the NxD Inference stacks. GENERATED by `chipswap calibrate`",
        "# (make calibrate) from ../shared/reference/neuron-benchmarks-modern/llm_serving.csv; do not",
        "# edit by hand. The time model is chipswap.projection.stackmodel; the hardware terms come from the",
        "# Inferentia2 (neuron-v2) fit.",
        "schema = 1",
        f"hardware_family = {_toml(HARDWARE_FAMILY)}",
        f"rows = {len(cal.rows)}",
        f"skipped = {len(cal.skipped)}",
    ]
    for s, t in sorted(cal.terms.items()):
        lines += [
            "",
            f'[stacks."{s}"]',
            f"rows = {_toml(list(t.rows))}",
            f"sources = {_toml(list(t.sources))}",
        ]
        fit_err = {m: cal.median(m, stack=s, items=cal.fitted) for m in METRICS}
        lines.append(
            "fit_error = { " + ", ".join(f"{m} = {_sig(v, 3)!r}" for m, v in fit_err.items() if v == v) + " }"
        )
        lines.append(f"widen = {t.widen!r}  # log-band added per unit of envelope distance")
        lines.append(f'[stacks."{s}".terms]')
        lines += [f"{k} = {v!r}" for k, v in t.values]
        lines.append(
            f'[stacks."{s}".bands]  # base relative half-width inside the envelope, leave-one-source-out'
        )
        lines += [f"{k} = {v!r}" for k, v in t.bands]
        lines.append(f'[stacks."{s}".envelope]')
        lines += [f"{d} = [{lo!r}, {hi!r}]" for d, lo, hi in t.envelope.ranges]
        lines.append(f"chips = {_toml(list(t.envelope.chips))}")
        lines.append(f"sampling = {_toml(list(t.envelope.sampling))}")
    return "\n".join(lines) + "\n"


def write_stacks(cal: StackCalibration, folder: str | Path | None = None) -> Path:
    from chipswap.atomic import atomic_write_text
    from chipswap.projection.platforms import shipped_dir

    path = Path(folder or shipped_dir()) / STACKS_FILE
    atomic_write_text(path, stacks_text(cal))
    return path


def stacks_differ(cal: StackCalibration, folder: str | Path | None = None) -> bool:
    import tomllib

    from chipswap.projection.calibration import _same
    from chipswap.projection.platforms import shipped_dir

    path = Path(folder or shipped_dir()) / STACKS_FILE
    if not path.is_file():
        return True
    try:
        return not _same(tomllib.loads(path.read_text()), tomllib.loads(stacks_text(cal)), 2e-3)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return True
