"""Length histogram with bucket edges, as a self-contained SVG string (drawn by chipswap.report.plots with
matplotlib, the one plotting library of the reports; no files).

`histogram_svg(plan_or_hist, edges)` is what `chipswap shapes --plot` writes and what the HTML report embeds.
Bars: request counts per length bin (linear length axis, up to 120 bins). Solid red lines (gid `edge-i`): the
plan's bucket edges; dashed grey lines (gid `compare-edge-i`): an optional comparison set (e.g. powers of
two).
The plot frame has gid `frame`. It may not touch files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

MAX_BINS = 120


def _hist_arrays(plan_or_hist: Any) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(plan_or_hist, "histogram_arrays"):  # ShapePlan
        return plan_or_hist.histogram_arrays
    if hasattr(plan_or_hist, "lengths") and hasattr(plan_or_hist, "counts"):  # core Histogram
        return np.asarray(plan_or_hist.lengths), np.asarray(plan_or_hist.counts, dtype=np.float64)
    lengths, counts = plan_or_hist  # (lengths, counts) pair
    return np.asarray(lengths), np.asarray(counts, dtype=np.float64)


def histogram_svg(
    plan_or_hist: Any,
    edges: Sequence[int] | None = None,
    *,
    compare_edges: Sequence[int] | None = None,
    compare_label: str = "powers of two",
    title: str = "Request lengths and bucket edges",
    xlabel: str = "tokens",
) -> str:
    """SVG of the length histogram with vertical lines at `edges` (default: the plan's sequence buckets)."""
    from chipswap.report.plots import histogram_svg as draw

    lengths, counts = _hist_arrays(plan_or_hist)
    if edges is None and hasattr(plan_or_hist, "sequence_buckets"):
        edges = plan_or_hist.sequence_buckets
    svg = draw(
        lengths,
        counts,
        list(edges or []),
        compare_edges=compare_edges,
        compare_label=compare_label,
        title=title,
        xlabel=xlabel,
        max_bins=MAX_BINS,
    )
    return svg + "\n"
