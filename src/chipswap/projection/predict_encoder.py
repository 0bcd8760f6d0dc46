"""Encoder projections: the configuration search and figures of an encoder (one forward per request) on an
instance, split out of chipswap.projection.predict (which calls `project_encoder` for mode "encoder").

Pure: no I/O, no torch, no clock. Takes the same ModelWork / PlatformModel / Instance; never reads files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chipswap.economics.catalog import Instance
from chipswap.projection.platform import (
    Coefficients,
    DeviceSpec,
    EncoderPoly,
    LlmPoly,
    PlatformModel,
    encoder_poly,
    llm_poly,
)
from chipswap.projection.projected import (
    BucketPrediction,
    Lengths,
    Projected,
    ProjectedServiceTimes,
    ServingProjection,
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
from chipswap.projection.work import ModelWork
from chipswap.simulation.servicetime import ServingConfig


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


def project_encoder(
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
