"""Request traces: read CSV, JSONL and Parquet files into a validated Trace (arrival times and token lengths).

The Azure LLM inference trace schema (`TIMESTAMP,ContextTokens,GeneratedTokens`) and common column names are
recognised without flags; any other schema is read by naming its columns (`columns={"prompt_tokens": "len"}`).
Every bad value is reported as one ChipswapError line naming the file, row and column and what would fix it.

This module is an I/O edge: it reads the trace file and nothing else. No planning logic lives here.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from chipswap.errors import ChipswapError, closest

# Logical field -> names recognised without flags (compared case-insensitively, first match wins).
COLUMN_ALIASES: dict[str, tuple[str, ...]] = {
    "timestamp": ("TIMESTAMP", "timestamp", "time", "arrival_time", "arrival_timestamp", "ts", "created_at"),
    "prompt_tokens": (
        "ContextTokens",
        "prompt_tokens",
        "input_tokens",
        "num_prompt_tokens",
        "prompt_len",
        "prompt_length",
        "input_length",
        "input_len",
        "context_tokens",
        "request_tokens",
        "seq_len",
        "sequence_length",
        "length",
        "tokens",
        "num_tokens",
    ),
    "output_tokens": (
        "GeneratedTokens",
        "output_tokens",
        "completion_tokens",
        "generated_tokens",
        "num_output_tokens",
        "output_len",
        "output_length",
        "response_tokens",
    ),
}
REQUIRED_FIELDS = ("prompt_tokens",)
FIELDS = tuple(COLUMN_ALIASES)
# File suffix -> reader name
FORMATS: dict[str, str] = {
    ".csv": "csv",
    ".tsv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
BUNDLED_TRACE = "azure_llm_2023_code.csv"


@dataclass(frozen=True)
class Trace:
    """A validated request trace.

    timestamps_s: float64 seconds since the first request (sorted as in the file; None if the trace has no
    time
    column). prompt_tokens: int64 >= 1. output_tokens: int64 >= 0, or None if the trace has no output column.
    """

    path: str
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray | None
    timestamps_s: np.ndarray | None
    columns: dict[str, str]

    def __len__(self) -> int:
        return int(self.prompt_tokens.size)

    @property
    def duration_s(self) -> float | None:
        if self.timestamps_s is None or self.timestamps_s.size < 2:
            return None
        return float(self.timestamps_s.max() - self.timestamps_s.min())

    @property
    def arrival_rate_rps(self) -> float | None:
        d = self.duration_s
        return (len(self) - 1) / d if d else None


def bundled_trace_path() -> Path:
    """Path of the bundled Azure LLM code trace (CC-BY 4.0, Patel et al., Splitwise, ISCA 2024)."""
    return Path(str(resources.files("chipswap.data").joinpath("traces", BUNDLED_TRACE)))


def read_trace(path: str | Path, *, columns: dict[str, str] | None = None, fmt: str | None = None) -> Trace:
    """Read and validate a trace.

    `columns` maps fields (timestamp, prompt_tokens, output_tokens) to file columns.
    """
    p = Path(path)
    if not p.exists():
        raise ChipswapError(f"trace file not found: {p}; give the path of a CSV, JSONL or Parquet trace")
    if p.is_dir():
        raise ChipswapError(f"trace path is a folder: {p}; give a CSV, JSONL or Parquet file")
    kind = fmt or FORMATS.get(p.suffix.lower())
    if kind is None:
        raise ChipswapError(
            f"cannot tell the format of {p.name} from its suffix {p.suffix!r}; use .csv, .jsonl or .parquet"
        )
    for key in columns or {}:
        if key not in FIELDS:
            raise ChipswapError(
                f"unknown trace field {key!r} in the column mapping; fields are {', '.join(FIELDS)}"
            )
    header, raw, row_base = _READERS[kind](p)
    if not raw or all(len(v) == 0 for v in raw.values()):
        raise ChipswapError(f"{p}: the trace is empty (no requests); give a trace with at least one row")
    mapping = _map_columns(p, header, columns or {})
    n = len(next(iter(raw.values())))
    if n == 0:
        raise ChipswapError(f"{p}: the trace is empty (no requests); give a trace with at least one row")
    prompt = _lengths(p, raw[mapping["prompt_tokens"]], mapping["prompt_tokens"], row_base, minimum=1)
    output = None
    if "output_tokens" in mapping:
        output = _lengths(p, raw[mapping["output_tokens"]], mapping["output_tokens"], row_base, minimum=0)
    ts = None
    if "timestamp" in mapping:
        ts = _timestamps(p, raw[mapping["timestamp"]], mapping["timestamp"], row_base)
    return Trace(path=str(p), prompt_tokens=prompt, output_tokens=output, timestamps_s=ts, columns=mapping)


# ------------------------------------------------------------------------------------------------------------
# Readers: each returns (header, {column: list or array of raw values}, row number of the first data row)
# ------------------------------------------------------------------------------------------------------------


def _read_csv(p: Path) -> tuple[list[str], dict[str, list], int]:
    delim = "\t" if p.suffix.lower() == ".tsv" else ","
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh, delimiter=delim)
            header = next(reader, None)
            if header is None:
                raise ChipswapError(
                    f"{p}: the trace is empty (no header, no rows); give a CSV with a header row"
                )
            header = [h.strip() for h in header]
            cols: list[list[str]] = [[] for _ in header]
            for lineno, row in enumerate(reader, start=2):
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) != len(header):
                    raise ChipswapError(
                        f"{p}: row {lineno - 1} (line {lineno}) has {len(row)} fields, the header has "
                        f"{len(header)}; fix that line"
                    )
                for c, v in zip(cols, row, strict=True):
                    c.append(v)
    except UnicodeDecodeError as exc:
        raise ChipswapError(f"{p}: not UTF-8 text ({exc.reason}); save the CSV as UTF-8") from None
    except csv.Error as exc:
        raise ChipswapError(f"{p}: CSV parse error: {exc}; fix the file") from None
    return header, dict(zip(header, cols, strict=True)), 1


def _read_jsonl(p: Path) -> tuple[list[str], dict[str, list], int]:
    header: list[str] = []
    rows: list[dict] = []
    with p.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ChipswapError(
                    f"{p}: line {lineno} is not JSON ({exc.msg}); one JSON object per line"
                ) from None
            if not isinstance(obj, dict):
                raise ChipswapError(f"{p}: line {lineno} is not a JSON object; one object per line")
            for key in obj:
                if key not in header:
                    header.append(key)
            rows.append(obj)
    cols = {h: [r.get(h, None) for r in rows] for h in header}
    return header, cols, 1


def _read_parquet(p: Path) -> tuple[list[str], dict[str, object], int]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(p)
    except Exception as exc:  # pyarrow raises several types for bad files
        raise ChipswapError(f"{p}: not a readable Parquet file ({exc}); check the file") from None
    cols: dict[str, object] = {}
    for name in table.column_names:
        col = table.column(name)
        cols[name] = col.to_numpy(zero_copy_only=False) if col.null_count == 0 else col.to_pylist()
    return list(table.column_names), cols, 1


_READERS = {"csv": _read_csv, "jsonl": _read_jsonl, "parquet": _read_parquet}


def _map_columns(p: Path, header: list[str], columns: dict[str, str]) -> dict[str, str]:
    lower = {h.lower(): h for h in header}
    out: dict[str, str] = {}
    for field, aliases in COLUMN_ALIASES.items():
        if field in columns:
            name = columns[field]
            if name not in header:
                hint = closest(name, header)
                raise ChipswapError(
                    f"{p}: column {name!r} (given for {field}) is not in the trace; "
                    f"columns are {', '.join(header)}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                )
            out[field] = name
            continue
        for a in aliases:
            if a.lower() in lower:
                out[field] = lower[a.lower()]
                break
    for field in REQUIRED_FIELDS:
        if field not in out:
            raise ChipswapError(
                f"{p}: no {field} column found among {', '.join(header) or '(none)'}; "
                f"name it with --{field.replace('_tokens', '')}-col COLUMN (recognised: "
                f"{', '.join(COLUMN_ALIASES[field][:4])}, ...)"
            )
    used = [v for v in out.values()]
    if len(set(used)) != len(used):
        raise ChipswapError(
            f"{p}: one column is mapped to two fields ({out}); give each field its own column"
        )
    return out


def _lengths(p: Path, values: object, column: str, row_base: int, *, minimum: int) -> np.ndarray:
    arr = _to_float(p, values, column, row_base, what="a token count")
    bad = ~np.isfinite(arr) | (arr != np.floor(arr))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ChipswapError(
            f"{p}: row {i + row_base}, column {column}: {_show(values, i)} is not a whole number; "
            "token counts are integers"
        )
    low = arr < minimum
    if low.any():
        i = int(np.flatnonzero(low)[0])
        need = "positive (>= 1)" if minimum == 1 else ">= 0"
        raise ChipswapError(
            f"{p}: row {i + row_base}, column {column}: {_show(values, i)} is not {need}; "
            f"token counts must be {need} (drop or fix that row)"
        )
    return arr.astype(np.int64)


def _show(values: object, i: int) -> str:
    v = values[i]  # type: ignore[index]
    return repr(v.item() if hasattr(v, "item") else v)


def _to_float(p: Path, values: object, column: str, row_base: int, *, what: str) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
        return values.astype(np.float64)
    vals = list(values)  # type: ignore[call-overload]
    try:
        return np.asarray(
            [float(v.strip()) if isinstance(v, str) else float(v) for v in vals], dtype=np.float64
        )
    except (TypeError, ValueError):
        pass
    for i, v in enumerate(vals):
        try:
            if isinstance(v, bool):
                raise ValueError
            float(v.strip() if isinstance(v, str) else v)
        except (TypeError, ValueError):
            shown = "an empty value" if v is None or (isinstance(v, str) and not v.strip()) else repr(v)
            raise ChipswapError(
                f"{p}: row {i + row_base}, column {column}: {shown} is not {what}; fix or drop that row"
            ) from None
    raise AssertionError("unreachable")


def _timestamps(p: Path, values: object, column: str, row_base: int) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype.kind == "M":
        t = values.astype("datetime64[ns]").astype(np.int64).astype(np.float64) / 1e9
    elif isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
        t = values.astype(np.float64)
    else:
        vals = list(values)  # type: ignore[call-overload]
        numeric = _try_numeric(vals)
        if numeric is not None:
            t = numeric
        else:
            t = _parse_datetimes(p, vals, column, row_base)
    bad = ~np.isfinite(t)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ChipswapError(
            f"{p}: row {i + row_base}, column {column}: timestamp is not finite; fix that row"
        )
    if t.size == 0:
        return t
    return t - float(t.min())


def _try_numeric(vals: list) -> np.ndarray | None:
    try:
        return np.asarray([float(v) for v in vals], dtype=np.float64)
    except (TypeError, ValueError):
        return None


def _parse_datetimes(p: Path, vals: list, column: str, row_base: int) -> np.ndarray:
    cleaned = [_clean_dt(v) for v in vals]
    try:
        arr = np.asarray(cleaned, dtype="datetime64[ns]")
    except (TypeError, ValueError):
        for i, v in enumerate(cleaned):
            try:
                np.datetime64(v, "ns")
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    raise ValueError
            except (TypeError, ValueError):
                raise ChipswapError(
                    f"{p}: row {i + row_base}, column {column}: {vals[i]!r} is not a timestamp; use ISO 8601 "
                    "(2023-11-16 18:17:03.98) or seconds as a number"
                ) from None
        raise
    if np.isnat(arr).any():
        i = int(np.flatnonzero(np.isnat(arr))[0])
        raise ChipswapError(
            f"{p}: row {i + row_base}, column {column}: {vals[i]!r} is not a timestamp; use ISO 8601 "
            "(2023-11-16 18:17:03.98) or seconds as a number"
        )
    return arr.astype(np.int64).astype(np.float64) / 1e9


def _clean_dt(v: object) -> object:
    if isinstance(v, str):
        s = v.strip()
        if s.endswith("Z"):
            s = s[:-1]
        if (
            len(s) > 6 and s[-6] in "+-" and s[-3] == ":"
        ):  # drop a UTC offset like +00:00 (times are relative)
            s = s[:-6]
        if not s:
            return "not-a-time"
        return s
    if v is None:
        return "not-a-time"
    return v
