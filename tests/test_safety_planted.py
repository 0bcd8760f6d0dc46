"""A planted project file is refused the way git refuses a repository it does not own (`safe.directory`).

The hostile pass's case: a `chipswap.toml` owned by another uid (or mode 0666), one folder above the working
folder (not under HOME, no `.git`), set the region, day rate and catalog silently. Now such a file, or a
catalog any config file names that fails the same check, is refused with one line naming the file and the
fix (`chipswap --config FILE`, or `safe_directories` in the user config); `config show` lists it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli_helpers import run_inproc

OTHER_UID = 65534  # nobody

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file to another uid needs root"
)


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """/shared/chipswap.toml one folder above the working folder /shared/work, outside HOME, no .git."""
    home, xdg, shared = tmp_path / "home", tmp_path / "xdg", tmp_path / "shared"
    work = shared / "work"
    for d in (home, xdg / "chipswap", work):
        d.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.delenv("CHIPSWAP_PROJECT_CONFIG")
    monkeypatch.chdir(work)
    project = shared / "chipswap.toml"
    project.write_text('region = "ap-south-1"\nday_rate = 1\n')
    project.chmod(0o644)
    return {"project": project, "user": xdg / "chipswap" / "config.toml", "shared": shared}


def _refused(capsys, *needles: str, args: tuple[str, ...] = ("cost", "job", "--baseline", "p5.48xlarge",
             "--baseline-hours", "2", "--candidate", "trn1.32xlarge",
             "--candidate-hours", "3")) -> str:  # fmt: skip
    code, out, err = run_inproc(capsys, *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, (out, err)
    for n in ("--config", "safe_directories", *needles):
        assert n in err, err
    return err


def test_an_own_0644_project_file_still_applies(planted, capsys) -> None:
    code, out, err = run_inproc(capsys, "config", "show", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["settings"]["region"]["value"] == "ap-south-1" and doc["refused"] == []


@needs_root
def test_a_project_file_owned_by_another_user_is_refused(planted, capsys) -> None:
    os.chown(planted["project"], OTHER_UID, OTHER_UID)
    _refused(capsys, str(planted["project"]), f"uid {OTHER_UID}")


def test_a_world_writable_project_file_is_refused(planted, capsys) -> None:
    planted["project"].chmod(0o666)
    _refused(capsys, str(planted["project"]), "writable by others")
    planted["project"].chmod(0o664)
    _refused(capsys, str(planted["project"]), "writable by its group")


def test_config_show_lists_the_refused_file_and_applies_nothing_from_it(planted, capsys) -> None:
    planted["project"].chmod(0o666)
    code, out, err = run_inproc(capsys, "config", "show", "--json")
    doc = json.loads(out)
    assert code == 0, err
    assert doc["settings"]["region"]["origin"] == "built-in" and doc["settings"]["day_rate"]["value"] == 800
    assert len(doc["refused"]) == 1 and str(planted["project"]) in doc["refused"][0]
    code, out, _ = run_inproc(capsys, "config", "show")
    assert code == 0 and any(x.startswith("refused (not applied): ") for x in out.splitlines()), out


def test_explicit_config_and_safe_directories_trust_it(planted, capsys, monkeypatch) -> None:
    planted["project"].chmod(0o666)
    code, out, err = run_inproc(capsys, "--config", str(planted["project"]), "config", "show", "--json")
    assert code == 0 and json.loads(out)["settings"]["region"]["value"] == "ap-south-1", err
    # --config first does not hide the command's numeric flags from the range check
    code, _, err = run_inproc(capsys, "--config", "none", "cost", "job", "--baseline", "p5.48xlarge",
                              "--baseline-hours", "5e-324", "--candidate", "trn1.32xlarge",
                              "--candidate-hours", "3")  # fmt: skip
    assert code == 2 and "--baseline-hours" in err, err
    code, out, _ = run_inproc(capsys, "--config", "none", "config", "show", "--json")
    assert code == 0 and json.loads(out)["settings"]["region"]["origin"] == "built-in"
    planted["user"].write_text(f'safe_directories = ["{planted["shared"]}"]\n')
    code, out, err = run_inproc(capsys, "config", "show", "--json")
    assert code == 0 and json.loads(out)["settings"]["region"]["value"] == "ap-south-1", err


def test_safe_directories_in_a_project_file_is_not_honoured(planted, capsys) -> None:
    planted["project"].write_text('safe_directories = ["*"]\n')
    code, _, err = run_inproc(capsys, "config", "show")
    assert code == 2 and "safe_directories" in err and "user config" in err, err


def test_a_catalog_a_trusted_file_names_must_pass_the_same_check(planted, capsys) -> None:
    cat = planted["shared"] / "prices.toml"
    cat.write_text("")
    cat.chmod(0o666)
    planted["project"].write_text('catalog = "prices.toml"\n')
    err = _refused(capsys, str(cat), "catalog named by project")
    code, out, _ = run_inproc(capsys, "config", "show", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["settings"]["catalog"]["value"] is None and str(cat) in doc["refused"][0], err
    cat.chmod(0o644)
    code, out, _ = run_inproc(capsys, "config", "show", "--json")
    assert json.loads(out)["settings"]["catalog"]["value"] == str(cat)


@needs_root
def test_a_link_planted_by_another_user_is_refused(planted, capsys) -> None:
    own = planted["shared"] / "mine.toml"
    own.write_text('region = "eu-west-1"\n')
    planted["project"].unlink()
    planted["project"].symlink_to(own)
    os.lchown(planted["project"], OTHER_UID, OTHER_UID)
    _refused(capsys, str(planted["project"]), f"uid {OTHER_UID}")
