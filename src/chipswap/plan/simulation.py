"""Simulation stage: replay the busiest window on each projected fleet and size it for the SLO, like for like
(today's GPU type and every candidate get the same traffic, objectives and search).

Input: PlanSetup, the Load, the ShapeSummary and the ProjectionStage. Output: SimulationStage: per instance
the
capacity per instance that meets the SLO (at the projection's value and at the edges of its band), the
fleet size, simulated latency percentiles and distributions at that size, the unloaded latency floor, and a
CurveSizer the economics and sensitivity stages re-size with. The simulator is reached through `_simulator()`
only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chipswap.plan.projection import ProjectionStage
from chipswap.plan.result import LatencySample, ShapeSummary
from chipswap.plan.setup import PlanSetup
from chipswap.plan.sizing import CurveSizer
from chipswap.plan.traffic import Load


@dataclass(frozen=True)
class InstanceSim:
    """One fleet simulated at its size. capacity_rps: requests/s one instance carries within the SLO;
    feasible: False when no fleet size meets the SLO (floor_ms says how low latency can go unloaded)."""

    instance: str
    sizer: CurveSizer | None
    count: int | None
    capacity_rps: float | None
    ttft_p99_ms: float | None
    e2e_p99_ms: float | None
    band: float | None
    feasible: bool
    floor_ms: float | None = None
    latency: LatencySample = field(default_factory=LatencySample, compare=False)
    note: str = ""


@dataclass(frozen=True)
class SimulationStage:
    by_instance: dict[str, InstanceSim] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def get(self, instance: str) -> InstanceSim | None:
        return self.by_instance.get(instance)


def _simulator() -> Any:
    try:
        from chipswap.core import simulate  # type: ignore[attr-defined]
    except ImportError:
        return None
    return simulate


def simulation(
    s: PlanSetup, load: Load | None, shapes: ShapeSummary | None, proj: ProjectionStage
) -> SimulationStage:
    projected = [p for p in proj.by_instance.values() if p.times is not None and p.excluded is None]
    if s.kind != "serving" or load is None or not projected:
        return SimulationStage()
    sim = _simulator()
    if sim is None:
        return SimulationStage(
            notes=(
                "the fleet simulator is not installed here: projected fleets are sized from the projected "
                f"steady throughput at {s.workload.utilization:.0%} utilization, and latency is not "
                "simulated",
            )
        )
    return _simulate_all(s, sim, load, shapes, projected)


def _simulate_all(
    s: PlanSetup, sim: Any, load: Load, shapes: ShapeSummary | None, projected: list[Any]
) -> SimulationStage:
    raise NotImplementedError  # filled in when chipswap.core.simulate lands
