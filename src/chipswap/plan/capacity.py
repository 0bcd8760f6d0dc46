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

# (instance, region, count, term) -> (chipswap.economics.capacity.CapacityScreen, one-line note). The check
# may also have a `blocks(instance, region, count, days)` method -> (longest block on offer in days or None,
# checked with AWS?, as of, one-line note), for a pick bought as Capacity Blocks.
CapacityCheck = Callable[[str, str, "int | None", str], "tuple[Any, str]"]


def _blocks(s: PlanSetup, best: Any, check: CapacityCheck | None) -> tuple[Any, str]:
    """The horizon-vs-Capacity-Block screen of a pick bought as Capacity Blocks (offerings from the check's
    `blocks` when it has one, else the longest block AWS sells, unchecked)."""
    from chipswap.economics.capacity import screen_block_horizon

    months = s.workload.horizon_months
    days = -(-months * 730 // 24)
    ask = getattr(check, "blocks", None)
    longest, checked, as_of, note = (
        ask(best.instance, s.region, best.count, days) if ask else (None, False, "shipped", "")
    )
    screen = screen_block_horizon(
        best.instance, s.region, best.count, months, longest, checked=checked, as_of=as_of
    )
    return screen, note


def capacity(
    s: PlanSetup, verdict: Verdict, best: Any, check: CapacityCheck | None
) -> tuple[Verdict, tuple[str, ...]]:
    if best is None or not verdict.is_move:  # capacity only matters for a move
        return verdict, ()
    from chipswap.economics.capacity import capacity_reason, qualify_verdict

    screens, notes = [], []
    if check is not None:
        screen, note = check(best.instance, s.region, best.count, s.workload.pricing.term)
        screens.append(screen)
        notes.append(note)
    if getattr(best, "term", "") == "capacity-block" and s.kind == "serving":
        screen, note = _blocks(s, best, check)
        screens.append(screen)
        notes.append(note)
    if not screens:
        return verdict, ()
    qualifiers = []
    for screen in screens:
        headline = qualify_verdict(verdict.verdict, screen)
        if headline != verdict.verdict:
            qualifiers.append(headline[len(verdict.verdict) + len(" — but ") :])
    reasons = tuple(capacity_reason(x) for x in screens)
    out = replace(verdict, reasons=(*verdict.reasons, *reasons), qualifier="; and ".join(qualifiers))
    return out, tuple(n for n in notes if n)
