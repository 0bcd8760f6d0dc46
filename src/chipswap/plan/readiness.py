"""Readiness stage: what the Neuron compiler is predicted to reject, judged once per candidate target.

Input: PlanSetup and the ShapeSummary. Output: ReadinessSummary. The readiness check is reached through
`run_check` only; a 2-layer copy stands for a transformer whose layers are all alike (same operators and
dtypes).
May not write anything.
"""

from __future__ import annotations

import time
from dataclasses import asdict, is_dataclass, replace
from typing import Any

from chipswap.plan.result import ReadinessSummary, ShapeSummary, jsonable
from chipswap.plan.setup import PlanSetup, rules_target

CHECK_DEPTH = 2  # layers kept in the representative readiness check
_DEPTH_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers")


def representative(ref: Any, full: bool) -> tuple[Any, str]:
    """A copy of a transformer config with CHECK_DEPTH of its identical layers, and the words that say so.

    Every layer of a standard transformer has the same operators and dtypes, so the readiness findings of a
    2-layer copy are those of the full model (module paths name layer 0/1), at a fraction of the export time.
    Configs whose layers differ (a `layer_types` list) and factories / exported programs are checked whole.
    """
    cfg = getattr(ref, "config", None) or {}
    depth = cfg.get("num_hidden_layers")
    if (
        full
        or getattr(ref, "kind", "") not in ("preset", "hf-config")
        or not isinstance(depth, int)
        or depth <= CHECK_DEPTH
        or "layer_types" in cfg
    ):
        return ref, "the full model"
    small = {**cfg, **{k: CHECK_DEPTH for k in _DEPTH_KEYS if k in cfg}}
    return replace(ref, config=small), (
        f"a {CHECK_DEPTH}-layer copy of its {depth} identical layers (same operators and dtypes; "
        "set model.full_check = true to export every layer)"
    )


def _finding_dict(f: Any) -> dict[str, Any]:
    if isinstance(f, dict):
        return f
    if is_dataclass(f) and not isinstance(f, type):
        return {k: jsonable(v) for k, v in asdict(f).items()}
    return {"text": str(f)}


def _float_or_none(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def targets(s: PlanSetup) -> tuple[str, ...]:
    """The readiness targets of the candidates (training skips Inferentia), each once, in candidate order."""
    return tuple(
        dict.fromkeys(
            t
            for c in s.candidates
            if not (s.kind == "training" and c.kind == "inferentia")
            and (t := rules_target(c.family)) is not None
        )
    )


def run_check(checked: Any, shapes: list[str] | None, target: str, task: str | None) -> Any:
    from chipswap.check import run_check as check

    return check(checked, shapes, target=target, task=task)


def readiness(s: PlanSetup, shapes: ShapeSummary | None) -> ReadinessSummary:
    wl, ref = s.workload, s.model
    if wl.model is None or ref is None:
        return ReadinessSummary(
            False, "no [model] in the workload: readiness not checked (unknown, not a pass)"
        )
    tgts = targets(s)
    if not tgts:
        return ReadinessSummary(False, "no Neuron candidate to check against")
    target, others = tgts[0], tgts[1:]
    checked, what = representative(ref, wl.model.full_check)
    # One representative shape: batch 1 at the largest planned sequence bucket. A transformer's operator
    # inventory does not depend on the sequence length, so one export stands for every bucket.
    max_pos = int((getattr(ref, "config", None) or {}).get("max_position_embeddings") or 0) or None
    seq = max(shapes.sequence_buckets) if shapes and shapes.sequence_buckets else 128
    why = "the largest planned bucket" if shapes and shapes.sequence_buckets else "a representative length"
    if max_pos and seq > max_pos:
        seq, why = max_pos, f"the model's max_position_embeddings {max_pos}, below the planned buckets"
    t0 = time.perf_counter()
    report = run_check(
        checked, None if ref.kind == "factory" else [f"input_ids=1x{seq}:int64"], target, wl.model.task
    )
    secs = time.perf_counter() - t0
    findings = tuple(report.findings_json())
    n_block = len(report.blockers)
    by_target = {target: (n_block, _float_or_none(report.support_percentage), findings)}
    from chipswap.core.rules import evaluate as judge

    for other in others:
        a = judge(report.inventory, report.ruleset, other)
        by_target[other] = (
            len(a.blockers),
            _float_or_none(a.support_percentage),
            tuple(_finding_dict(f) for f in a.findings),
        )
    shape_desc = (
        f"batch 1 x {seq} tokens ({why})" if ref.kind != "factory" else "the factory's example inputs"
    )
    return ReadinessSummary(
        True,
        f"predicted from published Neuron facts, not compiled: checked {what}, once, at {shape_desc}, "
        "without weights",
        target,
        report.sdk,
        shape_desc,
        report.exit_code,
        n_block,
        _float_or_none(report.support_percentage),
        findings,
        secs,
        report.to_markdown(),
        by_target,
    )
