"""Words the terminal summary, report.html and report.md share, so the three never say different things.

- ``flip_lines``: what would flip the verdict, one line per knob and direction ("toward move: ...");
- ``saving_words`` / ``monthly_delta_words``: a saving, or its opposite in words ("costs 7.4x as much",
  "+$244,211.86 a month"), never a negative percentage;
- ``caveat_lines``: every caveat the terminal prints (the capacity qualifier such as "check quota first",
  unknown inputs), for the HTML and Markdown.

Pure: no I/O. May not: decide anything (the plan's stages do).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any


def flip_lines(result: Any) -> list[str]:
    """Flips that exist, toward move first, each prefixed with its direction when it has one."""
    # every stated objective is shown, flip or not (the other knobs only where they flip)
    flips = [f for f in getattr(result, "flips", ()) if f.value is not None or f.knob.endswith(" objective")]
    order = {"toward move": 0, "toward stay": 1}
    flips.sort(key=lambda f: order.get(getattr(f, "direction", ""), 2))
    from chipswap.verdict.sensitivity import lever

    def text(f: Any) -> str:
        return f"{f.text} (lever: {lever(f.knob)})" if f.value is not None else f.text

    return [f"{f.direction}: {text(f)}" if getattr(f, "direction", "") else text(f) for f in flips]


def _money(v: Decimal) -> str:
    return f"${abs(v).quantize(Decimal('0.01')):,}"


def monthly_delta_words(saving_usd: Decimal | None) -> str:
    """ "saves $1,234.56 a month" or "+$244,211.86 a month" (costs more); never "$-244,211.86"."""
    if saving_usd is None:
        return "unknown"
    if saving_usd >= 0:
        return f"saves {_money(saving_usd)} a month"
    return f"+{_money(saving_usd)} a month"


def saving_words(
    pct: Decimal | float | None, now: Decimal | None = None, after: Decimal | None = None
) -> str:
    """ "58.1% saving", or for a move that costs more "costs 7.4x as much" (from the two monthly figures when
    given, else from the percentage: after / now = 1 - pct/100)."""
    if pct is None:
        return "saving unknown"
    p = Decimal(str(pct))
    if p >= 0:
        return f"{p.quantize(Decimal('0.1'))}% saving"
    if now is not None and after is not None and now > 0:
        ratio = after / now
    else:
        ratio = 1 - p / 100
    if ratio < Decimal("1.095"):
        return f"costs {(-p).quantize(Decimal('0.1'))}% more"
    return f"costs {ratio.quantize(Decimal('0.1'))}x as much"


def caveat_lines(result: Any) -> list[str]:
    """The caveats the terminal's verdict line carries, as sentences for the report."""
    v = getattr(result, "verdict", None)
    out = []
    qualifier = getattr(v, "qualifier", "")
    if qualifier:
        out.append(f"Before you move: {qualifier}.")
    priced = getattr(result, "best", None) is not None
    for reason in (*getattr(v, "reasons", ()), *getattr(v, "economics", ())):
        if reason.outcome == "unknown" and not (qualifier and reason.rule == "capacity"):
            if reason.rule in ("monthly-saving", "payback") and not priced:
                continue  # no candidate priced: the saving is not a check left undone (the verdict says why)
            out.append(f"Not checked: {reason.text}.")
    return out


def decision_lines(result: Any) -> list[str]:
    """What the answer rests on, beside it: a "measure first" verdict's detail, and the right-sizing of
    today's GPU fleet (no port)."""
    rs = right_sizing_line(result)
    return [*measure_rows(result), *([rs] if rs else [])]


def saving_range_words(lo: Decimal | float | None, hi: Decimal | float | None) -> str:
    """A saving's range across the error band in words: "43.5% to 72.6%", "costs 3.1x to 12.8x as much"."""
    if lo is None or hi is None:
        return "unknown"
    a, b = sorted((Decimal(str(lo)), Decimal(str(hi))))
    if a >= 0:
        return f"{a.quantize(Decimal('0.1'))}% to {b.quantize(Decimal('0.1'))}%"
    if b < 0:
        low, high = (1 - b / 100).quantize(Decimal("0.1")), (1 - a / 100).quantize(Decimal("0.1"))
        return f"costs {low}x to {high}x as much"
    return f"{saving_words(a)} to {saving_words(b)}"


def measure_rows(result: Any) -> list[str]:
    """A "measure first" verdict's detail: why no figure, the fix first, what flips it, the trial's cost and
    the next command ([] for any other verdict)."""
    from chipswap.verdict.rules import measure_lines

    m = getattr(getattr(result, "verdict", None), "measure", None)
    return list(measure_lines(m)) if m is not None else []


def right_sizing_line(result: Any) -> str:
    """Today's GPU fleet against the fleet the traffic needs, as a headline beside the answer (no port):
    "right-size: 2 x p5.4xlarge instead of 8 saves $30,134.40 a month (75.0%) without a port"; "" when the
    fleet is already that size, or is not sized."""
    gpu = getattr(result, "gpu_fleet", None)
    today = getattr(result, "monthly_today", None)
    needed = getattr(gpu, "count", None)
    n = getattr(result, "fleet_count", None)
    if getattr(result, "kind", "") != "serving" or needed is None or today is None or n is None:
        return ""
    now = result.monthly_now.value
    if needed >= n or today.value <= 0:
        return ""
    gain = today.value - now
    floor = str(getattr(gpu, "min_count_why", "") or "")
    why = f" ({floor})" if floor else ""
    return (
        f"right-size: {needed} x {result.fleet_instance} instead of {n}{why} {monthly_delta_words(gain)} "
        f"({gain / today.value * 100:.1f}%) without a port"
    )


def candidate_reason(result: Any, instance: str) -> str:
    """ " — <why it cannot be chosen>" for a candidate with a reason (no figure, misses the SLO, no price);
    "" for the GPU fleet and a candidate that can be chosen."""
    for c in getattr(result, "candidates", ()):
        if c.instance == instance and c.excluded:
            text = str(c.excluded).split(" (issue ")[0].replace(" — measure it (chipswap trial):", ":")
            return f" — {text}"
    return ""
