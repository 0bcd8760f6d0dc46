"""Input shapes for the readiness check: ``--shape NAME=DIMxDIM[:DTYPE]`` flags, a shape-plan file, or the
model's own default inputs per batch x sequence bucket -> shape sets (``InputSpec``). Pure parsing and
bounds (every dimension at most MAX_DIM, at most 8 of them); the model's input names come from
chipswap.models, imported where needed. Prints nothing, writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError, closest
from chipswap.textsafe import one_line

MAX_DIM = 1 << 20  # largest single dimension a --shape or plan may ask for

InputSpec = dict[str, tuple[tuple[int, ...], str]]

_SHAPE = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(\d+(?:\s*[x×]\s*\d+)*)\s*(?::\s*([A-Za-z0-9_]+))?\s*$"
)
_DTYPES = {
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
}
_DTYPE_ALIASES = {
    "long": "int64",
    "int": "int32",
    "float": "float32",
    "half": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp16": "float16",
    "double": "float64",
    "i64": "int64",
    "i32": "int32",
}


def parse_shape(text: str) -> tuple[str, tuple[int, ...], str]:
    """'input_ids=1x128:int64' -> ('input_ids', (1, 128), 'int64'). dtype defaults to int64."""
    m = _SHAPE.match(text or "")
    if not m:
        raise ChipswapError(
            f"cannot parse --shape {text!r}; use NAME=DIMxDIM[:DTYPE], e.g. input_ids=1x128:int64"
        )
    name, dims_s, dt = m.group(1), m.group(2), (m.group(3) or "int64").lower()
    parts = re.split(r"\s*[x×]\s*", dims_s)
    if len(parts) > 8 or any(len(x) > 8 for x in parts):
        raise ChipswapError(
            f"--shape {one_line(text, 80)!r} has too many or too large dimensions; "
            f"each dimension is at most {MAX_DIM:,}, at most 8 of them"
        )
    dims = tuple(int(x) for x in parts)
    if any(d > MAX_DIM for d in dims):
        raise ChipswapError(
            f"a dimension in --shape {one_line(text, 80)!r} is over {MAX_DIM:,}; use a smaller shape"
        )
    if any(d < 1 for d in dims):
        raise ChipswapError(f"every dimension must be >= 1 in --shape {text!r}; e.g. input_ids=1x128:int64")
    dt = _DTYPE_ALIASES.get(dt, dt)
    if dt not in _DTYPES:
        hint = closest(dt, _DTYPES)
        raise ChipswapError(
            f"unknown dtype {dt!r} in --shape {text!r}"
            + (f"; did you mean {', '.join(hint)}?" if hint else f"; one of {', '.join(sorted(_DTYPES))}")
        )
    return name, dims, dt


def specs_from_flags(flags: Sequence[str]) -> list[InputSpec]:
    """Repeated --shape flags -> shape sets; the k-th flag for a name goes to the k-th set."""
    sets: list[InputSpec] = []
    seen: dict[str, int] = {}
    for text in flags:
        name, dims, dt = parse_shape(text)
        k = seen.get(name, 0)
        seen[name] = k + 1
        while len(sets) <= k:
            sets.append({})
        sets[k][name] = (dims, dt)
    if sets and any(set(s) != set(sets[0]) for s in sets):
        raise ChipswapError(
            "each repeated --shape set must name the same inputs; got "
            + " | ".join(",".join(s) for s in sets)
            + "; repeat every input once per shape set"
        )
    return sets


def load_plan(path: str | Path) -> tuple[list[int], list[int]]:
    """(batch_buckets, sequence_buckets) from a chipswap.shapeplan/1 JSON file (other keys ignored)."""
    from chipswap.shapes.planfile import load_plan as read_plan

    plan = read_plan(path, default_batch=(1,))
    return list(plan.batch_buckets), list(plan.sequence_buckets)


def default_specs(
    ref: Any, batches: Sequence[int], seqs: Sequence[int], *, task: str | None = None
) -> list[InputSpec]:
    """One shape set per batch x sequence bucket, with the model's own inputs (text, pixels, audio, decoder
    ids).

    Inputs of a fixed size (pixels, audio features) do not vary with the sequence bucket: a model without a
    sequence input gets one shape set per batch bucket.
    """
    from chipswap import models

    info = models.model_inputs(ref, task=task)
    has_seq = any(n not in info.fixed for n in info.defaults)
    out: list[InputSpec] = []
    for b in batches:
        for s in seqs if has_seq else seqs[:1]:
            out.append(info.spec(b, s))
    return out


def default_seq(ref: Any) -> int:
    """Sequence length of the default shape set: 128, or less for a model with few positions (positions of
    RoBERTa-style models start after the padding index, so two are kept in reserve)."""
    max_pos = int(ref.config.get("max_position_embeddings") or 0)
    return min(128, max(1, max_pos - 2)) if max_pos else 128
