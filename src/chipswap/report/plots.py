"""Every plot of the reports, drawn with ONE library (matplotlib) and returned as inline SVG text.

Each function takes plain data (numbers, arrays, labels) and returns an `<svg class="plot NAME" ...>` string
with no XML prolog, no metadata and no external references, so the HTML report stays one self-contained
offline file. Text stays text (svg.fonttype = none); ids are salted per plot so several plots can share a
page.
Artists that tests and readers look for carry a gid (e.g. `edge-0`, `breakeven`, `slo-e2e`, `frame`).
May not write files; matplotlib is imported inside `_figure` so `chipswap --help` stays fast.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from html import escape
from typing import Any

import numpy as np

from chipswap.report.wording import saving_words

NAVY, ORANGE, GREY, GREEN, RED, BLUE = "#1f3b63", "#e07b1a", "#8a8f98", "#2e7d32", "#c62828", "#4c78a8"
PALETTE = (NAVY, ORANGE, GREEN, "#7b3294", "#008837", "#a6611a", BLUE)
WIDTH_IN, HEIGHT_IN = 7.6, 3.1

_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.S)
_METADATA = re.compile(r"\s*<metadata>.*?</metadata>", re.S)


def _figure(height: float = HEIGHT_IN, ncols: int = 1) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, height), layout="constrained")
    axes = fig.subplots(1, ncols)
    for ax in np.atleast_1d(axes):
        ax.patch.set_gid("frame")
        ax.spines[["top", "right"]].set_visible(False)
        ax.tick_params(labelsize=8)
        ax.grid(axis="y", color="#eeeeee", linewidth=0.8)
        ax.set_axisbelow(True)
    return fig, axes


def _vertical_grid(ax: Any) -> None:
    """Horizontal-bar plots: grid lines across the value axis only."""
    ax.grid(False)
    ax.grid(axis="x", color="#eeeeee", linewidth=0.8)


def render(fig: Any, name: str, title: str) -> str:
    """The figure as an inline <svg class="plot NAME"> with a <title>, deterministic for the same data."""
    import matplotlib

    buf = io.StringIO()
    # text stays text; "$" in money labels is a dollar, not mathtext
    rc = {
        "svg.fonttype": "none",
        "svg.hashsalt": f"chipswap-{name}",
        "font.size": 9,
        "text.parse_math": False,
    }
    with matplotlib.rc_context(rc):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = _METADATA.sub("", _PROLOG.sub("", buf.getvalue(), count=1), count=1)
    head = f'<svg class="plot {escape(name)}" role="img" aria-label="{escape(title)}" '
    svg = svg.replace("<svg ", head, 1)
    close = svg.index(">", svg.index("<svg")) + 1
    return svg[:close] + f"<title>{escape(title)}</title>" + svg[close:]


def _money_tick(v: float, _pos: object = None) -> str:
    """Money on an axis, with as many digits as the value needs ("$0.02", not "$0")."""
    if abs(v) >= 1e6:
        return f"${v / 1e6:.1f}M"
    if abs(v) >= 1e4:
        return f"${v / 1e3:.0f}k"
    if abs(v) >= 1e3:
        return f"${v / 1e3:.1f}k"
    if abs(v) >= 10 or v == 0:
        return f"${v:,.0f}"
    if abs(v) >= 0.1:
        return f"${v:.2f}"
    return f"${v:.2g}"


# Series that may coincide are told apart by line style (and a thinner line on top), and a series equal to
# an earlier one says so in the legend, so no line hides another while the legend lists both.
LINESTYLES = ("-", "--", ":", "-.")


def _style(i: int) -> dict[str, Any]:
    return {"linestyle": LINESTYLES[i % len(LINESTYLES)], "linewidth": max(1.0, 2.2 - 0.4 * (i % 4))}


def _same_as(series: Sequence[tuple[str, Any]]) -> list[str]:
    """Legend labels, with "(same as X)" for a series whose data equal an earlier one's."""
    out: list[str] = []
    for i, (label, data) in enumerate(series):
        twin = next((series[j][0] for j in range(i) if _equal(series[j][1], data)), None)
        out.append(f"{label} (same as {twin})" if twin else label)
    return out


def _equal(a: Any, b: Any) -> bool:
    try:
        x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    except (TypeError, ValueError):
        return a == b
    return x.shape == y.shape and bool(np.allclose(x, y, equal_nan=True))


