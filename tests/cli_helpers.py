"""Ways for tests to run the chipswap CLI: in-process (fast, captures output) or as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from chipswap.cli.main import main


def run_inproc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `chipswap ARGS` run through the real entry point in this process."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    """The parsed JSON that `chipswap ARGS` (with --json among ARGS) prints, after checking it exited 0."""
    code, out, err = run_inproc(capsys, *args)
    assert code == 0, err
    return json.loads(out)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m chipswap ARGS` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "chipswap", *args], capture_output=True, text=True, timeout=120
    )
