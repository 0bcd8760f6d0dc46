"""Readiness check of a Llama-3-70B-size config without weights at 1 x 128: wall time and peak RSS.

Each run is a fresh Python process (run_check, the code path of `chipswap check`), so the peak RSS includes
the torch and transformers imports, as a user would see it. Targets from issue 4: <= 30 s and <= 1.5 GiB.

    .venv/bin/python bench/bench_check.py [--repeat N] [--model llama-3-70b]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import torch, transformers
import transformers.models.llama.modeling_llama
t_imp = time.perf_counter() - t0
from chipswap.check import run_check
r = run_check(sys.argv[1], ["input_ids=1x128:int64", "attention_mask=1x128:int64"], sdk="2.32", target="inf2")
wall = time.perf_counter() - t0
a = r.assessment
print(json.dumps({
    "wall_s": wall,
    "check_s": r.wall_s,
    "import_s": t_imp,
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "cpu_s": sum(getattr(resource.getrusage(resource.RUSAGE_SELF), k) for k in ("ru_utime", "ru_stime")),
    "load": __import__("os").getloadavg()[0],
    "weightless": r.weightless,
    "ops": len(a.statuses),
    "supported": sum(a.counts("supported").values()),
    "unknown": sum(a.counts("unknown").values()),
    "unsupported": sum(a.counts("unsupported").values()),
    "support": str(a.support_percentage),
    "findings": [f"{f.severity}:{f.rule}" for f in r.findings],
    "exit_code": r.exit_code,
    "method": r.inventory.method,
}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default="llama-3-70b")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    runs = []
    for i in range(args.repeat):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, args.model], capture_output=True, text=True, cwd=ROOT, check=True
        )
        res = json.loads(out.stdout.strip().splitlines()[-1])
        runs.append(res)
        print(
            f"run {i + 1}: {res['wall_s']:.1f} s wall, {res['cpu_s']:.1f} s CPU, "
            f"peak RSS {res['peak_rss_mib']:.0f} MiB, {res['ops']} ops, load {res['load']:.1f}"
        )
    wall = statistics.median(r["wall_s"] for r in runs)
    check_s = statistics.median(r["check_s"] for r in runs)
    import_s = statistics.median(r["import_s"] for r in runs)
    rss = statistics.median(r["peak_rss_mib"] for r in runs)
    cpu = statistics.median(r["cpu_s"] for r in runs)
    load = statistics.median(r["load"] for r in runs)
    last = runs[-1]
    body = f"""
`run_check("{args.model}", input_ids/attention_mask 1x128 int64, sdk 2.32, target inf2)` in a fresh process,
weights never allocated (meta device: {last["weightless"]}). Median of {len(runs)} run(s).

| metric | value | target |
|---|---|---|
| wall time, process start to report (incl. torch/transformers import) | {wall:.1f} s | <= 30 s |
| of which: importing torch + transformers (Llama code) | {import_s:.1f} s | |
| of which: run_check after imports (build on meta + export + core-ATen + rules) | {check_s:.1f} s | |
| CPU time of the process (user + sys) | {cpu:.1f} s | |
| 1-minute load average at the end of the run (2 cores) | {load:.1f} | |
| peak RSS | {rss:.0f} MiB ({rss / 1024:.2f} GiB) | <= 1.5 GiB |
| op nodes in the core-ATen graph | {last["ops"]} | |
| supported / unsupported / unknown | {last["supported"]} / {last["unsupported"]} / {last["unknown"]} | |
| support percentage | {last["support"]}% | |
| findings | {", ".join(last["findings"]) or "none"} | |
| exit code | {last["exit_code"]} | |

Capture: {last["method"]}.
Runs: {", ".join(f"{r['wall_s']:.1f} s / {r['peak_rss_mib']:.0f} MiB" for r in runs)}.
The machine is shared (2 cores, other jobs running), so wall time varies run to run.
"""
    print(body)
    if not args.no_write:
        from _results import write_section

        write_section(
            "check",
            "Readiness check: Llama-3-70B config without weights (1 x 128)",
            "python bench/bench_check.py " + " ".join(sys.argv[1:])
            if sys.argv[1:]
            else "python bench/bench_check.py",
            body,
        )


if __name__ == "__main__":
    main()
