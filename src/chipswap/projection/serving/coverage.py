"""What the physical model's calibration covers, and the band a figure gets off the fitted shape.

A band is the held-out error of the kind of extrapolation a projection makes (measured by
chipswap.projection.fitting.physfit: leave one source out inside the data; long prompts, TP, model size and
an unseen chip family outside it), never a distance penalty. A dimension beyond the reach of every test,
or a band of +-100 % or more, is not a number: the figure is "outside what the calibration covers —
measure it (chipswap trial)".

What it is for: chipswap.projection.layouts (each layout's bands and refusal) and chipswap.cli.project
(printing a refused figure). Pure: no I/O; the shipped physics.toml is read by chipswap.projection.platforms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

OUTSIDE = "outside what the calibration covers — measure it (chipswap trial)"
OUTSIDE_BAND = 1.0  # a band of +-100 % or more carries no information
METRICS = ("requests_per_s", "out_tok_s", "tpot_s", "ttft_s")
# envelope dimensions whose extrapolation a test measured: (name, unit)
DIMENSIONS = (("prompt", "prompt tokens"), ("tp", "TP"), ("params", "B parameters"))


KIND_TEXT = {
    "loso": "leave-one-source-out", "lomo": "leave-one-model-out", "moe": "leave-one-MoE-model-out",
    "family": "unseen-family", "prompt": "long-prompt", "tp": "TP", "params": "model-size",
}  # fmt: skip


def is_outside(band: float) -> bool:
    return not math.isfinite(band) or band >= OUTSIDE_BAND


@dataclass(frozen=True)
class Coverage:
    """One vendor's calibration coverage: bands per kind of held-out test and metric, the fitted ranges,
    how far each extrapolation test reached (doublings) and the chip families with fitted runs."""

    vendor: str
    bands: tuple[tuple[str, tuple[tuple[str, float], ...]], ...]
    ranges: tuple[tuple[str, float, float], ...]
    reach: tuple[tuple[str, float], ...]
    families: tuple[str, ...]
    max_batch: int = 0
    # (family, bands as above): a family with enough held-out figures of its own
    family_bands: tuple[tuple[str, tuple[tuple[str, tuple[tuple[str, float], ...]], ...]], ...] = ()
    # the kinds every figure's band is at least (physics.toml band_kinds, written by the fit: leave one
    # source out and leave one model out since issue 37; leave one model out before)
    base_kinds: tuple[str, ...] = ("lomo",)

    def has_kind(self, kind: str) -> bool:
        return any(k == kind and per for k, per in self.bands)

    def band(self, kind: str, metric: str, family: str = "") -> float:
        bands = dict(self.family_bands).get(family, self.bands)
        per = dict(dict(bands).get(kind, ()))
        v = per.get(metric, per.get("requests_per_s"))
        return float("inf") if v is None else v

    def assess(
        self, *, family: str, tp: int, prompt: float, params_b: float, batch: int, moe: bool,
        moe_fitted: bool = False,
    ) -> tuple[dict[str, float], tuple[str, ...]]:  # fmt: skip
        """(band per metric, why the projection is off the data). A band is inf where no test reached. The
        base band is the leave-one-source-out error of the family and figure (the next source a user
        brings is a new source), never under the leave-one-model-out one; a MoE model under a stack with
        fitted MoE terms adds the leave-one-MoE-model-out kind."""
        kinds = [k for k in self.base_kinds if self.has_kind(k)] or ["lomo"]
        why: list[str] = []
        reach = dict(self.reach)
        values = {"prompt": prompt, "tp": float(tp), "params": params_b}
        units = dict(DIMENSIONS)
        beyond = False
        for name, lo, hi in self.ranges:
            if name not in values:
                continue
            v = values[name]
            d = math.log2(v / hi) if v > hi * 1.0001 else (math.log2(lo / v) if v < lo / 1.0001 else 0.0)
            if d <= 0:
                continue
            if d > reach.get(name, 0.0) + 1e-9:
                beyond = True
                why.append(
                    f"{units[name]} {v:,.4g} is {d:.1f} doublings outside the fitted {lo:,.4g}-{hi:,.4g}, "
                    f"beyond the {reach.get(name, 0.0):.1f} any held-out test reached"
                )
            else:
                kinds.append(name)
                why.append(f"{units[name]} {v:,.4g} outside the fitted {lo:,.4g}-{hi:,.4g}")
        if self.max_batch and batch > self.max_batch:
            beyond = True
            why.append(f"batch {batch} beyond the largest fitted batch {self.max_batch}")
        if family not in self.families:
            kinds.append("family")
            why.append(f"{family} has no fitted runs (predicted from {', '.join(self.families)})")
        if moe and moe_fitted and self.has_kind("moe"):
            kinds.append("moe")
            why.append(
                "MoE model: the stack's MoE terms are fitted on two MoE models of one source; the band is "
                "the error of holding one of them out"
            )
        elif moe:
            beyond = True
            why.append(
                "MoE model: no MoE serving run of this stack is in the fitted data, so no held-out test "
                "measured this error"
            )
        out = {}
        for m in METRICS:
            out[m] = float("inf") if beyond else max(self.band(k, m, family) for k in kinds)
        # a held-out error too wide to be a band: say which kind and how wide
        for k in () if beyond else kinds:
            b = self.band(k, "requests_per_s", family)
            if math.isfinite(b) and b >= OUTSIDE_BAND:
                why.append(f"the {KIND_TEXT.get(k, k)} error of {family} throughput is ±{b * 100:,.0f} %")
        return out, tuple(why)
