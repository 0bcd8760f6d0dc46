"""Projection: the user's model on one instance -> the serving configuration, service times and predicted
throughput / latency with error bands; or training tokens/s per node and job hours.

What it is for: `chipswap project`, and the plan (through chipswap.projection.api, which loads the catalog
and the
platform files and calls these functions). Every figure is labelled `projected` with the relative band the
calibration measured on held-out published rows for that platform and metric.

Pure: no I/O, no torch, no clock. Takes a ModelWork (chipswap.projection.work), a PlatformModel
(chipswap.projection.platform) and a catalog Instance; never reads files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chipswap.economics.catalog import Instance
from chipswap.errors import ChipswapError
from chipswap.projection.platform import (
    Coefficients,
    DeviceSpec,
    EncoderPoly,
    LlmPoly,
    PlatformModel,
    encoder_poly,
    llm_poly,
    train_tokens_per_s_per_device,
)
from chipswap.projection.work import ModelWork, dtype_bytes
from chipswap.simulation.servicetime import ServingConfig

MODES = ("llm", "encoder")
DTYPE_CHOICES = ("bf16", "any")  # or one weight dtype the platform serves
TRAINING_BYTES_PER_PARAM = 16  # bf16 weights + bf16 grads + fp32 master copy + Adam moments (2+2+4+4+4)
MAX_LENGTH_LIMIT = 1 << 20  # longest prompt + output accepted (bounds every length-sized computation)
GiB = float(2**30)


@dataclass(frozen=True)
class Projected:
    """A predicted figure: value in `unit`, relative band (0.2 = the truth expected within value/1.2 ..
    value*1.2, from held-out calibration error), source "projected", and a note when it needs one."""

    value: float
    unit: str
    band: float
    source: str = "projected"
    note: str = ""

    @property
    def low(self) -> float:
        return self.value / (1.0 + self.band)

    @property
    def high(self) -> float:
        return self.value * (1.0 + self.band)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "value": self.value,
            "unit": self.unit,
            "source": self.source,
            "band": self.band,
            "low": self.low,
            "high": self.high,
        }
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class ProjectedServiceTimes:
    """ServiceTimes (chipswap.simulation.servicetime) of one replica from precomputed polynomials: each call
    is a
    few multiply-adds. LLM projections answer prefill/decode (and encoder_s = a prefill); encoder projections
    answer encoder_s (and prefill_s = an encoder call); an encoder has no decode step."""

    llm: LlmPoly | None
    enc: EncoderPoly | None
    band: float
    source: str = "projected"

    def prefill_s(self, batch: int, length: int) -> float:
        if self.llm is not None:
            return self.llm.prefill_s(batch, length)
        assert self.enc is not None
        return self.enc.encoder_s(batch, length)

    def decode_step_s(self, batch: int, context: int) -> float:
        if self.llm is None:
            raise ChipswapError("an encoder projection has no decode step; project the model in llm mode")
        return self.llm.decode_step_s(batch, context)

    def encoder_s(self, batch: int, length: int) -> float:
        if self.enc is not None:
            return self.enc.encoder_s(batch, length)
        assert self.llm is not None
        return self.llm.prefill_s(batch, length)


@dataclass(frozen=True)
class Shape:
    """A request shape the projection reports: prompt (and output) tokens, with a label (p50, mean, ...)."""

    label: str
    prompt: int
    output: int


@dataclass(frozen=True)
class Lengths:
    """The traffic's lengths as the projection needs them: the shapes to report, the mean shape that sets
    throughput, and the longest prompt + output a configuration must accept."""

    shapes: tuple[Shape, ...]
    mean_prompt: float
    mean_output: float
    max_total: int
    requests: int

    @staticmethod
    def of(
        prompt: int | Sequence[int] | np.ndarray, output: int | Sequence[int] | np.ndarray | None
    ) -> Lengths:
        p = np.atleast_1d(np.asarray(prompt, dtype=np.int64))
        o = np.zeros_like(p) if output is None else np.atleast_1d(np.asarray(output, dtype=np.int64))
        if p.size == 0:
            raise ChipswapError(
                "no request lengths given: []; pass prompt tokens (and output tokens) or a trace"
            )
        if o.size == 1 and p.size > 1:
            o = np.full_like(p, int(o[0]))
        if o.size != p.size:
            raise ChipswapError(
                f"prompt and output lengths differ in count: {p.size} vs {o.size}; give one output per prompt"
            )
        if int(p.min()) < 1 or int(o.min()) < 0:
            raise ChipswapError(
                f"lengths must be >= 1 (prompt) and >= 0 (output), got min {int(p.min())} / {int(o.min())}; "
                "fix the lengths"
            )
        total = int((p + o).max())
        if total > MAX_LENGTH_LIMIT:
            raise ChipswapError(
                f"longest request is {total:,} tokens, over the {MAX_LENGTH_LIMIT:,} chipswap projects; "
                "check the trace's length columns"
            )
        if p.size == 1:
            shapes: tuple[Shape, ...] = (Shape("given", int(p[0]), int(o[0])),)
        else:
            qs = (("p50", 50), ("p90", 90), ("p99", 99))
            shapes = (
                (Shape("mean", round(float(p.mean())), round(float(o.mean()))),)
                + tuple(
                    Shape(
                        lbl,
                        int(np.percentile(p, q, method="higher")),
                        int(np.percentile(o, q, method="higher")),
                    )
                    for lbl, q in qs
                )
                + (Shape("max", int(p.max()), int(o.max())),)
            )
        return Lengths(shapes, float(p.mean()), float(o.mean()), total, int(p.size))


def _pad(length: int, buckets: Sequence[int] | None, padded: bool) -> int:
    """The compiled length a request of `length` tokens runs at: the smallest bucket >= length on a padded
    platform (powers of two from 128 when no buckets are given), the length itself on a GPU."""
    if not padded:
        return length
    if buckets:
        for b in sorted(buckets):
            if b >= length:
                return int(b)
        return int(length)  # over the largest bucket: the caller's plan rejects it; compute it unpadded
    return max(128, 1 << max(0, (length - 1).bit_length()))


@dataclass(frozen=True)
class ShapePrediction:
    shape: Shape
    padded_prompt: int
    ttft: Projected  # batch-1 prefill of the (padded) prompt
    tpot: Projected  # one decode step at the configuration's batch, context prompt + output/2
    e2e: Projected  # ttft + output x tpot (no queueing)

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.shape.label,
            "prompt_tokens": self.shape.prompt,
            "output_tokens": self.shape.output,
            "padded_prompt_tokens": self.padded_prompt,
        } | _figures(self, {"ttft_s": "ttft", "tpot_s": "tpot", "e2e_s": "e2e"})


def _figures(obj: Any, names: dict[str, str]) -> dict[str, Any]:
    """{json key: figure.as_dict()} for the Projected attributes of a prediction record."""
    return {key: getattr(obj, attr).as_dict() for key, attr in names.items()}


@dataclass(frozen=True)
class BatchPrediction:
    """Steady state at one batch size and the mean request shape, for the whole instance."""

    batch: int
    tpot: Projected
    e2e: Projected
    requests_per_s: Projected
    output_tokens_per_s: Projected

    def as_dict(self) -> dict[str, Any]:
        return {"batch": self.batch} | _figures(
            self,
            {
                "tpot_s": "tpot",
                "e2e_s": "e2e",
                "requests_per_s": "requests_per_s",
                "output_tokens_per_s": "output_tokens_per_s",
            },
        )


@dataclass(frozen=True)
class BucketPrediction:
    """Encoder: one compiled length at one batch size, for the whole instance."""

    length: int
    batch: int
    latency: Projected
    inferences_per_s: Projected

    def as_dict(self) -> dict[str, Any]:
        return {"length": self.length, "batch": self.batch} | _figures(
            self, {"latency_s": "latency", "inferences_per_s": "inferences_per_s"}
        )


@dataclass(frozen=True)
class ServingProjection:
    """The answer for one model on one instance. `config` / `times` are None when nothing fits; `reason`
    then says why. `rejected` lists every configuration that lost and why; `notes` the assumptions."""

    model: str
    instance: str
    family: str
    mode: str
    config: ServingConfig | None
    times: ProjectedServiceTimes | None
    band: float
    bands: tuple[tuple[str, float], ...]
    requests_per_s: Projected | None
    output_tokens_per_s: Projected | None
    shapes: tuple[ShapePrediction, ...] = ()
    batches: tuple[BatchPrediction, ...] = ()
    buckets: tuple[BucketPrediction, ...] = ()
    rejected: tuple[tuple[str, str], ...] = ()
    reason: str = ""
    notes: tuple[str, ...] = ()
    stacks: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return self.config is not None

    def as_dict(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "model": self.model,
            "instance": self.instance,
            "family": self.family,
            "mode": self.mode,
            "fits": self.fits,
            "reason": self.reason or None,
            "config": None
            if cfg is None
            else {
                "tp_degree": cfg.tp_degree,
                "replicas": cfg.replicas,
                "max_batch": cfg.max_batch,
                "weight_dtype": cfg.weight_dtype,
                "max_length": cfg.max_length,
                "batch_sizes": list(cfg.batch_sizes),
                "padded": cfg.padded,
                "why": cfg.why,
            },
            "band": self.band,
            "bands": dict(self.bands),
            "requests_per_s": self.requests_per_s.as_dict() if self.requests_per_s else None,
            "output_tokens_per_s": self.output_tokens_per_s.as_dict() if self.output_tokens_per_s else None,
            "shapes": [s.as_dict() for s in self.shapes],
            "batches": [b.as_dict() for b in self.batches],
            "buckets": [b.as_dict() for b in self.buckets],
            "rejected": [{"config": c, "why": w} for c, w in self.rejected],
            "notes": list(self.notes),
            "calibrated_on": list(self.stacks),
        }


# --- the configuration search -------------------------------------------------------------------


def devices_of(instance: Instance) -> int:
    return instance.neuron_cores if instance.is_neuron else instance.accelerator_count


def tp_options(work: ModelWork, instance: Instance) -> list[int]:
    """The tensor-parallel degrees `work` can use on `instance`. Callers that size fleets for an SLO try each
    with `project_serving(..., tp=N)`: the highest-throughput layout may miss a latency objective."""
    return _tp_options(work, devices_of(instance))


def _tp_options(work: ModelWork, devices: int) -> list[int]:
    """TP degrees that split the attention heads evenly (KV heads split or replicated) within the
    instance's devices."""
    d = work.dims
    return [
        t for t in range(1, devices + 1) if d.heads % t == 0 and (d.kv_heads % t == 0 or t % d.kv_heads == 0)
    ]


