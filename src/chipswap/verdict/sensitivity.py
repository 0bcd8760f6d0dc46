"""Sensitivity: for each main input, the change that flips the verdict. Pure: no I/O.

The caller supplies, per knob, a pure function value -> verdict (the whole pipeline from that input to the
verdict, with every other input held), the base value and the range to search. Continuous knobs are searched
outward from the base value on a grid (denser near the base) until the verdict changes, then the edge is found
by bisection. Discrete knobs (the pricing term) are evaluated at every choice. The answer is worded by a table
of templates (SHOWN), e.g. "a 1.41x slower Neuron throughput would flip it to 'close call — stay'"; the
printed
number is rounded toward the flip and re-evaluated, so re-running at the printed value does flip, and
`Flip.value` is that printed value.
"""

from __future__ import annotations

import math
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
    value: (
        float | str | None
    )  # the printed value that flips the verdict (rounded toward the flip); None: none
    verdict: str | None  # the verdict at that value
    text: str
    edge: float | str | None = None  # where the verdict changes, unrounded (the bisection's outer point)
    direction: str = ""  # "toward move" / "toward stay" when the search asked for one; "" any change


# the lever each knob pulls: a flip through the money (a fleet re-sized, a price, the porting) or through the
# objective (a fleet meeting the SLO or not); printed beside every row that flips
LEVERS: dict[str, str] = {
    "throughput ratio": "cost: the Neuron fleet re-sized",
    "GPU throughput ratio": "cost: the GPU fleet re-sized",
    "engineer-days": "cost: porting",
    "utilization": "cost: both fleets re-sized",
    "traffic": "cost: both fleets re-sized",
    "price term": "cost: the price of both sides",
    "runs per month": "cost: runs per month",
    "run time (hours)": "cost: the Neuron run's hours",
}


def lever(knob: str) -> str:
    """The lever of a knob, in words ("objective: ..." for an SLO knob)."""
    if knob.endswith(" objective"):
        return "objective: which fleets meet the SLO"
    return LEVERS.get(knob, "cost")


@dataclass(frozen=True)
class Shown:
    """How a knob's value is printed: a display number d = to_d(value, base) rounded to `decimals`, its
    inverse, and the words. Rounding always goes away from the base, into the flipped side, so a rerun at the
    printed value flips (a rounded-back value would not); when that is not enough, more decimals are shown."""

    to_d: Callable[[float, float], float]
    from_d: Callable[[float, float], float]
    decimals: int
    words: Callable[[str, float], str]  # (display number as printed, base) -> text


def _ratio_d(v: float, b: float) -> float:
    r = v / b if b else float("inf")
    return 1 / r if r < 1 else r


_SAME = (lambda v, _b: v, lambda d, _b: d)
_SLOWER = (_ratio_d, lambda d, b: b / d)
_FASTER = (_ratio_d, lambda d, b: b * d)
SHOWN: dict[str, tuple[Shown, Shown]] = {
    # (below the base, above the base)
    "throughput ratio": (
        Shown(*_SLOWER, 2, lambda d, _b: f"a {d}x slower Neuron throughput"),
        Shown(*_FASTER, 2, lambda d, _b: f"a {d}x faster Neuron throughput"),
    ),
    "GPU throughput ratio": (
        Shown(*_SLOWER, 2, lambda d, _b: f"a {d}x slower GPU throughput"),
        Shown(*_FASTER, 2, lambda d, _b: f"a {d}x faster GPU throughput"),
    ),
    "engineer-days": (Shown(*_SAME, 1, lambda d, b: f"porting taking {d} engineer-days instead of {b:.4g}"),)
    * 2,
    "utilization": (
        Shown(
            lambda v, _b: v * 100,
            lambda d, _b: d / 100,
            0,
            lambda d, b: f"running both fleets at {d}% utilization instead of {b:.0%}",
        ),
    )
    * 2,
    "traffic": (Shown(lambda v, b: v / b, lambda d, b: d * b, 2, lambda d, _b: f"{d}x today's traffic"),) * 2,
    "runs per month": (Shown(*_SAME, 2, lambda d, b: f"{d} runs per month instead of {b:.4g}"),) * 2,
    "run time (hours)": (Shown(*_SAME, 1, lambda d, b: f"a Neuron run taking {d} hours instead of {b:.4g}"),)
    * 2,
}
_GENERIC = Shown(*_SAME, 4, lambda d, b: f"{d} instead of {b:.4g}")


def _round_away(d: float, d_base: float, decimals: int) -> float:
    """`d` rounded to `decimals`, away from the base's display value (toward the flip)."""
    q = 10.0**decimals
    return (math.ceil(d * q) if d >= d_base else math.floor(d * q)) / q


