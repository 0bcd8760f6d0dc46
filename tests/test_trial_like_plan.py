"""Issue 39, item 6: `chipswap trial` reads the defaults file and CHIPSWAP_* like `plan` (cli/config.py), takes
--no-aws and --candidate, and says which stage it is in from the first second."""

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
