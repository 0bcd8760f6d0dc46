"""Reading data files someone else may have written (plans, compiled sets, bench results, configs).

One place that turns every way a data file can be wrong into one ChipswapError line naming the file and the
fix: missing, a folder instead of a file, too large, not UTF-8, not JSON/TOML, nested too deep. Data files are
parsed, never executed (no pickle, no imports). May not write anything, import torch, or follow names found
inside the data (callers validate those with `inside`).
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError

# plans, sets, configs and bench results are KB to MB; a file over 64 MiB is an error, not data
MAX_DATA_FILE_BYTES = 64 * 1024 * 1024
MAX_NESTING = 64  # deeper than any file chipswap writes; deeper input is refused before recursion blows up


def read_text(path: str | Path, what: str, *, max_bytes: int = MAX_DATA_FILE_BYTES) -> str:
    """The UTF-8 text of a data file, or one error line naming `what` (e.g. "plan file") and the fix."""
    p = Path(path)
    if p.is_dir():
        raise ChipswapError(f"{what} {p} is a folder, not a file; give the path of the file itself")
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise ChipswapError(f"cannot read {what} {p}: {exc.strerror or exc}; check the path") from None
    if size > max_bytes:
        raise ChipswapError(
            f"{what} {p} is {size:,} bytes, over the {max_bytes:,}-byte limit for such files; "
            "check that it is the right file"
        )
    try:
        raw = _read_at_most(p, max_bytes + 1)  # a device or FIFO has no size to check: stop reading instead
    except OSError as exc:
        raise ChipswapError(f"cannot read {what} {p}: {exc.strerror or exc}; check the path") from None
    if len(raw) > max_bytes:
        raise ChipswapError(
            f"{what} {p} is over the {max_bytes:,}-byte limit for such files; check that it is the right file"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ChipswapError(
            f"{what} {p} is not UTF-8 text (byte {exc.start}); save it as UTF-8 (JSON/TOML are always UTF-8)"
        ) from None


def _read_at_most(path: Path, limit: int) -> bytes:
    """Up to `limit` bytes; opening never blocks on a FIFO with no writer (it reads as empty)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _depth_ok(text: str, limit: int) -> bool:
    """Pre-scan: bracket depth outside strings stays <= `limit` (json and tomllib recurse per level)."""
    depth = 0
    in_str = False
    esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


# transformers writes a non-finite float as {"__float__": "Infinity"} (PreTrainedConfig.to_json_string) and an
# older version wrote the bare literal; both are how a config.json holds e.g. Mamba-2's time_step_limit.
_FLOAT_TAG = "__float__"
_NONFINITE = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


def _tagged_float(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and _FLOAT_TAG in obj:
        value = obj[_FLOAT_TAG]
        if not isinstance(value, str) or value not in _NONFINITE:
            raise ValueError(f"{_FLOAT_TAG} must be one of {', '.join(_NONFINITE)}, got {str(value)[:20]!r}")
        return _NONFINITE[value]
    return obj


def parse_json(text: str, what: str, source: str = "", *, nonfinite: bool = False) -> Any:
    """JSON text to Python values; nesting deeper than MAX_NESTING is refused, and NaN/Infinity too unless
    `nonfinite` (model configs, which transformers writes with bare or tagged non-finite floats)."""
    where = f"{what} {source}".strip()
    if not _depth_ok(text, MAX_NESTING):
        raise ChipswapError(f"{where} is nested deeper than {MAX_NESTING} levels; not a chipswap file")
    try:
        if nonfinite:
            return json.loads(text, parse_constant=_NONFINITE.__getitem__, object_hook=_tagged_float)
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ChipswapError(
            f"{where} is not JSON ({exc.msg} at line {exc.lineno}); fix or regenerate it"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ChipswapError(f"{where} is not valid JSON ({exc}); fix or regenerate it") from None


def read_json(
    path: str | Path, what: str, *, max_bytes: int = MAX_DATA_FILE_BYTES, nonfinite: bool = False
) -> Any:
    """Read and parse a JSON data file with every failure as one error line."""
    return parse_json(read_text(path, what, max_bytes=max_bytes), what, str(path), nonfinite=nonfinite)


def parse_toml(text: str, where: str, *, fix: str = "fix it", **kw: Any) -> dict[str, Any]:
    """TOML text to Python values (kw go to tomllib.loads), every failure one error line starting with
    `where`: bad syntax, nesting deeper than MAX_NESTING, an integer longer than Python converts (4,300
    digits: tomllib raises a bare ValueError). The one TOML parser for configs, catalogs and workloads."""
    if not _depth_ok(text, MAX_NESTING):
        raise ChipswapError(f"{where} is nested deeper than {MAX_NESTING} levels; not a chipswap file")
    try:
        return tomllib.loads(text, **kw)
    except tomllib.TOMLDecodeError as exc:
        raise ChipswapError(f"{where} is not valid TOML ({exc}); {fix}") from None
    except RecursionError:
        raise ChipswapError(f"{where} is nested too deeply; not a chipswap file") from None
    except ValueError as exc:  # int() past sys.get_int_max_str_digits(), or a parse_float that refused
        why = "an integer with too many digits" if "digits" in str(exc) else str(exc)[:80]
        raise ChipswapError(f"{where} holds {why}; write a plain number of at most a few digits") from None


def read_toml(
    path: str | Path, what: str, *, max_bytes: int = MAX_DATA_FILE_BYTES, **kw: Any
) -> dict[str, Any]:
    """Read and parse a TOML data file with every failure as one error line (kw go to tomllib.loads)."""
    return parse_toml(read_text(path, what, max_bytes=max_bytes), f"{what} {path}", **kw)


def strict_number(value: Any, field: str, *, lo: float | None = None, hi: float | None = None) -> float:
    """A finite real number from data, never a bool or a string; inclusive bounds; errors name the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ChipswapError(f"{field} must be a number, got {value!r}; write a plain number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ChipswapError(f"{field} must be a finite number, got {value!r}; write a plain number")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ChipswapError(f"{field} is {value!r}, outside [{lo}, {hi}]; give a value in that range")
    return float(value)


def strict_int(value: Any, field: str, *, lo: int = 0, hi: int) -> int:
    """An integer from data within [lo, hi] (the upper bound is required: it bounds allocations)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChipswapError(f"{field} must be an integer, got {value!r}; write a whole number")
    if value < lo or value > hi:
        raise ChipswapError(f"{field} is {value:,}, outside [{lo:,}, {hi:,}]; give a value in that range")
    return int(value)


def inside(root: str | Path, name: str, what: str) -> Path:
    """`root / name` resolved, refused unless it stays inside `root` (data names never escape it)."""
    if not name or "\x00" in name or Path(name).is_absolute():
        raise ChipswapError(f"{what} {name!r} is not a plain relative name; the file was edited")
    base = Path(root).resolve()
    target = (base / name).resolve()
    if target != base and base not in target.parents:
        raise ChipswapError(f"{what} {name!r} points outside {base}; the file was edited or is hostile")
    return target
