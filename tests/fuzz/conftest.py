"""Fuzz suite settings and its end-of-run counts.

Environment (all optional; `make test` uses the defaults, `make fuzz` a longer run):
  CHIPSWAP_FUZZ_SCALE    multiplies every class's examples per kind (default 1)
  CHIPSWAP_FUZZ_SEED     an integer seed (default: derandomized, the same inputs on every run)
There is no time budget: every kind runs its fixed number of inputs however loaded the machine is (a skip
on a slow machine would hide the failures the suite exists to catch).
  CHIPSWAP_FUZZ_REPORT   write the counts as JSON to this path
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.fuzz.harness import CEILING_BYTES, TALLY


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TALLY.counts["tried"]:
        return
    t = SimpleNamespace(**TALLY.to_json())
    lines = [
        f"fuzz: {t.tried} hostile inputs in {t.seconds:.1f}s; {t.known_open_failures} of them failed in kinds"
        " listed in KNOWN_OPEN (xfail); of the rest:",
        f"fuzz: {t.ok} exit 0, {t.blockers} exit 1 (blockers), {t.clean_errors} clean one-line errors"
        f" (exit 2); {t.tracebacks} tracebacks, {t.bad_exit} wrong exit codes, {t.outside_writes} writes"
        f" outside the roots, {t.timeouts} timeouts, {t.over_memory} over the {CEILING_BYTES // 2**30} GiB"
        " ceiling",
        f"fuzz: peak RSS {t.peak_rss_kib / 1024:.0f} MiB (the test process), largest growth in one input"
        f" {t.peak_growth_kib / 1024:.0f} MiB",
    ]
    seed = os.environ.get("CHIPSWAP_FUZZ_SEED")
    lines.append(f"fuzz: seed {seed}" if seed else "fuzz: derandomized (CHIPSWAP_FUZZ_SEED=N: another draw)")
    for cls, c in sorted(t.by_class.items()):
        lines.append(
            f"fuzz:   {cls:<14} {c['tried']:>5} tried {c['clean_errors']:>5} clean errors"
            f" {c['failures']:>3} failing {c['known_open']:>3} known-open {c['ms'] / 1000:6.1f}s"
        )
    terminalreporter.write_sep("-", "fuzz counts")
    for line in lines:
        terminalreporter.write_line(line)
    report = os.environ.get("CHIPSWAP_FUZZ_REPORT")
    if report:
        doc = TALLY.to_json()
        Path(report).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
