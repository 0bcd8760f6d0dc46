"""Figures: a number with its unit, where it came from, and (for predictions) its error band.

Every number the verdict reads is a `Figure`. This module is the ONE place where figures of different origin
are ranked: `pick` chooses, per quantity, the figure whose source ranks highest

    measured > projected > published > stated > assumption

and keeps the others beside it (`Chosen.overridden`) so the report can say what was not used and why. Pure: no
I/O; it may not import torch or read files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Precedence, best first. Every source a workload, the projection or the simulator writes maps to one of
# these.
SOURCES: tuple[str, ...] = ("measured", "projected", "published", "stated", "assumption")
_RANK = {s: i for i, s in enumerate(SOURCES)}
# Sources spelled with their origin in the workload file or the catalog, and the class they rank as.
_ALIASES = {"seed example": "stated", "published benchmark": "published", "simulated": "projected"}


def source_kind(source: str) -> str:
    """The precedence class of a source text: one of SOURCES, or "derived" for computed numbers.

    "catalog: <source> (<as_of>)" prices are published figures; "computed" and "trace" are derived from other
    figures and never compete with them."""
    s = source.strip().lower()
    if s in _RANK:
        return s
    if s in _ALIASES:
        return _ALIASES[s]
    if s.startswith("catalog"):
        return "published"
    if s.startswith(("projected", "simulated")):
        return "projected"
    if s.startswith("measured"):
        return "measured"
    return "derived"


def rank(source: str) -> int:
    """Lower is better; derived numbers rank after every figure."""
    return _RANK.get(source_kind(source), len(SOURCES))


@dataclass(frozen=True)
class Figure:
    """A number and where it came from.

    value: the number (float, int or Decimal); unit: what it counts ("requests/s per instance", "ms", ...);
    source: "measured", "projected", "published", "stated", "assumption" (or an origin that maps to one, e.g.
    "seed example", "catalog: aws (2025-06)"), or "computed"; note: how it was obtained;
    band: relative half-width of the error band for predictions (0.2 means x/1.2 .. x*1.2), None when the
    figure has no band (a stated or measured number the user vouches for).
    """

    value: Any
    unit: str
    source: str
    note: str = ""
    band: float | None = None
    at_least: bool = False  # a lower bound (a measurement that never saturated): the value or more

    @property
    def kind(self) -> str:
        return source_kind(self.source)

    @property
    def low(self) -> float:
        v = float(self.value)
        return v / (1 + self.band) if self.band else v

    @property
    def high(self) -> float:
        v = float(self.value)
        return v * (1 + self.band) if self.band else v

    @property
    def label(self) -> str:
        """ "projected ± 23%", "measured", "assumption": how the report names the figure's origin ("measured,
        a lower bound" for a run that never saturated)."""
        if self.band:
            return f"{self.source} ± {self.band * 100:.0f}%"
        return f"{self.source}, a lower bound" if self.at_least else self.source

    def text(self, fmt: str = ",.3g") -> str:
        return f"{format(float(self.value), fmt)} {self.unit} ({self.label})"


@dataclass(frozen=True)
class Chosen:
    """The figure used for one quantity and the ones it outranked (shown in the report, never used)."""

    figure: Figure | None
    overridden: tuple[Figure, ...] = ()

    @property
    def why(self) -> str:
        if self.figure is None or not self.overridden:
            return ""
        others = "; ".join(f"{o.text()} not used" for o in self.overridden)
        return f"{self.figure.kind} outranks {others}"


def pick(figures: Iterable[Figure | None]) -> Chosen:
    """The best-ranked figure (measured > projected > published > stated > assumption); ties keep the first
    given. None entries (a source that has no figure for this quantity) are skipped. A lower bound
    (`at_least`: a measurement that never saturated) outranks the others only where they fall below it: a
    figure above it agrees with it and is used, the bound beside it."""
    given = [f for f in figures if f is not None]
    if not given:
        return Chosen(None)
    order = sorted(range(len(given)), key=lambda i: (rank(given[i].source), i))
    first = given[order[0]]
    if first.at_least:
        above = [i for i in order[1:] if not given[i].at_least and float(given[i].value) > float(first.value)]
        if above:
            order = [above[0], *(i for i in order if i != above[0])]
    return Chosen(given[order[0]], tuple(given[i] for i in order[1:]))


def is_prediction(f: Figure | None) -> bool:
    return f is not None and f.kind == "projected"


def is_assumed(f: Figure | None) -> bool:
    return f is not None and f.kind == "assumption"
