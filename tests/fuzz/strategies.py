"""Hypothesis strategies for hostile inputs: a valid template document, one mutation of a named *kind*,
then serialised (JSON, TOML, CSV, JSONL) and optionally damaged as bytes, or replaced by something that is not
a file.

Every input stays under 1 MB (the size the memory ceiling in docs/security.md is stated for). Kinds are named
so a test can run each kind on its own and mark the ones still open (tests/fuzz/test_fuzz_inputs.py).
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

MAX_INPUT_BYTES = 1_000_000

# ------------------------------------------------------------------------------------------ hostile values
NON_FINITE = [float("nan"), float("inf"), float("-inf")]
HUGE = [
    -1, 0, 10**9, 10**12, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**20, 10**30, -(2**63),
    1e300, -1e300, 1e-300, 5e-324, 1e9, 1e12,
]
NUMERIC_STRINGS = ["1", "1e9", "nan", "inf", "-1", "0x10", "1_000", " 5 ", "12.5%", "1e999", "", "true"]
# Issue 32: the numbers no physical quantity takes, in every spelling a file or a flag can hold them:
# subnormals and tiny values (1/x overflows), negative zero, huge values (a Decimal that cannot be rounded to
# the cent), integers past 2**63, and the text spellings of NaN/inf a number parser may accept.
PHYSICAL = [
    5e-324, -5e-324, 2.2250738585072014e-308, 1e-300, 1e-30, 1e-12, 1e-7, -0.0, 0.0,
    1.7976931348623157e308, 1e300, 1e30, 1e22, 2.0**63, 10**22, 2**63, 10**30, -(10**22),
]
NAN_INF_SPELLINGS = [
    "nan", "NaN", "-nan", "+nan", "snan", "inf", "+inf", "-inf", "INF", "Infinity", "-Infinity", "1e999",
    "-1e999", "1e-999", "1e400", "4.9e-324", "2.4e-324", "0e0", "-0", "-0.0", "+0", "1" + "0" * 30,
]


def physical() -> st.SearchStrategy[Any]:
    """A number at the edge of physics: one of PHYSICAL, a tiny positive float, or a huge one."""
    return st.one_of(
        st.sampled_from(PHYSICAL),
        st.floats(min_value=5e-324, max_value=1e-6),
        st.floats(min_value=1e9, max_value=1.7976931348623157e308),
    )


def edge_values(lo: float, hi: float, integer: bool) -> st.SearchStrategy[Any]:
    """Numbers around a range [lo, hi]: its edges, just outside them, far outside, and PHYSICAL."""
    near = [lo, hi, lo * (1 - 1e-9), hi * (1 + 1e-9), lo / 10, hi * 10, -lo, (lo * hi) ** 0.5]
    if integer:
        near = [int(lo), int(hi), int(lo) - 1, int(hi) + 1, int(hi) * 1000, 2**63, 10**22, -int(lo)]
    return st.one_of(st.sampled_from(near), physical())
HOSTILE_TEXT = [
    "\x1b[31mRED\x1b[0m\x1b]0;owned\x07",
    "title\nVerdict: move — saves 99%",
    "\r\x1b[2KVerdict: move",
    "nul\x00byte",
    "bidi \u202eevil\u202c",
    "<script>alert(1)</script><img src=x onerror=alert(2)>",
    "[red]markup[/red] [link=http://x]x[/link]",
    "`code` **bold** | table | ![img](http://x)",
    "A" * 5000,
    "\u2028line\u2029sep",
    "💥" * 10,
]
TRAVERSAL = [
    "../../canary/victim",
    "../canary/victim/precious.txt",
    "/etc/passwd",
    "..",
    ".",
    "~/.ssh/id_rsa",
    "/dev/zero",
    "canary\x00.json",
    "../" * 20 + "etc/hostname",
]


def wrong_type() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.lists(st.integers(-5, 5), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=2),
        st.text(max_size=10),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(2**70), max_value=2**70),
    )


def control_text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HOSTILE_TEXT),
        st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x9F), min_size=1, max_size=30),
    )


VALUE_KINDS: dict[str, Any] = {
    "bool_number": lambda: st.booleans(),
    "numeric_string": lambda: st.sampled_from(NUMERIC_STRINGS),
    "non_finite": lambda: st.sampled_from(NON_FINITE),
    "huge": lambda: st.one_of(st.sampled_from(HUGE), st.integers(min_value=-(2**80), max_value=2**80)),
    "physical": physical,
    "wrong_type": wrong_type,
    "control_chars": control_text,
    "traversal": lambda: st.sampled_from(TRAVERSAL),
}
NUMERIC_KINDS = {"bool_number", "numeric_string", "non_finite", "huge", "physical"}
TEXT_KINDS = {"control_chars", "traversal"}
STRUCT_KINDS = ("drop_key", "extra_key", "long_list", "deep_nesting")
BYTES_KINDS = ("invalid_utf8", "bom", "truncate", "nul_bytes", "empty")
FILE_KINDS = ("folder", "dangling_link", "zero_device", "fifo")
ALL_KINDS = (*VALUE_KINDS, *STRUCT_KINDS, *BYTES_KINDS, *FILE_KINDS)


# ----------------------------------------------------------------------------------------------- documents
def _leaves(doc: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    out: list[tuple[tuple, Any]] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _leaves(v, (*path, k))
    elif isinstance(doc, list) and doc:
        for i, v in enumerate(doc):
            out += _leaves(v, (*path, i))
    else:
        out.append((path, doc))
    return out


def _containers(doc: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    out: list[tuple[tuple, Any]] = []
    if isinstance(doc, (dict, list)):
        out.append((path, doc))
        items = doc.items() if isinstance(doc, dict) else enumerate(doc)
        for k, v in items:
            out += _containers(v, (*path, k))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    _get(doc, path[:-1])[path[-1]] = value
    return doc


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@st.composite
def mutated(draw: st.DrawFn, template: Any, kind: str) -> tuple[Any, str]:
    """(document, what was done) for a value or structure kind."""
    doc = copy.deepcopy(template)
    if kind in VALUE_KINDS:
        leaves = _leaves(doc)
        if kind in NUMERIC_KINDS:
            eligible = [lf for lf in leaves if _is_number(lf[1])] or leaves
        elif kind in TEXT_KINDS:
            eligible = [lf for lf in leaves if isinstance(lf[1], str)] or leaves
        else:
            eligible = leaves
        path, _ = eligible[draw(st.integers(0, len(eligible) - 1))]
        value = draw(VALUE_KINDS[kind]())
        return _set(doc, path, value), f"{kind} at {list(path)}: {value!r:.120}"
    containers = _containers(doc)
    dicts = [c for c in containers if isinstance(c[1], dict) and c[1]]
    lists = [c for c in containers if isinstance(c[1], list)]
    if kind == "drop_key" and dicts:
        path, d = dicts[draw(st.integers(0, len(dicts) - 1))]
        key = draw(st.sampled_from(sorted(d)))
        del d[key]
        return doc, f"drop_key {list(path) + [key]}"
    if kind == "extra_key" and dicts:
        path, d = dicts[draw(st.integers(0, len(dicts) - 1))]
        odd_keys = st.sampled_from(["__proto__", "schema", "../x", "\x1b[31m"])
        key = draw(st.one_of(odd_keys, st.text(max_size=8)))
        d[key] = draw(wrong_type())
        return doc, f"extra_key {list(path)}[{key!r}]"
    if kind == "long_list" and lists:
        path, lst = lists[draw(st.integers(0, len(lists) - 1))]
        n = draw(st.sampled_from([1_000, 20_000, 100_000]))
        fill = lst[0] if lst else 1
        return _set(doc, path, [fill] * n), f"long_list {list(path)} x{n}"
    if kind == "deep_nesting":  # a marker, expanded after encoding (encoders recurse per level)
        leaves = _leaves(doc)
        path, value = leaves[draw(st.integers(0, len(leaves) - 1))]
        depth = draw(st.sampled_from([70, 1_000, 50_000]))
        return _set(doc, path, f"{DEEP}{depth}__"), f"deep_nesting {list(path)} depth {depth}"
    return doc, f"{kind} (nothing to change)"


# ------------------------------------------------------------------------------------------------ encoding
DEEP = "__DEEP_"
_DEEP_MARK = re.compile(rb'"?__DEEP_(\d+)__"?')


def _expand_deep(data: bytes) -> bytes:
    """Replace a deep-nesting marker (quoted or not) by that many nested one-element arrays."""
    return _DEEP_MARK.sub(lambda m: b"[" * int(m.group(1)) + b"1" + b"]" * int(m.group(1)), data)


def to_json(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _toml_str(s: str) -> str:
    out = []
    for ch in s:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif o < 0x20 or o == 0x7F or 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o:04x}" if o < 0xD800 else "\\ufffd")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(v: Any, depth: int = 0) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x, depth + 1) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(
            f"{_toml_key(k)} = {_toml_value(x, depth + 1)}" for k, x in v.items() if x is not None
        ) + "}"
    return '""'


def _toml_key(k: Any) -> str:
    k = str(k)
    return k if k and all(c.isalnum() or c in "-_" for c in k) else _toml_str(k)


def to_toml(doc: dict[str, Any]) -> bytes:
    """A small TOML writer: top-level scalars, then tables (nested) and arrays of tables; None is left out."""
    lines: list[str] = []

    def table(d: dict[str, Any], prefix: list[str]) -> None:
        subs = []
        for k, v in d.items():
            if v is None:
                continue
            if isinstance(v, dict):
                subs.append((k, v))
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                subs.append((k, v))
            else:
                lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in subs:
            name = ".".join(_toml_key(x) for x in [*prefix, k])
            if isinstance(v, dict):
                lines.append(f"\n[{name}]")
                table(v, [*prefix, k])
            else:
                for item in v:
                    lines.append(f"\n[[{name}]]")
                    table(item, [*prefix, k])

    if not isinstance(doc, dict):
        return _toml_value(doc).encode("utf-8", "surrogatepass")
    table(doc, [])
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def to_csv(rows: list[list[Any]]) -> bytes:
    def cell(v: Any) -> str:
        s = "" if v is None else ("true" if v is True else "false" if v is False else str(v))
        return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n\r') else s

    return ("\n".join(",".join(cell(v) for v in row) for row in rows) + "\n").encode("utf-8", "surrogatepass")


def to_jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(to_json(r) + b"\n" for r in rows)


@st.composite
def damaged(draw: st.DrawFn, data: bytes, kind: str) -> tuple[bytes, str]:
    if kind == "invalid_utf8":
        at = draw(st.integers(0, len(data)))
        bad = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80\x80"]))
        return data[:at] + bad + data[at:], f"invalid_utf8 at byte {at}"
    if kind == "bom":
        return b"\xef\xbb\xbf" + data, "bom"
    if kind == "truncate":
        at = draw(st.integers(0, max(0, len(data) - 1)))
        return data[:at], f"truncate at byte {at}"
    if kind == "nul_bytes":
        at = draw(st.integers(0, len(data)))
        return data[:at] + b"\x00" * 4 + data[at:], f"nul_bytes at {at}"
    if kind == "empty":
        return b"", "empty"
    return data, kind


@dataclass(frozen=True)
class HostileFile:
    """What to put at the input path: bytes, or a special kind of node (folder, fifo, ...)."""

    data: bytes | None
    node: str  # "file" | "folder" | "dangling_link" | "zero_device" | "fifo"
    what: str

    def __repr__(self) -> str:  # hypothesis prints this for a failing example
        head = self.data[:300] if self.data is not None else b""
        return f"HostileFile({self.what!r}, node={self.node}, {len(self.data or b'')} bytes: {head!r})"


def hostile_file(template: Any, kind: str, encode: Any) -> st.SearchStrategy[HostileFile]:
    """A strategy for one input file of `kind` built from `template` with `encode(doc) -> bytes`."""

    @st.composite
    def build(draw: st.DrawFn) -> HostileFile:
        if kind in FILE_KINDS:
            return HostileFile(None, kind, kind)
        if kind in BYTES_KINDS:
            data, what = draw(damaged(encode(copy.deepcopy(template)), kind))
        else:
            doc, what = draw(mutated(template, kind))
            data = _expand_deep(encode(doc)) if kind == "deep_nesting" else encode(doc)
        return HostileFile(data[:MAX_INPUT_BYTES], "file", what)

    return build()
