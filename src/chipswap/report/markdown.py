"""The plan report as a Markdown summary (for pull requests and chat): verdict, figures, reasons, costs,
flips.

Everything that comes from a file someone else wrote (the title, notes, figure notes, trace names) goes
through
textsafe.md_text: HTML is escaped and Markdown markup is neutralised, one line each, so a title cannot inject
raw HTML or fake a "Verdict:" line. The terminal summary at the end sits in a code fence longer than any run
of
backticks inside it. May not write files.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from chipswap.textsafe import human_number, md_text


def _money(v: Decimal | None) -> str:
    return "unknown" if v is None else f"${v.quantize(Decimal('0.01')):,}"


def _pct(v: Any) -> str:
    return "unknown" if v is None else f"{float(v):.1f}%"


def _fig(f: Any) -> str:
    if f is None:
        return "unknown"
    return f"{human_number(f.value)} {md_text(f.unit)} ({md_text(f.label)})"


def _count(n: int | None, why: str = "") -> str:
    """An instance count, or what stands in for one (never Python's "None")."""
    if n is not None:
        return f"{n:,}"
    return f"none ({md_text(why)})" if why else "not sized"


def _fence(lines: list[str]) -> str:
    longest = max((len(m) for line in lines for m in re.findall(r"`+", line)), default=0)
    return "`" * max(3, longest + 1)


def _fleet_row(f: Any, serving: bool) -> str:
    lat = []
    if f.e2e_p99 is not None:
        lat.append(f"end to end {_fig(f.e2e_p99)}")
    if f.ttft_p99 is not None:
        lat.append(f"TTFT {_fig(f.ttft_p99)}")
    cfg = "—"
    if f.config is not None:
        c = f.config
        cfg = f"TP {c.tp_degree} x {c.replicas} replica(s), batch {c.max_batch}, {md_text(c.weight_dtype)}"
    lo, hi = f.count_range
    count = _count(f.count, f.sizing)
    if f.count is not None and lo is not None and lo != hi:
        count += f" ({lo}–{hi} across the band)" if hi is not None else f" ({lo} or more across the band)"
    if f.meets_slo is False:
        count += " — misses SLO"
    cells = [md_text(f.instance), _fig(f.throughput)]
    if serving:
        cells.append("; ".join(lat) or "unknown")
    cells += [count, cfg]
    return "| " + " | ".join(cells) + " |"


def curve_table(fleets: list[Any]) -> list[str]:
    """Fleet size vs traffic: each point re-planned (sized by simulation on the traffic scaled by
    superposition), its band, and the linear curve (the 1x count scaled) it replaces."""
    rows = [f for f in fleets if getattr(f, "curve_band", ())]
    if not rows:
        return []
    out = [
        "",
        "## Fleet size vs traffic",
        "",
        "Each point re-planned: the traffic scaled (superposition) and the fleet sized by simulation for "
        "every "
        "objective; the band scales each point by the capacity's ratio at the projection band's edges; "
        "linear: the count at 1x times the traffic (the curve before re-planning).",
        "",
        "| instance | traffic | re-planned | band | linear |",
        "|---|---|---|---|---|",
    ]
    for f in rows:
        linear = dict(f.curve_linear)
        for (g, n), (_g, lo, hi) in zip(f.curve, f.curve_band, strict=True):
            band = f"{_count(lo)}–{_count(hi) if hi is not None else 'none meets'}"
            out.append(f"| {md_text(f.instance)} | {g:g}x | {_count(n)} | {band} | {_count(linear.get(g))} |")
    return out


def render_markdown(r: Any, summary: list[str]) -> str:
    v = r.verdict
    out = [
        f"# chipswap plan: {md_text(r.title)}",
        "",
        f"**Verdict: {md_text(v.verdict)}** — {md_text(v.why, 2000)}",
        "",
    ]
    from chipswap.report.wording import (
        caveat_lines,
        decision_lines,
        flip_lines,
        monthly_delta_words,
        saving_range_words,
        saving_words,
    )

    decision = decision_lines(r)
    if decision:
        out += [f"- {md_text(d, 2000)}" for d in decision] + [""]
    caveats = caveat_lines(r)
    if caveats:
        out += [f"> {md_text(c, 2000)}" for c in caveats] + [""]
    gpu = getattr(r, "gpu_fleet", None)
    now_count = gpu.count if gpu is not None and gpu.count and r.kind == "serving" else r.fleet_count
    out.append(
        f"- GPU side per month: {_money(r.monthly_now.value)} ({now_count} x {md_text(r.fleet_instance)}; "
        f"{md_text(r.monthly_now.source)})"
    )
    today = getattr(r, "monthly_today", None)
    if today is not None and today.value != r.monthly_now.value:
        out.append(f"- Today's fleet: {_money(today.value)} ({r.fleet_count} x {md_text(r.fleet_instance)})")
    if r.best is not None:
        b = r.best
        lo, hi = b.saving_pct_range
        band = f"; {saving_range_words(lo, hi)} across the error band" if lo is not None and lo != hi else ""
        out += [
            f"- Monthly cost after: {_money(b.monthly_usd)} ({_count(b.count)} x {md_text(b.instance)}, "
            f"{md_text(b.rate.source) if b.rate else 'no price'})",
            f"- {'Extra cost' if (b.saving_usd or 0) < 0 else 'Saving'}: {monthly_delta_words(b.saving_usd)} "
            f"({saving_words(b.saving_pct, r.monthly_now.value, b.monthly_usd)}{band})",
            f"- Porting: {_money(r.porting.value)} ({md_text(r.porting.note)}); payback month: "
            f"{b.payback_month or 'never'}" + (f"; per run: run {b.payback_run}" if b.payback_run else ""),
        ]
    if r.shapes is not None and r.shapes.sequence_buckets:
        out.append(
            f"- Shapes: {', '.join(map(str, r.shapes.sequence_buckets))}; padding overhead "
            f"{_pct(r.shapes.padding_overhead_pct)}"
        )
    if r.weights is not None:
        out.append(f"- Model weights: {r.weights.value:.1f} GiB in bf16 ({md_text(r.weights.note)})")
    rd = r.readiness
    out.append(
        f"- Readiness: {rd.blockers} blocker(s) on {md_text(rd.target)} (prediction; {md_text(rd.note)})"
        if rd.checked
        else f"- Readiness: not checked ({md_text(rd.note)})"
    )
    serving = r.kind == "serving"
    fleets = [f for f in (gpu, *(getattr(c, "fleet", None) for c in r.candidates)) if f is not None]
    if fleets:
        head = ["instance", "throughput" if serving else "run time"] + (["latency p99"] if serving else [])
        head += ["instances", "configuration"]
        out += ["", "## Figures", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += [_fleet_row(f, serving) for f in fleets]
    out += curve_table(fleets) if serving else []
    out += [
        "",
        "## Screening rules",
        "",
        "| rule | outcome | input | threshold | reason |",
        "|---|---|---|---|---|",
    ]
    from chipswap.report.html import reason_rows, report_notes, trace_attribution

    for x in reason_rows(v):
        out.append(
            f"| {md_text(x.rule)} | {x.outcome} | {md_text(x.input_label)} = {md_text(x.value_text)} | "
            f"{md_text(x.threshold)} | {md_text(x.text, 2000)} |"
        )
    out += [
        "",
        "## Candidates",
        "",
        "| instance | $/h | throughput / run time | count | monthly | saving | payback |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in r.candidates:
        rate = f"{c.rate.value} ({md_text(c.rate.source)})" if c.rate else "unknown"
        if c.block:  # a Capacity Block price: how the money is bought, beside the figure
            rate += f"; {md_text(c.block, 600)}"
        note = f" — excluded: {md_text(c.excluded, 1000)}" if c.excluded else ""
        out.append(
            f"| {md_text(c.instance)}{note} | {rate} | {_fig(c.throughput)} | {_count(c.count)} | "
            f"{_money(c.monthly_usd)} | "
            f"{saving_words(c.saving_pct, r.monthly_now.value, c.monthly_usd)}"
            f"{' (misses SLO)' if c.meets_slo is False else ''} | {c.payback_month or 'never'} |"
        )
    out += ["", "## What would flip it", ""]
    out += [f"- {md_text(f, 1000)}" for f in flip_lines(r)] or ["- (nothing within the searched range)"]
    notes = report_notes(r)
    if notes:
        out += ["", "## Notes", ""] + [f"- {md_text(n, 2000)}" for n in notes]
    if trace_attribution(r):
        out += ["", md_text(trace_attribution(r))]
    fence = _fence(summary)
    out += ["", "---", "", fence, *summary, fence, ""]
    return "\n".join(out)
