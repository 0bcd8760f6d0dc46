"""Projection: the user's model on one instance -> the serving configuration, service times and predicted
throughput / latency with error bands. (Training projections: chipswap.projection.training.)

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
from dataclasses import replace
from typing import Any

import numpy as np

from chipswap.economics.catalog import Instance
from chipswap.errors import ChipswapError
from chipswap.projection.layouts import (
    Layout,
    Pin,
    StackContext,
    batch_options,
    best_of,
    evaluate,
    tp_degrees,
)
from chipswap.projection.platform import (
    Coefficients,
    DeviceSpec,
    PlatformModel,
)
from chipswap.projection.projected import (  # noqa: F401  (re-exported: callers import them from here)
    MAX_LENGTH_LIMIT,
    BatchPrediction,
    BucketPrediction,
    Lengths,
    Projected,
    ProjectedServiceTimes,
    ServingProjection,
    Shape,
    ShapePrediction,
    _figures,
    _pad,
)
from chipswap.projection.search_common import (
    _band,
    _dtype_candidates,
    _empty,
    _gib,
    _reserve,
    _tp_options,
    devices_of,
)
from chipswap.projection.serving.coverage import OUTSIDE
from chipswap.projection.serving.physics import Schedule, replica_rps
from chipswap.projection.work import (
    GiB,
    ModelWork,
    decode_weight_params,
    dtype_bytes,
    expected_experts_touched,
)
from chipswap.simulation.servicetime import (
    ServingConfig,
    charged_context,
    decode_steps,
    load_mix,
    positions_held,
)

MODES = ("llm", "encoder")
DTYPE_CHOICES = ("bf16", "any")  # or one weight dtype the platform serves


# --- the configuration search -------------------------------------------------------------------


def tp_options(work: ModelWork, instance: Instance, platform: PlatformModel | None = None) -> list[int]:
    """The tensor-parallel degrees `work` can use on `instance`. Callers that size fleets for an SLO try each
    with `project_serving(..., tp=N)`: the highest-throughput layout may miss a latency objective. With the
    platform, Neuron degrees whose heads are padded are included and logical NeuronCores counted."""
    if platform is None:
        return _tp_options(work, devices_of(instance))
    per_chip = platform.devices[0].devices_per_chip if instance.is_neuron else 0
    return tp_degrees(work, devices_of(instance, per_chip), platform.padded)


def _coefficient_ok(platform: PlatformModel, coef: Coefficients, compute_dtype: str) -> str:
    """'' when the platform is calibrated for this compute dtype, else why not."""
    from chipswap.projection.platform import precision_class

    name = f"compute_eff_{precision_class(compute_dtype)}"
    if coef.get(name) is None:
        return (
            f"{compute_dtype} compute not calibrated on {platform.family} (no published {compute_dtype} rows)"
        )
    return ""


# stacks with published fp8 dense serving runs in the physical fit (TensorRT-LLM 0.9, 0.15 and 1.0 FP8
# on H100, H200 and L40S; chipswap.projection.fitting.rows)
FP8_STACKS = frozenset({"trtllm"})


def _physics_ok(ctx: StackContext, compute_dtype: str) -> str:
    """'' when the physical model is calibrated for this compute dtype under the stack (16-bit everywhere;
    fp8 only where its dense runs were published), else why not."""
    if compute_dtype in ("bf16", "fp16") or (compute_dtype == "fp8" and ctx.stack in FP8_STACKS):
        return ""
    hint = "; TensorRT-LLM's are: --stack trtllm" if ctx.stack == "vllm" and compute_dtype == "fp8" else ""
    return (
        f"{compute_dtype} compute not calibrated under {ctx.stack} (no published {compute_dtype} dense "
        f"serving runs{hint})"
    )


def _lnc_combos(
    work: ModelWork, platform: PlatformModel, instance: Instance, device: DeviceSpec, devices: int,
    tps: list[int], ctx: StackContext, pin: Pin,
) -> list[tuple[int, DeviceSpec, int, int]]:  # fmt: skip
    """(lnc, device, devices, TP) to search. Trainium2 under the physical model is sold at LNC=2 (a logical
    core = two physical cores, 4 per chip) and LNC=1 (8 per chip): TP is counted in logical cores."""
    if platform.family != "Trainium2" or ctx.physics is None:
        return [(0, device, devices, t) for t in tps]
    out = [(2, device, devices, t) for t in tps]
    half = replace(
        device, peak_flops=tuple((k, v / 2) for k, v in device.peak_flops),
        hbm_bytes_s=device.hbm_bytes_s / 2,
        memory_bytes=device.memory_bytes / 2, devices_per_chip=device.devices_per_chip * 2,
    )  # fmt: skip
    many = devices * 2
    lnc1 = tp_degrees(work, many, platform.padded)
    if pin.tp is not None:
        lnc1 = [t for t in lnc1 if t == pin.tp]
    return out + [(1, half, many, t) for t in lnc1]


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
    decode_buckets: Sequence[int] | None = None,
    host_memory_note: bool = True,
    tp: int | None = None,
    replicas: int | None = None,
    batch: int | None = None,
    stack: StackContext | None = None,
) -> ServingProjection:
    """Search the serving configurations of `work` on `instance` and predict the chosen one.

    mode "llm": prefill + decode (causal LM); "encoder": one forward per request. dtype "bf16" (16-bit
    only; 8-bit configurations are listed as alternatives), "any" (8-bit weights may win; labelled), or one
    weight dtype. buckets: the compiled prompt lengths on a padded (Neuron) platform; powers of two from 128
    when not given; decode_buckets: the compiled decode contexts (default: buckets), at whose bucket a decode
    step is charged (chipswap.simulation.servicetime.charged_context, the simulator's rule).
    tp / replicas / batch: pin the layout (llm mode; see `tp_options`); stack: the serving
    stack assumed (chipswap.projection.layouts.StackContext; default: the family's own calibration). A model
    that
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
        from chipswap.projection.predict_encoder import project_encoder

        return project_encoder(work, platform, instance, device, lengths, dtype, buckets)
    ctx = stack or StackContext()
    pin = Pin(tp, replicas, batch)
    if ctx.physics is not None:  # the physical model: no table-fit coefficients
        coef = Coefficients(
            "llm", (), group="physics", stacks=(f"{ctx.stack}: physics.toml ({ctx.physics.family})",)
        )
    else:
        coef = ctx.hardware if ctx.hardware is not None else platform.phase("llm")
    devices = devices_of(instance, device.devices_per_chip)
    chosen, alternatives = _dtype_candidates(platform, dtype, mode)
    rejected: list[tuple[str, str]] = []
    notes: list[str] = [ctx.note] if ctx.note else []
    d = work.dims
    if d.max_positions and lengths.max_total > d.max_positions:
        reason = (
            f"the traffic's longest request holds {lengths.max_total:,} positions (prompt + output - 1: the "
            f"last token is never fed back) but {work.name} accepts {d.max_positions:,} positions"
        )
        return _empty(work, platform, instance, mode, reason, [("all", reason)], notes)
    tps = tp_degrees(work, devices, platform.padded)
    if pin.tp is not None:
        if pin.tp not in tps:
            rule = (
                "fit"
                if platform.padded
                else f"divide the {d.heads} attention heads / {d.kv_heads} KV heads and fit"
            )
            reason = (
                f"TP{pin.tp} is not a valid layout of {work.name} on {instance.name}: it must {rule} "
                f"{devices} devices (valid: {', '.join(f'TP{t}' for t in tps) or 'none'})"
            )
            return _empty(work, platform, instance, mode, reason, [(f"TP{pin.tp}", reason)], notes)
        tps = [pin.tp]
    if not tps:
        reason = f"no TP degree <= {devices} divides the {d.heads} attention heads and {d.kv_heads} KV heads"
        return _empty(work, platform, instance, mode, reason, [("all", reason)], notes)
    for t in (2, 4, 8, 16, 24, 32, 64):
        if pin.tp is None and t <= devices and t not in tps:
            rejected.append(
                (f"TP{t}", f"{t} does not split the {d.heads} attention heads / {d.kv_heads} KV heads evenly")
            )
    mean_pad = _pad(int(round(lengths.mean_prompt)), buckets, platform.padded)
    decode_ctx = _decode_context(lengths, decode_buckets or buckets, platform.padded, buckets)
    candidates: list[Layout] = []
    alt_candidates: list[Layout] = []
    pbands = _llm_bands(platform)
    combos = _lnc_combos(work, platform, instance, device, devices, tps, ctx, pin)
    for wdt in chosen + alternatives:
        compute = platform.compute_dtype_for(wdt)
        label_dt = f"{wdt}" if wdt == compute else f"{wdt} weights / {compute} matmuls"
        if device.peak(compute) is None:
            rejected.append((label_dt, f"no published {compute} peak for {device.chip}"))
            continue
        why_not = (
            _physics_ok(ctx, compute) if ctx.physics is not None else _coefficient_ok(platform, coef, compute)
        )
        if why_not:
            rejected.append((label_dt, why_not))
            continue
        kv_dtype = "fp8" if compute == "fp8" else "bf16"
        for lnc, device, devices, t in combos:
            reserve = _reserve(platform, device)
            most = devices // t
            reps = most if pin.replicas is None else pin.replicas
            label = f"TP{t} x {reps} replicas, {label_dt}" + (f", LNC={lnc}" if lnc else "")
            if reps > most:
                rejected.append(
                    (label, f"{reps} replicas x TP{t} need {reps * t} devices; {instance.name} has {devices}")
                )
                continue
            weights = work.weight_bytes(wdt) / t
            per_seq = work.kv_cache_bytes(lengths.max_total, kv_dtype, t)  # windows hold their last W
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
            memory_batch = int(free // per_seq)
            for b in batch_options(platform, memory_batch, pin):
                lab = f"{label}, batch {b}"
                if b > memory_batch:
                    rejected.append(
                        (
                            lab,
                            f"memory: {b} sequences of {lengths.max_total:,} tokens need "
                            f"{_gib(b * per_seq)} of KV cache; {_gib(free)} is left per "
                            f"{platform.device_unit}",
                        )
                    )
                    continue
                lay = evaluate(
                    work, platform, instance, device, coef, ctx, dtype=wdt, compute=compute, tp=t,
                    replicas=reps, batch=b, mean_prompt=lengths.mean_prompt, mean_output=lengths.mean_output,
                    mean_pad=mean_pad, platform_bands=pbands, label=lab, lnc=lnc, decode_ctx=decode_ctx,
                )  # fmt: skip
                # KV-cache capacity of one replica (the simulator's block accounting on GPUs)
                lay = replace(lay, kv_tokens=int(free // _kv_per_position(work, kv_dtype, t, lengths)))
                (candidates if wdt in chosen else alt_candidates).append(lay)
    if not candidates:
        reason = _no_fit_reason(rejected, work, instance, chosen, alt_candidates)
        return _empty(work, platform, instance, mode, reason, rejected, notes)
    best = best_of(candidates)
    if best.refused:
        reason = f"{OUTSIDE}: {'; '.join(best.outside) or 'no held-out test covers this layout'}"
        measure = to_measure(candidates, pinned=pin != Pin())
        said = f"{reason}; a trial measures {measure.label} ({'pinned' if pin != Pin() else 'by memory fit'})"
        empty = _empty(work, platform, instance, mode, said, rejected + [(best.label, reason)], notes)
        config = _config(instance, platform, lengths, measure, ctx, (), measure_why(measure, pin != Pin()))
        return replace(empty, to_measure=config)
    for c in candidates:
        if c is not best:
            rejected.append(
                (
                    c.label,
                    f"lower slow edge: {c.slow_edge:,.2f} ({c.rps:,.2f} ±{c.band('requests_per_s'):.0%}) vs "
                    f"{best.slow_edge:,.2f} requests/s per instance",
                )
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
    if best.outside and ctx.physics is not None:
        notes.append(
            f"off the fitted runs: {'; '.join(best.outside)}; bands are the held-out error of that kind of "
            f"extrapolation (requests/s ±{best.band('requests_per_s'):.0%})"
        )
    elif best.outside:
        notes.append(
            f"the chosen layout lies outside the published rows of {ctx.stack}: {'; '.join(best.outside)}; "
            f"its band is widened to ±{best.band('requests_per_s'):.0%}"
        )
    if ctx.physics is not None and ctx.coverage is not None:
        notes.extend(_band_kind_note(ctx.coverage, ctx.physics.family))
    if best.padded_heads:
        notes.append(
            f"attention heads padded from {d.heads} to {best.padded_heads} for TP{best.tp} (as NxDI does)"
        )
    notes.extend(f"model {work.name}: {n}" for n in d.notes)
    if d.sliding_window and d.sliding_layers:
        notes.append(
            f"sliding window: {d.sliding_layers} of {d.layers} layers attend over the last "
            f"{d.sliding_window:,} positions; their attention FLOPs, KV-cache read and KV cache are bounded "
            "by it"
        )
    if work.is_moe:
        ep = (
            "experts split across the group (expert parallel)"
            if d.experts % best.tp == 0
            else "experts tensor-parallel"
        )
        touched = expected_experts_touched(d.experts, d.experts_per_token, best.max_batch)
        notes.append(
            f"MoE: {d.experts} experts, top-{d.experts_per_token}"
            + (f", {d.moe_layers} of {d.layers} layers MoE" if d.moe_layers else "")
            + f"; work per token from the active parameters "
            f"({(work.matmul_params + work.head_params) / 1e9:,.1f} B), every expert in memory; a decode "
            f"step reads the experts its batch touches ({touched:,.1f} of "
            f"{d.experts} per layer at batch {best.max_batch} under uniform routing: "
            f"{decode_weight_params(work, best.max_batch) / 1e9:,.1f} B); {ep}"
        )
    if best.lnc:
        notes.append(
            f"TP counted in logical NeuronCores at LNC={best.lnc} ("
            + ("two physical cores each, 4" if best.lnc == 2 else "one physical core each, 8")
            + " per chip)"
        )
    if ctx.physics is None and platform.calibrated_batch and best.max_batch > platform.calibrated_batch:
        notes.append(
            f"batch {best.max_batch} is beyond the largest batch in {platform.family}'s calibration rows "
            f"({platform.calibrated_batch}): decode times there are extrapolated"
        )
    if ctx.physics is None and instance.is_neuron and best.tp not in (24, 32):
        notes.append(
            f"TP{best.tp}: the published Neuron decoder rows are all TP24/TP32; the per-layer overhead is "
            "extrapolated to this degree"
        )
    return _llm_result(
        work,
        platform,
        instance,
        lengths,
        best,
        buckets,
        rejected,
        notes,
        coef,
        ctx,
        candidates + alt_candidates,
        decode_buckets=decode_buckets,
    )


BAND_NOTE_START = "bands start from the leave-one-model-out error"  # the plan lifts these notes to its report


def _band_kind_note(coverage: Any, family: str) -> list[str]:
    """What a printed band promises, where it is narrower than the error of a new source: the bands start
    from the leave-one-model-out error (physics.toml band_kinds), widened off the fitted runs; with a whole
    source held out the errors were wider (their 80th percentile is quoted). A family without fitted runs
    has the unseen-family band instead."""
    if "loso" in coverage.base_kinds or not coverage.has_kind("loso") or family not in coverage.families:
        return []
    lomo = coverage.band("lomo", "requests_per_s", family)
    loso = coverage.band("loso", "requests_per_s", family)
    if not (math.isfinite(loso) and loso > lomo):
        return []
    return [
        f"{BAND_NOTE_START} (±{lomo:.0%} requests/s on {family}: a model the fitted sources lacked, served "
        f"as they served theirs), wider off the fitted runs; with a whole source held out, 80% fell within "
        f"±{loso:.0%} (another stack version or setup can be that far off: measure first)"
    ]


def _kv_per_position(work: ModelWork, kv_dtype: str, tp: int, lengths: Lengths) -> float:
    """KV-cache bytes per position of one device, for the simulator's block accounting (which charges a
    sequence its positions): every layer's cache per token; with sliding-window layers, the cache of a
    sequence of the traffic's mean length per position (its windows hold their last W positions)."""
    if not any(w for w, _ in work.kv_terms(kv_dtype, tp)):
        return work.kv_bytes_per_token(kv_dtype, tp)
    mean = max(1.0, lengths.mean_prompt + lengths.mean_output)
    return work.kv_cache_bytes(mean, kv_dtype, tp) / mean


def _no_fit_reason(
    rejected: list[tuple[str, str]],
    work: ModelWork,
    instance: Instance,
    chosen: list[str],
    alts: list[Layout],
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


def _llm_bands(platform: PlatformModel) -> dict[str, float]:
    thr = _band(platform, "llm", "out_tok_s")
    tpot = _band(platform, "llm", "tpot_s") or thr
    ttft = _band(platform, "llm", "ttft_s") or thr
    return {"out_tok_s": thr, "tpot_s": tpot, "ttft_s": ttft, "e2e_s": max(tpot, ttft)}


def _decode_context(
    lengths: Lengths, decode_buckets: Sequence[int] | None, padded: bool, buckets: Sequence[int] | None = None
) -> Any:
    """The context `project`'s capacity charges a decode step at: the simulator's rule (charged_context).
    A padded platform given no decode buckets is taken to compile one at the mean request's last position
    (what chipswap's shape plan does for a traffic of one length). A length mix gives a
    servicetime.LoadMix instead: the step and prefill averaged over the mix by the simulator's rules."""
    if padded and not decode_buckets:
        return int(math.ceil(positions_held(lengths.mean_prompt, lengths.mean_output)))
    one = charged_context(lengths.mean_prompt, lengths.mean_output, decode_buckets if padded else ())
    if lengths.prompts is None or lengths.outputs is None:
        return one
    uniq, inv = np.unique(lengths.prompts, return_inverse=True)
    pads = np.array([_pad(int(x), buckets, padded) for x in uniq.tolist()], dtype=np.int64)[inv.reshape(-1)]
    mix = load_mix(lengths.prompts, lengths.outputs, decode_buckets if padded else (), pads)
    return one if mix is None else mix


def _llm_result(
    work: ModelWork,
    platform: PlatformModel,
    instance: Instance,
    lengths: Lengths,
    best: Layout,
    buckets: Sequence[int] | None,
    rejected: list[tuple[str, str]],
    notes: list[str],
    coef: Coefficients,
    ctx: StackContext,
    layouts: list[Layout],
    decode_buckets: Sequence[int] | None = None,
) -> ServingProjection:
    lb = dict(best.bands)
    bands = {
        "out_tok_s": lb["requests_per_s"],
        "tpot_s": lb["tpot_s"],
        "ttft_s": lb["ttft_s"],
        "e2e_s": max(lb["tpot_s"], lb["ttft_s"]),
    }
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
    decode_ctx = _decode_context(lengths, decode_buckets or buckets, platform.padded, buckets)
    batches = []
    b = 1
    sizes = []
    while b < best.max_batch:
        sizes.append(b)
        b *= 2
    sizes.append(best.max_batch)
    for b in sizes:
        rps = best.replicas * replica_rps(
            poly, b, lengths.mean_prompt, lengths.mean_output, mean_pad,
            Schedule(ctx.stack, static_batch=platform.padded, occupancy=best.occupancy,
                     live_step_s=best.live_step_s),  # fmt: skip
            context=decode_ctx, steps=decode_steps(lengths.mean_output),
        )  # fmt: skip
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
        f"highest requests/s at the slow edge of its band, at the traffic's mean request "
        f"({lengths.mean_prompt:,.0f} prompt + {lengths.mean_output:,.0f} output tokens), among "
        f"{len(layouts)} layouts"
        + (f" under {ctx.stack}" if ctx.stack else "")
        + (f"; TP in logical NeuronCores, LNC={best.lnc}" if best.lnc else "")
    )
    config = _config(instance, platform, lengths, best, ctx, tuple(rejected), why)
    band = max(bands["out_tok_s"], bands["tpot_s"])
    # the capacity figure (the knee) of a stack the shared rate sweeps do not validate: its band widened
    knee = (
        (1.0 + bands["out_tok_s"]) * (1.0 + ctx.knee_widening) - 1.0
        if ctx.knee_widening
        else bands["out_tok_s"]
    )
    knee_note = f", band widened {ctx.knee_widening:.0%}: {ctx.stack}'s knee not validated under load" if (
        ctx.knee_widening) else ""  # fmt: skip
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
            best.rps, "requests/s", knee, note=f"whole instance, batch {best.max_batch}{knee_note}"
        ),
        output_tokens_per_s=Projected(best.rps * lengths.mean_output, "tokens/s", knee),
        shapes=tuple(shapes),
        batches=tuple(batches),
        rejected=tuple(rejected),
        notes=tuple(notes),
        stacks=coef.stacks,
        stack=ctx.stack,
        layouts=tuple(
            x.as_dict(lengths.mean_output, chosen=x is best)
            for x in sorted(layouts, key=lambda c: (c is not best, -c.slow_edge))
        ),
    )


def _config(
    instance: Instance, platform: PlatformModel, lengths: Lengths, lay: Layout, ctx: StackContext,
    rejected: tuple[tuple[str, str], ...], why: str,
) -> ServingConfig:  # fmt: skip
    return ServingConfig(
        instance=instance.name,
        tp_degree=lay.tp,
        replicas=lay.replicas,
        max_batch=lay.max_batch,
        weight_dtype=lay.dtype,
        max_length=lengths.max_total,
        padded=platform.padded,
        why=why,
        rejected=rejected,
        stack=ctx.stack,
        kv_tokens=lay.kv_tokens,
        slot_occupancy=lay.occupancy,
        live_step_s=lay.live_step_s,
    )


def to_measure(layouts: list[Layout], *, pinned: bool) -> Layout:
    """The layout a trial measures when no layout has a figure the calibration covers: the pinned one, else
    by memory fit alone: the most sequences an instance holds at once (replicas x batch), then the fewest
    devices per replica (LNC=2 on Trainium2 first)."""
    if pinned and len(layouts) == 1:
        return layouts[0]
    return max(layouts, key=lambda c: (c.replicas * c.max_batch, -c.tp, c.lnc != 1))


def measure_why(lay: Layout, pinned: bool) -> str:
    how = "as pinned" if pinned else "by memory fit: the most sequences held at once, then the smallest TP"
    return f"no projected figure ({OUTSIDE.split(' — ')[0]}); the layout to measure, chosen {how}" + (
        f"; TP in logical NeuronCores, LNC={lay.lnc}" if lay.lnc else ""
    )


def weight_summary(work: ModelWork, dtype: str = "bf16") -> dict[str, float]:
    """Parameters and memory figures for reports."""
    return {
        "params": float(work.params),
        "weights_gib": work.params * dtype_bytes(dtype) / GiB,
        "kv_bytes_per_token": work.kv_bytes_per_token_total("bf16"),
    }
