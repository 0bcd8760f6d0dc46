"""Readiness stage: what the Neuron compiler is predicted to reject, judged once per candidate target.

Input: PlanSetup and the ShapeSummary. Output: ReadinessSummary. The readiness check is reached through
`run_check` only; a 2-layer copy stands for a transformer whose layers are all alike (same operators and
dtypes). A result is kept in the readiness memo (chipswap.plan.readiness_memo) and read back by a later
plan of the same model, shapes, rules and library versions. May write nothing but that memo.
"""

from __future__ import annotations

import time
from dataclasses import asdict, fields, is_dataclass, replace
from typing import Any

from chipswap.plan import readiness_memo as memo
from chipswap.plan.result import ReadinessSummary, ShapeSummary, jsonable
from chipswap.plan.setup import PlanSetup, rules_target


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


def _input_names(ref: Any, task: str | None) -> list[str]:
    from chipswap.models import input_names

    return input_names(ref, task=task)


def run_check(
    ref: Any, shapes: list[str] | None, target: str, task: str | None, full: bool, training: bool
) -> Any:
    from chipswap.readiness.check import run_check as check

    return check(ref, shapes, target=target, task=task, full_model=full, training=training)


def readiness(s: PlanSetup, shapes: ShapeSummary | None) -> ReadinessSummary:
    wl, ref = s.workload, s.model
    if wl.model is None or ref is None:
        return ReadinessSummary(
            False, "no [model] in the workload: readiness not checked (unknown, not a pass)"
        )
    tgts = targets(s)
    if not tgts:
        return ReadinessSummary(False, "no Neuron candidate to check against")
    # One representative shape: batch 1 at the largest planned sequence bucket. A transformer's operator
    # inventory does not depend on the sequence length, so one export stands for every bucket.
    max_pos = int((getattr(ref, "config", None) or {}).get("max_position_embeddings") or 0) or None
    seq = max(shapes.sequence_buckets) if shapes and shapes.sequence_buckets else 128
    why = "the largest planned bucket" if shapes and shapes.sequence_buckets else "a representative length"
    if max_pos and seq > max_pos:
        seq, why = max_pos, f"the model's max_position_embeddings {max_pos}, below the planned buckets"
    t0 = time.perf_counter()
    training = s.kind == "training"
    key = memo.memo_key(
        ref, seq=seq, why=why, targets=list(tgts), task=wl.model.task, full=bool(wl.model.full_check),
        training=training,
    )  # fmt: skip
    remembered = _from_doc(memo.recall(key))
    if remembered is not None:
        return replace(remembered, note=f"{remembered.note} (read from the readiness memo: {MEMO_WORDS})")
    summary = _checked(s, ref, tgts, seq, why, training, t0)
    memo.remember(key, _to_doc(summary))
    return summary


MEMO_WORDS = "the same model config, shapes, rules and library versions were checked before"


def _to_doc(r: ReadinessSummary) -> dict[str, Any]:
    doc = {f.name: getattr(r, f.name) for f in fields(r)}
    doc["findings"] = list(r.findings)
    doc["by_target"] = {t: [b, pct, list(fs)] for t, (b, pct, fs) in r.by_target.items()}
    return doc


def _from_doc(doc: dict[str, Any] | None) -> ReadinessSummary | None:
    """A memo entry back as a summary; None when it does not have the summary's shape."""
    if doc is None or set(doc) != {f.name for f in fields(ReadinessSummary)}:
        return None
    try:
        by_target = {
            str(t): (int(b), None if pct is None else float(pct), tuple(dict(x) for x in fs))
            for t, (b, pct, fs) in doc["by_target"].items()
        }
        return ReadinessSummary(
            **{**doc, "findings": tuple(dict(x) for x in doc["findings"]), "by_target": by_target}
        )
    except (TypeError, ValueError, AttributeError):
        return None


def _checked(
    s: PlanSetup, ref: Any, tgts: tuple[str, ...], seq: int, why: str, training: bool, t0: float
) -> ReadinessSummary:
    from chipswap.models import representative

    wl = s.workload
    target, others = tgts[0], tgts[1:]
    what = "the full model" if wl.model.full_check else representative(ref)[1]
    what = what.replace("--full-model exports", "model.full_check = true exports")  # the workload's key
    # Token models are checked at the planned length; vision/audio models (no input_ids) and factories at the
    # inputs the model's own forward signature and config call for.
    token_model = ref.kind != "factory" and "input_ids" in _input_names(ref, wl.model.task)
    report = run_check(
        ref,
        [f"input_ids=1x{seq}:int64"] if token_model else None,
        target,
        wl.model.task,
        wl.model.full_check,
        training,
    )
    secs = time.perf_counter() - t0
    findings = tuple(report.findings_json())
    n_block = len(report.blockers)
    by_target = {target: (n_block, _float_or_none(report.support_percentage), findings)}
    from chipswap.readiness.rules import evaluate as judge

    for other in others:
        a = judge(report.inventory, report.ruleset, other)
        by_target[other] = (
            len(a.blockers),
            _float_or_none(a.support_percentage),
            tuple(_finding_dict(f) for f in a.findings),
        )
    if token_model:
        shape_desc = f"batch 1 x {seq} tokens ({why})"
    else:
        shape_desc = "the factory's example inputs" if ref.kind == "factory" else "the model's default inputs"
    step = " with one training step (backward and AdamW)" if training else ""
    return ReadinessSummary(
        True,
        f"predicted from published Neuron facts, not compiled: checked {what}{step}, once, at {shape_desc}, "
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
