"""Bench: the physical serving model off the fitted shape. Fits the model on every shared serving source
at once (the modern runs, the trn2-vs-H100 runs, the Neuron SDK decoder tables, the MoE rows), then prints,
per chip family and figure, the leave-one-source-out error (the default band), leave-one-model-out, leave
one MoE model out, and the extrapolation tests that hold out a whole region (long prompts, TP 4, models of
7 B and up, model size x batch, one chip family's stack): median |error|, signed median, band coverage,
median band half-width, against the targets of issues 27 and 37; then which of the issue's shapes get a
figure. Writes the section "Projection off the fitted shape" of docs/benchmarks.md and the same tables into
docs/projection.md (between its extrapolation markers). --write also writes the fitted physics.toml (the
same file `chipswap calibrate` writes, from the same calibration).

    PYTHONPATH=src python bench/bench_extrapolation.py [--write]
"""

from __future__ import annotations

import re
import sys
import time

import numpy as np

from _results import ROOT, write_section  # noqa: E402
from chipswap.economics.catalog_io import load_catalog
from chipswap.projection.api import model_work, project_serving
from chipswap.projection.fitting import physfit as F
from chipswap.projection.fitting.physcal import calibrate_physics

COMMAND = "PYTHONPATH=src python bench/bench_extrapolation.py"
FAMILIES = ("Trainium2", "Inferentia2", "Trainium", "H100", "H200", "L40S", "A100", "B200")
NAMES = {"out_tok_s": "output tok/s", "requests_per_s": "requests/s", "ttft_s": "TTFT", "tpot_s": "TPOT"}
EXTRAPOLATIONS = ("loso", "moe", "prompt", "tp", "params", "size_batch", "size_batch_shared", "family")
P5E_CAPACITY_BLOCK = 43.26  # USD/h, ../shared/reference/pricing/capacity_blocks_snapshot_2024.csv (Q4 2024)


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %" if x == x else "-"


def _abs(x: float) -> str:
    return f"{x * 100:.1f} %" if x == x else "-"


