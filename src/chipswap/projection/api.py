"""The projection API for callers (the plan, `chipswap project`): loads the catalog and the calibrated
platform files, then calls the pure chipswap.projection.predict.

    work = model_work("llama-3-8b")                       # or a ModelRef from chipswap.models.resolve_model
    p = project_serving(work, "inf2.48xlarge", prompt_tokens=trace.prompt_tokens,
                        output_tokens=trace.output_tokens)
    p.config (ServingConfig), p.times (ServiceTimes), p.band, p.shapes / p.batches, p.rejected, p.reason
Training projections: chipswap.projection.training.project_training (the layout-aware model).

Errors: an instance with no chip specs or no calibration for the mode, an unsupported dtype, a model config
missing a size -> ChipswapError (one line, naming what is missing and that a measured figure can be given).
A model that fits no configuration is not an error: the result has `fits` False and a `reason`.
Reads shipped data only; writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from chipswap.economics.catalog import Catalog, Instance
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.projection.layouts import StackContext
from chipswap.projection.platform import PlatformModel
from chipswap.projection.platforms import load_physics, platform_for_instance
from chipswap.projection.predict import ServingProjection
from chipswap.projection.predict import project_serving as _project_serving
from chipswap.projection.predict import tp_options as _tp_options
from chipswap.projection.serving.physics import moe_stack, with_stack
from chipswap.projection.stacks import GPU_CALIBRATED_STACK, default_stack, stack_for
from chipswap.projection.work import ModelWork

__all__ = [
    "model_work",
    "platform_of",
    "project_serving",
    "stack_context",
    "tp_options",
]


def model_work(model: Any, *, task: str | None = None) -> ModelWork:
    """ModelWork of a model spec string (preset, config.json, module:factory) or a resolved ModelRef."""
    from chipswap.models import resolve_model
    from chipswap.projection.flops import model_work as _model_work

    ref = resolve_model(model, task=task) if isinstance(model, str) else model
    return _model_work(ref, task=task)


def _instance(instance: str | Instance, catalog: Catalog) -> Instance:
    return catalog.instance(instance) if isinstance(instance, str) else instance


def platform_of(instance: str | Instance, catalog: Catalog | None = None) -> PlatformModel:
    """The calibrated platform model of an instance's chip (raises when chipswap has none)."""
    cat = catalog or load_catalog()
    return platform_for_instance(_instance(instance, cat), cat)


def stack_context(
    stack: str | None,
    instance: Instance,
    platform: PlatformModel,
    catalog: Catalog,
    *,
    sampling: str = "device",
) -> StackContext:
    """The serving stack a projection on `instance` assumes: the one named (checked against the instance's
    side: Neuron or GPU) or the side's default, with its fitted terms and its knee band's widening where the
    shared rate sweeps do not validate it (stack_load.toml). A chip no stack was calibrated for (e.g.
    Trainium3) is a one-line error."""
    from chipswap.projection.stack_load import load_stack_load

    ctx = _stack_context(stack, instance, platform, sampling=sampling)
    return replace(ctx, knee_widening=load_stack_load().knee_widening(ctx.stack))


def _stack_context(stack: str | None, instance: Instance, platform: PlatformModel, *,
                   sampling: str) -> StackContext:  # fmt: skip
    side = "neuron" if instance.is_neuron else "gpu"
    st = stack_for(stack, side)
    if side == "gpu":
        if st.id == GPU_CALIBRATED_STACK:
            return StackContext(st.id, widen_unit=_widen_unit())
        extra = _gpu_stack_gap()
        return StackContext(
            st.id,
            extra_band=extra,
            widen_unit=_widen_unit(),
            note=(
                f"{st.id} on GPUs: the GPU table fit is used (every NVIDIA table row is TensorRT-LLM), its "
                f"band widened by {extra:.0%}: its median error on the 94 published H100 vLLM runs (2026, "
                "vLLM 0.17.1, Qwen 0.6-7.6 B at TP1, prompts 3.7K-59.5K)"
            ),
        )
    if st.calibration == "sdk-tables":
        if not platform.has_phase("llm"):
            raise ChipswapError(
                f"no LLM serving calibration for {platform.family} under {st.id}: the Neuron SDK tables "
                f"have no {platform.family} rows; use --stack {default_stack('neuron')} or give a measured "
                "figure"
            )
        return StackContext(st.id, widen_unit=_widen_unit())
    from chipswap.projection.platforms import load_families

    _, groups = load_families()
    group = groups.get(platform.group)
    if group is not None and not group.free_for("llm"):  # e.g. Inferentia (NeuronCore-v1): encoders only
        raise ChipswapError(
            f"no LLM serving calibration for {platform.family} (uncalibrated): no published {st.id} "
            f"figures for {instance.accelerator}; give a measured figure for {instance.name} instead"
        )
    return physics_context(st.id, platform, sampling=sampling)