def _reserve(platform: PlatformModel, device: DeviceSpec) -> float:
    return platform.reserve_bytes + platform.reserve_fraction * device.memory_bytes


def _gib(x: float) -> str:
    return f"{x / GiB:,.1f} GiB"


def _dtype_candidates(platform: PlatformModel, dtype: str, mode: str) -> tuple[list[str], list[str]]:
    """(dtypes that may be chosen, dtypes only shown as alternatives)."""
    served = [w for w, _ in platform.weight_dtypes if not (mode == "llm" and w == "fp32")]
    want = dtype.lower()
    if want == "any":
        return served, []
    if want == "bf16":
        sixteen = [w for w in served if w in ("bf16",)] or [w for w in served if w == "fp16"]
        return sixteen, [w for w in served if w not in ("bf16", "fp16", "fp32")]
    if want not in served:
        raise ChipswapError(
            f"dtype {dtype!r} is not served on {platform.family}; use one of {', '.join(served)}, bf16 or any"
        )
    return [want], []


def _coefficient_ok(platform: PlatformModel, coef: Coefficients, compute_dtype: str) -> str:
    """'' when the platform is calibrated for this compute dtype, else why not."""
    from chipswap.projection.platform import precision_class

    name = f"compute_eff_{precision_class(compute_dtype)}"
    if coef.get(name) is None:
        return (
            f"{compute_dtype} compute not calibrated on {platform.family} (no published {compute_dtype} rows)"
        )
    return ""


