"""The plan report as ONE self-contained HTML file: inline CSS, inline SVG plots, no scripts, no network.

Plots (all matplotlib, via chipswap.report.plots): cumulative cost with the break-even month, monthly cost of
both sides, the saving with its error band, cost per 1M requests, simulated latency distributions (TTFT and
end
to end) per fleet against the SLO, fleet size vs traffic for both sides, arrivals per window with the busiest
window, and the length histogram with the planned bucket edges. Everything from data is escaped by Jinja's
autoescape. May not write files (the command publishes the report set).
"""

from __future__ import annotations

from decimal import Decimal
from importlib import resources
from typing import Any

import numpy as np
from jinja2 import Environment, select_autoescape
from markupsafe import Markup

from chipswap.report.plots import (
    GREY,
    NAVY,
    ORANGE,
    arrivals_svg,
    bars_svg,
    cumulative_svg,
    fleet_size_svg,
    histogram_svg,
    latency_svg,
    saving_band_svg,
)
from chipswap.textsafe import human_number

__all__ = ["arrivals_svg", "reason_rows", "render_html", "report_notes", "trace_attribution"]


def _float_or_none(v: object) -> float | None:
    try:
        return None if v is None else float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def lengths_svg(prompt_tokens: np.ndarray, edges: tuple[int, ...]) -> str:
    """Length histogram of the trace with the planned bucket edges."""
    if prompt_tokens.size == 0:
        return ""
    lengths, counts = np.unique(prompt_tokens, return_counts=True)
    return histogram_svg(lengths, counts.astype(np.float64), list(edges))


def _fleets(r: Any) -> list[Any]:
    """Today's GPU fleet and every candidate's, as planned (FleetPlan), where known."""
    out = [getattr(r, "gpu_fleet", None)]
    out += [getattr(c, "fleet", None) for c in r.candidates]
    return [f for f in out if f is not None]


def _plots(r: Any) -> dict[str, Markup]:
    out: dict[str, Markup] = {}
    tokens = getattr(r.traffic, "prompt_tokens", None) if r.traffic is not None else None
    if tokens is not None and np.asarray(tokens).size > 1:
        out["histogram"] = Markup(
            lengths_svg(np.asarray(tokens), r.shapes.sequence_buckets if r.shapes else ())
        )
    best = r.best
    after_label = f"{best.count} x {best.instance} + porting" if best and best.count else "Neuron + porting"
    gpu = getattr(r, "gpu_fleet", None)
    now_count = gpu.count if gpu is not None and gpu.count and r.kind == "serving" else r.fleet_count
    out["cumulative"] = Markup(
        cumulative_svg(
            r.cumulative_now,
            r.cumulative_after,
            best.payback_month if best else None,
            f"GPU: {now_count} x {r.fleet_instance}",
            after_label,
            _float_or_none(getattr(r, "break_even_months", None)),
        )
    )
    if r.kind == "serving":
        rows: list[tuple[str, float | None, str]] = [
            (r.fleet_instance + " (GPU)", _float_or_none(r.gpu_cost_per_million_usd), NAVY)
        ]
        rows += [
            (
                c.instance,
                _float_or_none(c.cost_per_million_usd),
                ORANGE if best is not None and c.instance == best.instance else GREY,
            )
            for c in r.candidates
        ]
        missed = [False] + [c.meets_slo is False for c in r.candidates]
        why = [None] + [c.excluded for c in r.candidates]
        out["cpm"] = Markup(
            bars_svg("Cost per 1M requests per instance type", rows, "", "cpm", apart=missed, why=why)
        )
    monthly = [(f"GPU: {now_count} x {r.fleet_instance}", float(r.monthly_now.value), NAVY)]
    for c in r.candidates:
        label = f"{c.count} x {c.instance}" if c.count else c.instance
        monthly.append(
            (
                label,
                _float_or_none(c.monthly_usd),
                ORANGE if best is not None and c.instance == best.instance else GREY,
            )
        )
    gpu_missed = getattr(gpu, "meets_slo", None) is False and r.kind == "serving"
    missed_m = [gpu_missed] + [c.meets_slo is False for c in r.candidates]
    out["monthly"] = Markup(
        bars_svg(
            "Monthly cost, GPU side vs each candidate",
            monthly,
            "",
            "monthly",
            apart=missed_m,
            why=[None] + [c.excluded for c in r.candidates],
        )
    )
    saving = saving_plot(r.candidates, float(r.thresholds.close_margin_pct))
    if saving is not None:
        out[saving[0]] = saving[1]
    if r.traffic is not None and r.traffic.window_counts:
        out["arrivals"] = Markup(
            arrivals_svg(
                r.traffic.window_counts,
                r.traffic.window_s,
                r.traffic.scale,
                r.traffic.peak_rps,
                getattr(r.traffic, "busiest_rps", None),
            )
        )
    fleets = _fleets(r)
    sims = [
        (f"{f.count} x {f.instance}", f.latency.ttft_ms, f.latency.e2e_ms)
        for f in fleets
        if f.latency.e2e_ms.size
    ]
    if sims:
        slo = getattr(r, "slo", {}) or {}
        llm = (
            r.gpu_fleet is None
            or r.gpu_fleet.ttft_p99 is not None
            or any(c.fleet is not None and c.fleet.ttft_p99 is not None for c in r.candidates)
        )
        out["latency"] = Markup(latency_svg(sims, slo.get("p99_ms"), slo.get("ttft_p99_ms"), with_ttft=llm))
    sized = [f for f in fleets if f.curve]
    curves = [(f.instance, f.curve) for f in sized]
    bands = [getattr(f, "curve_band", ()) for f in sized]
    if r.kind == "serving" and curves:
        out["fleetsize"] = Markup(fleet_size_svg(curves, (r.fleet_instance, r.fleet_count), bands))
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
        return human_number(v)
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


