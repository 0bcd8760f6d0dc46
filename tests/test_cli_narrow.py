"""The CLI on a narrow terminal and when piped: tables keep every digit at 60 columns, `plan` says what it is
doing on stderr (a line per stage off a terminal, nothing with --quiet), `workload-help` says where to
start."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from chipswap.cli.stages import StageProgress
from tests.cli_helpers import run_inproc

JOB = (
    "cost", "job", "--baseline", "p5.48xlarge", "--baseline-hours", "20", "--candidate", "trn1.32xlarge",
    "--candidate-hours", "26", "--porting-days", "3", "--candidate-term", "on-demand",
    "--candidate-term", "3yr",
)  # fmt: skip


def test_cost_job_at_60_columns_keeps_every_digit(capsys, monkeypatch) -> None:
    import chipswap.cli.cost as cost

    monkeypatch.setattr(cost, "console", lambda: Console(width=60, force_terminal=True, color_system=None))
    code, out, err = run_inproc(capsys, *JOB)
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= 60, max(lines, key=len)
    assert "…" not in out
    for figure in ("$55.04", "$1,100.80", "$559.00", "$541.80", "49.2 %", "$213.20", "$887.60", "80.6 %"):
        assert figure in out, figure
    wide = Console(width=200, force_terminal=True, color_system=None)
    monkeypatch.setattr(cost, "console", lambda: wide)
    code, out, _ = run_inproc(capsys, *JOB)
    assert code == 0 and "┃ instance" in out  # a table where it fits


def test_stage_progress_off_a_terminal_and_quiet(capsys) -> None:
    early = StageProgress("chipswap plan", tty=False)
    early.say("reading the workload")  # the first 2 s stay quiet: bad input is then one error line alone
    assert capsys.readouterr().err == ""
    p = StageProgress("chipswap plan", tty=False, quiet_start_s=0)
    p.say("projecting")
    p.say("simulating fleets")
    p.close()
    err = capsys.readouterr().err.splitlines()
    assert [e.split(" (")[0] for e in err] == [
        "chipswap plan: projecting",
        "chipswap plan: simulating fleets",
    ]
    q = StageProgress("chipswap plan", quiet=True, tty=False, quiet_start_s=0)
    q.say("projecting")
    q.close()
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_plan_json_reports_stages_on_stderr_only(capsys, tmp_path, monkeypatch) -> None:
    import chipswap.cli.stages as stages

    monkeypatch.setattr(stages, "QUIET_START_S", 0.0)  # every stage line, however fast this machine is
    code, out, err = run_inproc(
        capsys, "plan", "--example", "finetune", "--no-aws", "--json", "--out", str(tmp_path / "r")
    )
    assert code == 0, err
    assert json.loads(out)["verdict"]["verdict"]  # stdout is the JSON alone
    assert "chipswap plan: projecting" in err and "chipswap plan: sensitivity" in err
    code, out, err = run_inproc(
        capsys, "plan", "--example", "finetune", "--no-aws", "-q", "--out", str(tmp_path)
    )
    assert code == 0 and err == ""


def test_workload_help_points_at_the_examples(capsys) -> None:
    code, out, _ = run_inproc(capsys, "workload-help")
    assert code == 0
    first, last = out.strip().splitlines()[0], out.strip().splitlines()[-1]
    assert "chipswap plan --print-example" in first and "chipswap plan --print-example" in last
