"""Length histogram with bucket edges, as a self-contained SVG string (no matplotlib, no files).

`histogram_svg(plan_or_hist, edges)` is what `chipswap shapes --plot` writes and what the HTML report embeds.
Bars: request counts per length bin (linear length axis, up to 120 bins). Solid red lines: the plan's bucket
edges;
dashed grey lines: an optional comparison set (e.g. powers of two). Pure string building; it may not touch
files.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

import numpy as np

WIDTH, HEIGHT = 760, 300
PAD_L, PAD_R, PAD_T, PAD_B = 56, 16, 28, 44
MAX_BINS = 120
X_PAD = 0.03  # fraction of the x range added on the right


def _hist_arrays(plan_or_hist: Any) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(plan_or_hist, "histogram_arrays"):  # ShapePlan
        return plan_or_hist.histogram_arrays
    if hasattr(plan_or_hist, "lengths") and hasattr(plan_or_hist, "counts"):  # core Histogram
        return np.asarray(plan_or_hist.lengths), np.asarray(plan_or_hist.counts, dtype=np.float64)
    lengths, counts = plan_or_hist  # (lengths, counts) pair
    return np.asarray(lengths), np.asarray(counts, dtype=np.float64)


def _nice_ticks(top: float, n: int = 5) -> list[float]:
    if top <= 0:
        return [0.0]
    raw = top / n
    mag = 10 ** np.floor(np.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    return [float(x) for x in np.arange(0, top + step * 0.5, step)]


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
    lengths, counts = _hist_arrays(plan_or_hist)
    if edges is None and hasattr(plan_or_hist, "sequence_buckets"):
        edges = plan_or_hist.sequence_buckets
    edges = [int(e) for e in (edges or [])]
    xmax = float(max([*(lengths.tolist() or [1]), *edges, *(compare_edges or [])]))
    nb = int(min(MAX_BINS, max(1, xmax)))
    binw = xmax / nb
    if lengths.size:
        idx = np.minimum(((lengths - 1) / binw).astype(int), nb - 1)
        bins = np.bincount(idx, weights=counts, minlength=nb)
    else:
        bins = np.zeros(nb)
    ymax = float(bins.max()) if bins.size and bins.max() > 0 else 1.0
    pw, ph = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B
    # The x axis runs a little past the largest edge/length: the last bucket line is not drawn on the border.
    xaxis = xmax + max(1.0, X_PAD * xmax)

    def X(v: float) -> float:
        return PAD_L + pw * v / xaxis

    def Y(v: float) -> float:
        return PAD_T + ph * (1 - v / ymax)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" font-family="sans-serif" font-size="11" role="img">',
        f"<title>{escape(title)}</title>",
        f'<text x="{PAD_L}" y="16" font-size="13">{escape(title)}</text>',
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
    ]
    for i, c in enumerate(bins.tolist()):
        if c <= 0:
            continue
        x0, x1 = X(i * binw), X((i + 1) * binw)
        parts.append(
            f'<rect class="bar" x="{x0:.2f}" y="{Y(c):.2f}" width="{max(x1 - x0 - 0.5, 0.5):.2f}" '
            f'height="{PAD_T + ph - Y(c):.2f}" fill="#4c78a8"/>'
        )
    for t in _nice_ticks(xmax):
        parts.append(f'<text x="{X(t):.1f}" y="{PAD_T + ph + 14}" text-anchor="middle">{int(t)}</text>')
    for t in _nice_ticks(ymax, 4):
        parts.append(f'<text x="{PAD_L - 4}" y="{Y(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    parts.append(f'<text x="{PAD_L + pw / 2}" y="{HEIGHT - 8}" text-anchor="middle">{escape(xlabel)}</text>')
    parts.append(
        f'<text x="12" y="{PAD_T + ph / 2}" transform="rotate(-90 12 {PAD_T + ph / 2})" '
        'text-anchor="middle">requests</text>'
    )
    for e in compare_edges or []:
        parts.append(
            f'<line class="compare-edge" x1="{X(e):.2f}" x2="{X(e):.2f}" y1="{PAD_T}" y2="{PAD_T + ph}" '
            'stroke="#888" stroke-dasharray="4 3"/>'
        )
    for e in edges:
        parts.append(
            f'<line class="edge" x1="{X(e):.2f}" x2="{X(e):.2f}" y1="{PAD_T}" y2="{PAD_T + ph}" '
            f'stroke="#d62728" stroke-width="1.5"><title>bucket {e}</title></line>'
        )
    lx = PAD_L + pw - 190
    parts.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{PAD_T + 12}" y2="{PAD_T + 12}" stroke="#d62728"/>')
    parts.append(f'<text x="{lx + 22}" y="{PAD_T + 16}">chipswap buckets ({len(edges)})</text>')
    if compare_edges:
        parts.append(
            f'<line x1="{lx}" x2="{lx + 18}" y1="{PAD_T + 26}" y2="{PAD_T + 26}" stroke="#888" '
            'stroke-dasharray="4 3"/>'
        )
        parts.append(
            f'<text x="{lx + 22}" y="{PAD_T + 30}">{escape(compare_label)} ({len(compare_edges)})</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
