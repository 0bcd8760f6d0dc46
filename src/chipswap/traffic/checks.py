"""What a valid trace value is, written once as SQL for the engine and explained once in words for the user.

For each field (prompt/output token counts, a histogram's request counts, arrival times) and each column type
the engine may report, `field_sql` gives the cleaned value and the condition that it is valid, evaluated
inside
the scan, so a bad row is counted without materialising the trace. `explain` turns the first bad row that
chipswap.traffic.diagnose finds into the one-line reason. Bounds come from
chipswap.shapes.histogram.MAX_LENGTH, so
every later allocation sized by a length is bounded before it happens.

Pure string building; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from chipswap.shapes.histogram import MAX_LENGTH
from chipswap.traffic.source import ident

# A histogram row may stand for at most this many requests (float64 stays exact below it).
MAX_COUNT = 1 << 53
# A value read as text is parsed only up to this length (a count or a time needs a few dozen characters);
# longer is invalid without being parsed, so the work per row stays linear in its bytes (issue 32).
MAX_VALUE_CHARS = 1000

INTEGER_TYPES = {
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
    "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT",
}  # fmt: skip
WIDE_INTEGER_TYPES = {"HUGEINT", "UBIGINT", "UHUGEINT"}
FLOAT_TYPES = {"FLOAT", "DOUBLE", "REAL"}
TEXT_TYPES = {"VARCHAR", "JSON"}
UNBOUNDED_TYPES = {"BIGNUM", "VARINT"}  # arbitrary precision: read as text instead
TIME_TYPES = {
    "TIMESTAMP", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS", "TIMESTAMP WITH TIME ZONE", "DATE",
}  # fmt: skip


@dataclass(frozen=True)
class Rule:
    """Bounds and wording for one integer field."""

    minimum: int
    maximum: int
    what: str  # "a token count"
    fix: str


RULES: dict[str, Rule] = {
    "prompt_tokens": Rule(1, MAX_LENGTH, "a token count", "token counts are integers"),
    "output_tokens": Rule(0, MAX_LENGTH, "a token count", "token counts are integers"),
    "count": Rule(0, MAX_COUNT, "a request count", "counts are whole numbers of requests"),
}


def _base(dtype: str) -> str:
    return dtype.split("(")[0].upper()


def number_sql(column: str, dtype: str) -> str | None:
    """SQL for the column as a number (NULL where it is not one); None if the type cannot hold numbers."""
    c = ident(column)
    base = _base(dtype)
    if base in INTEGER_TYPES or base in FLOAT_TYPES or base == "DECIMAL":
        return c
    if base in TEXT_TYPES:  # the length first: no value is parsed past MAX_VALUE_CHARS (issue 32)
        s = f"CAST({c} AS VARCHAR)"
        return f"(CASE WHEN length({s}) <= {MAX_VALUE_CHARS} THEN TRY_CAST({s} AS DOUBLE) END)"
    return None


def field_sql(field: str, column: str, dtype: str) -> tuple[str, str]:
    """(value as BIGINT, valid condition) for an integer field.

    For integer column types the value is the column itself (out of range where not valid: cheap, and callers
    that clamp it can tell an invalid row from the clamped key); for every other type it is NULL where not
    valid.
    """
    rule = RULES[field]
    c = ident(column)
    base = _base(dtype)
    bounds = f"BETWEEN {rule.minimum} AND {rule.maximum}"
    if base in INTEGER_TYPES:  # wider than BIGINT: TRY_CAST, so an invalid row never stops the scan
        cast = "TRY_CAST" if base in WIDE_INTEGER_TYPES else "CAST"
        return f"{cast}({c} AS BIGINT)", f"({c} IS NOT NULL AND {c} {bounds})"
    num = number_sql(column, dtype)
    if num is None:  # booleans, dates, lists, ...: never a count
        return "CAST(NULL AS BIGINT)", "false"
    x = f"CAST({num} AS DOUBLE)"
    valid = f"({x} IS NOT NULL AND isfinite({x}) AND {x} = floor({x}) AND {x} {bounds})"
    return f"CASE WHEN {valid} THEN TRY_CAST({x} AS BIGINT) END", valid


def time_sql(column: str, dtype: str) -> tuple[str, str]:
    """(arrival as DOUBLE seconds, valid condition). Numbers are seconds; text is seconds or ISO 8601."""
    c = ident(column)
    base = _base(dtype)
    if base in TIME_TYPES:
        x = f"(epoch_us(CAST({c} AS TIMESTAMPTZ)) / 1e6)"
    elif base in INTEGER_TYPES or base in FLOAT_TYPES or base == "DECIMAL":
        x = f"CAST({c} AS DOUBLE)"
    elif base in TEXT_TYPES:
        s = f"CAST({c} AS VARCHAR)"
        x = (
            f"(CASE WHEN length({s}) <= {MAX_VALUE_CHARS} THEN "
            f"COALESCE(TRY_CAST({s} AS DOUBLE), epoch_us(TRY_CAST({s} AS TIMESTAMPTZ)) / 1e6) END)"
        )
    else:
        return "CAST(NULL AS DOUBLE)", "false"
    return x, f"({x} IS NOT NULL AND isfinite({x}))"


SHOWN_CHARS = 40  # a value is quoted up to this many characters (a 1 MiB value is not echoed whole)


def shown_value(raw: str) -> str:
    """A value as messages quote it: repr of at most SHOWN_CHARS characters, then its length."""
    if len(raw) <= SHOWN_CHARS:
        return repr(raw)
    return f"{raw[:SHOWN_CHARS]!r}... ({len(raw):,} characters)"


def explain(field: str, column: str, dtype: str, raw: str | None, number: float | None) -> str:
    """Why the value `raw` (as text; None when missing) of `column` is not valid for `field`."""
    shown = "an empty value" if raw is None or not str(raw).strip() else shown_value(str(raw))
    if raw is not None and len(str(raw)) > MAX_VALUE_CHARS:
        what = "a timestamp" if field == "timestamp" else RULES[field].what
        return (
            f"column {column}: {shown} is longer than {MAX_VALUE_CHARS:,} characters, so not {what}; fix or "
            "drop that row"
        )
    if field == "timestamp":
        return (
            f"column {column}: {shown} is not a timestamp; use ISO 8601 (2023-11-16 18:17:03.98) or seconds "
            "as a number"
        )
    rule = RULES[field]
    base = _base(dtype)
    if raw is None or not str(raw).strip():
        return f"column {column}: an empty value is not {rule.what}; fix or drop that row"
    if base == "BOOLEAN" or str(raw).strip().lower() in ("true", "false"):
        return f"column {column}: {shown} is a boolean, not {rule.what}; fix or drop that row"
    if number is None:
        return f"column {column}: {shown} is not {rule.what}; fix or drop that row"
    if math.isnan(number) or (math.isfinite(number) and number != math.floor(number)):
        return f"column {column}: {shown} is not a whole number; {rule.fix}"
    if number < rule.minimum:
        need = "positive (>= 1)" if rule.minimum == 1 else f">= {rule.minimum}"
        return (
            f"column {column}: {shown} is not {need}; {rule.what[2:]}s must be {need} (drop or fix that row)"
        )
    unit = "tokens per request" if rule.maximum == MAX_LENGTH else "requests per row"
    return (
        f"column {column}: {shown} exceeds chipswap's limit of {rule.maximum:,} {unit}; fix or drop that row "
        "(no model serves a context that long)"
        if rule.maximum == MAX_LENGTH
        else f"column {column}: {shown} exceeds the limit of {rule.maximum:,} {unit}; split that row"
    )