def shown_value(
    knob: Knob, value: float, flipped: str, hit: Callable[[str], bool] | None = None
) -> tuple[float, str]:
    """The printed form of a flip at `value`: the rounded value (in knob units) and its words. The rounding
    goes toward the flip and is checked: if the printed value would not flip, more decimals are used.
    `hit`: what counts as flipped (default: the verdict `flipped` itself)."""
    hit = hit or (lambda v: v == flipped)
    below, above = SHOWN.get(knob.name, (_GENERIC, _GENERIC))
    sh = below if value < knob.base else above
    prefix = "" if knob.name in SHOWN else f"{knob.name} = "
    d_base = sh.to_d(knob.base, knob.base) if knob.base else 0.0
    d = sh.to_d(value, knob.base)
    for dec in range(sh.decimals, sh.decimals + 7):
        # the nearest printed number if it already flips (float noise at the edge), else one step further
        step = (1 if d >= d_base else -1) / 10.0**dec
        for dr in (round(d, dec), _round_away(d, d_base, dec), round(d, dec) + step):
            text = f"{dr:.{dec}f}"
            v = sh.from_d(float(text), knob.base)
            if knob.lo <= v <= knob.hi and hit(knob.evaluate(v)):
                return v, prefix + sh.words(text, knob.base)
    return value, prefix + sh.words(f"{d:.{sh.decimals + 6}g}", knob.base)


def _edge(
    f: Callable[[float], str], inside: float, outside: float, hit: Callable[[str], bool], iters: int
) -> float:
    """Bisection between a value that is not a hit (inside) and one that is (outside)."""
    for _ in range(iters):
        mid = (inside + outside) / 2
        if hit(f(mid)):
            outside = mid
        else:
            inside = mid
    return outside


def _search_side(
    f: Callable[[float], str], base: float, end: float, hit: Callable[[str], bool], steps: int, iters: int
) -> float | None:
    prev = base
    for k in range(1, steps + 1):
        x = base + (end - base) * (k / steps) ** 2
        if hit(f(x)):
            return _edge(f, prev, x, hit, iters)
        prev = x
    return None


def flip_point(
    knob: Knob,
    steps: int = 64,
    iters: int = 40,
    toward: Callable[[str], bool] | None = None,
    direction: str = "",
) -> Flip:
    """The value nearest to the base (relative change) at which the verdict changes; both sides searched.
    `toward`: only verdicts it accepts count (e.g. a move), named `direction` in the words."""
    base_verdict = knob.evaluate(knob.base)
    hit = toward or (lambda v: v != base_verdict)
    found: list[float] = []
    for end in (knob.lo, knob.hi):
        if end == knob.base:
            continue
        x = _search_side(knob.evaluate, knob.base, end, hit, steps, iters)
        if x is not None:
            found.append(x)
    if not found:
        return _no_flip(
            knob.name, knob.base, f"no {knob.name} between {knob.lo:.4g} and {knob.hi:.4g}", direction
        )

    def rel(x: float) -> float:
        return abs(x - knob.base) / (abs(knob.base) or 1.0)

    x = min(found, key=rel)
    after = knob.evaluate(x)
    shown, words = shown_value(knob, x, after, toward)
    after = knob.evaluate(shown) if toward is not None else after  # the verdict at the printed value
    return Flip(knob.name, knob.base, shown, after, f"{words} would flip it to '{after}'", x, direction)


def _no_flip(name: str, base: float | str, what: str, direction: str, tail: str = "") -> Flip:
    """The Flip when nothing searched changes the verdict; `what` (e.g. "no other term") leads the words."""
    goal = f" {direction}" if direction else ""
    return Flip(name, base, None, None, f"{what} changes the verdict{goal}{tail}", direction=direction)


def choice_flips(choice: Choice, toward: Callable[[str], bool] | None = None, direction: str = "") -> Flip:
    base_verdict = choice.evaluate(choice.base)
    hit = toward or (lambda v: v != base_verdict)
    flips = []
    unpriced = []
    for c in choice.choices:
        if c == choice.base:
            continue
        v = choice.evaluate(c)
        if v is None:
            unpriced.append(c)
        elif hit(v):
            flips.append((c, v))
    tail = f" ({', '.join(unpriced)}: no published price, not evaluated)" if unpriced else ""
    if not flips:
        return _no_flip(choice.name, choice.base, f"no other {choice.name}", direction, tail)
    c, v = flips[0]
    more = "; ".join(f"{cc} gives '{vv}'" for cc, vv in flips[1:])
    text = (
        f"buying on {c} instead of {choice.base} would flip it to '{v}'"
        + (f"; {more}" if more else "")
        + tail
    )
    return Flip(choice.name, choice.base, c, v, text, c, direction)


def sensitivity(
    knobs: Sequence[Knob],
    choices: Sequence[Choice] = (),
    directions: Sequence[tuple[str, Callable[[str], bool]]] = (),
) -> tuple[Flip, ...]:
    """Every knob's flip; with `directions` ((name, accepts verdict) pairs), one flip per knob per direction,
    direction by direction (e.g. toward move, then toward stay)."""
    if not directions:
        return tuple(flip_point(k) for k in knobs) + tuple(choice_flips(c) for c in choices)
    out: list[Flip] = []
    for name, toward in directions:
        out.extend(flip_point(k, toward=toward, direction=name) for k in knobs)
        out.extend(choice_flips(c, toward, name) for c in choices)
    return tuple(out)
