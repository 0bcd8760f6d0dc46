"""`chipswap check` says what it is doing on stderr (a line per stage off a terminal; big models take
minutes), while the readiness core prints nothing and only calls the progress callback it is given."""

from __future__ import annotations

import json

import pytest

from chipswap.errors import ChipswapError
from chipswap.readiness.check import run_check
from tests.cli_helpers import run_inproc

MODEL = "tests.badmodels:make_good"


def test_core_calls_the_callback_per_stage_and_prints_nothing(capsys) -> None:
    heard: list[str] = []
    report = run_check(MODEL, ["x=4x8:float32"], progress=heard.append)
    assert capsys.readouterr() == ("", "")
    assert heard[0] == "resolving the model" and heard[-1] == "evaluating the Neuron rules"
    assert any(h.startswith("exporting (1 shape") for h in heard)
    assert report.exit_code == 0
    run_check(MODEL, ["x=4x8:float32"])  # no callback: still silent
    assert capsys.readouterr() == ("", "")


def test_cli_prints_stages_on_stderr_and_keeps_stdout_json(capsys, monkeypatch) -> None:
    import chipswap.cli.stages as stages

    monkeypatch.setattr(stages, "QUIET_START_S", 0.0)  # every stage line, however fast this machine is
    code, out, err = run_inproc(capsys, "check", MODEL, "--shape", "x=4x8:float32", "--json")
    assert code == 0, err
    assert json.loads(out)["shapes"] == ["x=4x8:float32"]
    lines = err.splitlines()
    assert lines[0].startswith("chipswap check: resolving the model (")
    assert any(x.startswith("chipswap check: evaluating the Neuron rules (") for x in lines)


def test_held_lines_wait_for_the_capture_and_vanish_on_an_early_error(capsys) -> None:
    from chipswap.cli.stages import StageProgress

    p = StageProgress("chipswap check", tty=False, quiet_start_s=0, hold_until=("exporting",))
    p.say("resolving the model")
    p.say("building llama")
    assert capsys.readouterr().err == ""  # a config that fails to build is then one error line alone
    p.say("exporting (1 shape)")
    p.say("evaluating the Neuron rules")
    p.close()
    assert [x.split(" (")[0] for x in capsys.readouterr().err.splitlines()] == [
        "chipswap check: resolving the model",
        "chipswap check: building llama",
        "chipswap check: exporting",
        "chipswap check: evaluating the Neuron rules",
    ]


def test_a_model_that_fails_to_build_is_one_line_even_with_every_stage_shown(capsys, monkeypatch) -> None:
    import chipswap.cli.stages as stages

    monkeypatch.setattr(stages, "QUIET_START_S", 0.0)
    heard: list[str] = []
    bad = "tests.badmodels:make_not_a_module"  # the factory runs (stage "building"), then is refused
    with pytest.raises(ChipswapError):
        run_check(bad, progress=heard.append)
    assert heard[-1].startswith("building")
    code, _, err = run_inproc(capsys, "check", bad)
    assert code == 2 and err.startswith("chipswap: error: ") and err.count("\n") == 1, err
