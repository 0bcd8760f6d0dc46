"""Shared pieces of the serving configuration search, used by the LLM search (predict.py) and the encoder
search (predict_encoder.py): devices an instance offers, TP degrees that split the heads, the runtime memory
reserve, the dtypes a platform may serve, the platform's fitted bands, and the empty result.

Pure core: no I/O, no torch, no clock; it may not import predict.py or predict_encoder.py (they import it).
"""

from __future__ import annotations

from chipswap.economics.catalog import Instance
from chipswap.errors import ChipswapError
from chipswap.projection.platform import DeviceSpec, PlatformModel
from chipswap.projection.projected import ServingProjection
from chipswap.projection.work import GiB, ModelWork


def devices_of(instance: Instance, per_chip: int = 0) -> int:
    """Devices a layout can use: NeuronCores (logical ones where the family says so: `per_chip` per chip,
    e.g. 4 on Trn2 at LNC=2) or GPUs."""
    if not instance.is_neuron:
        return instance.accelerator_count
    return instance.accelerator_count * per_chip if per_chip else instance.neuron_cores


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


def _band(platform: PlatformModel, phase: str, metric: str, fallback: str | None = None) -> float:
    b = platform.band(phase, metric)
    if not b and fallback:
        b = platform.band(phase, fallback)
    return b


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
