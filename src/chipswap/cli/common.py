"""What the command modules share: flag parsing (every flag value a command reads as text becomes a number,
a list or a term here, or one ChipswapError line naming the flag and an example), the progress line of a
long step, and the one way every command prints a table: ``console()`` (the terminal's width; off a terminal
a wide fixed width) and ``print_table`` (the table where it fits, one card per row
where it does not, so no cell is ever cut to "in…" on a 60-column terminal).

Only flag plumbing and presentation: no decisions, nothing written. Each command module stays one thin layer
over the capability packages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

import typer

from chipswap.cli.fit import print_table as print_table
from chipswap.economics.catalog import TERMS, ReservedTerm
from chipswap.errors import ChipswapError

RESERVED_EXAMPLE = "10000,5.50,1"
T = TypeVar("T")

# Flags several commands declare the same way (one definition; typer reads it at each command).
CATALOG_HELP = "TOML file with the same schema as the shipped catalog; its entries override the shipped ones."
CATALOG_FLAG = typer.Option(None, "--catalog", metavar="FILE", help=CATALOG_HELP)
JSON_TABLE_FLAG = typer.Option(False, "--json", help="Print JSON instead of a table.")


def maybe_flag(*names: str, help: str, **kw: Any) -> Any:  # noqa: A002 - typer's own keyword
    """The most common flag: None unless given (`typer.Option(None, *names, help=...)`); `kw`: typer's other
    keywords (metavar, ...)."""
    return typer.Option(None, *names, help=help, **kw)


def switch(*names: str, help: str) -> Any:  # noqa: A002 - typer's own keyword
    """An on/off flag, off unless given (`typer.Option(False, *names, help=...)`)."""
    return typer.Option(False, *names, help=help)


@contextmanager
def step_progress(enabled: bool, label: str) -> Iterator[Callable[[str], None]]:
    """A rich progress line on a terminal, advanced once per step (`step("us-east-1")`); silent otherwise."""
    if not enabled:
        yield lambda _m: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda m: bar.update(task, advance=1, description=f"{label}: {m}")


def money(d: Decimal | float | str) -> str:
    """Money for people: to the cent, thousands separated, sign first ("-$1,100.80", never "$53803.8038")."""
    from chipswap.economics.cost import usd

    q = usd(Decimal(str(d)))
    sign = "-" if q < 0 else ""
    return f"{sign}${abs(q):,.2f}"


def rate_text(d: Decimal | float | str) -> str:
    """An hourly rate: at least cents, up to the 5 decimals AWS publishes (21.5 -> $21.50, 1.96786 stays)."""
    d = Decimal(str(d)).quantize(Decimal("0.00001"), rounding="ROUND_HALF_UP").normalize()
    places = max(2, -d.as_tuple().exponent)  # type: ignore[operator]
    return f"${d:,.{places}f}"


OFF_TERMINAL_WIDTH = 160  # pipes and CI logs: wide enough that tables stay tables


def console(stderr: bool = False) -> Any:
    """The rich console tables go to: a terminal's own width ($COLUMNS or the window), off a terminal
    OFF_TERMINAL_WIDTH (read at each call; tests set it) so piped tables stay tables. $COLUMNS is not trusted
    off a terminal: GNU readline exports COLUMNS=80 into every child of a process that loaded it."""
    from rich.console import Console

    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=OFF_TERMINAL_WIDTH)


def from_flags(cls: type[T], flags: Mapping[str, Any], **converted: Any) -> T:
    """The dataclass `cls` built from a command's `flags` (its locals()): each flag named like a field goes in
    as given; `converted` holds the fields a command renames or parses, and wins over a flag of that name."""
    from dataclasses import fields

    given = {f.name: flags[f.name] for f in fields(cls) if f.name in flags}  # type: ignore[arg-type]
    return cls(**{**given, **converted})


# --- flag parsing -------------------------------------------------------------------------------------------
MAX_FLAG_VALUE = Decimal(10) ** 12


def flag_number(
    value: str | float | None,
    flag: str,
    *,
    positive: bool = True,
    allow_zero: bool = False,
    example: str | None = None,
) -> Decimal:
    example = example or f"{flag} 20"
    try:
        d = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise ChipswapError(f"{flag} must be a number, got {value!r}; pass e.g. {example}") from None
    if not d.is_finite():
        raise ChipswapError(f"{flag} must be a finite number, got {value!r}; pass e.g. {example}")
    if abs(d) > MAX_FLAG_VALUE:  # money, hours, rates: beyond this the Decimal context overflows when priced
        raise ChipswapError(f"{flag} is {value}, over the {MAX_FLAG_VALUE:,} limit; pass e.g. {example}")
    if positive and (d < 0 or (d == 0 and not allow_zero)):
        need = "0 or more" if allow_zero else "greater than 0"
        raise ChipswapError(
            f"{flag} must be {need}, got {value}; pass a {'non-negative' if allow_zero else 'positive'}"
            " number"
        )
    return d


def optional_number(value: str | None, flag: str, **kw) -> Decimal | None:
    return None if value is None else flag_number(value, flag, **kw)


def flag_count(value: int | str, flag: str) -> int:
    text = str(value).strip()
    try:
        n = int(text)
    except ValueError:
        raise ChipswapError(
            f"{flag} must be a whole number of instances, got {text!r}; pass e.g. {flag} 2"
        ) from None
    if n < 1:
        raise ChipswapError(
            f"{flag} must be at least 1, got {n}; pass the number of instances, e.g. {flag} 2"
        )
    return n


def flag_reserved(text: str | None, flag: str) -> ReservedTerm | None:
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise ChipswapError(
            f"{flag} must be UPFRONT,HOURLY,YEARS (upfront USD, hourly USD, 1 or 3 years), got {text!r};"
            f" e.g. {flag} {RESERVED_EXAMPLE}"
        )
    ex = f"{flag} {RESERVED_EXAMPLE} (upfront USD, hourly USD, years)"
    up = flag_number(parts[0], f"{flag} upfront", allow_zero=True, example=ex)
    hourly = flag_number(parts[1], f"{flag} hourly", allow_zero=True, example=ex)
    if parts[2] not in ("1", "3"):
        raise ChipswapError(f"{flag} years must be 1 or 3, got {parts[2]!r}; e.g. {ex}")
    return ReservedTerm(up, hourly, int(parts[2]))


def flag_term(term: str, flag: str) -> str:
    t = term.strip().lower()
    aliases = {"ondemand": "on-demand", "od": "on-demand", "1y": "1yr", "3y": "3yr", "ri": "ri-effective"}
    t = aliases.get(t, t)
    if t not in TERMS:
        raise ChipswapError(f"unknown {flag}: {term!r}; use one of {', '.join(TERMS)}")
    return t


INT_LIST_EXAMPLES = {"--seq-len": "128,256", "--batch-sizes": "1,4"}


def flag_ints(text: str, flag: str) -> list[int]:
    """Comma-separated integers; their bounds are checked by chipswap.shapes.planfile before anything is
    built."""
    from chipswap.shapes.planfile import MAX_BUCKETS

    items = [x for x in text.replace(" ", "").split(",") if x]
    if len(items) > MAX_BUCKETS:
        raise ChipswapError(
            f"{flag} lists {len(items):,} values, over the limit of {MAX_BUCKETS};"
            f" e.g. {flag} {INT_LIST_EXAMPLES[flag]}"
        )
    try:
        vals = [int(x) for x in items]
    except ValueError:
        raise ChipswapError(
            f"{flag} must be comma-separated integers, got {text!r}; e.g. {flag} {INT_LIST_EXAMPLES[flag]}"
        ) from None
    if not vals or any(v < 1 for v in vals):
        raise ChipswapError(
            f"{flag} must list positive integers, got {text!r}; e.g. {flag} {INT_LIST_EXAMPLES[flag]}"
        )
    return vals


def flag_limit(flag: str, value: float | None, example: str) -> None:
    """Reject negative, NaN and infinite limits before the cache is touched."""
    import math

    if value is None:
        return
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise ChipswapError(f"{flag} must be a finite number >= 0, got {value!r}; pass {example}")
