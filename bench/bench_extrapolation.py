"""Bench: the physical serving model off the fitted shape. Fits the model on every modern serving run
(../shared/reference/neuron-benchmarks-modern/), then prints, per chip family and figure, the
leave-one-source-out error and four extrapolation tests that hold out a whole region (long prompts, TP 4,
models of 7 B and up, one chip family's stack): median |error|, signed median, band coverage, median band
half-width, against the targets of issue 27. Writes the section "Projection off the fitted shape" of
docs/benchmarks.md and the same tables into docs/projection.md (between its extrapolation markers).

    PYTHONPATH=src python bench/bench_extrapolation.py
"""

from __future__ import annotations

import re
import time

from _results import ROOT, write_section  # noqa: E402

from chipswap.projection.fitting import physfit as F

COMMAND = "PYTHONPATH=src python bench/bench_extrapolation.py"
FAMILIES = ("Trainium2", "Inferentia2", "H100")
NAMES = {"out_tok_s": "output tok/s", "requests_per_s": "requests/s", "ttft_s": "TTFT", "tpot_s": "TPOT"}
EXTRAPOLATIONS = ("prompt", "tp", "params", "family")


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %" if x == x else "-"


def _abs(x: float) -> str:
    return f"{x * 100:.1f} %" if x == x else "-"


def split_table(cal: F.PhysCalibration, kind: str) -> str:
    lines = [
        "| family | figure | figures | median abs. error | signed median | coverage | median half-width | targets |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for fam in FAMILIES:
        for m in F.METRICS:
            s = F.summarize(cal, kind, fam, m)
            if s is None:
                continue
            ok = ""
            if kind in EXTRAPOLATIONS:
                hits = (
                    s.median_abs <= F.TARGETS["median"],
                    s.coverage >= F.TARGETS["coverage"],
                    s.half_width <= F.TARGETS["half_width"],
                )
                ok = "met" if all(hits) else "missed: " + ", ".join(
                    n for n, h in zip(("error", "coverage", "half-width"), hits, strict=True) if not h
                )
            hw = "n/a" if s.half_width == float("inf") else f"±{s.half_width * 100:.0f} %"
            lines.append(
                f"| {fam} | {NAMES[m]} | {s.figures} | {_abs(s.median_abs)} | {_pct(s.signed_median)} | "
                f"{s.coverage * 100:.1f} % | {hw} | {ok} |"
            )
    return "\n".join(lines)


def body(cal: F.PhysCalibration, seconds: float) -> str:
    fams = {r.family for r in cal.runs}
    parts = [
        f"{len(cal.runs)} runs fitted ({', '.join(f'{f} {sum(r.family == f for r in cal.runs)}' for f in sorted(fams))}), "
        f"{len(cal.skipped)} skipped (Poisson-load runs, compile / load failures); calibration with every "
        f"held-out fit {seconds:.0f} s on this machine. Error = predicted / published - 1; the band of a figure "
        "is the 80th percentile of |log error| of that kind of extrapolation, pooled over the vendor's "
        "families (so coverage is about 80 % per vendor by construction; per family it is not).",
    ]
    for s in cal.splits:
        parts += ["", f"**{F.SPLITS_DOC[s.kind]}**", "", split_table(cal, s.kind)]
    lp = F.long_prompt_errors(cal)
    parts += [
        "",
        f"**Trainium2 long prompts (14.8K-59.5K) fitted without them**: TTFT median |error| {_abs(lp['ttft_s'])}, "
        f"output tok/s {_abs(lp['out_tok_s'])} (target <= 30 %).",
    ]
    return "\n".join(parts)


def _replace_between(path, begin: str, end: str, text: str) -> None:
    from chipswap.atomic import atomic_write_text

    doc = path.read_text()
    block = f"{begin}\n{text.strip()}\n{end}"
    pat = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    doc = pat.sub(lambda _m: block, doc) if pat.search(doc) else doc.rstrip("\n") + "\n\n" + block + "\n"
    atomic_write_text(path, doc)


def main() -> None:
    t0 = time.perf_counter()
    cal = F.calibrate_physics()
    seconds = time.perf_counter() - t0
    text = body(cal, seconds)
    print(text)
    write_section("extrapolation", "Projection off the fitted shape (issue 27)", COMMAND, text)
    _replace_between(
        ROOT / "docs" / "projection.md", "<!-- extrapolation:begin -->", "<!-- extrapolation:end -->",
        f"Command: `{COMMAND}`\n\n" + text,
    )  # fmt: skip


if __name__ == "__main__":
    main()