def saving_plot(candidates: Any, margin_pct: float) -> tuple[str, Markup] | None:
    """("savingband", the chart) when some candidate's saving has a band; ("savingband_note", why there is no
    chart) when savings exist but none has one (bare points would read as bands); None without savings."""
    rows = [
        (c.instance, _float_or_none(c.saving_pct), *(_float_or_none(x) for x in c.saving_pct_range))
        for c in candidates
    ]
    if any(None not in row and row[2] != row[3] for row in rows):
        return "savingband", Markup(saving_band_svg(rows, margin_pct))
    if any(row[1] is not None for row in rows):
        return "savingband_note", Markup.escape(NO_BAND_NOTE)
    return None


NO_BAND_NOTE = (
    "No saving-band chart: no candidate's figures carry an error band (measured or stated figures have "
    "none), so each saving is the single figure in the candidates table."
)


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
    from chipswap.textsafe import html_value

    env = Environment(
        autoescape=select_autoescape(default=True, default_for_string=True), finalize=html_value
    )
    env.filters.update(money=_money, pct=_pct, g=_g)
    text = resources.files("chipswap.report").joinpath("templates", "plan.html.j2").read_text("utf-8")
    css = resources.files("chipswap.report").joinpath("templates", "plan.css").read_text("utf-8")
    tpl = env.from_string(text)
    from chipswap.report.wording import (
        caveat_lines,
        decision_lines,
        flip_lines,
        monthly_delta_words,
        saving_range_words,
        saving_words,
    )

    return tpl.render(
        r=result,
        v=result.verdict,
        caveats=caveat_lines(result),
        decision=decision_lines(result),
        flip_lines=flip_lines(result),
        saving_words=saving_words,
        monthly_delta_words=monthly_delta_words,
        saving_range_words=saving_range_words,
        plots=_plots(result),
        css=Markup(css),
        reasons=reason_rows(result.verdict),
        fleets=_fleets(result),
        notes=report_notes(result),
        attribution=trace_attribution(result),
    )
