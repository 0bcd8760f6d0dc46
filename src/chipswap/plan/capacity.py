"""Capacity stage: can the chosen fleet actually be launched (offered in the region, within the vCPU quota)?

Input: PlanSetup, the VerdictStage and a `CapacityCheck` (the command builds it from
chipswap.economics.aws.capacity,
which
asks AWS read-only or falls back to the shipped snapshot). Output: the Verdict with the capacity reason added
and,
for a move that cannot launch as is, its qualifier ("— but request a quota increase of 768 vCPUs in us-east-1
first"), plus the note saying where the facts came from. The capacity rule qualifies a move; it never turns
one
into a stay (chipswap.economics.capacity decides the wording). No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from chipswap.plan.setup import PlanSetup
from chipswap.verdict.rules import Verdict

# (instance, region, count, term) -> (chipswap.economics.capacity.CapacityScreen, one-line note)
CapacityCheck = Callable[[str, str, "int | None", str], "tuple[Any, str]"]


def capacity(
    s: PlanSetup, verdict: Verdict, best: Any, check: CapacityCheck | None
) -> tuple[Verdict, tuple[str, ...]]:
    if check is None or best is None or not verdict.is_move:  # capacity only matters for a move
        return verdict, ()
    from chipswap.economics.capacity import capacity_reason, qualify_verdict

    screen, note = check(best.instance, s.region, best.count, s.workload.pricing.term)
    headline = qualify_verdict(verdict.verdict, screen)
    qualifier = headline[len(verdict.verdict) + len(" — but ") :] if headline != verdict.verdict else ""
    out = replace(verdict, reasons=(*verdict.reasons, capacity_reason(screen)), qualifier=qualifier)
    return out, (note,) if note else ()
