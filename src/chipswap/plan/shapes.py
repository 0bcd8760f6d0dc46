"""Shapes stage: the fixed shapes Neuron would compile for this traffic (the shape planner), capped at what
the
model accepts.

Input: PlanSetup and the TrafficStage. Output: ShapesStage (ShapeSummary + notes). The planner is reached
through
`plan_shapes` only. May not read files itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from chipswap.errors import ChipswapError
from chipswap.plan.result import ShapeSummary
from chipswap.plan.setup import PlanSetup, max_positions
from chipswap.plan.traffic import TrafficStage


@dataclass(frozen=True)
class ShapesStage:
    summary: ShapeSummary | None
    notes: tuple[str, ...] = ()


def _float_or_none(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def plan_shapes(trace: Any, mode: str, max_buckets: int, max_length: int | None) -> ShapeSummary:
    """The shape planner's buckets and padding overhead (and its fixed-rule baselines) for `trace`."""
    from chipswap.shapes.shapeplan import plan_shapes as planner

    plan = planner(trace, mode=mode, max_buckets=max_buckets, max_length=max_length)
    requests = len(trace)
    baselines = {
        name: _float_or_none(b.get("padding_overhead_pct", b.get("overhead_pct")))
        if isinstance(b, dict)
        else _float_or_none(b)
        for name, b in (plan.baselines or {}).items()
    }
    return ShapeSummary(
        True,
        f"optimal buckets from {requests:,} requests (mode {mode}, at most {max_buckets} buckets)",
        tuple(int(b) for b in plan.sequence_buckets),
        tuple(int(b) for b in plan.decode_buckets),
        _float_or_none(plan.padding_overhead_pct),
        baselines,
        None,
        plan.to_dict(),
        _float_or_none(plan.overflow_share),
        plan.overflow_policy,
        plan.max_length or max_length,
    )


def shapes(s: PlanSetup, t: TrafficStage | None) -> ShapesStage:
    if t is None:
        return ShapesStage(None)
    wl, wpath = s.workload, s.path
    tr = wl.traffic
    assert tr is not None
    max_pos = max_positions(s.model)
    if t.trace is None:
        if max_pos is not None and (tr.prompt_tokens or 0) > max_pos:
            raise ChipswapError(
                f"{wpath}: traffic.prompt_tokens: {tr.prompt_tokens} is longer than the model's "
                f"max_position_embeddings {max_pos}; set traffic.prompt_tokens = {max_pos} or less"
            )
        total = int(tr.prompt_tokens or 0) + int(tr.output_tokens or 0)
        return ShapesStage(
            ShapeSummary(
                False,
                "steady rate with one length: one shape, no planning needed",
                (int(tr.prompt_tokens or 0),),
                (total,) if tr.mode == "llm" else (),
                max_length=total,
            )
        )
    max_len = tr.max_length
    if max_pos is not None and max_len is not None and max_len > max_pos:
        raise ChipswapError(
            f"{wpath}: traffic.max_length: {max_len} is longer than the model's "
            f"max_position_embeddings {max_pos}; set traffic.max_length = {max_pos} or less"
        )
    hist = getattr(t.trace, "prompt", None)  # a histogram file: its own longest length, not a sample's
    if hist is not None and hasattr(hist, "max_length"):
        longest = int(hist.max_length)
    else:
        longest = int(np.max(t.load.all_prompt_tokens)) if t.load.all_prompt_tokens.size else 0
    if max_pos is not None and max_len is None and longest > max_pos:
        max_len = max_pos  # cap at what the model accepts; the longer requests are overflow
    summary = plan_shapes(t.trace, tr.mode, tr.max_buckets, max_len)
    notes = []
    if summary.overflow_share:
        notes.append(
            f"{summary.overflow_share:.1%} of requests are longer than the largest planned bucket "
            f"({max_len if max_len is not None else 'max length'} tokens; policy "
            f"{summary.overflow_policy or 'reject'})"
            + (" — capped at the model's max_position_embeddings" if tr.max_length is None else "")
        )
    return ShapesStage(summary, tuple(notes))
