"""Sensitivity: for each main input, the change that flips the verdict. Pure: no I/O.

The caller supplies, per knob, a pure function value -> verdict (the whole pipeline from that input to the
verdict, with every other input held), the base value and the range to search. Continuous knobs are searched
outward from the base value on a grid (denser near the base) until the verdict changes, then the edge is found
by bisection. Discrete knobs (the pricing term) are evaluated at every choice. The answer is worded by a table
of templates, e.g. "a 1.41x slower Neuron throughput would flip it to 'close call — stay'".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Knob:
    """One continuous input: its name, base value and the range searched (absolute values)."""

    name: str
    base: float
    lo: float
    hi: float
    evaluate: Callable[[float], str]


@dataclass(frozen=True)
class Choice:
    """One discrete input: its name, base choice and the other choices."""

    name: str
    base: str
    choices: tuple[str, ...]
    evaluate: Callable[[str], str | None]  # None: this choice cannot be evaluated (e.g. no published price)


@dataclass(frozen=True)
class Flip:
    knob: str
    base: float | str
    value: float | str | None  # the nearest value that flips the verdict, None when none in range
    verdict: str | None  # the verdict at that value
    text: str


def _wording(name: str, base: float, value: float) -> str:
    ratio = value / base if base else float("inf")
    table: dict[str, Callable[[], str]] = {
        "throughput ratio": lambda: (
            f"a {1 / ratio:.2f}x slower Neuron throughput"
            if ratio < 1
            else f"a {ratio:.2f}x faster Neuron throughput"
        ),
        "engineer-days": lambda: f"porting taking {value:.1f} engineer-days instead of {base:g}",
        "utilization": lambda: f"running the Neuron fleet at {value:.0%} utilization instead of {base:.0%}",
        "traffic": lambda: f"{ratio:.2f}x today's traffic",
        "runs per month": lambda: f"{value:.2f} runs per month instead of {base:g}",
        "run time (hours)": lambda: f"a Neuron run taking {value:.1f} hours instead of {base:g}",
    }
    return table.get(name, lambda: f"{name} = {value:.4g} instead of {base:.4g}")()


def _edge(f: Callable[[float], str], inside: float, outside: float, base_verdict: str, iters: int) -> float:
    """Bisection between a value with the base verdict (inside) and one without (outside)."""
    for _ in range(iters):
        mid = (inside + outside) / 2
        if f(mid) == base_verdict:
            inside = mid
        else:
            outside = mid
    return outside


def _search_side(
    f: Callable[[float], str], base: float, end: float, base_verdict: str, steps: int, iters: int
) -> float | None:
    prev = base
    for k in range(1, steps + 1):
        x = base + (end - base) * (k / steps) ** 2
        if f(x) != base_verdict:
            return _edge(f, prev, x, base_verdict, iters)
        prev = x
    return None


def flip_point(knob: Knob, steps: int = 64, iters: int = 40) -> Flip:
    """The value nearest to the base (relative change) at which the verdict changes; both sides searched."""
    base_verdict = knob.evaluate(knob.base)
    found: list[float] = []
    for end in (knob.lo, knob.hi):
        if end == knob.base:
            continue
        x = _search_side(knob.evaluate, knob.base, end, base_verdict, steps, iters)
        if x is not None:
            found.append(x)
    if not found:
        return Flip(
            knob.name,
            knob.base,
            None,
            None,
            f"no {knob.name} between {knob.lo:.4g} and {knob.hi:.4g} changes the verdict",
        )

    def rel(x: float) -> float:
        return abs(x - knob.base) / (abs(knob.base) or 1.0)

    x = min(found, key=rel)
    after = knob.evaluate(x)
    return Flip(
        knob.name, knob.base, x, after, f"{_wording(knob.name, knob.base, x)} would flip it to '{after}'"
    )


def choice_flips(choice: Choice) -> Flip:
    base_verdict = choice.evaluate(choice.base)
    flips = []
    unpriced = []
    for c in choice.choices:
        if c == choice.base:
            continue
        v = choice.evaluate(c)
        if v is None:
            unpriced.append(c)
        elif v != base_verdict:
            flips.append((c, v))
    tail = f" ({', '.join(unpriced)}: no published price, not evaluated)" if unpriced else ""
    if not flips:
        return Flip(choice.name, choice.base, None, None, f"no other {choice.name} changes the verdict{tail}")
    c, v = flips[0]
    more = "; ".join(f"{cc} gives '{vv}'" for cc, vv in flips[1:])
    text = (
        f"buying on {c} instead of {choice.base} would flip it to '{v}'"
        + (f"; {more}" if more else "")
        + tail
    )
    return Flip(choice.name, choice.base, c, v, text)


def sensitivity(knobs: Sequence[Knob], choices: Sequence[Choice] = ()) -> tuple[Flip, ...]:
    return tuple(flip_point(k) for k in knobs) + tuple(choice_flips(c) for c in choices)
