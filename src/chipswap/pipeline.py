"""Where `chipswap plan` used to live: it is now the chain of stages in `chipswap.plan` (one module per
stage).

Kept so `from chipswap.pipeline import run_plan, PlanResult` keeps working; nothing else lives here.
"""

from __future__ import annotations

from chipswap.plan import (
    CandidateResult,
    Figure,
    FleetPlan,
    PlanResult,
    ReadinessSummary,
    ShapeSummary,
    TrafficSummary,
    run_plan,
)

__all__ = [
    "CandidateResult",
    "Figure",
    "FleetPlan",
    "PlanResult",
    "ReadinessSummary",
    "ShapeSummary",
    "TrafficSummary",
    "run_plan",
]
