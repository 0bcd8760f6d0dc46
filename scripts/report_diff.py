"""Compare the report.json files of two `chipswap plan` runs, leaving out timings and run-specific paths.

    python scripts/report_diff.py BEFORE_DIR AFTER_DIR

Each DIR holds one sub-folder per run (e.g. default/, classifier-serving/), each with a report.json, as
written by `chipswap plan --out DIR/<run>`. Prints one line per run (how many values compared, which differ)
and exits 1 if any verdict or figure differs. Timings (`seconds`, `stage_seconds`, `readiness/seconds`) and
paths that name where the run happened (`workload_path`, `source_trace`) are not compared.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

IGNORED_KEYS = {"seconds", "stage_seconds", "workload_path", "source_trace"}


def leaves(node: Any, path: str = "") -> dict[str, Any]:
    """Every scalar of a JSON document by its slash path, without the ignored keys."""
    out: dict[str, Any] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            if key not in IGNORED_KEYS:
                out.update(leaves(value, f"{path}/{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.update(leaves(value, f"{path}/{i}"))
    else:
        out[path] = node
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    before, after = Path(argv[0]), Path(argv[1])
    runs = sorted(p.parent.name for p in before.glob("*/report.json"))
    if not runs:
        print(f"no */report.json under {before}", file=sys.stderr)
        return 2
    differ = 0
    for run in runs:
        a = leaves(json.loads((before / run / "report.json").read_text()))
        other = after / run / "report.json"
        b = leaves(json.loads(other.read_text())) if other.is_file() else {}
        bad = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        differ += bool(bad)
        shown = ", ".join(bad[:5]) + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else "")
        print(f"{run}: {len(a)} values compared, {len(bad)} differ{': ' + shown if bad else ''}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
