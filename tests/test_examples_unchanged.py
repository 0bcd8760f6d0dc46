"""The bundled examples' plans are unchanged by speed work (issue 38): each example's report.json (verdict,
fleet sizes, figures, flips, readiness; every value but timings and run paths) against
tests/snapshots/example_reports.json, taken from main before the speed work (31a66e0). The shape histograms
(tens of thousands of values) are compared by hash.

A change that moves a figure on purpose (new physics, a new verdict rule) regenerates the snapshot and says so
in its commit: run the plans with the new code and
    python -m tests.test_examples_unchanged DIR     # DIR/<example>/report.json for each example
(or CHIPSWAP_UPDATE_SNAPSHOTS=1 with this test), then review the diff (scripts/report_diff.py shows it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SNAP = Path(__file__).parent / "snapshots" / "example_reports.json"
UPDATE = os.environ.get("CHIPSWAP_UPDATE_SNAPSHOTS") == "1"
EXAMPLES = ("llama-serving", "classifier-serving", "finetune", "trn2-serving")
HASHED = ("shapes",)  # compared by hash: too many values to keep readable


def _leaves(doc: Any) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("report_diff", REPO / "scripts" / "report_diff.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.leaves(doc)


def snapshot_of(report: dict[str, Any]) -> dict[str, Any]:
    """Every value of a report.json by path (timings and run paths left out); a HASHED section: one hash."""
    out: dict[str, Any] = {}
    hashed: dict[str, list[tuple[str, Any]]] = {}
    for path, value in sorted(_leaves(report).items()):
        top = path.split("/")[1]
        if top in HASHED:
            hashed.setdefault(top, []).append((path, value))
        else:
            out[path] = value
    for top, items in hashed.items():
        out[f"/{top}#sha256"] = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()
    return out


def _differences(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    return [f"{k}: {want.get(k, '<absent>')!r} -> {got.get(k, '<absent>')!r}"
            for k in sorted(want.keys() | got.keys()) if want.get(k) != got.get(k)]  # fmt: skip


def write(reports: dict[str, dict[str, Any]]) -> None:
    old = json.loads(SNAP.read_text()) if SNAP.exists() else {}
    old.update({ex: snapshot_of(doc) for ex, doc in reports.items()})
    SNAP.write_text(json.dumps(dict(sorted(old.items())), indent=0, sort_keys=True) + "\n")


@pytest.mark.slow  # a whole plan per example
@pytest.mark.parametrize("example", EXAMPLES)
def test_the_example_report_is_unchanged(example: str, tmp_path: Path) -> None:
    from chipswap.cli.main import main

    out = tmp_path / "report"
    code: Any = 0
    try:
        main(["plan", "--example", example, "--no-aws", "-q", "--out", str(out)])
    except SystemExit as done:
        code = done.code
    assert code in (0, None)
    report = json.loads((out / "report.json").read_text())
    if UPDATE:
        write({example: report})
    want = json.loads(SNAP.read_text())[example]
    got = snapshot_of(report)
    assert len(want) > 100 and any("verdict" in k for k in want)
    bad = _differences(want, got)
    assert not bad, (
        f"{example}: {len(bad)} of {len(want)} report values moved (regenerate the snapshot only for a "
        "change meant to move them; see this file's docstring):\n" + "\n".join(bad[:30])
    )


if __name__ == "__main__":
    root = Path(sys.argv[1])
    write({ex: json.loads((root / ex / "report.json").read_text()) for ex in EXAMPLES
           if (root / ex / "report.json").is_file()})  # fmt: skip