def legend_outside(fig: Any, ax: Any, ncol: int = 2) -> None:
    """The legend below the plot, off the data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower left", ncol=ncol, fontsize=8, frameon=False)


def cumulative_svg(
    cum_now: Sequence[Any],
    cum_after: Sequence[Any] | None,
    payback_month: int | None,
    now_label: str,
    after_label: str,
    crossing_month: float | None = None,
) -> str:
    """Cumulative cost over the horizon: today's side vs porting + the candidate, with the break-even point
    where the lines cross (labelled with the payback month, the first whole month that covers porting)."""
    from matplotlib.ticker import FuncFormatter

    fig, ax = _figure()
    months = np.arange(len(cum_now))
    now = np.array([float(v) for v in cum_now])
    ax.plot(months, now, color=NAVY, linewidth=2.2, label=now_label, gid="series-now")
    if cum_after:
        after = np.array([float(v) for v in cum_after])
        ax.plot(months, after, color=ORANGE, linewidth=2.2, label=after_label, gid="series-after")
        if payback_month is not None and payback_month <= months[-1]:
            at = (
                float(crossing_month)
                if crossing_month is not None and 0 <= crossing_month <= payback_month
                else float(payback_month)
            )
            y = float(np.interp(at, months, after))
            ax.axvline(at, color=GREEN, linestyle="--", linewidth=1)
            ax.plot([at], [y], "o", color=GREEN, markersize=7, gid="breakeven")
            ax.annotate(
                f"break-even: month {payback_month}",
                (at, y),
                xytext=(6, 18),
                textcoords="offset points",
                color=GREEN,
                fontsize=8,
            )
    ax.yaxis.set_major_formatter(FuncFormatter(_money_tick))
    ax.set_xlabel("months from the move")
    ax.set_ylim(bottom=0)
    ax.set_title("Cumulative cost over the horizon", loc="left", fontsize=10)
    legend_outside(fig, ax)
    return render(fig, "cumulative", "Cumulative cost over the horizon")


def bars_svg(
    title: str,
    rows: Sequence[tuple[str, float | None, str]],
    unit: str,
    cls: str,
    ranges: Sequence[tuple[float | None, float | None] | None] | None = None,
    apart: Sequence[bool] | None = None,
    why: Sequence[str | None] | None = None,
) -> str:
    """Horizontal bars (label, value or None = unknown, colour); `why`: each row's reason when its value is
    unknown (printed beside it, shortened); `ranges` draws each bar's band as an error
    bar. Money when unit is "" or starts with "/" ("$12.30/h"), else "12.30 unit". `apart` marks rows that
    miss the SLO: drawn hatched in light grey with "misses SLO" (gid missed-N), listed after every row that
    meets it, so such an option is never the lowest solid bar."""
    flags = list(apart or [False] * len(rows))
    order = sorted(range(len(rows)), key=lambda i: flags[i])  # stable: rows meeting the SLO first
    reasons = [(why[i] if why else None) for i in order]
    rows = [rows[i] for i in order]
    flags = [flags[i] for i in order]
    ranges = [ranges[i] for i in order] if ranges else None
    fig, ax = _figure(height=0.6 + 0.42 * max(len(rows), 1))
    _vertical_grid(ax)
    labels = [r[0] + ("\n(misses SLO)" if miss else "") for r, miss in zip(rows, flags, strict=True)]
    ys = np.arange(len(rows))[::-1]
    for k, (y, (_label, v, color), rng, miss) in enumerate(
        zip(ys, rows, ranges or [None] * len(rows), flags, strict=True)
    ):
        if v is None:
            said = str(reasons[k] or "not priced, or not sized").split(":")[0].split(";")[0][:70]
            ax.text(0, y, f"  unknown ({said})", va="center", fontsize=8)
            continue
        if miss:
            bar = ax.barh(y, v, color="#e4e4e4", edgecolor=GREY, hatch="///", height=0.62, linewidth=0.8)[0]
            bar.set_gid(f"missed-{int(y)}")
            text = f"${v:,.2f}{unit}" if unit.startswith("/") or unit == "" else f"{v:,.2f} {unit}"
            ax.annotate(
                f"{_money_tick(v) if unit == '' else text} — misses SLO",
                (v, y),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
                color="#555555",
            )
            continue
        ax.barh(y, v, color=color, height=0.62)[0].set_gid(f"bar-{int(y)}")
        if rng is not None and rng[0] is not None and rng[1] is not None:
            lo, hi = sorted((float(rng[0]), float(rng[1])))
            ax.errorbar(
                v, y, xerr=[[max(v - lo, 0)], [max(hi - v, 0)]], color="#333333", capsize=3, linewidth=1
            )
        text = f"${v:,.2f}{unit}" if unit.startswith("/") or unit == "" else f"{v:,.2f} {unit}"
        if (unit.startswith("/") or unit == "") and 0 < abs(v) < 1:
            text = f"${v:.3g}{unit}"
        ax.annotate(text, (v, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_yticks(ys, labels)
    if unit == "":
        from matplotlib.ticker import FuncFormatter

        ax.xaxis.set_major_formatter(FuncFormatter(_money_tick))
    known = [r[1] for r in rows if r[1] is not None]
    ax.set_xlim(0, (max(known) if known else 1.0) * 1.45 or 1.0)
    ax.set_title(title, loc="left", fontsize=10)
    return render(fig, cls, title)


def arrivals_svg(
    counts: Sequence[int], window_s: float, scale: float, peak: float | None, busiest: float | None = None
) -> str:
    """Arrival rate per window (scaled), with the 95th-percentile window and the busiest window fleets are
    sized for."""
    if not counts:
        return ""
    rates = np.array(counts, dtype=float) / window_s * scale
    fig, ax = _figure()
    for i, patch in enumerate(ax.bar(np.arange(rates.size), rates, color=NAVY, width=0.85)):
        patch.set_gid(f"window-{i}")
    for value, color, style, words in (
        (peak, ORANGE, "--", "95th-percentile window"),
        (busiest, RED, ":", "busiest window (sized for)"),
    ):
        if value is not None:
            label = f"{words}: {value:.3g} req/s"
            ax.axhline(value, color=color, linestyle=style, linewidth=1.2, label=label)
    ax.set_xlabel(f"{window_s:g}-second windows (requests/s, scaled x{scale:g})")
    ax.set_ylabel("requests/s")
    ax.set_title("Arrival rate per window", loc="left", fontsize=10)
    legend_outside(fig, ax)
    return render(fig, "arrivals", "Arrival rate per window")


def latency_svg(
    fleets: Sequence[tuple[str, np.ndarray, np.ndarray]],
    slo_e2e_ms: float | None,
    slo_ttft_ms: float | None,
    *,
    with_ttft: bool = True,
) -> str:
    """Simulated latency distributions (CDF) per fleet at its chosen size: time to first token (LLMs) and end
    to end, each against its objective. An encoder's answer is its first token: one panel."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    panels = [("time to first token", slo_ttft_ms, 1), ("end to end", slo_e2e_ms, 2)]
    if not with_ttft:
        panels = panels[1:]
    fig, axes = _figure(height=3.3, ncols=len(panels))
    axes = np.atleast_1d(axes)
    plain = FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    for ax, (which, slo, col) in zip(axes, panels, strict=True):
        names = _same_as([(row[0], np.sort(np.asarray(row[col], dtype=float))) for row in fleets])
        for i, row in enumerate(fleets):
            v = np.sort(np.asarray(row[col], dtype=float))
            v = v[np.isfinite(v) & (v > 0)]
            if v.size == 0:
                continue
            q = np.linspace(0, 100, v.size)
            ax.plot(v, q, color=PALETTE[i % len(PALETTE)], label=names[i], gid=f"cdf-{col}-{i}", **_style(i))
        if slo is not None:
            ax.axvline(
                slo, color=RED, linestyle="--", linewidth=1.2, gid=f"slo-{'ttft' if col == 1 else 'e2e'}"
            )
            ax.annotate(
                f"SLO p99 {slo:,.0f} ms",
                (slo, 50),
                xytext=(-4, 0),
                textcoords="offset points",
                ha="right",
                rotation=90,
                va="center",
                color=RED,
                fontsize=8,
            )
        ax.axhline(99, color=GREY, linewidth=0.8, linestyle=":")
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 3.0)))
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda _v, _pos: ""))
        ax.set_xlabel(f"{which} (ms, log scale)")
        ax.set_ylabel("percentile of requests")
        ax.set_ylim(0, 100.5)
    if fleets:
        legend_outside(fig, axes[-1], ncol=3)
    fig.suptitle(
        "Simulated latency at the busiest window, each fleet at its chosen size",
        x=0.02,
        ha="left",
        fontsize=10,
    )
    return render(fig, "latency", "Simulated latency distributions against the SLO")


