"""Reading the bucket keys of a plan file (`chipswap.shapeplan/1`, written by `chipswap shapes --out`).

`compile` and `check` need only the sequence and batch buckets, so they read plans through this lenient reader
(other keys are kept, not validated); `chipswap.shapeplan.load_plan` is the strict reader of a whole plan.
May not import torch or touch anything but the plan file it is given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError

PLAN_SCHEMA = "chipswap.shapeplan/1"


@dataclass(frozen=True)
class BucketPlan:
    sequence_buckets: tuple[int, ...]
    batch_buckets: tuple[int, ...]
    max_length: int
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """(batch, seq) for every bucket, sequence-major."""
        return [(b, s) for s in self.sequence_buckets for b in self.batch_buckets]


def _int_list(value: Any, key: str, source: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise ChipswapError(
            f"plan {source}: {key!r} must be a non-empty list of positive integers, got {value!r};"
            " write the plan with chipswap shapes --out or pass --seq-len"
        )
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ChipswapError(
                f"plan {source}: {key!r} holds {v!r}, not a positive integer; fix the plan file"
            )
        out.append(int(v))
    return tuple(sorted(set(out)))


def parse_plan(
    data: Any, source: str = "plan", *, default_batch: tuple[int, ...] | None = None
) -> BucketPlan:
    """Read the keys compile needs from a ``chipswap.shapeplan/1`` document; other keys are kept in
    ``extra``."""
    if not isinstance(data, Mapping):
        raise ChipswapError(f"plan {source}: not a JSON object; write it with chipswap shapes --out")
    schema = data.get("schema", PLAN_SCHEMA)
    if schema != PLAN_SCHEMA:
        raise ChipswapError(f"plan {source}: schema is {schema!r}, expected {PLAN_SCHEMA!r}; re-plan it")
    if default_batch is not None and "batch_buckets" not in data:
        data = {**data, "batch_buckets": list(default_batch)}
    for key in ("sequence_buckets", "batch_buckets"):
        if key not in data:
            raise ChipswapError(
                f"plan {source} has no {key!r}; write the plan with chipswap shapes --out, or pass"
                " --seq-len/--batch-sizes instead of --plan"
            )
    seq = _int_list(data["sequence_buckets"], "sequence_buckets", source)
    batch = _int_list(data["batch_buckets"], "batch_buckets", source)
    ml = data.get("max_length", seq[-1])
    if isinstance(ml, bool) or not isinstance(ml, int) or ml < 1:
        raise ChipswapError(f"plan {source}: 'max_length' is {ml!r}, not a positive integer; fix the plan")
    extra = {k: v for k, v in data.items() if k not in ("sequence_buckets", "batch_buckets", "max_length")}
    return BucketPlan(seq, batch, int(ml), extra)


def load_plan(path: str | Path, *, default_batch: tuple[int, ...] | None = None) -> BucketPlan:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ChipswapError(f"cannot read plan file {p}: {exc.strerror or exc}; check the path") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ChipswapError(
            f"plan file {p} is not JSON ({exc.msg} at line {exc.lineno}); re-plan it"
        ) from None
    return parse_plan(data, str(p), default_batch=default_batch)
