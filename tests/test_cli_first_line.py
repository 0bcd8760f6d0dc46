"""A long command's first progress line comes while its first stage runs (chipswap.cli.stages, issue 38):
off a terminal, a stage still running FIRST_LINE_S after the start is written by a timer, then every later
stage; a closed progress (the command ended, or failed with its one error line) writes nothing later."""

from __future__ import annotations

import time

import pytest

from chipswap.cli import stages
from chipswap.cli.stages import StageProgress


class Err:
    """What the command wrote on stderr so far (pytest's capture; read as it grows)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys, self.text = capsys, ""

    def getvalue(self) -> str:
        self.text += self.capsys.readouterr().err
        return self.text


def _wait_for(buf: Err, limit_s: float = 20.0) -> str:
    end = time.monotonic() + limit_s  # a bound, not a speed: the timer fires within it on any machine
    while not buf.getvalue() and time.monotonic() < end:
        time.sleep(0.02)
    return buf.getvalue()


@pytest.fixture
def buf(monkeypatch, capsys) -> Err:
    """stderr as the test sees it, and a 50 ms first-line timer."""
    monkeypatch.setattr(stages, "FIRST_LINE_S", 0.05)
    return Err(capsys)


def test_a_long_first_stage_is_written_while_it_runs(buf: Err) -> None:
    p = StageProgress("chipswap plan", tty=False)
    p.say("reading traffic")  # bad input shows here: no timer yet
    time.sleep(0.2)
    assert buf.getvalue() == ""
    p.say("checking readiness")  # both start well inside the quiet 2 s; readiness then runs on
    got = _wait_for(buf)
    assert got.startswith("chipswap plan: checking readiness (") and got.count("\n") == 1
    p.say("projecting")  # once a line is out, every later stage has its own (not the stale one above)
    p.close()
    rest = buf.getvalue().removeprefix(got)
    assert buf.getvalue().startswith(got) and rest.startswith("chipswap plan: projecting (")


def test_a_closed_or_quiet_progress_writes_nothing_later(buf: Err) -> None:
    p = StageProgress("chipswap plan", tty=False)
    p.say("planning shapes")
    p.close()  # e.g. bad input: the error line must stand alone
    q = StageProgress("chipswap plan", tty=False, quiet=True)
    q.say("reading traffic")
    held = StageProgress("chipswap check", tty=False, hold_until=("exporting",))
    held.say("building")  # check holds its lines until its config is known to be sound
    time.sleep(0.3)
    q.close()
    held.close()
    assert buf.getvalue() == ""