def physics_context(stack: str, platform: PlatformModel, *, sampling: str = "device") -> StackContext:
    """The physical model under an NxD Inference stack on a Neuron family: the family's fitted parameters
    (its vendor's where it has no runs of its own: the band of an unseen family then applies), the stack's
    schedule and what the calibration covers."""
    from chipswap.projection.serving.physics import Physics, Schedule
    from chipswap.projection.stack_load import load_stack_load

    data = load_physics()
    if not data:
        raise ChipswapError(
            "no fitted physical model: physics.toml is missing; run `chipswap calibrate` (make calibrate)"
        )
    fams = data["families"]
    phys = fams.get(platform.family)
    note = ""
    twin = _same_core_family(platform, fams)
    if phys is None and twin is not None:
        phys = Physics(twin, fams[twin].values)
        note = (
            f"{platform.family} has no published {stack} runs; it carries the same NeuronCore as {twin} "
            f"(families.toml group {platform.group}): {twin}'s fitted parameters on {platform.family}'s own "
            f"spec sheet (memory, interconnect), with {twin}'s bands (the SDK tables' transfer between the "
            "two "
            "measured 7.5 % on output tok/s)"
        )
    if phys is None:
        base = fams.get("_neuron")
        if base is None:
            raise ChipswapError("no fitted Neuron parameters in physics.toml; run `chipswap calibrate`")
        phys = Physics(platform.family, base.values)
        note = (
            f"{platform.family} has no published {stack} runs: its figures use the Neuron parameters fitted "
            "on "
            "the other families, on its own spec sheet, with the held-out band of an unseen family"
        )
    occ = data["occupancy"].get(stack) or (min(data["occupancy"].values()) if data["occupancy"] else 1.0)
    live_step = load_stack_load().live_step(stack)
    if live_step is not None:  # issue 40: every compiled slot live (the admission rule), the step grows
        occ = 1.0
    schedule = Schedule(
        stack, static_batch=True, prefill_pauses_decode=True, occupancy=occ, host_sampling=sampling == "cpu",
        note="compiled batch (a step costs the compiled batch's step); prefills pause decoding",
        live_step_s=live_step or 0.0,
    )  # fmt: skip
    stacks = data.get("stacks", {})
    return StackContext(
        stack, sampling=sampling, note=note, physics=phys, schedule=schedule,
        coverage=data["coverage"].get("neuron"),
        moe_terms=tuple(sorted(stacks.get(moe_stack(stack), {}).items())),
    )  # fmt: skip


# the TensorRT-LLM version whose fitted terms a `--stack trtllm` projection carries (physics.toml stacks;
# the newest of the published TensorRT-LLM tables)
TRTLLM_TERMS = "trtllm-1.0"


def gpu_physics_context(ctx: StackContext, platform: PlatformModel, *, moe: bool) -> StackContext:
    """An LLM on a GPU goes through the physical model: the GPU family's fitted parameters (fitted on the
    published TensorRT-LLM tables and vLLM runs; the NVIDIA vendor's on another GPU's spec sheet, with the
    band of an unseen family), continuous batching, TensorRT-LLM's fitted terms under `--stack trtllm`, and
    for a MoE model the MoE kernel terms fitted on the published H100 MoE runs (vLLM, bf16 and dynamic fp8:
    physics.toml stacks.vllm-moe / vllm-moe-fp8). Unchanged (the GPU table fit) when physics.toml has no
    NVIDIA family, or for a MoE model no GPU MoE terms (the table fit then refuses the MoE model)."""
    from chipswap.projection.serving.physics import Physics, Schedule

    data = load_physics()
    stacks = data.get("stacks", {}) if data else {}
    terms = stacks.get(moe_stack("vllm"))
    cov = data.get("coverage", {}).get("nvidia") if data else None
    fams = data.get("families", {}) if data else {}
    phys = fams.get(platform.family) or (
        Physics(platform.family, fams["_nvidia"].values) if "_nvidia" in fams else None
    )
    if (moe and not terms) or cov is None or phys is None:
        return ctx
    stack = ctx.stack or "vllm"
    # the stack's own fitted terms: vLLM's, or the newest TensorRT-LLM's; a MoE model runs vLLM's MoE
    # kernels (the only GPU MoE runs published), whose terms were fitted on top of vLLM's
    key = "vllm" if moe or stack != "trtllm" else TRTLLM_TERMS
    own = stacks.get(key)
    runs = "TensorRT-LLM 0.9, 0.15 and 1.0 tables and vLLM on H100"
    fitted_stack = moe or stack in ("vllm", "trtllm")
    extra = 0.0 if fitted_stack else _gpu_stack_gap()
    note = (
        f"MoE on {platform.family}: the physical model with the MoE terms fitted on the published H100 vLLM "
        "MoE runs (MiMo-V2-Flash, MiniMax-M2.5, eager, bf16 and dynamic fp8), not the GPU table fit"
        if moe
        else f"{stack} on {platform.family}: the physical model fitted on the published GPU runs ({runs}), "
        f"with {key}'s fitted terms"
        + (
            ""
            if fitted_stack
            else f" (no published {stack} GPU run states its prompt length: run as vLLM, band widened by "
            f"{extra:.0%}, the GPU table fit's median error on the published vLLM runs: one calibration "
            "on another stack's runs)"
        )
    )
    return replace(
        ctx,
        physics=with_stack(phys, own),
        schedule=Schedule(stack, static_batch=False, note="continuous batching"),
        coverage=cov,
        extra_band=extra,
        note=note,
        moe_terms=tuple(sorted(terms.items())) if moe and terms else (),
        moe_fp8_terms=tuple(sorted(stacks.get(moe_stack("vllm", "fp8"), {}).items())) if moe else (),
    )


