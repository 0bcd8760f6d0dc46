"""The fuzz harness's case limits (tests/fuzz/harness.py): CPU seconds for a runaway loop, a wall limit
WALL_FACTOR times longer for a read blocked on a FIFO (which uses no CPU), and a case that sleeps (as a
loaded machine makes a case wait) is not a timeout."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.fuzz import harness
from tests.fuzz.harness import Sandbox, run


def _box(tmp_path: Path) -> Sandbox:
    base = tmp_path / "sandbox"
    base.mkdir()
    return Sandbox(base)


def test_a_runaway_loop_is_stopped_by_its_cpu_limit(tmp_path: Path) -> None:
    def spin() -> None:
        while True:
            pass

    outcome = run(_box(tmp_path), spin, cli=False, timeout_s=1)
    assert outcome.timed_out and outcome.error


def test_waiting_is_not_using_cpu(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(harness, "WALL_FACTOR", 5)
    outcome = run(_box(tmp_path), lambda: time.sleep(1.5), cli=False, timeout_s=1)  # 1.5 s wall, ~0 CPU
    assert not outcome.timed_out and outcome.code == 0


def test_a_read_blocked_on_a_fifo_is_stopped_by_the_wall_limit(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(harness, "WALL_FACTOR", 2)
    box = _box(tmp_path)
    fifo = box.work / "pipe"
    os.mkfifo(fifo)
    outcome = run(box, lambda: fifo.read_bytes(), cli=False, timeout_s=1)
    assert outcome.timed_out and outcome.seconds >= 2 * 0.9
