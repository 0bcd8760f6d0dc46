"""The plan report as ONE self-contained HTML file: inline CSS, inline SVG plots, no scripts, no network.

Plots: traffic histogram with the planned bucket edges (from the shape planner), cumulative cost over the
horizon with the break-even month, cost per 1M requests per instance, monthly cost now vs after, arrivals per
window.
"""

from __future__ import annotations

from decimal import Decimal
from html import escape
from importlib import resources
from typing import Any

import numpy as np
from jinja2 import Environment, select_autoescape
from markupsafe import Markup

W, H = 720, 300
PL, PR, PT, PB = 78, 20, 34, 46
NAVY, ORANGE, GREY, GREEN, RED = "#1f3b63", "#e07b1a", "#8a8f98", "#2e7d32", "#c62828"


def _num(v: float) -> str:
    return f"{v:.1f}"


def _ticks(top: float, n: int = 5) -> list[float]:
    if top <= 0:
        return [0.0, 1.0]
    raw = top / n
    mag = 10 ** np.floor(np.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [float(step * i) for i in range(int(np.ceil(top / step)) + 1)]


def _money_tick(v: float) -> str:
    if v >= 1e6:
        return f"${v / 1e6:.1f}M"
    if v >= 1e3:
        return f"${v / 1e3:.0f}k"
    return f"${v:,.0f}"


def _frame(title: str, aria: str, body: list[str], cls: str, height: float = H) -> str:
    return (
        f'<svg class="plot {cls}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height:.0f}" '
        f'role="img" '
        f'aria-label="{escape(aria)}"><title>{escape(title)}</title>'
        f'<text x="{PL}" y="20" class="pt">{escape(title)}</text>' + "".join(body) + "</svg>"
    )


def _float_or_none(v: object) -> float | None:
    try:
        return None if v is None else float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def cumulative_svg(
    cum_now: tuple[Decimal, ...],
    cum_after: tuple[Decimal, ...] | None,
    payback_month: int | None,
    now_label: str,
    after_label: str,
    crossing_month: float | None = None,
) -> str:
    """Cumulative cost over months: today's fleet vs porting + the candidate fleet, with break-even.

    The marker sits where the two lines cross (`crossing_month`, fractional) when it is known; the label names
    the payback month, the first whole month whose cumulative saving covers the porting cost.
    """
    months = len(cum_now) - 1
    series = [np.array([float(v) for v in cum_now])]
    if cum_after:
        series.append(np.array([float(v) for v in cum_after]))
    top = max(float(s.max()) for s in series) * 1.05 or 1.0
    ticks = _ticks(top)
    top = ticks[-1]
    pw, ph = W - PL - PR, H - PT - PB

    def X(m: float) -> float:
        return PL + pw * m / max(months, 1)

    def Y(v: float) -> float:
        return PT + ph * (1 - v / top)

    body = [f'<line x1="{PL}" y1="{_num(Y(0))}" x2="{W - PR}" y2="{_num(Y(0))}" stroke="#333"/>']
    for t in ticks:
        body.append(
            f'<line x1="{PL}" x2="{W - PR}" y1="{_num(Y(t))}" y2="{_num(Y(t))}" stroke="#eee"/>'
            f'<text x="{PL - 6}" y="{_num(Y(t) + 4)}" text-anchor="end" class="tk">{_money_tick(t)}</text>'
        )
    step = max(1, months // 12)
    for m in range(0, months + 1, step):
        body.append(f'<text x="{_num(X(m))}" y="{H - PB + 16}" text-anchor="middle" class="tk">{m}</text>')
    body.append(
        f'<text x="{PL + pw / 2}" y="{H - 8}" text-anchor="middle" class="ax">months from the move</text>'
    )
    for s, color, label, dy in zip(series, (NAVY, ORANGE), (now_label, after_label), (0, 16), strict=False):
        pts = " ".join(f"{_num(X(i))},{_num(Y(v))}" for i, v in enumerate(s))
        body.append(
            f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2.5" points="{pts}"/>'
        )
        body.append(
            f'<rect x="{PL + 10}" y="{PT + 4 + dy}" width="12" height="4" fill="{color}"/>'
            f'<text x="{PL + 28}" y="{PT + 10 + dy}" class="lg">{escape(label)}</text>'
        )
    if payback_month is not None and cum_after and payback_month <= months:
        at = float(payback_month)
        if crossing_month is not None and 0 <= crossing_month <= payback_month:
            at = float(crossing_month)
        lo = min(int(at), months - 1) if months else 0
        frac = at - lo
        after = series[1]
        x, y = X(at), Y(float(after[lo] + (after[min(lo + 1, months)] - after[lo]) * frac))
        body.append(
            f'<line x1="{_num(x)}" x2="{_num(x)}" y1="{PT}" y2="{_num(Y(0))}" stroke="{GREEN}" '
            f'stroke-dasharray="4 3"/><circle class="breakeven" cx="{_num(x)}" cy="{_num(y)}" r="5" '
            f'fill="{GREEN}"/><text x="{_num(x + 6)}" y="{PT + 44}" class="lg" fill="{GREEN}">'
            f"break-even: month {payback_month}</text>"
        )
    return _frame(
        "Cumulative cost over the horizon",
        "cumulative cost, GPU vs Neuron, with break-even",
        body,
        "cumulative",
    )


def bars_svg(title: str, rows: list[tuple[str, float | None, str]], unit: str, cls: str) -> str:
    """Horizontal bars: (label, value or None = unknown, color)."""
    known = [v for _, v, _ in rows if v is not None]
    top = (max(known) if known else 1.0) * 1.1 or 1.0
    left = 200
    bh = 26.0
    body = []
    for i, (label, v, color) in enumerate(rows):
        y = PT + 12 + i * (bh + 8)
        body.append(
            f'<text x="{left - 8}" y="{_num(y + bh / 2 + 4)}" text-anchor="end" class="tk">'
            f"{escape(label)}</text>"
        )
        if v is None:
            body.append(
                f'<text x="{left + 4}" y="{_num(y + bh / 2 + 4)}" class="tk">unknown (no price)</text>'
            )
            continue
        w = (W - left - 120) * v / top
        body.append(
            f'<rect class="bar" x="{left}" y="{_num(y)}" width="{_num(max(w, 1))}" height="{_num(bh)}" '
            f'fill="{color}"/><text x="{_num(left + w + 6)}" y="{_num(y + bh / 2 + 4)}" class="tk">'
            f"{escape(_fmt_unit(v, unit))}</text>"
        )
    return _frame(title, title, body, cls, PT + 24 + len(rows) * (bh + 8))


def _fmt_unit(v: float, unit: str) -> str:
    return f"${v:,.2f}{unit}" if unit.startswith("/") or unit == "" else f"{v:,.2f} {unit}"


def arrivals_svg(counts: tuple[int, ...], window_s: float, scale: float, peak: float | None) -> str:
    if not counts:
        return ""
    rates = np.array(counts, dtype=float) / window_s * scale
    top = float(rates.max()) * 1.15 or 1.0
    ticks = _ticks(top)
    top = ticks[-1]
    pw, ph = W - PL - PR, H - PT - PB
    bw = pw / len(rates)
    body = []
    for t in ticks:
        y = PT + ph * (1 - t / top)
        body.append(
            f'<line x1="{PL}" x2="{W - PR}" y1="{_num(y)}" y2="{_num(y)}" stroke="#eee"/>'
            f'<text x="{PL - 6}" y="{_num(y + 4)}" text-anchor="end" class="tk">{t:g}</text>'
        )
    for i, r in enumerate(rates):
        h = ph * r / top
        body.append(
            f'<rect class="bar" x="{_num(PL + i * bw + 1)}" y="{_num(PT + ph - h)}" '
            f'width="{_num(max(bw - 2, 1))}" height="{_num(h)}" fill="{NAVY}"/>'
        )
    if peak is not None:
        y = PT + ph * (1 - peak / top)
        body.append(
            f'<line x1="{PL}" x2="{W - PR}" y1="{_num(y)}" y2="{_num(y)}" stroke="{ORANGE}" '
            f'stroke-dasharray="5 3"/><text x="{W - PR}" y="{_num(y - 4)}" text-anchor="end" class="lg">'
            f"95th-percentile window: {peak:.3g} req/s</text>"
        )
    body.append(
        f'<text x="{PL + pw / 2}" y="{H - 8}" text-anchor="middle" class="ax">'
        f"{window_s:g}-second windows (requests/s, scaled x{scale:g})</text>"
    )
    mid = PT + ph / 2
    body.append(
        f'<text class="ax ylabel" x="16" y="{_num(mid)}" text-anchor="middle" '
        f'transform="rotate(-90 16 {_num(mid)})">requests/s</text>'
    )
    return _frame("Arrival rate per window", "arrival rate per window", body, "arrivals")


def lengths_svg(prompt_tokens: np.ndarray, edges: tuple[int, ...]) -> str:
    """Length histogram with bucket edges; the x range is padded so the last edge is off the border."""
    if prompt_tokens.size == 0:
        return ""
    from chipswap.report.shapes_plot import histogram_svg  # the planner's plot, from raw lengths

    lengths, counts = np.unique(prompt_tokens, return_counts=True)
    top = max([int(lengths.max()), *(int(e) for e in edges)])
    # a zero-count length 5% past the last edge widens the x axis without drawing a bar
    lengths = np.append(lengths, int(np.ceil(top * 1.05)) + 1)
    counts = np.append(counts.astype(np.float64), 0.0)
    return histogram_svg((lengths, counts), list(edges))


def _plots(r: Any) -> dict[str, Markup]:
    out: dict[str, Markup] = {}
    tokens = getattr(r.traffic, "prompt_tokens", None) if r.traffic is not None else None
    if tokens is not None and np.asarray(tokens).size > 1:
        try:
            out["histogram"] = Markup(
                lengths_svg(np.asarray(tokens), r.shapes.sequence_buckets if r.shapes else ())
            )
        except (ImportError, TypeError, ValueError):
            pass
    if "histogram" not in out and r.shapes is not None and r.shapes.svg:
        out["histogram"] = Markup(r.shapes.svg)
    best = r.best
    after_label = f"{best.count} x {best.instance} + porting" if best and best.count else "Neuron + porting"
    out["cumulative"] = Markup(
        cumulative_svg(
            r.cumulative_now,
            r.cumulative_after,
            best.payback_month if best else None,
            f"today: {r.fleet_count} x {r.fleet_instance}",
            after_label,
            _float_or_none(getattr(r, "break_even_months", None)),
        )
    )
    if r.kind == "serving":
        rows: list[tuple[str, float | None, str]] = [
            (
                r.fleet_instance + " (today)",
                float(r.gpu_cost_per_million_usd) if r.gpu_cost_per_million_usd else None,
                NAVY,
            )
        ]
        rows += [
            (
                c.instance,
                float(c.cost_per_million_usd) if c.cost_per_million_usd is not None else None,
                ORANGE if best is not None and c.instance == best.instance else GREY,
            )
            for c in r.candidates
        ]
        out["cpm"] = Markup(bars_svg("Cost per 1M requests per instance type", rows, "", "cpm"))
    monthly = [(f"now: {r.fleet_count} x {r.fleet_instance}", float(r.monthly_now.value), NAVY)]
    for c in r.candidates:
        label = f"{c.count} x {c.instance}" if c.count else c.instance
        monthly.append(
            (
                label,
                float(c.monthly_usd) if c.monthly_usd is not None else None,
                ORANGE if best is not None and c.instance == best.instance else GREY,
            )
        )
    out["monthly"] = Markup(bars_svg("Monthly cost now vs after", monthly, "", "monthly"))
    if r.traffic is not None and r.traffic.window_counts:
        out["arrivals"] = Markup(
            arrivals_svg(r.traffic.window_counts, r.traffic.window_s, r.traffic.scale, r.traffic.peak_rps)
        )
    return out


def _money(v: Any) -> str:
    if v is None:
        return "unknown"
    return f"${Decimal(v).quantize(Decimal('0.01')):,}"


def _pct(v: Any, digits: int = 1) -> str:
    if v is None:
        return "unknown"
    return f"{float(v):.{digits}f}%"


def _g(v: Any) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, Decimal):
        return f"{v.quantize(Decimal('0.01')):,}"
    return str(v)


def trace_attribution(result: Any) -> str:
    """The bundled trace's licence line, only when the bundled trace was read for this report."""
    traffic = getattr(result, "traffic", None)
    source = str(getattr(traffic, "source", "") or "")
    if traffic is None or not source.startswith("bundled"):
        return ""
    return 'Trace data: Azure LLM inference trace 2023 (CC-BY 4.0), Patel et al., "Splitwise", ISCA 2024.'


def reason_rows(verdict: Any) -> list[Any]:
    """Every reason the verdict carries (screening, economics, and any later kind), each once, in order."""
    rows: list[Any] = []
    for name in ("reasons", "economics", "cautions", "warnings"):
        for x in getattr(verdict, name, None) or ():
            if not any(x is y or x == y for y in rows):
                rows.append(x)
    return rows


def report_notes(result: Any) -> list[str]:
    """The result's notes and warnings (text), each once."""
    out: list[str] = []
    for name in ("notes", "warnings"):
        for n in getattr(result, name, None) or ():
            text = n.line() if hasattr(n, "line") else str(n)
            if text not in out:
                out.append(text)
    return out


def render_html(result: Any) -> str:
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters.update(money=_money, pct=_pct, g=_g)
    text = resources.files("chipswap.report").joinpath("templates", "plan.html.j2").read_text("utf-8")
    css = resources.files("chipswap.report").joinpath("templates", "plan.css").read_text("utf-8")
    tpl = env.from_string(text)
    return tpl.render(
        r=result,
        v=result.verdict,
        plots=_plots(result),
        css=Markup(css),
        reasons=reason_rows(result.verdict),
        notes=report_notes(result),
        attribution=trace_attribution(result),
    )
