"""Training on a chip with no published training throughput (Trainium2), by transfer: the coefficients
fitted on a calibrated family applied to the target's spec sheet (matmul peak per dtype, HBM bandwidth,
NeuronLink / NVLink, EFA: the System the catalog gives), with the band measured by the same transfer
where the truth is known.

Transfer test (training.fit.transfer_tests): fit on one family's published rows only (its own family
factor left out, so the fitted efficiency is the source's), predict another family's rows at their published
layouts with the target's spec sheet, and compare with what was published. The stack factors (stack
properties, not chip ones) come from the full fit. The trn2 band is the widest 80th percentile |ln error| of
the generation transfers within a vendor (A100 <-> H100, H100 -> B200: trn1 -> trn2 is one such step on one
compiler), and never below trn1's own held-out band; the cross-vendor tests (trn1 <-> H100) are printed
beside it as the bound of carrying an efficiency across vendors.

Pure: no I/O, no clock; the fits that measure the transfer run in training.fit (it calls these).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chipswap.projection.training.model import Coef

# (source family, target family): every pair with published rows on both sides
TRANSFER_TESTS: tuple[tuple[str, str], ...] = (
    ("A100", "H100"),
    ("H100", "A100"),
    ("H100", "B200"),
    ("Trainium", "H100"),
    ("H100", "Trainium"),
)
FAMILY_FACTORS = ("k_A100",)  # the per-family efficiency factors a transfer must not carry
TRANSFERRED = {"Trainium2": "Trainium", "H200": "H100"}  # target family -> the family it is transferred from


@dataclass(frozen=True)
class TransferResult:
    source: str
    target: str
    rows: int
    median_abs_error: float
    median_error: float
    band: float  # 80th percentile of |ln(predicted / published)|, as a relative half-width
    cross_vendor: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "rows": self.rows,
            "median_abs_error": round(self.median_abs_error, 4),
            "median_error": round(self.median_error, 4),
            "band": round(self.band, 4),
            "cross_vendor": self.cross_vendor,
        }


def transferred_coef(src: Coef, full: Coef, src_group: str, dst_group: str) -> Coef:
    """The source family's fit as the target sees it: its efficiency (and exposed TP share) under the
    target's vendor group, fp8 speed-ups and stack factors from the full fit where the source has none."""
    vals = dict(full.values)
    vals.update(dict(src.values))
    vals[f"e16_{dst_group}"] = src.get(f"e16_{src_group}")
    for k in FAMILY_FACTORS:
        vals.pop(k, None)
    return Coef(tuple(vals.items()))


def transfer_band(tests: list[TransferResult], floor: float) -> tuple[float, str]:
    """(band, what it was measured on): the widest within-vendor generation transfer's band, at least
    `floor` (the source family's own held-out band)."""
    within = [t for t in tests if not t.cross_vendor]
    band = max([floor] + [t.band for t in within])
    return band, ", ".join(f"{t.source} -> {t.target} ±{t.band * 100:.0f} %" for t in within)
