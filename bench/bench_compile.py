"""N AOTInductor buckets of one model hold ONE copy of the weights: resident memory measured, not assumed.

Compiles the distilbert-base preset (random weights, ~66M parameters, fp32) at N sequence buckets with
``chipswap.compile.compiler`` (AOTInductor, weights not embedded) and, for comparison, the same buckets with
the
weights embedded in each package. Then, each in a fresh process, loads all N buckets, runs each once and reads
the process's resident memory (VmRSS, split into anonymous and file-backed) against the same process before
loading:

- shared:   chipswap's way: one weights.pt memory-mapped once, passed to every bucket (load_constants
            user_managed)
- copied:   the same packages, but each bucket gets its own copy of the weights (user_managed=False)
- embedded: packages compiled with the weights inside (aot_inductor.package_constants_in_so=True)

Run: .venv/bin/python bench/bench_compile.py [--buckets 32,64,128] [--model distilbert-base] [--reps 3]
Compiles are cached in $CHIPSWAP_BENCH_CACHE (default /tmp/chipswap-bench-cache), so reruns only measure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from _results import ROOT  # noqa: E402  (first: it puts src/ on the path)

MEASURE = r"""
import json, os, sys
os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = "1"
import torch, torch._inductor
from chipswap.compile.backends.aoti import AOTInductorBackend, load_weights
def rss():
    out = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "RssAnon", "RssFile"):
            out[k] = int(v.split()[0]) * 1024
    return out
cfg = json.loads(sys.argv[1])
mode, dirs, wfile = cfg["mode"], cfg["dirs"], cfg["weights"]
torch.set_num_threads(1)
base = rss()
be = AOTInductorBackend()
weights = load_weights(wfile) if mode != "embedded" else None
arts = [be.load(d, weights=weights, copy_weights=(mode == "copied")) for d in dirs]
if weights is not None:  # page every weight in (a mmap is lazy): count the whole copy, not the touched rows
    with torch.no_grad():
        for t in weights.values():
            float(t.float().sum())
for a in arts:
    feed = {s.name: torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for s in a.inputs}
    if "attention_mask" in feed:
        feed["attention_mask"] += 1
    a(feed)
after = rss()
print(json.dumps({k: after[k] - base[k] for k in after}))
"""


def _compile_seconds(cache, report) -> float:
    """Seconds the buckets took to compile when they were built (recorded in each cache entry)."""
    return sum(float(cache.read(b.key).meta.get("compile_seconds", 0.0)) for b in report.buckets)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="distilbert-base")
    ap.add_argument("--buckets", default="32,64,128")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-embedded", action="store_true", help="skip the embedded-weights compiles (slow)")
    args = ap.parse_args()
    from _results import write_section
    from chipswap.compile.cache import ArtifactCache
    from chipswap.compile.compiler import compile_plan, plan_from_args, target_from_spec

    seqs = [int(x) for x in args.buckets.split(",")]
    cache = ArtifactCache(os.environ.get("CHIPSWAP_BENCH_CACHE", "/tmp/chipswap-bench-cache"))
    target = target_from_spec(args.model)
    n_params = sum(p.numel() for p in target.model.parameters())
    w_bytes = sum(p.numel() * p.element_size() for p in target.model.parameters())
    plan = plan_from_args(seqs, [1])
    rep = compile_plan(target, plan, backend="aotinductor", cache=cache, progress=True)
    t_shared = _compile_seconds(cache, rep)
    dirs = [str(cache.entry_dir(b.key)) for b in rep.buckets]
    wfile = str(cache.entry_dir(rep.compiled_set["weights_key"]) / "weights.pt")
    modes: dict[tuple[str, int], list[str]] = {}
    for k in sorted({1, len(dirs)}):
        modes[("shared", k)] = dirs[:k]
        modes[("copied", k)] = dirs[:k]
    t_emb = None
    if not args.no_embedded:
        rep_e = compile_plan(
            target, plan, backend="aotinductor", cache=cache, flags={"embed_weights": "1"}, progress=True
        )
        t_emb = _compile_seconds(cache, rep_e)
        edirs = [str(cache.entry_dir(b.key)) for b in rep_e.buckets]
        for k in sorted({1, len(edirs)}):
            modes[("embedded", k)] = edirs[:k]
    del target
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res: dict[tuple[str, int], dict[str, float]] = {}
    for (mode, k), ds in modes.items():
        runs = []
        for _ in range(args.reps):
            cfg = json.dumps({"mode": mode, "dirs": ds, "weights": wfile})
            out = subprocess.run(
                [sys.executable, "-c", MEASURE, cfg], capture_output=True, text=True, env=env
            )
            if out.returncode != 0:
                raise SystemExit(f"{mode} measurement failed:\n{out.stderr[-2000:]}")
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        res[(mode, k)] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        print(mode, k, {key: round(v / 2**20, 1) for key, v in res[(mode, k)].items()}, flush=True)
    mib = 2**20
    n = len(seqs)
    lines = [
        f"Model: `{args.model}` preset, random weights, {n_params / 1e6:.1f}M parameters,"
        f" {w_bytes / mib:.0f} MiB of fp32 weights. N = {n} AOTInductor buckets (batch 1, sequence"
        f" {', '.join(map(str, seqs))}). Each row: a fresh process loads all N buckets and runs each once;"
        f" resident memory growth over the same process before loading (median of {args.reps}).",
        "",
        "| weights | buckets loaded | RSS growth (MiB) | anonymous (MiB) | file-backed (MiB) |"
        " RSS growth / weight bytes |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    label = {
        "shared": "shared: one weights.pt, `load_constants(user_managed=True)` (chipswap)",
        "copied": "copied into each bucket (`user_managed=False`)",
        "embedded": "embedded in each package (`package_constants_in_so=True`)",
    }
    order = {"shared": 0, "copied": 1, "embedded": 2}
    for (mode, k), r in sorted(res.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        lines.append(
            f"| {label[mode]} | {k} | {r['VmRSS'] / mib:.0f} | {r['RssAnon'] / mib:.0f} | "
            f"{r['RssFile'] / mib:.0f} |"
            f" {r['VmRSS'] / w_bytes:.2f} |"
        )
    lines += [
        "",
        f"Compile time for the {n} buckets: {t_shared:.0f} s without weights"
        + (f", {t_emb:.0f} s with embedded weights" if t_emb is not None else "")
        + " on this machine (as recorded in the cache entries when they were built).",
        "Every weight page is touched once before measuring (weights.pt is memory-mapped, so untouched rows "
        "of"
        " the embedding table would otherwise not count). Shared: the same ~1 copy for 1 or N buckets."
        " Copied: one copy per bucket plus the mapped file. Embedded: each package's weights are mapped "
        "from its"
        " .so and copied again into the runtime's constant buffers, about 2 copies per bucket.",
    ]
    write_section(
        "compile",
        "Compile: N AOTInductor buckets share one copy of the weights",
        f"python bench/bench_compile.py --model {args.model} --buckets {args.buckets} --reps {args.reps}",
        "\n".join(lines),
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