def fleet_size_svg(
    curves: Sequence[tuple[str, Sequence[tuple[float, int | None]]]],
    today: tuple[str, int] | None = None,
    bands: Sequence[Sequence[tuple[float, int | None, int | None]]] = (),
) -> str:
    """Instances each fleet needs as traffic grows or shrinks (both sides re-sized the same way: each point
    re-planned by simulation), with each curve's band (fewest, most) shaded where `bands[i]` gives it."""
    fig, ax = _figure()
    names = _same_as([(label, [(f, -1 if n is None else n) for f, n in pts]) for label, pts in curves])
    for i, (_label, pts) in enumerate(curves):
        xs = [f for f, n in pts if n is not None]
        ys = [n for _f, n in pts if n is not None]
        if xs:
            ax.step(
                xs,
                ys,
                where="post",
                color=PALETTE[i % len(PALETTE)],
                marker="o",
                markersize=max(2.0, 4.0 - i),
                label=names[i],
                gid=f"size-{i}",
                **_style(i),
            )
        band = [(g, lo, hi) for g, lo, hi in (bands[i] if i < len(bands) else ()) if lo and hi]
        if len(band) > 1:
            ax.fill_between(
                [g for g, _lo, _hi in band],
                [lo for _g, lo, _hi in band],
                [hi for _g, _lo, hi in band],
                step="post",
                color=PALETTE[i % len(PALETTE)],
                alpha=0.10,
                linewidth=0,
                gid=f"size-band-{i}",
            )
    if today is not None:
        ax.plot(
            [1.0],
            [today[1]],
            "s",
            color=RED,
            markersize=6,
            label=f"today: {today[1]} x {today[0]}",
            gid="today",
        )
    ax.axvline(1.0, color=GREY, linewidth=0.8, linestyle=":")
    ax.set_xlabel("traffic (x the busiest window of the workload)")
    ax.set_ylabel("instances")
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda _v, _pos: ""))
    ax.set_title("Fleet size vs traffic, both sides sized the same way", loc="left", fontsize=10)
    legend_outside(fig, ax, ncol=3)
    return render(fig, "fleetsize", "Fleet size vs traffic")


