"""Text from data files made safe to echo: to a terminal (no escape sequences, no fake extra lines) and into
Markdown/HTML (no raw markup). Pure string functions; every place that prints a name or title read from a file
uses these, so a workload title cannot recolour the terminal or forge a "Verdict:" line.
"""

from __future__ import annotations

import html
import re
import unicodedata

# C0 controls, DEL, C1 controls; Unicode line/paragraph separators and bidi overrides (they reorder text).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(text: object, max_chars: int = 300) -> str:
    """`text` as one printable line: controls (newline, ESC, ...) shown as \\xNN, cut at max_chars."""
    s = _CONTROL.sub(_escape, str(text))
    s = "".join(c if unicodedata.category(c) != "Cs" else "\\ufffd" for c in s)
    return s if len(s) <= max_chars else s[: max_chars - 1] + "…"


def md_text(text: object, max_chars: int = 300) -> str:
    """`text` for Markdown: one line, HTML escaped, and the characters Markdown treats as markup escaped."""
    s = html.escape(one_line(text, max_chars), quote=False)
    return re.sub(r"([\\`*_{}\[\]()#+!|~>])", r"\\\1", s)


_HTML_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def html_value(value: object) -> object:
    """Jinja ``finalize`` for HTML reports: a plain string from data keeps tabs and newlines (HTML whitespace)
    but shows every other control character as \\xNN (a raw ESC or bidi override never reaches the page);
    Markup (chipswap's own SVG and CSS) and non-strings pass unchanged."""
    if isinstance(value, str) and not hasattr(value, "__html__"):
        return _HTML_CONTROL.sub(_escape, value)
    return value


def human_number(value: object, unknown: str = "unknown") -> str:
    """A number as a person reads it: thousands separated and whole from 1,000 up ("77,110", never
    "7.711e+04"), 4 significant digits below ("363.4", "1.234"), 3 for fractions ("0.0123"); None ->
    `unknown`."""
    if value is None:
        return unknown
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    if x != x or x in (float("inf"), float("-inf")):
        return unknown
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 1 or x == 0:
        return f"{x:.4g}"
    return f"{x:.3g}" if abs(x) >= 1e-4 else f"{x:.2e}"
