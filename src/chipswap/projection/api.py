"""The projection API for callers (the plan, `chipswap project`): loads the catalog and the calibrated
platform files, then calls the pure chipswap.projection.predict.

    work = model_work("llama-3-8b")                       # or a ModelRef from chipswap.models.resolve_model
    p = project_serving(work, "inf2.48xlarge", prompt_tokens=trace.prompt_tokens,
                        output_tokens=trace.output_tokens)
    p.config (ServingConfig), p.times (ServiceTimes), p.band, p.shapes / p.batches, p.rejected, p.reason
    t = project_training(work, "trn1.32xlarge", tokens=2e9, seq_len=8192)

Errors: an instance with no chip specs or no calibration for the mode, an unsupported dtype, a model config
missing a size -> ChipswapError (one line, naming what is missing and that a measured figure can be given).
A model that fits no configuration is not an error: the result has `fits` False and a `reason`.
Reads shipped data only; writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from chipswap.economics.catalog import Catalog, Instance
from chipswap.economics.catalog_io import load_catalog
from chipswap.projection.platform import PlatformModel
from chipswap.projection.platforms import platform_for_instance
from chipswap.projection.predict import ServingProjection, TrainingProjection
from chipswap.projection.predict import project_serving as _project_serving
from chipswap.projection.predict import project_training as _project_training
from chipswap.projection.predict import tp_options as _tp_options
from chipswap.projection.work import ModelWork

__all__ = ["model_work", "platform_of", "project_serving", "project_training", "tp_options"]


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
) -> ServingProjection:
    """Configuration search + projected service times and figures for `work` on `instance` (see
    chipswap.projection.predict.project_serving for the arguments)."""
    cat = catalog or load_catalog()
    inst = _instance(instance, cat)
    return _project_serving(
        work,
        platform_for_instance(inst, cat),
        inst,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        mode=mode,
        dtype=dtype,
        buckets=buckets,
        tp=tp,
    )


def tp_options(work: ModelWork, instance: str | Instance, catalog: Catalog | None = None) -> list[int]:
    """Valid tensor-parallel degrees of `work` on `instance` (pass each as project_serving(..., tp=N))."""
    cat = catalog or load_catalog()
    return _tp_options(work, _instance(instance, cat))


def project_training(
    work: ModelWork,
    instance: str | Instance,
    *,
    tokens: float,
    seq_len: int = 4096,
    dtype: str | None = None,
    nodes: int = 1,
    catalog: Catalog | None = None,
) -> TrainingProjection:
    """Training tokens/s per node +- band and hours for `tokens` trained tokens."""
    cat = catalog or load_catalog()
    inst = _instance(instance, cat)
    return _project_training(
        work, platform_for_instance(inst, cat), inst, tokens=tokens, seq_len=seq_len, dtype=dtype, nodes=nodes
    )
