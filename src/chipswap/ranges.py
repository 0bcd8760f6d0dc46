"""Physical ranges: one table of what a number in each unit may be, and the one check every boundary runs.

Every number chipswap reads from a user (workload files, command-line flags, bench result files, catalog
overrides) has a unit, and every unit a range (``UNITS``): generous enough that no real input is refused,
narrow enough that the arithmetic downstream stays finite and exact (a rate of 5e-324 requests/s makes a
fleet of infinitely many instances; a price of 1e30 $/h a Decimal that cannot be rounded to the cent). Zero
is not in a range unless a field says it may be zero (``zero=True``): then 0 itself is accepted, never a
subnormal next to it. ``FLAGS`` gives every numeric command-line flag its unit (``tests/test_ranges.py``
fails on a numeric flag missing here); workload fields carry theirs in their type
(``chipswap.plan.workload``), bench and catalog fields at the call that reads them. docs/security.md lists
the table.

Pure data and checks: no files, no clock, imports only chipswap.errors.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from chipswap.errors import ChipswapError


@dataclass(frozen=True)
class Range:
    """What a number in one unit may be: [lo, hi] (lo > 0), whole numbers only where `integer`."""

    what: str  # "a request rate"
    unit: str  # "requests/s"
    lo: Decimal
    hi: Decimal
    example: str  # a typical value, for the fix
    integer: bool = False


def _r(what: str, unit: str, lo: str, hi: str, example: str, integer: bool = False) -> Range:
    return Range(what, unit, Decimal(lo), Decimal(hi), example, integer)


# The one table. Bounds are physical: 1e-6 requests/s is one request in 11 days, 1e9 requests/s more than any
# fleet serves; the products and quotients the planner forms of them (fleet = rate / throughput, cost =
# instances x $/h x hours) stay far inside float range and inside the 28 digits a Decimal is exact to.
UNITS: dict[str, Range] = {
    "rate": _r("a request rate", "requests/s", "0.000001", "1000000000", "20"),
    "token_rate": _r("a token rate", "tokens/s", "0.000001", "1000000000000", "2500"),
    "hours": _r("a duration", "hours", "0.000001", "1000000", "20"),
    "hours_per_month": _r("billed hours per month", "hours/month", "0.001", "744", "730"),
    "days": _r("a number of days", "days", "0.001", "100000", "3"),
    "whole_days": _r("a number of days", "days", "1", "100000", "1", integer=True),
    "months": _r("a number of months", "months", "0.001", "1200", "12"),
    "epochs": _r("a number of epochs", "epochs", "0.0001", "10000", "3"),
    "years": _r("a term", "years", "1", "10", "1", integer=True),
    "seconds": _r("a duration", "s", "0.000001", "31536000", "60"),
    "ms": _r("a latency", "ms", "0.001", "86400000", "250"),
    "usd": _r("an amount of money", "USD", "0.000001", "10000000000", "2000"),
    "usd_per_hour": _r("a price", "USD/h", "0.000001", "100000", "5.50"),
    "usd_per_day": _r("a day rate", "USD/day", "0.01", "1000000", "800"),
    "instances": _r("a number of instances", "instances", "1", "100000", "2", integer=True),
    "count": _r("a count", "items", "1", "1000000000", "1000", integer=True),
    "per_month": _r("a number per month", "per month", "0.001", "100000", "4"),
    "tokens": _r("a length", "tokens", "1", "16777216", "512", integer=True),
    "tokens_total": _r("a number of tokens", "tokens", "1", "10000000000000000", "1e9"),
    "batch": _r("a batch size", "sequences", "1", "1048576", "8", integer=True),
    "model_dim": _r("a model dimension", "units", "1", "1048576", "4096", integer=True),
    "fraction": _r("a fraction", "", "0.0001", "1", "0.7"),
    "share": _r("a share", "", "0.000000001", "1", "0.01"),
    "percent": _r("a percentage", "%", "0.0001", "100", "20"),
    "percent_band": _r("an uncertainty", "%", "0.0001", "1000", "5"),
    "factor": _r("a speed factor", "x", "0.0001", "10000", "0.8"),
    "ratio": _r("a ratio", "x", "1", "1000000", "2"),
    "gib": _r("a size", "GiB", "0.001", "1000000", "16"),
    "bytes": _r("a size", "bytes", "1", "4294967296", "1048576", integer=True),
    "port": _r("a TCP port", "", "1", "65535", "8000", integer=True),
    "seed": _r("a seed", "", "1", "4294967295", "0", integer=True),
    "workers": _r("a number of workers", "workers", "1", "1024", "1", integer=True),
    "tolerance": _r("a tolerance", "abs diff", "0.000000000001", "1000000", "0.001"),
    "tflops": _r("a compute peak", "TFLOP/s", "0.000001", "1000000000", "190"),
    "gbps": _r("a bandwidth", "GB/s", "0.001", "1000000000", "820"),
}


@dataclass(frozen=True)
class Spec:
    """One boundary number: its unit, whether exactly 0 is also accepted, and whether the command bounds it
    itself (`own`: its own message and tighter limits stand; the table then only refuses a nonzero value below
    the unit's smallest, the subnormals no "(0, max]" check catches)."""

    unit: str
    zero: bool = False
    own: bool = False


def _s(unit: str, zero: bool = False) -> Spec:
    return Spec(unit, zero)


# Every numeric command-line flag: "command --flag" -> its unit. A comma-separated value (--seq-len 128,256,
# --reserved UPFRONT,HOURLY,YEARS) is checked item by item against the units listed for its positions (the
# last repeats). A value that is not a number at all is left to the command's own parser ("trace", "12.5%").
FLAGS: dict[str, tuple[Spec, ...]] = {
    "plan --close-margin": (_s("percent", zero=True),),
    "plan --train-hours": (_s("hours"),),
    "shapes --k": (_s("count"),),
    "shapes --max-buckets": (_s("count"),),
    "shapes --decode-k": (_s("count"),),
    "shapes --max-length": (_s("tokens"),),
    "shapes --max-total-length": (_s("tokens"),),
    "shapes --max-positions": (_s("tokens"),),
    "shapes --align": (_s("tokens"),),
    "shapes --hidden-size": (_s("model_dim"),),
    "shapes --num-layers": (_s("model_dim"),),
    "shapes --intermediate-size": (_s("model_dim"),),
    "shapes --heads": (_s("model_dim"),),
    "shapes --kv-heads": (_s("model_dim"),),
    "shapes --max-compile-s": (_s("seconds"),),
    "shapes --compile-s-per-bucket": (_s("seconds", zero=True),),
    "shapes --compile-s-per-token": (_s("seconds", zero=True),),
    "shapes --device-memory-gib": (_s("gib"),),
    "shapes --bucket-memory-gib": (_s("gib", zero=True),),
    "shapes --bucket-memory-per-token": (_s("bytes", zero=True),),
    "shapes --arrival-rate": (_s("rate"),),
    "shapes --batch-window-ms": (_s("ms"),),
    "shapes --max-batch": (_s("batch"),),
    "check --timeout": (_s("seconds"),),
    "project --prompt-tokens": (_s("tokens"),),
    "project --output-tokens": (_s("tokens", zero=True),),
    "project --bucket": (_s("tokens"),),
    "project --train-tokens": (_s("tokens_total"),),
    "project --seq-len": (_s("tokens"),),
    "project --nodes": (_s("instances"),),
    "project --global-batch": (_s("batch"),),
    "project --tp": (_s("workers"),),
    "project --replicas": (_s("workers"),),
    "project --batch": (_s("batch"),),
    "trial --tp": (_s("workers"),),
    "trial --batch": (_s("batch"),),
    "capacity --count": (_s("instances"),),
    "capacity --block-days": (_s("whole_days"),),
    "compile --seq-len": (_s("tokens"),),
    "compile --batch-sizes": (_s("batch"),),
    "compile --atol": (_s("tolerance", zero=True),),
    "serve --seq-len": (_s("tokens"),),
    "serve --batch-sizes": (_s("batch"),),
    "serve --max-length": (_s("tokens"),),
    "serve --port": (_s("port", zero=True),),
    "serve --max-batch-delay-ms": (_s("ms", zero=True),),
    "serve --max-queue": (_s("count"),),
    "serve --max-queue-total": (_s("count"),),
    "serve --max-queue-wait-ms": (_s("ms"),),
    "serve --timeout": (_s("seconds"),),
    "serve --workers": (_s("workers"),),
    "serve --max-body-bytes": (_s("bytes"),),
    "serve --drain-timeout": (_s("seconds", zero=True),),
    "serve --threads": (_s("workers"),),
    "serve --max-connections": (_s("count"),),
    "serve --max-connections-per-client": (_s("count"),),
    "serve --header-timeout": (_s("seconds"),),
    "serve --body-timeout": (_s("seconds"),),
    "serve --keep-alive-timeout": (_s("seconds"),),
    "serve --health-port": (_s("port", zero=True),),
    "bench --requests": (_s("count"),),
    "bench --duration": (_s("seconds"),),
    "bench --time-scale": (_s("factor"),),
    "bench --rate": (_s("rate"),),
    "bench --max-length": (_s("tokens"),),
    "bench --timeout": (_s("seconds"),),
    "bench --max-inflight": (_s("count"),),
    "bench --slo-ms": (_s("ms"),),
    "bench --slo-ttft-ms": (_s("ms"),),
    "bench --slo-itl-ms": (_s("ms"),),
    "bench --seed": (_s("seed", zero=True),),
    "cost job --baseline-hours": (_s("hours"),),
    "cost job --candidate-hours": (_s("hours"),),
    "cost job --baseline-count": (_s("instances"),),
    "cost job --candidate-count": (_s("instances"),),
    "cost job --block-days": (_s("whole_days"),),
    "cost job --baseline-rate": (_s("usd_per_hour", zero=True),),
    "cost job --candidate-rate": (_s("usd_per_hour", zero=True),),
    "cost job --reserved": (_s("usd", zero=True), _s("usd_per_hour", zero=True), _s("years")),
    "cost job --porting-days": (_s("days", zero=True),),
    "cost job --day-rate": (_s("usd_per_day", zero=True),),
    "cost job --runs-per-month": (_s("per_month"),),
    "cost serve --throughput": (_s("rate"),),
    "cost serve --rate": (_s("usd_per_hour", zero=True),),
    "cost serve --reserved": (_s("usd", zero=True), _s("usd_per_hour", zero=True), _s("years")),
    "cost serve --utilization": (_s("fraction"),),
    "cost serve --count": (_s("instances"),),
    "cost serve --rps": (_s("rate"),),
    "cost serve --hours-per-month": (_s("hours_per_month"),),
    "cost serve --baseline-throughput": (_s("rate"),),
    "cost serve --baseline-rate": (_s("usd_per_hour", zero=True),),
    "cost serve --baseline-count": (_s("instances"),),
    "cost serve --porting-days": (_s("days", zero=True),),
    "cost serve --day-rate": (_s("usd_per_day", zero=True),),
    "cache prune --older-than": (_s("days", zero=True),),
    "cache prune --max-size": (_s("gib", zero=True),),
}
FLAG_ALIASES: dict[str, str] = {"shapes -k": "shapes --k", "capacity -n": "capacity --count"}
# Commands that bound their own flags (rounds 1-2: their messages name tighter, command-specific limits, e.g.
# "--tp must be 1..256"): for these the table refuses only what those "(0, max]" checks let through, a nonzero
# value below the unit's smallest (5e-324). `cost` and `cache prune` rely on the table alone.
OWN_BOUNDS = frozenset({"plan", "shapes", "check", "project", "capacity", "compile", "serve", "bench"})
FLAGS = {
    key: tuple(Spec(s.unit, s.zero, key.split(" ")[0] in OWN_BOUNDS) for s in specs)
    for key, specs in FLAGS.items()
}


# ------------------------------------------------------------------------------------------------- checks
def show(d: Decimal | float | int) -> str:
    """A bound as people write it: 0.000001, 744, 1e9 (not 1E+9 or 1000000000.0)."""
    d = (Decimal(d) if not isinstance(d, Decimal) else d).normalize()
    exp = d.as_tuple().exponent
    if d != 0 and isinstance(exp, int) and (exp >= 6 or abs(d) < Decimal("0.0001")):
        m, e = f"{d:e}".split("e")
        return f"{m}e{int(e)}"
    return f"{d:f}"


def span(spec: Spec) -> str:
    """'1e-6 to 1e9 requests/s (a request rate)'; '0, or ...' where zero is accepted."""
    r = UNITS[spec.unit]
    unit = f" {r.unit}" if r.unit else ""
    whole = ", a whole number" if r.integer else ""
    return f"{'0, or ' if spec.zero else ''}{show(r.lo)} to {show(r.hi)}{unit} ({r.what}{whole})"


def as_decimal(value: Any) -> Decimal | None:
    """A plain number (int, float, Decimal, numeric text) as an exact Decimal; -0 is 0; None if not one."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, float):
            d = Decimal(repr(value)) if math.isfinite(value) else Decimal(str(value))
        elif isinstance(value, (int, Decimal)):
            d = Decimal(value)
        elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?[\w.+-]+\s*", value) and len(value) < 400:
            d = Decimal(value.strip())
        else:
            return None
    except (InvalidOperation, ValueError):
        return None
    return d + 0 if d.is_finite() and d.is_zero() else d  # -0 -> 0


def problem(value: Any, spec: Spec) -> str | None:
    """Why `value` is not a number in `spec`'s range ('outside ...', 'not finite', ...), or None if it is."""
    d = as_decimal(value)
    if d is None:
        return f"not a number; allowed {span(spec)}"
    if not d.is_finite():
        return f"not finite; allowed {span(spec)}"
    r = UNITS[spec.unit]
    if d.is_zero() and spec.zero:
        return None
    if d < r.lo or d > r.hi:
        return f"outside {span(spec)}"
    if r.integer and d != d.to_integral_value():
        return f"not a whole number; allowed {span(spec)}"
    return None


def check(value: Any, spec: Spec | str, where: str, fix: str = "") -> Decimal:
    """`value` as an exact Decimal, or one ChipswapError line: where, the value, the range with its unit, the
    fix (default: give a value in that range, e.g. the unit's example)."""
    spec = Spec(spec) if isinstance(spec, str) else spec
    why = problem(value, spec)
    if why is not None:
        shown = value if isinstance(value, (str, Decimal)) else repr(value)
        fix = fix or f"give a value in that range, e.g. {UNITS[spec.unit].example}"
        raise ChipswapError(f"{where} is {str(shown)[:60]}, {why}; {fix}")
    d = as_decimal(value)
    assert d is not None
    return d


def data_number(value: Any, where: str, spec: Spec | str, fix: str = "") -> float:
    """A number read from a data file (JSON/TOML): a real int/float (never a bool or a string) in range."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise ChipswapError(f"{where} must be a number, got {value!r:.60}; write a plain number")
    return float(check(value, spec, where, fix))


# ------------------------------------------------------------------------------------ command-line values
def _command_of(argv: list[str]) -> str | None:
    """'cost serve' / 'shapes': the leading words of argv that name a command in FLAGS."""
    words: list[str] = []
    for a in argv:
        if a.startswith("-"):
            break
        words.append(a)
        if len(words) == 2:
            break
    known = {k.rsplit(" ", 1)[0] for k in FLAGS}
    for n in (2, 1):
        name = " ".join(words[:n])
        if len(words) >= n and name in known:
            return name
    return None


def flag_problem(flag_key: str, value: str) -> str | None:
    """The one error line for a value of a numeric flag ('cost serve --throughput'), or None when it is in
    range or not a number at all (the command's own parser then names what it expects)."""
    specs = FLAGS[flag_key]
    flag = flag_key.rsplit(" ", 1)[1]
    items = value.split(",") if "," in value else [value]
    if len(specs) > 1 and len(items) != len(specs):
        return None  # the command names the expected form
    for i, item in enumerate(items):
        spec = specs[min(i, len(specs) - 1)]
        text = item.strip().removesuffix("%") if spec.unit == "percent" else item.strip()
        d = as_decimal(text)
        if d is None and text.lower().lstrip("+-") not in ("nan", "inf", "infinity", "snan"):
            continue
        why = problem(text, spec)
        if why is not None and spec.own and not below_floor(d, spec):
            continue  # the command's own bound names it
        if why is not None:
            part = f" (item {i + 1})" if len(items) > 1 else ""
            example = ",".join(UNITS[s.unit].example for s in specs)
            return f"{flag}{part} is {text[:60]}, {why}; pass a value in that range, e.g. {flag} {example}"
    return None


def below_floor(d: Decimal | None, spec: Spec) -> bool:
    """A nonzero finite value smaller than the unit's smallest (what "(0, max]" checks let through)."""
    return d is not None and d.is_finite() and not d.is_zero() and abs(d) < UNITS[spec.unit].lo


def check_flags(argv: list[str]) -> None:
    """Every numeric flag value in `argv` in its physical range, before any command runs (one error line)."""
    command = _command_of(argv)
    if command is None:
        return
    for i, a in enumerate(argv):
        if a == "--":
            break
        name, eq, inline = a.partition("=")
        key = FLAG_ALIASES.get(f"{command} {name}", f"{command} {name}")
        if key not in FLAGS:
            continue
        value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
        if value is None:
            continue
        why = flag_problem(key, value)
        if why is not None:
            raise ChipswapError(why)
