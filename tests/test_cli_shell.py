"""The CLI shell: help, version, and the one-line error contract (exit 2, no traceback)."""

from __future__ import annotations

import pytest

from chipswap import __version__
from chipswap.cli.main import main
from chipswap.errors import ChipswapError, closest
from tests.cli_helpers import run_cli


def test_version_prints_package_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"chipswap {__version__}"


def test_help_lists_commands() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0
    assert "Usage: chipswap" in proc.stdout


def test_unknown_command_is_one_line_exit_2() -> None:
    proc = run_cli("no-such-command")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "no-such-command" in proc.stderr


def test_chipswap_error_becomes_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import chipswap.cli.main as cli

    def boom(*_a: object, **_k: object) -> None:
        raise ChipswapError("bad thing:\n  value 7; use 8")

    monkeypatch.setattr(cli, "app", boom)
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == "chipswap: error: bad thing: value 7; use 8\n"


def test_closest_suggests_near_names() -> None:
    assert closest("p5.48xlarg", ["p5.48xlarge", "p4d.24xlarge", "trn1.32xlarge"])[0] == "p5.48xlarge"
    assert closest("zzzz", ["a", "b"]) == []


def test_short_help_flag_works_on_subcommands() -> None:
    proc = run_cli("cost", "job", "-h")
    assert proc.returncode == 0, proc.stderr
    assert "--baseline" in proc.stdout
