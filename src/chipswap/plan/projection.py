"""Projection stage: how fast the model runs on each instance (GPU fleet and candidates), predicted.

Input: PlanSetup, the Load and the ShapeSummary. Output: ProjectionStage: per instance the serving configuration
and the ServiceTimes the simulator replays (serving), or training tokens/s per instance (training), each a
prediction with its error band; or why the instance cannot run the model. The projection engine is reached
through `_engine()` only; the model's weight size through `chipswap.models.parameter_count`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.plan.figures import Figure
from chipswap.plan.result import ShapeSummary
from chipswap.plan.setup import PlanSetup
from chipswap.plan.traffic import Load


@dataclass(frozen=True)
class InstanceProjection:
    """The projection for one instance type. times: a chipswap.core.servicetime.ServiceTimes (serving);
    config: its ServingConfig; tokens_per_s: training throughput per instance; excluded: why the model cannot
    run there (memory, no calibration), None when it can or when nothing was projected."""

    instance: str
    config: Any = None
    times: Any = None
    tokens_per_s: Figure | None = None
    excluded: str | None = None
    note: str = ""


@dataclass(frozen=True)
class ProjectionStage:
    by_instance: dict[str, InstanceProjection] = field(default_factory=dict)
    weights: Figure | None = None
    available: bool = False
    notes: tuple[str, ...] = ()

    def get(self, instance: str) -> InstanceProjection:
        return self.by_instance.get(instance, InstanceProjection(instance))


def weights_gib(ref: Any) -> Figure | None:
    """Weight memory in bf16 from a meta-device build (no weight memory); None when it cannot be counted."""
    if ref is None or not getattr(ref, "weightless_ok", False):
        return None
    from chipswap.models import parameter_count

    try:
        n = parameter_count(ref)
    except ChipswapError:
        return None
    gib = n * 2 / 2**30
    return Figure(
        gib, "GiB (bf16 weights)", "computed", f"{n / 1e9:.2f}B parameters x 2 bytes, from the model config"
    )


def _engine() -> Any:
    """The projection engine module, or None while it is not part of this installation."""
    try:
        from chipswap import projection as engine  # type: ignore[attr-defined]
    except ImportError:
        return None
    return engine


def _fits(instance: Any, weights: Figure | None) -> str | None:
    mem = float(instance.accelerator_memory_gib)
    if weights is not None and weights.value > mem:
        return (
            f"the model's weights ({weights.value:.1f} GiB in bf16) do not fit in its {mem:g} GiB of "
            "accelerator memory"
        )
    return None


def projection(s: PlanSetup, load: Load | None, shapes: ShapeSummary | None) -> ProjectionStage:
    weights = weights_gib(s.model)
    instances = (s.fleet, *s.candidates)
    engine = _engine() if s.model is not None else None
    if engine is None:
        why = (
            "no [model] in the workload, so nothing is projected"
            if s.model is None
            else "the projection engine is not installed here, so nothing is projected"
        )
        return ProjectionStage(
            {i.name: InstanceProjection(i.name, excluded=_fits(i, weights)) for i in instances},
            weights,
            False,
            (why,),
        )
    raise NotImplementedError("projection engine wiring")  # replaced when the engine lands
