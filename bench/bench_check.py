"""Readiness check of a Llama-3-70B-size config without weights at 1 x 128: wall time and peak RSS.

Two modes side by side, each a fresh Python process per run (run_check, the code path of `chipswap check`), so
the peak RSS includes the torch and transformers imports, as a user would see it:

* default: `chipswap check llama-3-70b` checks a 2-layer copy of its 80 identical layers (same findings);
* baseline: `--full-model` exports all 80 layers (what every check did before).

Targets (issue 13): <= 30 s and <= 1.5 GiB for `chipswap check` on the 70B config, one shape. The 1-minute
load average is recorded with every run: the number is only comparable on an idle machine.

    .venv/bin/python bench/bench_check.py [--repeat N] [--model llama-3-70b] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from _results import ROOT  # noqa: E402  (first: it puts src/ on the path)

CHILD = r"""
import json, os, resource, sys, time
load0 = os.getloadavg()[0]
t0 = time.perf_counter()
import torch, transformers
import transformers.models.llama.modeling_llama
t_imp = time.perf_counter() - t0
from chipswap.readiness.check import run_check
shape = ["input_ids=1x128:int64", "attention_mask=1x128:int64"]
r = run_check(sys.argv[1], shape, sdk="2.32", target="inf2", full_model=sys.argv[2] == "full")
wall = time.perf_counter() - t0
a = r.assessment
print(json.dumps({
    "wall_s": wall,
    "check_s": r.wall_s,
    "import_s": t_imp,
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "cpu_s": sum(getattr(resource.getrusage(resource.RUSAGE_SELF), k) for k in ("ru_utime", "ru_stime")),
    "load_start": load0,
    "load": os.getloadavg()[0],
    "weightless": r.weightless,
    "checked": r.checked,
    "ops": len(a.statuses),
    "supported": sum(a.counts("supported").values()),
    "unknown": sum(a.counts("unknown").values()),
    "unsupported": sum(a.counts("unsupported").values()),
    "support": str(a.support_percentage),
    "findings": sorted({f"{f.severity}:{f.rule}" for f in r.findings}),
    "exit_code": r.exit_code,
    "method": r.inventory.method,
}))
"""


def _run(model: str, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, model, mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _s(runs: list[dict], key: str) -> str:
    return f"{_median(runs, key):.1f} s"


def _mib(runs: list[dict]) -> str:
    m = _median(runs, "peak_rss_mib")
    return f"{m:.0f} MiB ({m / 1024:.2f} GiB)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default="llama-3-70b")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    results: dict[str, list[dict]] = {"default": [], "full": []}
    for i in range(args.repeat):  # interleaved, so both modes see the same machine load
        for mode in results:
            res = _run(args.model, mode)
            results[mode].append(res)
            print(
                f"run {i + 1} {mode:7s}: {res['wall_s']:.1f} s wall, {res['cpu_s']:.1f} s CPU, "
                f"peak RSS {res['peak_rss_mib']:.0f} MiB, {res['ops']} ops, "
                f"load {res['load_start']:.1f} -> {res['load']:.1f}"
            )
    d, f = results["default"], results["full"]
    same = d[-1]["findings"] == f[-1]["findings"] and d[-1]["exit_code"] == f[-1]["exit_code"]
    loads = [r["load_start"] for rs in results.values() for r in rs]
    body = f"""
`run_check("{args.model}", input_ids/attention_mask 1x128 int64, sdk 2.32, target inf2)` in a fresh
process per run, weights never allocated (meta device: {d[-1]["weightless"]}). Median of {len(d)} runs per
mode, the two modes interleaved.

| metric | `chipswap check` (default) | `--full-model` (baseline) | target |
|---|---|---|---|
| what is exported | {d[-1]["checked"]} | {f[-1]["checked"]} | |
| wall time, process start to report (incl. imports) | {_s(d, "wall_s")} | {_s(f, "wall_s")} | <= 30 s |
| of which: importing torch + transformers | {_s(d, "import_s")} | {_s(f, "import_s")} | |
| of which: run_check after imports | {_s(d, "check_s")} | {_s(f, "check_s")} | |
| CPU time of the process (user + sys) | {_s(d, "cpu_s")} | {_s(f, "cpu_s")} | |
| peak RSS | {_mib(d)} | {_mib(f)} | <= 1.5 GiB |
| op nodes in the core-ATen graph | {d[-1]["ops"]} | {f[-1]["ops"]} | |
| support percentage | {d[-1]["support"]}% | {f[-1]["support"]}% | |
| findings | {", ".join(d[-1]["findings"]) or "none"} | {", ".join(f[-1]["findings"]) or "none"} | |
| exit code | {d[-1]["exit_code"]} | {f[-1]["exit_code"]} | |

Speed-up of the default over the baseline: {_median(f, "wall_s") / _median(d, "wall_s"):.1f}x wall time; same
findings and exit code: {"yes" if same else "NO"}.
1-minute load average at the start of the runs (2 cores): {min(loads):.1f} to {max(loads):.1f}
({"idle" if max(loads) < 1.0 else "loaded: other jobs were running, so the wall times are upper bounds"}).
On an idle 2-core machine the wall time is close to the CPU time; under load it is not.
Capture (default): {d[-1]["method"]}.
Runs (default): {", ".join(f"{r['wall_s']:.1f} s / {r['peak_rss_mib']:.0f} MiB" for r in d)}.
Runs (full): {", ".join(f"{r['wall_s']:.1f} s / {r['peak_rss_mib']:.0f} MiB" for r in f)}.
"""
    print(body)
    if not args.no_write:
        from _results import write_section

        write_section(
            "check",
            "Readiness check: Llama-3-70B config without weights (1 x 128)",
            " ".join(["python bench/bench_check.py", *sys.argv[1:]]),
            body,
        )


if __name__ == "__main__":
    main()