def split_table(cal: F.PhysCalibration, kind: str) -> str:
    lines = [
        "| family | figure | figures | median abs. error | signed median | coverage | median half-width "
        "| targets |",
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
                ok = (
                    "met"
                    if all(hits)
                    else "missed: "
                    + ", ".join(
                        n for n, h in zip(("error", "coverage", "half-width"), hits, strict=True) if not h
                    )
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
        f"{len(cal.runs)} runs fitted ({', '.join(f'{f} {sum(r.family == f for r in cal.runs)}' for f in sorted(fams))}), "  # noqa: E501
        f"{len(cal.skipped)} skipped (Poisson-load runs, compile / load failures, GPU tables without a "
        "batch or a prompt length); calibration with every "
        f"held-out fit {seconds:.0f} s on this machine. Error = predicted / published - 1; the band of a "
        "figure "
        "is the 80th percentile of |log error| of that kind of extrapolation, pooled over the vendor's "
        "families (so coverage is about 80 % per vendor by construction; per family it is not).",
    ]
    for s in cal.splits:
        parts += ["", f"**{F.SPLITS_DOC[s.kind]}**", "", split_table(cal, s.kind)]
    lp = F.long_prompt_errors(cal)
    parts += [
        "",
        "**Trainium2 long prompts (14.8K-59.5K) fitted without them**: TTFT median |error| "
        f"{_abs(lp['ttft_s'])}, "
        f"output tok/s {_abs(lp['out_tok_s'])} (target <= 30 %).",
    ]
    return "\n".join(parts)


def gpu_feasibility(cal: F.PhysCalibration) -> str:
    """The H100 vLLM runs whose mean TTFT is below what the chip's dense bf16 peak allows at the stated
    shapes (B prompts arriving at once finish their prefills no faster than one after another at 100 % of
    peak: mean TTFT >= (B + 1) / 2 x prefill FLOPs / peak), and the GPU table fit's error without them."""
    ctx = F.load_context(cal.runs)
    figs = [f for f in cal.split("gpu_table").figures if f.metric == "out_tok_s"]
    fast = set()
    for r in (f.run for f in figs):
        ttft = r.value("ttft_s")
        if ttft is None:
            continue
        w, d = ctx.works[r.model], ctx.works[r.model].dims
        flops = 2 * w.matmul_params * r.prompt + 2 * d.heads * d.head_dim * d.layers * r.prompt**2
        if ttft < (r.batch + 1) / 2 * flops / ctx.devices[(r.chip, r.lnc)].need_peak("bf16"):
            fast.add(r.row_id)
    rest = [abs(f.ratio - 1) for f in figs if f.run.row_id not in fast]
    gone = [abs(f.ratio - 1) for f in figs if f.run.row_id in fast]
    rest_s, gone_s = _abs(float(np.median(rest))), _abs(float(np.median(gone)))
    return (
        f"**H100 vLLM runs faster than the chip allows at their stated shapes**: {len(fast)} of {len(figs)} "
        "report a mean TTFT below (B + 1) / 2 prefills at 100 % of the H100's dense bf16 peak "
        "(989 TFLOP/s): prefix-cache hits or shorter prompts than stated. The GPU table fit's median "
        f"|error| on output tok/s is {rest_s} on the other {len(rest)} and {gone_s} on these (all "
        f"{len(figs)}: the shipped vllm_gap). They stay in the fit and in the gap (no run is dropped for "
        "disagreeing with the model)."
    )


def must_show(cat) -> str:
    w = model_work("llama-3.1-8b")
    pinned = project_serving(
        w, "inf2.48xlarge", prompt_tokens=1500, output_tokens=250, tp=8, replicas=3, batch=32, catalog=cat
    )
    free = project_serving(w, "inf2.48xlarge", prompt_tokens=1500, output_tokens=250, catalog=cat)
    r = pinned.requests_per_s
    c = free.config
    if r is None or c is None or free.requests_per_s is None:
        return f"no figure: pinned: {pinned.reason or 'a figure'}; free search: {free.reason or 'a figure'}"
    tpot = pinned.shapes[0].tpot.value
    return (
        f"Pinned TP8 x 3, batch 32 (published 5.0-5.3 requests/s, TPOT 26.6-26.9 ms alone): **{r.value:.2f} "
        f"requests/s ±{r.band * 100:.0f} % ({r.low:.2f}-{r.high:.2f})**, TPOT of a lone request "
        f"{tpot * 1e3:.1f} "
        f"ms. Free search: TP{c.tp_degree} x {c.replicas}, batch {c.max_batch}: "
        f"{free.requests_per_s.value:.2f} ±{free.requests_per_s.band * 100:.0f} % requests/s."
    )


def trn2_claim(cat) -> str:
    lines = [
        "| model | instance | layout | requests/s (band) | slow edge | trn2 price for parity "
        "| for 30 % / 40 % better |",
        "|---|---|---|---|---|---|---|",
    ]
    for model in ("llama-3.1-8b", "llama-3.3-70b"):
        w = model_work(model)
        res = {
            i: project_serving(w, i, prompt_tokens=1500, output_tokens=250, catalog=cat)
            for i in ("trn2.48xlarge", "p5en.48xlarge", "p5e.48xlarge")
        }
        trn = res["trn2.48xlarge"].requests_per_s
        for inst, p in res.items():
            rps, cfg = p.requests_per_s, p.config
            if rps is None or cfg is None:
                lines.append(f"| {model} | {inst} | - | no figure: {p.reason[:200]} | | | |")
                continue
            price = None
            if inst == "p5en.48xlarge":
                found = cat.find_rate(inst, "us-east-1", "on-demand")
                price = float(found.usd_per_hour) if found is not None else None
            elif inst == "p5e.48xlarge":
                price = P5E_CAPACITY_BLOCK
            parity = f"${price * trn.value / rps.value:,.2f}/h (vs ${price:,.2f})" if price and trn else "-"
            better = (
                f"${price * trn.value / rps.value / 1.3:,.2f} / ${price * trn.value / rps.value / 1.4:,.2f}"
                if price and trn
                else "-"
            )
            lines.append(
                f"| {model} | {inst} | TP{cfg.tp_degree} x {cfg.replicas}, batch {cfg.max_batch} | "
                f"{rps.value:,.2f} ±{rps.band * 100:.0f} % | {rps.low:,.2f} | {parity} | {better} |"
            )
    return "\n".join(lines)


def moe_line(cat) -> str:
    w = model_work("qwen3-30b-a3b")
    p = project_serving(w, "trn2.48xlarge", prompt_tokens=1500, output_tokens=250, catalog=cat)
    if not p.fits:
        return f"Qwen3-30B-A3B on trn2.48xlarge at 1,500 / 250: {p.reason}"
    r, c = p.requests_per_s, p.config
    return (
        "Qwen3-30B-A3B on trn2.48xlarge at 1,500 / 250: "
        f"TP{c.tp_degree} x {c.replicas}, batch {c.max_batch}: "
        f"TTFT {p.shapes[0].ttft.value * 1e3:,.0f} ms ±{p.shapes[0].ttft.band * 100:.0f} %, "
        f"{r.value:,.2f} ±{r.band * 100:.0f} % requests/s (issue 27: 311 ms and 0.88 requests/s projected "
        "before, against 1,547 ms and 0.375 requests/s measured in runs the project never saw)"
    )


def _band_text(fig) -> str:
    if fig is None:
        return "-"
    band = fig.band
    return "refused" if band != band or band >= 1.0 else f"{fig.value:,.3g} ±{band * 100:.0f} %"


def coverage_table(cat) -> str:
    """The issue's shapes: dense 8B / 70B at 128-1,500-token prompts on inf2, trn1, trn2, and the MoE
    models on trn2, inf2, H100: requests/s and TTFT with their bands, or the reason."""
    lines = [
        "| model | instance | prompt / output | layout | requests/s | TTFT | TPOT |",
        "|---|---|---|---|---|---|---|",
    ]
    cases = [
        (m, i, p, 256)
        for m in ("llama-3.1-8b", "llama-3.3-70b")
        for i in ("inf2.48xlarge", "trn1.32xlarge", "trn2.48xlarge")
        for p in (128, 512, 1024, 1500)
    ] + [
        (m, i, 1000, 300)
        for m in ("qwen3-30b-a3b", "gpt-oss-20b", "llama-4-scout")
        for i in ("trn2.48xlarge", "inf2.48xlarge", "p5.48xlarge")
    ]
    for model, inst, prompt, out in cases:
        p = project_serving(model_work(model), inst, prompt_tokens=prompt, output_tokens=out, catalog=cat)
        if not p.fits or p.config is None:
            lines.append(f"| {model} | {inst} | {prompt} / {out} | - | {p.reason[:120]} | | |")
            continue
        c, sh = p.config, p.shapes[0]
        lines.append(
            f"| {model} | {inst} | {prompt} / {out} | TP{c.tp_degree} x {c.replicas}, batch {c.max_batch} | "
            f"{_band_text(p.requests_per_s)} | {_band_text(sh.ttft)} | {_band_text(sh.tpot)} |"
        )
    return "\n".join(lines)


def _replace_between(path, begin: str, end: str, text: str) -> None:
    from chipswap.atomic import atomic_write_text

    doc = path.read_text()
    block = f"{begin}\n{text.strip()}\n{end}"
    pat = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    doc = pat.sub(lambda _m: block, doc) if pat.search(doc) else doc.rstrip("\n") + "\n\n" + block + "\n"
    atomic_write_text(path, doc)


def main() -> None:
    t0 = time.perf_counter()
    cal = calibrate_physics()
    seconds = time.perf_counter() - t0
    if "--write" in sys.argv[1:]:
        print(f"wrote {F.write_physics(cal)}")
        from chipswap.projection.platforms import load_physics

        load_physics.cache_clear()
    cat = load_catalog()
    text = "\n\n".join(
        [
            body(cal, seconds),
            gpu_feasibility(cal),
            "**Llama 3.1 8B on inf2.48xlarge at 1,500 / 250**: " + must_show(cat),
            "**MoE**: " + moe_line(cat),
            "**The issue's shapes** (issue 37: short and chat prompts on every Neuron family, MoE on Neuron "
            "and H100; `chipswap project MODEL -i INSTANCE --prompt-tokens P --output-tokens O`):",
            coverage_table(cat),
            "**Trn2 vs p5e / p5en at 1,500 / 250** (whole instance; p5e/p5en under the GPU default stack "
            "vllm):",
            trn2_claim(cat),
        ]
    )
    print(text)
    write_section("extrapolation", "Projection off the fitted shape (issue 27)", COMMAND, text)
    _replace_between(
        ROOT / "docs" / "projection.md", "<!-- extrapolation:begin -->", "<!-- extrapolation:end -->",
        f"Command: `{COMMAND}`\n\n" + text,
    )  # fmt: skip


if __name__ == "__main__":
    main()