def _same_core_family(platform: PlatformModel, fitted: dict[str, Any]) -> str | None:
    """A fitted family that carries the same NeuronCore as `platform` (same families.toml fit group)."""
    from chipswap.projection.platforms import load_families

    if not platform.group:
        return None
    families, _ = load_families()
    for name, spec in sorted(families.items()):
        if name != platform.family and spec.group == platform.group and name in fitted:
            return name
    return None


def _widen_unit() -> float:
    """The log-band a table-fit projection adds for what its tables never had (MoE): the extra held-out
    log error of a model-size extrapolation over a projection inside the fitted shapes, measured on the
    Neuron runs (physics.toml: bands.neuron params vs lomo, requests/s)."""
    data = load_physics()
    cov = data.get("coverage", {}).get("neuron") if data else None
    if cov is None:
        return 0.0
    return max(
        0.0, math.log1p(cov.band("params", "requests_per_s")) - math.log1p(cov.band("lomo", "requests_per_s"))
    )


def _gpu_stack_gap() -> float:
    """How far the GPU table fit (TensorRT-LLM rows) is from vLLM on GPUs: its median |error| on the 94
    published H100 vLLM runs (physics.toml gpu.vllm_gap); 15 % where never fitted (assumption)."""
    data = load_physics()
    return float(data.get("vllm_gap", 0.15)) if data else 0.15


def project_serving(
    work: ModelWork,
    instance: str | Instance,
    *,
    prompt_tokens: int | Sequence[int] | np.ndarray,
    output_tokens: int | Sequence[int] | np.ndarray | None = None,
    mode: str = "llm",
    dtype: str = "bf16",
    buckets: Sequence[int] | None = None,
    catalog: Catalog | None = None,
    tp: int | None = None,
    replicas: int | None = None,
    batch: int | None = None,
    stack: str | None = None,
    sampling: str = "device",
    decode_buckets: Sequence[int] | None = None,
) -> ServingProjection:
    """Configuration search + projected service times and figures for `work` on `instance` (see
    chipswap.projection.predict.project_serving for the arguments). stack: a chipswap.projection.stacks id of
    the instance's side (default: nxdi-vllm on Neuron, vllm on GPUs)."""
    cat = catalog or load_catalog()
    inst = _instance(instance, cat)
    platform = platform_for_instance(inst, cat)
    ctx = stack_context(stack, inst, platform, cat, sampling=sampling) if mode == "llm" else None
    if ctx is not None and not inst.is_neuron and ctx.physics is None:
        ctx = gpu_physics_context(ctx, platform, moe=work.is_moe)
    return _project_serving(
        work,
        platform,
        inst,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        mode=mode,
        dtype=dtype,
        buckets=buckets,
        decode_buckets=decode_buckets,
        tp=tp,
        replicas=replicas,
        batch=batch,
        stack=ctx,
    )


def tp_options(work: ModelWork, instance: str | Instance, catalog: Catalog | None = None) -> list[int]:
    """Valid tensor-parallel degrees of `work` on `instance` (pass each as project_serving(..., tp=N))."""
    cat = catalog or load_catalog()
    inst = _instance(instance, cat)
    return _tp_options(work, inst, platform_for_instance(inst, cat))