def saving_band_svg(
    rows: Sequence[tuple[str, float | None, float | None, float | None]], margin_pct: float
) -> str:
    """Each candidate's monthly saving (% of the GPU side) with its range across the error band, against the
    close-call margin."""
    fig, ax = _figure(height=0.7 + 0.45 * max(len(rows), 1))
    _vertical_grid(ax)
    ys = np.arange(len(rows))[::-1]
    for y, (_label, pct, lo, hi) in zip(ys, rows, strict=True):
        if pct is None:
            ax.text(0, y, "  not priced / not sized", va="center", fontsize=8)
            continue
        if lo is not None and hi is not None:
            a, b = sorted((lo, hi))
            ax.plot(
                [a, b], [y, y], color=ORANGE, linewidth=7, alpha=0.35, solid_capstyle="butt", gid=f"band-{y}"
            )
        ax.plot([pct], [y], "o", color=NAVY if pct >= margin_pct else RED, markersize=7)
        ax.annotate(
            f"{pct:.1f}%" if pct >= 0 else saving_words(pct),
            (pct, y),
            xytext=(0, 8),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )
    ax.axvline(margin_pct, color=RED, linestyle="--", linewidth=1, gid="margin")
    ax.axvline(0, color="#333333", linewidth=0.8)
    ax.set_yticks(ys, [r[0] for r in rows])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel(f"monthly saving, % of the GPU side (close-call margin {margin_pct:g}%)")
    ax.set_title("Saving with its error band", loc="left", fontsize=10)
    return render(fig, "savingband", "Saving with its error band")


def histogram_svg(
    lengths: np.ndarray,
    counts: np.ndarray,
    edges: Sequence[int],
    *,
    compare_edges: Sequence[int] | None = None,
    compare_label: str = "powers of two",
    title: str = "Request lengths and bucket edges",
    xlabel: str = "tokens",
    max_bins: int = 120,
) -> str:
    """Request counts per length bin with the plan's bucket edges (gid edge-i) and an optional comparison set
    (gid compare-edge-i, dashed). The x axis runs a little past the largest edge so the last line is
    visible."""
    edges = [int(e) for e in edges]
    xmax = float(max([*(np.asarray(lengths).tolist() or [1]), *edges, *(compare_edges or [])]))
    nb = int(min(max_bins, max(1, xmax)))
    binw = xmax / nb
    if np.asarray(lengths).size:
        idx = np.minimum(((np.asarray(lengths) - 1) / binw).astype(int), nb - 1)
        bins = np.bincount(idx, weights=np.asarray(counts, dtype=float), minlength=nb)
    else:
        bins = np.zeros(nb)
    fig, ax = _figure()
    drawn = ax.bar(np.arange(nb) * binw, bins, width=binw * 0.95, align="edge", color=BLUE)
    for i, patch in enumerate(b for b in drawn if b.get_height() > 0):
        patch.set_gid(f"bar-{i}")
    for i, e in enumerate(compare_edges or []):
        ax.axvline(
            e,
            color="#888888",
            linestyle="--",
            linewidth=1,
            gid=f"compare-edge-{i}",
            label=f"{compare_label} ({len(compare_edges or [])})" if i == 0 else None,
        )
    for i, e in enumerate(edges):
        ax.axvline(
            e,
            color="#d62728",
            linewidth=1.5,
            gid=f"edge-{i}",
            label=f"chipswap buckets ({len(edges)})" if i == 0 else None,
        )
    ax.set_xlim(0, xmax + max(1.0, 0.03 * xmax))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("requests")
    ax.set_title(title, loc="left", fontsize=10)
    if edges or compare_edges:
        legend_outside(fig, ax)
    return render(fig, "histogram", title)
