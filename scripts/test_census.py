"""The test suite's census for docs/DEVELOPING.md: how many tests each area has (pytest's collection,
slow ones counted apart) and the slowest tests of a run (from a log of `pytest --durations=N`), so growth is
visible.

    python scripts/test_census.py [--durations LOG] [--label "how the log was made"] [--write]

--durations: a pytest log with a "slowest durations" section (e.g.
`make test-all PYTEST_ADDOPTS=--durations=30 > LOG`); several logs may be given (their lines are pooled).
--write replaces the text between `<!-- census -->` and `<!-- /census -->` in docs/DEVELOPING.md; without it
the section is printed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "DEVELOPING.md"
# file name prefix -> area (first match wins; the rest is "other")
AREAS = (
    ("fuzz/", "fuzz (hostile inputs)"), ("test_security", "security"), ("test_simulate", "simulation"),
    ("test_serve", "serving"), ("test_plan", "plan"), ("test_projection", "projection"),
    ("test_training", "projection"), ("test_physics", "projection"), ("test_calibration", "projection"),
    ("test_check", "readiness check"), ("test_readiness", "readiness check"), ("test_bench", "bench"),
    ("test_loadgen", "bench"), ("test_trial", "trial"), ("test_traces", "traffic"),
    ("test_workload", "plan"), ("test_catalog", "economics"), ("test_cost", "economics"),
    ("test_capacity", "economics"), ("test_aws", "economics"), ("test_compile", "compile"),
    ("test_cache", "compile"), ("test_security_cache", "compile"), ("test_shape", "shapes"),
    ("test_buckets", "shapes"), ("test_ranges", "ranges"), ("test_round", "ranges"),
    ("test_report", "report"),
    ("test_verdict", "verdict"), ("test_models", "models"), ("test_cli", "cli"),
)  # fmt: skip


def area_of(nodeid: str) -> str:
    name = nodeid.split("::")[0].removeprefix("tests/")
    return next((area for prefix, area in AREAS if name.startswith(prefix)), "other")


def collect(marker: str) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "-m", marker], cwd=ROOT, capture_output=True, text=True, check=False)  # fmt: skip
    return [line for line in r.stdout.splitlines() if "::" in line]


def slowest(logs: list[Path], n: int = 20) -> list[tuple[float, str, str]]:
    """The n slowest (seconds, phase, test); a test timed in several logs counts with its last figure."""
    last: dict[tuple[str, str], float] = {}
    for log in logs:
        for m in re.finditer(r"^([0-9.]+)s (call|setup|teardown)\s+(\S+)", log.read_text(), re.M):
            last[(m.group(3), m.group(2))] = float(m.group(1))
    return sorted(((s, phase, test) for (test, phase), s in last.items()), reverse=True)[:n]


def section(logs: list[Path], label: str) -> str:
    fast, slow = Counter(map(area_of, collect("not slow"))), Counter(map(area_of, collect("slow")))
    lines = ["| area | `make test` | `make test-slow` |", "|---|---:|---:|"]
    for area in sorted(set(fast) | set(slow), key=lambda a: -(fast[a] + slow[a])):
        lines.append(f"| {area} | {fast[area]:,} | {slow[area]:,} |")
    lines.append(f"| **all** | **{sum(fast.values()):,}** | **{sum(slow.values()):,}** |")
    out = ["Tests by area (`python scripts/test_census.py`, pytest's collection):", "", *lines]
    if logs:
        out += ["", f"The 20 slowest tests ({label}):", "", "| seconds | phase | test |", "|---:|---|---|"]
        out += [f"| {s:.1f} | {phase} | `{nodeid}` |" for s, phase, nodeid in slowest(logs)]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--durations", action="append", type=Path, default=[])
    ap.add_argument("--label", default="a run with --durations")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    text = section(args.durations, args.label)
    if not args.write:
        print(text)
        return
    doc = DOC.read_text()
    block = f"<!-- census -->\n{text}\n<!-- /census -->"
    pattern = re.compile(r"<!-- census -->.*?<!-- /census -->", re.S)
    if pattern.search(doc):
        doc = pattern.sub(lambda _m: block, doc)
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(doc)


if __name__ == "__main__":
    main()
