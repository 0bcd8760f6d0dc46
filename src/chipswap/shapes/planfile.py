"""Reading the bucket keys of a plan file (`chipswap.shapeplan/1`, written by `chipswap shapes --out`).

`compile` and `check` need only the sequence and batch buckets, so they read plans through this lenient reader
(other keys are kept, not validated); `chipswap.shapes.shapeplan.load_plan` is the strict reader of a whole
plan.
A plan may come from someone else, and its numbers size tensors: every bucket is a strict integer (not a bool,
a float or a string) within the documented bounds below, checked before anything is allocated, so a 1 MB plan
cannot ask for a 10^9-row batch. May not import torch or touch anything but the plan file it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chipswap.datafile import read_json
from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

PLAN_SCHEMA = "chipswap.shapeplan/1"

# Upper bounds on what a plan (or --seq-len / --batch-sizes) may ask compile and check to build. Each bucket
# is a tensor of batch x sequence tokens per input, built and run before anything else: checked first.
MAX_SEQUENCE_BUCKET = 1_048_576  # 2^20 tokens: past the context of every model chipswap has a preset for
MAX_BATCH_BUCKET = 4_096  # compiled batch sizes on Neuron are 1..a few hundred
MAX_BUCKET_TOKENS = 4_194_304  # batch x sequence of one compiled shape (an int64 input of it is 32 MiB)
MAX_BUCKETS = 256  # entries in one bucket list (the shape planner proposes a handful)
MAX_SHAPES = 4_096  # sequence buckets x batch sizes: one compile each
MAX_PLAN_BYTES = 64 * 2**20  # a plan with its histogram is KB to a few MB


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


def _where(key: str, source: str) -> str:
    return key if source == "arguments" else f"plan {source}: {key!r}"


def _positive_int(v: Any, what: str, hi: int, fix: str = "fix the plan file") -> int:
    """`v` as an int in 1..hi (a bool, float or string is not one), else one line "<what> <v>, ...; <fix>"."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ChipswapError(f"{what} {one_line(repr(v), 80)}, not a positive integer; fix the plan file")
    if v > hi:
        raise ChipswapError(f"{what} {v:,}, over the limit of {hi:,}; {fix}")
    return int(v)


def _int_list(value: Any, key: str, source: str) -> tuple[int, ...]:
    """Sorted distinct positive integers within the bound for `key` (batch sizes or sequence lengths);
    refused before anything is built."""
    where = _where(key, source)
    if not isinstance(value, list) or not value:
        raise ChipswapError(
            f"{where} must be a non-empty list of positive integers, got {one_line(repr(value), 80)};"
            " write the plan with chipswap shapes --out or pass --seq-len"
        )
    if len(value) > MAX_BUCKETS:
        raise ChipswapError(
            f"{where} lists {len(value):,} buckets, over the limit of {MAX_BUCKETS}; a plan needs a handful"
            " (re-plan with chipswap shapes -k N)"
        )
    hi = MAX_BATCH_BUCKET if "batch" in key else MAX_SEQUENCE_BUCKET
    out = []
    for v in value:
        out.append(_positive_int(v, f"{where} holds", hi, f"use values up to {hi:,}"))
    return tuple(sorted(set(out)))


def check_shapes(seq: tuple[int, ...], batch: tuple[int, ...], source: str) -> None:
    """Bounds on the whole grid: the number of shapes (one compile each) and tokens in the largest shape."""
    where = "--seq-len x --batch-sizes" if source == "arguments" else f"plan {source}"
    if len(seq) * len(batch) > MAX_SHAPES:
        raise ChipswapError(
            f"{where} makes {len(seq) * len(batch):,} shapes to compile, over the limit of {MAX_SHAPES:,};"
            " use fewer sequence buckets or batch sizes"
        )
    tokens = seq[-1] * batch[-1]
    if tokens > MAX_BUCKET_TOKENS:
        raise ChipswapError(
            f"{where}: the largest shape, batch {batch[-1]:,} x sequence {seq[-1]:,}, is {tokens:,} tokens,"
            f" over the limit of {MAX_BUCKET_TOKENS:,} per compiled shape; use smaller batch sizes for long"
            " sequences"
        )


def parse_plan(
    data: Any, source: str = "plan", *, default_batch: tuple[int, ...] | None = None
) -> BucketPlan:
    """Read the keys compile needs from a ``chipswap.shapeplan/1`` document; other keys are kept in
    ``extra``."""
    if not isinstance(data, Mapping):
        raise ChipswapError(f"plan {source}: not a JSON object; write it with chipswap shapes --out")
    schema = data.get("schema", PLAN_SCHEMA)
    if schema != PLAN_SCHEMA:
        raise ChipswapError(
            f"plan {source}: schema is {one_line(repr(schema), 80)}, expected {PLAN_SCHEMA!r}; re-plan it"
        )
    _check_known_keys(data, source)
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
    check_shapes(seq, batch, source)
    ml = data.get("max_length", seq[-1])
    ml = _positive_int(ml, f"plan {source}: 'max_length' is", MAX_SEQUENCE_BUCKET)
    extra = {k: v for k, v in data.items() if k not in ("sequence_buckets", "batch_buckets", "max_length")}
    return BucketPlan(seq, batch, ml, extra)


PLAN_MODES = ("encoder", "llm")  # chipswap.shapes.shapeplan.MODES
OVERFLOW_POLICIES = ("reject", "truncate")  # chipswap.shapes.buckets.POLICIES


def _check_known_keys(data: Mapping[str, Any], source: str) -> None:
    """The plan keys compile does not use are still checked against the schema when present (issue 19:
    ``mode = "banana"`` was accepted)."""
    for key, allowed in (("mode", PLAN_MODES), ("overflow_policy", OVERFLOW_POLICIES)):
        if key in data and data[key] not in allowed:
            raise ChipswapError(
                f"plan {source}: {key!r} is {one_line(repr(data[key]), 80)}; use one of {', '.join(allowed)}"
            )
    if "decode_buckets" in data and data["decode_buckets"] != []:
        _int_list(data["decode_buckets"], "decode_buckets", source)


def load_plan(path: str | Path, *, default_batch: tuple[int, ...] | None = None) -> BucketPlan:
    """A plan FILE must say its schema (a dict passed in Python may leave it out)."""
    p = Path(path)
    data = read_json(p, "plan file", max_bytes=MAX_PLAN_BYTES)
    if isinstance(data, Mapping) and "schema" not in data:
        raise ChipswapError(
            f"plan {p} has no 'schema'; write it with chipswap shapes --out (schema {PLAN_SCHEMA!r})"
        )
    return parse_plan(data, str(p), default_batch=default_batch)
