"""Issue 39, item 6: `chipswap trial` reads the defaults file and CHIPSWAP_* like `plan` (cli/config.py),
takes --no-aws and --candidate, and says which stage it is in from the first second."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import run_inproc

NO_TARGETS = """
title = "no targets: the defaults give the candidates"
kind = "serving"
[traffic]
steady_rps = 5.0
prompt_tokens = 256
output_tokens = 32
[fleet]
instance = "g6e.xlarge"
count = 2
[porting]
engineer_days = 5
[throughput]
gpu_requests_per_s = 3.0
"""


def _workload(tmp_path: Path) -> Path:
    wl = tmp_path / "w.toml"
    wl.write_text(NO_TARGETS)
    return wl


def test_trial_reads_the_defaults_file(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    wl = _workload(tmp_path)
    code, _out, err = run_inproc(capsys, "trial", str(wl), "--out", str(tmp_path / "kit"), "--no-aws", "-q")
    assert code == 2 and "targets: missing" in err  # no defaults: the key is missing, as in plan
    home = tmp_path / "xdg"
    (home / "chipswap").mkdir(parents=True)
    (home / "chipswap" / "config.toml").write_text('candidates = ["inf2.xlarge"]\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    code, _out, err = run_inproc(capsys, "trial", str(wl), "--out", str(tmp_path / "kit"), "--no-aws", "-q")
    # past the workload: the candidates came from the defaults file; what stops it now is the missing model
    assert code == 2 and "targets: missing" not in err and "[model]" in err, err


def test_trial_reads_chipswap_variables(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHIPSWAP_CANDIDATES", "inf2.xlarge")
    code, _out, err = run_inproc(capsys, "trial", str(_workload(tmp_path)), "--out", str(tmp_path / "k"))
    assert code == 2 and "targets: missing" not in err and "[model]" in err, err


def test_trial_says_its_stage_from_the_first_second(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CHIPSWAP_CANDIDATES", "inf2.xlarge")
    wl = _workload(tmp_path)
    wl.write_text(NO_TARGETS + '[throughput.candidates."inf2.xlarge"]\nrequests_per_s = 1.8\n')
    _code, _out, err = run_inproc(capsys, "trial", str(wl), "--out", str(tmp_path / "k"))
    assert err.splitlines()[0].startswith("chipswap trial: planning"), err


def test_the_kit_carries_the_workload_and_its_files(tmp_path: Path) -> None:
    """The kit's README refers only to files inside the kit: the workload, its model config and its trace are
    copied under workload/ (a file outside the workload's folder, or a huge one, is not)."""
    from types import SimpleNamespace

    from chipswap.cli.trialkit import workload_copy

    (tmp_path / "w.toml").write_text("title = 'x'\n")
    (tmp_path / "config.json").write_text("{}\n")
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "chat.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    wl = SimpleNamespace(
        model=SimpleNamespace(config="config.json"), traffic=SimpleNamespace(trace="traces/chat.csv")
    )
    files, trace = workload_copy(wl, tmp_path / "w.toml")
    assert set(files) == {"workload/w.toml", "workload/config.json", "workload/traces/chat.csv"}
    assert trace == "workload/traces/chat.csv"
    outside = SimpleNamespace(
        model=SimpleNamespace(config="../elsewhere.json"), traffic=SimpleNamespace(trace="/abs.csv")
    )
    files, trace = workload_copy(outside, tmp_path / "w.toml")
    assert set(files) == {"workload/w.toml"} and trace is None


def test_the_readme_follow_up_runs_from_the_kit_folder() -> None:
    from types import SimpleNamespace

    from chipswap.trial.readme import plan_command

    cmd = plan_command(SimpleNamespace(workload_arg="workload/w.toml", example=None))  # type: ignore[arg-type]
    assert cmd == "chipswap plan workload/w.toml --bench results/*.json"
