"""The plan report as a Markdown summary (for pull requests and chat): verdict, reasons, costs, flips."""

from __future__ import annotations

from decimal import Decimal
from typing import Any


def _money(v: Decimal | None) -> str:
    return "unknown" if v is None else f"${v.quantize(Decimal('0.01')):,}"


def _pct(v: Any) -> str:
    return "unknown" if v is None else f"{float(v):.1f}%"


def render_markdown(r: Any, summary: list[str]) -> str:
    v = r.verdict
    out = [f"# chipswap plan: {r.title}", "", f"**Verdict: {v.verdict}** — {v.why}", ""]
    out += [
        f"- Monthly cost now: {_money(r.monthly_now.value)} ({r.fleet_count} x {r.fleet_instance}; "
        f"{r.monthly_now.source})"
    ]
    if r.best is not None:
        b = r.best
        out += [
            f"- Monthly cost after: {_money(b.monthly_usd)} ({b.count} x {b.instance}, "
            f"{b.rate.source if b.rate else 'no price'})",
            f"- Saving: {_money(b.saving_usd)} a month ({_pct(b.saving_pct)})",
            f"- Porting: {_money(r.porting.value)} ({r.porting.note}); payback month: "
            f"{b.payback_month or 'never'}" + (f"; per run: run {b.payback_run}" if b.payback_run else ""),
        ]
    if r.shapes is not None and r.shapes.sequence_buckets:
        out.append(
            f"- Shapes: {', '.join(map(str, r.shapes.sequence_buckets))}; padding overhead "
            f"{_pct(r.shapes.padding_overhead_pct)}"
        )
    if r.weights is not None:
        out.append(f"- Model weights: {r.weights.value:.1f} GiB in bf16 ({r.weights.note})")
    rd = r.readiness
    out.append(
        f"- Readiness: {rd.blockers} blocker(s) on {rd.target} (prediction; {rd.note})"
        if rd.checked
        else f"- Readiness: not checked ({rd.note})"
    )
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
            f"| {x.rule} | {x.outcome} | {x.input_label} = {x.value_text} | {x.threshold} | {x.text} |"
        )
    out += [
        "",
        "## Candidates",
        "",
        "| instance | $/h | throughput / run time | count | monthly | saving | payback |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in r.candidates:
        rate = f"{c.rate.value} ({c.rate.source})" if c.rate else "unknown"
        thr = (
            f"{c.throughput.value:.4g} {c.throughput.unit} ({c.throughput.source})"
            if c.throughput
            else "unknown"
        )
        note = f" — excluded: {c.excluded}" if c.excluded else ""
        out.append(
            f"| {c.instance}{note} | {rate} | {thr} | {c.count} | {_money(c.monthly_usd)} | "
            f"{_pct(c.saving_pct)} | {c.payback_month or 'never'} |"
        )
    out += ["", "## What would flip it", ""]
    out += [f"- {f.text}" for f in r.flips] or ["- (no candidate to vary)"]
    notes = report_notes(r)
    if notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    if trace_attribution(r):
        out += ["", trace_attribution(r)]
    out += ["", "---", "", "```", *summary, "```", ""]
    return "\n".join(out)