def _band(platform: PlatformModel, phase: str, metric: str, fallback: str | None = None) -> float:
    b = platform.band(phase, metric)
    if not b and fallback:
        b = platform.band(phase, fallback)
    return b


@dataclass(frozen=True)
class _Candidate:
    dtype: str
    compute: str
    tp: int
    replicas: int
    max_batch: int
    poly: LlmPoly
    rps: float
    label: str


def _steady_rps(poly: LlmPoly, batch: int, prompt: float, output: float, padded_prompt: int) -> float:
    """Requests/s of one replica at continuous batching: each request's batch-1 prefill plus its share of
    `output` decode steps at `batch` sequences in flight, context prompt + output/2."""
    context = int(prompt + output / 2)
    step = poly.decode_step_s(batch, context)
    per_request = poly.prefill_s(1, padded_prompt) + output * step / batch
    return 1.0 / per_request


def project_serving(
    work: ModelWork,
    platform: PlatformModel,
    instance: Instance,
    *,
    prompt_tokens: int | Sequence[int] | np.ndarray,
    output_tokens: int | Sequence[int] | np.ndarray | None = None,
    mode: str = "llm",
    dtype: str = "bf16",
    buckets: Sequence[int] | None = None,
    host_memory_note: bool = True,
    tp: int | None = None,
) -> ServingProjection:
    """Search the serving configurations of `work` on `instance` and predict the chosen one.

    mode "llm": prefill + decode (causal LM); "encoder": one forward per request. dtype "bf16" (16-bit
    only; 8-bit configurations are listed as alternatives), "any" (8-bit weights may win; labelled), or one
    weight dtype. buckets: the compiled prompt lengths on a padded (Neuron) platform; powers of two from 128
    when not given. tp: search only this tensor-parallel degree (llm mode; see `tp_options`). A model that
    fits no configuration returns a projection with `reason` set, not an error;
    a platform with no calibration for this mode raises ChipswapError naming what is missing."""
    if mode not in MODES:
        raise ChipswapError(f"unknown mode: {mode!r}; use llm or encoder")
    if mode == "llm" and work.kind != "decoder":
        raise ChipswapError(
            f"model {work.name} is an encoder; project it with mode encoder (llm needs a causal LM)"
        )
    lengths = Lengths.of(prompt_tokens, output_tokens if mode == "llm" else None)
    device = platform.device(instance.accelerator)
    if mode == "encoder":
        return _project_encoder(work, platform, instance, device, lengths, dtype, buckets)
    coef = platform.phase("llm")
    devices = devices_of(instance)
    chosen, alternatives = _dtype_candidates(platform, dtype, mode)
    rejected: list[tuple[str, str]] = []
    notes: list[str] = []
    d = work.dims
    if d.max_positions and lengths.max_total > d.max_positions:
        reason = (
            f"the traffic's longest request is {lengths.max_total:,} tokens but {work.name} accepts "
            f"{d.max_positions:,} positions"
        )
        return _empty(work, platform, instance, mode, reason, [("all", reason)], notes)
    tps = _tp_options(work, devices)
    if tp is not None:
        if tp not in tps:
            reason = (
                f"TP{tp} is not a valid layout of {work.name} on {instance.name}: it must divide the "
                f"{d.heads} attention heads and {d.kv_heads} KV heads and fit {devices} devices "
                f"(valid: {', '.join(f'TP{t}' for t in tps) or 'none'})"
            )
            return _empty(work, platform, instance, mode, reason, [(f"TP{tp}", reason)], notes)
        tps = [tp]
    if not tps:
        reason = f"no TP degree <= {devices} divides the {d.heads} attention heads and {d.kv_heads} KV heads"
        return _empty(work, platform, instance, mode, reason, [("all", reason)], notes)
    for t in (2, 4, 8, 16, 24, 32, 64):
        if tp is None and t <= devices and t not in tps:
            rejected.append(
                (f"TP{t}", f"{t} does not split the {d.heads} attention heads / {d.kv_heads} KV heads evenly")
            )
    mean_pad = _pad(int(round(lengths.mean_prompt)), buckets, platform.padded)
    candidates: list[_Candidate] = []
    alt_candidates: list[_Candidate] = []
    reserve = _reserve(platform, device)
    for wdt in chosen + alternatives:
        compute = platform.compute_dtype_for(wdt)
        label_dt = f"{wdt}" if wdt == compute else f"{wdt} weights / {compute} matmuls"
        if device.peak(compute) is None:
            rejected.append((label_dt, f"no published {compute} peak for {device.chip}"))
            continue
        why_not = _coefficient_ok(platform, coef, compute)
        if why_not:
            rejected.append((label_dt, why_not))
            continue
        kv_dtype = "fp8" if compute == "fp8" else "bf16"
        for tp in tps:
            label = f"TP{tp} x {devices // tp} replicas, {label_dt}"
            weights = work.weight_bytes(wdt) / tp
            per_seq = work.kv_bytes_per_token(kv_dtype, tp) * lengths.max_total
            free = device.memory_bytes - weights - reserve
            if free < per_seq:
                rejected.append(
                    (
                        label,
                        f"memory: weights {_gib(weights)} + KV cache of one {lengths.max_total:,}-token "
                        f"request {_gib(per_seq)} + runtime reserve {_gib(reserve)} > "
                        f"{_gib(device.memory_bytes)} per "
                        f"{platform.device_unit}",
                    )
                )
                continue
            max_batch = int(min(platform.max_batch, free // per_seq))
            poly = llm_poly(
                work,
                device,
                coef,
                tp=tp,
                weight_dtype=wdt,
                compute_dtype=compute,
                kv_dtype=kv_dtype,
                family=platform.family,
            )
            rps = (devices // tp) * _steady_rps(
                poly, max_batch, lengths.mean_prompt, lengths.mean_output, mean_pad
            )
            cand = _Candidate(wdt, compute, tp, devices // tp, max_batch, poly, rps, label)
            (candidates if wdt in chosen else alt_candidates).append(cand)
    if not candidates:
        reason = _no_fit_reason(rejected, work, instance, chosen, alt_candidates)
        return _empty(work, platform, instance, mode, reason, rejected, notes)
    best = max(candidates, key=lambda c: (c.rps, -c.tp))
    for c in candidates:
        if c is not best:
            rejected.append(
                (c.label, f"lower throughput: {c.rps:,.2f} vs {best.rps:,.2f} requests/s per instance")
            )
    for c in alt_candidates:
        rejected.append(
            (
                c.label,
                f"quantized weights ({c.dtype}; accuracy must be checked), not chosen under dtype={dtype!r}: "
                f"{c.rps:,.2f} requests/s per instance; pass dtype 'any' to allow",
            )
        )
    if host_memory_note:
        ckpt = work.weight_bytes("bf16")
        if ckpt > float(instance.memory_gib) * GiB * 0.9:
            notes.append(
                f"needs pre-sharded weights: the bf16 checkpoint ({_gib(ckpt)}) is larger than the host RAM "
                f"({float(instance.memory_gib):,.0f} GiB); load per-device shards instead of the whole "
                "checkpoint"
            )
    if best.dtype != "bf16":
        notes.append(f"weights in {best.dtype}: a quantized model; check its accuracy before relying on it")
    if platform.padded and not buckets:
        notes.append(
            "prompts padded to powers of two from 128 (the NxDI default); pass the buckets from "
            "`chipswap shapes` for your plan"
        )
    if platform.calibrated_batch and best.max_batch > platform.calibrated_batch:
        notes.append(
            f"batch {best.max_batch} is beyond the largest batch in {platform.family}'s calibration rows "
            f"({platform.calibrated_batch}): decode times there are extrapolated"
        )
    if instance.is_neuron and best.tp not in (24, 32):
        notes.append(
            f"TP{best.tp}: the published Neuron decoder rows are all TP24/TP32; the per-layer overhead is "
            "extrapolated to this degree"
        )
    return _llm_result(work, platform, instance, lengths, best, buckets, rejected, notes, coef)


def _no_fit_reason(
    rejected: list[tuple[str, str]],
    work: ModelWork,
    instance: Instance,
    chosen: list[str],
    alts: list[_Candidate],
) -> str:
    need = work.weight_bytes(chosen[0] if chosen else "bf16")
    have = float(instance.accelerator_memory_gib) * GiB
    text = (
        f"{work.name} does not fit {instance.name} in {', '.join(chosen) or 'any served dtype'}: "
        f"weights alone are {_gib(need)} against {_gib(have)} of accelerator memory"
        if need > have
        else f"{work.name} fits no configuration of {instance.name} in {', '.join(chosen) or 'any dtype'} "
        "(see the rejected configurations)"
    )
    if alts:
        best = max(alts, key=lambda c: c.rps)
        text += f"; it would fit with {best.dtype} weights ({best.label}), a quantized model"
    return text


def _empty(
    work: ModelWork,
    platform: PlatformModel,
    instance: Instance,
    mode: str,
    reason: str,
    rejected: list[tuple[str, str]],
    notes: list[str],
) -> ServingProjection:
    return ServingProjection(
        model=work.name,
        instance=instance.name,
        family=platform.family,
        mode=mode,
        config=None,
        times=None,
        band=0.0,
        bands=(),
        requests_per_s=None,
        output_tokens_per_s=None,
        rejected=tuple(rejected),
        reason=reason,
        notes=tuple(notes),
    )


def _llm_bands(platform: PlatformModel) -> dict[str, float]:
    thr = _band(platform, "llm", "out_tok_s")
    tpot = _band(platform, "llm", "tpot_s") or thr
    ttft = _band(platform, "llm", "ttft_s") or thr
    return {"out_tok_s": thr, "tpot_s": tpot, "ttft_s": ttft, "e2e_s": max(tpot, ttft)}


def _llm_result(
    work: ModelWork,
    platform: PlatformModel,
    instance: Instance,
    lengths: Lengths,
    best: _Candidate,
    buckets: Sequence[int] | None,
    rejected: list[tuple[str, str]],
    notes: list[str],
    coef: Coefficients,
) -> ServingProjection:
    bands = _llm_bands(platform)
    poly = best.poly
    shapes = []
    for s in lengths.shapes:
        padded = _pad(s.prompt, buckets, platform.padded)
        ttft = poly.prefill_s(1, padded)
        tpot = poly.decode_step_s(best.max_batch, s.prompt + s.output // 2)
        shapes.append(
            ShapePrediction(
                s,
                padded,
                Projected(ttft, "s", bands["ttft_s"]),
                Projected(tpot, "s", bands["tpot_s"], note=f"at batch {best.max_batch}"),
                Projected(
                    ttft + s.output * tpot,
                    "s",
                    bands["e2e_s"],
                    note=f"at batch {best.max_batch}, no queueing",
                ),
            )
        )
    mean_pad = _pad(int(round(lengths.mean_prompt)), buckets, platform.padded)
    batches = []
    b = 1
    sizes = []
    while b < best.max_batch:
        sizes.append(b)
        b *= 2
    sizes.append(best.max_batch)
    for b in sizes:
        rps = best.replicas * _steady_rps(poly, b, lengths.mean_prompt, lengths.mean_output, mean_pad)
        tpot = poly.decode_step_s(b, int(lengths.mean_prompt + lengths.mean_output / 2))
        batches.append(
            BatchPrediction(
                b,
                Projected(tpot, "s", bands["tpot_s"]),
                Projected(poly.prefill_s(1, mean_pad) + lengths.mean_output * tpot, "s", bands["e2e_s"]),
                Projected(rps, "requests/s", bands["out_tok_s"]),
                Projected(rps * lengths.mean_output, "tokens/s", bands["out_tok_s"]),
            )
        )
    why = (
        f"highest throughput at the traffic's mean request ({lengths.mean_prompt:,.0f} prompt + "
        f"{lengths.mean_output:,.0f} output tokens) among {len(rejected) + 1} configurations"
    )
    config = ServingConfig(
        instance=instance.name,
        tp_degree=best.tp,
        replicas=best.replicas,
        max_batch=best.max_batch,
        weight_dtype=best.dtype,
        max_length=lengths.max_total,
        padded=platform.padded,
        why=why,
        rejected=tuple(rejected),
    )
    band = max(bands["out_tok_s"], bands["tpot_s"])
    return ServingProjection(
        model=work.name,
        instance=instance.name,
        family=platform.family,
        mode="llm",
        config=config,
        times=ProjectedServiceTimes(poly, None, band),
        band=band,
        bands=tuple(sorted(bands.items())),
        requests_per_s=Projected(
            best.rps, "requests/s", bands["out_tok_s"], note=f"whole instance, batch {best.max_batch}"
        ),
        output_tokens_per_s=Projected(best.rps * lengths.mean_output, "tokens/s", bands["out_tok_s"]),
        shapes=tuple(shapes),
        batches=tuple(batches),
        rejected=tuple(rejected),
        notes=tuple(notes),
        stacks=coef.stacks,
    )


def _encoder_coefficients(platform: PlatformModel) -> tuple[Coefficients, str, float]:
    """The encoder coefficients, or (on a platform with only LLM rows) its prefill calibration, with a
    note."""
    if platform.has_phase("encoder"):
        return platform.phase("encoder"), "", _band(platform, "encoder", "enc_per_s")
    if platform.has_phase("llm"):
        return (
            platform.phase("llm"),
            f"no published encoder rows for {platform.family}: the encoder forward is projected with its "
            "LLM prefill calibration (same matmuls and attention, bidirectional)",
            _band(platform, "llm", "ttft_s"),
        )
    platform.phase("encoder")  # raises the "no calibration" error
    raise AssertionError("unreachable")


def _project_encoder(
    work: ModelWork,
    platform: PlatformModel,
    instance: Instance,
    device: DeviceSpec,
    lengths: Lengths,
    dtype: str,
    buckets: Sequence[int] | None,
) -> ServingProjection:
    coef, coef_note, band = _encoder_coefficients(platform)
    devices = devices_of(instance)
    chosen, _alts = _dtype_candidates(platform, dtype, "encoder")
    rejected: list[tuple[str, str]] = []
    notes: list[str] = [coef_note] if coef_note else []
    reserve = _reserve(platform, device)
    lens = sorted({_pad(s.prompt, buckets, platform.padded) for s in lengths.shapes})
    if buckets:
        lens = sorted({int(b) for b in buckets})
    longest = max(lens)
    best: tuple[float, str, str, int, int, int, Any] | None = None
    for wdt in chosen:
        compute = platform.compute_dtype_for(wdt)
        if device.peak(compute) is None:
            rejected.append((wdt, f"no published {compute} peak for {device.chip}"))
            continue
        for tp in [t for t in _tp_options(work, devices) if t in (1, 2, 4, 8)]:
            weights = work.weight_bytes(wdt) / tp
            act_per_seq = (
                4.0 * longest * work.dims.hidden * 4 / tp + work.dims.heads * longest * longest * 2.0 / tp
            )
            free = device.memory_bytes - weights - reserve
            label = f"TP{tp} x {devices // tp} copies, {wdt}"
            if free < act_per_seq:
                rejected.append(
                    (
                        label,
                        f"memory: weights {_gib(weights)} + reserve {_gib(reserve)} leave no room "
                        f"for one {longest}-token sequence in {_gib(device.memory_bytes)}",
                    )
                )
                continue
            max_batch = int(min(platform.max_batch, free // act_per_seq))
            if coef.phase == "encoder":
                poly: Any = encoder_poly(
                    work, device, coef, tp=tp, weight_dtype=wdt, compute_dtype=compute, family=platform.family
                )
            else:
                poly = llm_poly(
                    work, device, coef, tp=tp, weight_dtype=wdt, compute_dtype=compute, family=platform.family
                )
            call = poly.encoder_s if coef.phase == "encoder" else poly.prefill_s
            per_s = (devices // tp) * max_batch / call(max_batch, longest)
            if best is None or per_s > best[0]:
                if best is not None:
                    rejected.append(
                        (best[1], f"lower throughput: {best[0]:,.1f} vs {per_s:,.1f} inferences/s")
                    )
                best = (per_s, label, wdt, tp, devices // tp, max_batch, poly)
            else:
                rejected.append((label, f"lower throughput: {per_s:,.1f} vs {best[0]:,.1f} inferences/s"))
            if tp == 1:
                break  # one copy per device fits: larger TP only adds collectives
    if best is None:
        reason = (
            f"{work.name} fits no encoder configuration of {instance.name} (see the rejected configurations)"
        )
        return _empty(work, platform, instance, "encoder", reason, rejected, notes)
    per_s, label, wdt, tp, copies, max_batch, poly = best
    enc = poly if isinstance(poly, EncoderPoly) else None
    llm = poly if isinstance(poly, LlmPoly) else None
    call = enc.encoder_s if enc is not None else llm.prefill_s  # type: ignore[union-attr]
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64, 128) if b < max_batch] + [max_batch]
    bucket_preds = tuple(
        BucketPrediction(
            n, b, Projected(call(b, n), "s", band), Projected(copies * b / call(b, n), "inferences/s", band)
        )
        for n in lens
        for b in sizes
    )
    mean_len = _pad(int(round(lengths.mean_prompt)), buckets, platform.padded)
    rps = copies * max_batch / call(max_batch, mean_len)
    config = ServingConfig(
        instance=instance.name,
        tp_degree=tp,
        replicas=copies,
        max_batch=max_batch,
        weight_dtype=wdt,
        max_length=longest,
        batch_sizes=tuple(sizes) if platform.padded else (),
        padded=platform.padded,
        why=(
            f"highest inferences/s at the longest compiled length ({longest}) among the configurations "
            "that fit"
        ),
        rejected=tuple(rejected),
    )
    if platform.padded and not buckets:
        notes.append("lengths padded to powers of two from 128; pass the buckets from `chipswap shapes`")
    return ServingProjection(
        model=work.name,
        instance=instance.name,
        family=platform.family,
        mode="encoder",
        config=config,
        times=ProjectedServiceTimes(llm, enc, band),
        band=band,
        bands=(("enc_per_s", band), ("enc_latency_s", band)),
        requests_per_s=Projected(
            rps, "inferences/s", band, note=f"whole instance, batch {max_batch}, mean length"
        ),
        output_tokens_per_s=None,
        buckets=bucket_preds,
        rejected=tuple(rejected),
        notes=tuple(notes),
        stacks=coef.stacks,
    )


# --- training -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingProjection:
    """Training throughput of one node (instance) and the hours a job of `tokens` takes on `nodes` of them."""

    model: str
    instance: str
    family: str
    dtype: str
    seq_len: int
    tokens: float
    nodes: int
    tokens_per_s_per_node: Projected
    hours: Projected
    state_bytes: float
    fits_one_node: bool
    nodes_for_memory: int
    notes: tuple[str, ...] = field(default=())
    stacks: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "instance": self.instance,
            "family": self.family,
            "dtype": self.dtype,
            "seq_len": self.seq_len,
            "tokens": self.tokens,
            "nodes": self.nodes,
            "tokens_per_s_per_node": self.tokens_per_s_per_node.as_dict(),
            "hours": self.hours.as_dict(),
            "training_state_gib": self.state_bytes / GiB,
            "fits_one_node": self.fits_one_node,
            "nodes_for_memory": self.nodes_for_memory,
            "notes": list(self.notes),
            "calibrated_on": list(self.stacks),
        }


def project_training(
    work: ModelWork,
    platform: PlatformModel,
    instance: Instance,
    *,
    tokens: float,
    seq_len: int = 4096,
    dtype: str | None = None,
    nodes: int = 1,
) -> TrainingProjection:
    """Tokens/s per node (instance) at the platform's fitted training utilisation and the hours for `tokens`
    trained tokens on `nodes` nodes (throughput scales linearly with nodes: an assumption, stated)."""
    if not (tokens > 0 and math.isfinite(tokens)):
        raise ChipswapError(f"training tokens must be a positive number, got {tokens!r}; give tokens per run")
    if not 1 <= seq_len <= MAX_LENGTH_LIMIT:
        raise ChipswapError(
            f"sequence length {seq_len} is outside 1..{MAX_LENGTH_LIMIT}; give the training length"
        )
    if not 1 <= nodes <= 100_000:
        raise ChipswapError(f"nodes must be 1..100000, got {nodes}")
    if not platform.training_dtypes:
        raise ChipswapError(
            f"no training calibration for {platform.family}: chipswap has no published training rows "
            "for this "
            "chip family; give a measured figure (hours or tokens/s) for this instance instead"
        )
    coef = platform.phase("training")
    use = (dtype or platform.training_dtypes[0]).lower()
    if use not in platform.training_dtypes:
        raise ChipswapError(
            f"no {use} training calibration for {platform.family}: its published training rows are "
            f"{', '.join(platform.training_dtypes)}; use dtype {platform.training_dtypes[0]} or give a "
            "measured figure"
        )
    device = platform.device(instance.accelerator)
    per_device = train_tokens_per_s_per_device(
        work, device, coef, seq_len=seq_len, compute_dtype=use, family=platform.family
    )
    devices = devices_of(instance)
    per_node = per_device * devices
    band = _band(platform, "training", "train_tok_s")
    state = work.params * TRAINING_BYTES_PER_PARAM
    usable = float(instance.accelerator_memory_gib) * GiB * (1.0 - platform.reserve_fraction)
    need_nodes = max(1, math.ceil(state / usable))
    notes = []
    if use == "fp8":
        notes.append("fp8 training (as in the published NVIDIA rows); a bf16 run is slower")
    if need_nodes > 1:
        notes.append(
            f"full training state ({_gib(state)}: bf16 weights and grads, fp32 master and Adam "
            f"moments) needs >= {need_nodes} nodes' accelerator memory; per-node throughput assumes a "
            "multi-node run like the "
            "published ones"
        )
    if nodes > 1:
        notes.append(f"{nodes} nodes: throughput assumed to scale linearly (assumption)")
    if seq_len < 1024 and work.kind == "decoder":
        notes.append("short sequences: the published decoder rows train at 2,048-8,192 tokens")
    hours = tokens / (per_node * nodes) / 3600.0
    return TrainingProjection(
        model=work.name,
        instance=instance.name,
        family=platform.family,
        dtype=use,
        seq_len=seq_len,
        tokens=float(tokens),
        nodes=nodes,
        tokens_per_s_per_node=Projected(
            per_node, "tokens/s", band, note=f"{devices} {platform.device_unit}s, {use}"
        ),
        hours=Projected(hours, "h", band),
        state_bytes=state,
        fits_one_node=need_nodes <= 1,
        nodes_for_memory=need_nodes,
        notes=tuple(notes),
        stacks=coef.stacks,
    )


def weight_summary(work: ModelWork, dtype: str = "bf16") -> dict[str, float]:
    """Parameters and memory figures for reports."""
    return {
        "params": float(work.params),
        "weights_gib": work.params * dtype_bytes(dtype) / GiB,
        "kv_bytes_per_token": work.kv_bytes_per_token_total("bf16"),
    }
