"""Defaults from ~/.config/chipswap/config.toml, a project chipswap.toml and CHIPSWAP_* variables:
precedence flag > env > project > user > built-in, `chipswap config show` (text and --json) names where each
value came from, a bad value is one line (exit 2), and cost / catalog / plan use them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chipswap.cli.config import KEYS, project_file, settings
from tests.cli_helpers import run_inproc


@pytest.fixture
def layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A user config under XDG_CONFIG_HOME and a project folder (a git repository) inside a fake home; the
    test runs from a subfolder of the project."""
    home = tmp_path / "home"
    xdg = tmp_path / "xdg"
    (xdg / "chipswap").mkdir(parents=True)
    repo = home / "work" / "repo"
    sub = repo / "models" / "llama"
    sub.mkdir(parents=True)
    (repo / ".git").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.delenv("CHIPSWAP_PROJECT_CONFIG")
    monkeypatch.chdir(sub)
    return {"user": xdg / "chipswap" / "config.toml", "project": repo / "chipswap.toml", "cwd": sub}


def test_precedence_flag_env_project_user_builtin(layers, monkeypatch) -> None:
    layers["user"].write_text('region = "eu-west-1"\nday_rate = 900\n[stacks]\nneuron = "nxdi-tgi"\n')
    layers["project"].write_text('region = "us-west-2"\ncandidates = ["inf2.48xlarge"]\n')
    found = settings()
    assert found["region"].value == "us-west-2" and found["region"].origin == f"project {layers['project']}"
    assert str(found["day_rate"].value) == "900" and found["day_rate"].origin.startswith("user ")
    assert found["stacks.neuron"].value == "nxdi-tgi"
    assert found["candidates"].value == ("inf2.48xlarge",)
    assert found["stacks.gpu"].builtin and found["stacks.gpu"].value == KEYS["stacks.gpu"].builtin
    monkeypatch.setenv("CHIPSWAP_REGION", "ap-south-1")
    monkeypatch.setenv("CHIPSWAP_CANDIDATES", "trn1.32xlarge, inf2.xlarge")
    found = settings()
    assert (found["region"].value, found["region"].origin) == ("ap-south-1", "env CHIPSWAP_REGION")
    assert found["candidates"].value == ("trn1.32xlarge", "inf2.xlarge")
    flagged = settings({"region": "sa-east-1", "region:flag": "--region"})["region"]
    assert (flagged.value, flagged.origin) == ("sa-east-1", "flag --region")


def test_project_search_stops_at_the_repository_and_at_home(layers, tmp_path) -> None:
    assert project_file() is None
    above = layers["project"].parent.parent / "chipswap.toml"  # outside the repository: never read
    above.write_text('region = "eu-west-1"\n')
    assert project_file() is None
    layers["project"].write_text('region = "us-west-2"\n')
    assert project_file() == layers["project"]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert project_file(outside) is None


def test_config_show_text_and_json(layers, capsys, monkeypatch) -> None:
    layers["user"].write_text('catalog = "my-catalog.toml"\n')
    (layers["user"].parent / "my-catalog.toml").write_text("")
    monkeypatch.setenv("CHIPSWAP_DAY_RATE", "1,000".replace(",", ""))
    code, out, err = run_inproc(capsys, "config", "show", "--json")
    assert code == 0, err
    doc = json.loads(out)["settings"]
    assert set(doc) == set(KEYS)
    assert doc["catalog"]["value"] == str(layers["user"].parent / "my-catalog.toml")  # relative to the file
    assert doc["day_rate"] == {"value": 1000.0, "origin": "env CHIPSWAP_DAY_RATE", "env": "CHIPSWAP_DAY_RATE"}
    assert doc["region"]["origin"] == "built-in"
    code, out, _ = run_inproc(capsys, "config", "show")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("day_rate = "))
    assert "1000" in line and "env CHIPSWAP_DAY_RATE" in line


@pytest.mark.parametrize(
    ("where", "text", "needle"),
    [
        ("user", 'region = "the moon"\n', "region = 'the moon' is not an AWS region"),
        ("project", "day_rate = -5\n", "day_rate = -5 is not a number of USD per engineer-day above 0"),
        ("project", 'colour = "blue"\n', "unknown key 'colour'"),
        ("user", 'candidates = "x y"\n', "candidates = 'x y' is not instance type names"),
        ("project", '[stacks]\ngpu = "cuda"\n', "stacks.gpu = 'cuda' is not a gpu serving stack"),
        ("user", 'catalog = "missing.toml"\n', "catalog file not found"),
        ("project", "region = [\n", "chipswap config file"),
    ],
)
def test_bad_values_are_one_line_exit_2(layers, capsys, where, text, needle) -> None:
    layers[where].write_text(text)
    code, out, err = run_inproc(capsys, "config", "show")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and needle in err and str(layers[where]) in err, err


def test_bad_env_value_names_the_variable(layers, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CHIPSWAP_DAY_RATE", "lots")
    code, _, err = run_inproc(capsys, "cost", "job", "--baseline", "p5.48xlarge", "--baseline-hours", "2",
                              "--candidate", "trn1.32xlarge", "--candidate-hours", "3")  # fmt: skip
    assert code == 2 and err.startswith("chipswap: error: env CHIPSWAP_DAY_RATE: day_rate = 'lots'")


def test_cost_and_catalog_use_the_defaults(layers, capsys, monkeypatch) -> None:
    job = ("cost", "job", "--baseline", "p5.48xlarge", "--baseline-hours", "20", "--candidate",
           "trn1.32xlarge", "--candidate-hours", "26", "--porting-days", "3", "--json")  # fmt: skip
    base = json.loads(run_inproc(capsys, *job)[1])
    layers["project"].write_text('region = "us-west-2"\nday_rate = 1000\n')
    got = json.loads(run_inproc(capsys, *job)[1])
    assert got["region"] == "us-west-2" and base["region"] == "us-east-1"
    assert got["porting"]["day_rate_usd"] == 1000 and base["porting"]["day_rate_usd"] == 800
    flag = json.loads(run_inproc(capsys, *job, "--day-rate", "700", "--region", "us-east-1")[1])
    assert flag["porting"]["day_rate_usd"] == 700 and flag["region"] == "us-east-1"  # a flag wins
    code, out, _ = run_inproc(capsys, "catalog", "--family", "trn1", "--json")
    assert code == 0 and json.loads(out)["region"] == "us-west-2"


def test_plan_workload_defaults_fill_only_what_the_workload_leaves_out(layers, tmp_path) -> None:
    from chipswap.cli.config import workload_defaults
    from chipswap.cli.plan import example_path
    from chipswap.plan.workload_file import load_workload

    text = example_path("llama-serving").read_text()
    stated = load_workload(example_path("llama-serving"))
    layers["user"].write_text('candidates = ["inf2.48xlarge"]\nregion = "us-west-2"\n')
    kept = load_workload(example_path("llama-serving"), defaults=workload_defaults(settings()))
    assert kept.targets.candidates == stated.targets.candidates  # the workload's own list wins
    lines = [x for x in text.splitlines() if not x.strip().startswith(("candidates", "region"))]
    bare = tmp_path / "bare.toml"
    bare.write_text("\n".join(lines) + "\n")
    filled = load_workload(bare, defaults=workload_defaults(settings()))
    assert filled.targets.candidates == ["inf2.48xlarge"] and filled.fleet.region == "us-west-2"
