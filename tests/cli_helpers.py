"""Ways for tests to run the chipswap CLI: in-process (fast, captures output) or as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from chipswap.cli.main import main
from chipswap.errors import ChipswapError


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


def one_line_error(match: str | None, call: Callable[..., object], *args: object) -> str:
    """The message of the ChipswapError that `call(*args)` must raise, checked to match `match` (regex; None:
    any) and to be one line, as every bad input's error must be."""
    with pytest.raises(ChipswapError, match=match) as ei:
        call(*args)
    message = str(ei.value)
    assert "\n" not in message
    return message


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m chipswap ARGS` in a fresh process (the timeout is a hang guard, not a speed: a second
    suite on the same cores makes a whole plan take minutes)."""
    return subprocess.run(
        [sys.executable, "-m", "chipswap", *args], capture_output=True, text=True, timeout=900
    )


_MANY = r"""
import json, os, sys, tempfile
from chipswap.cli.main import main
res = []
for args in json.loads(sys.argv[1]):
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush(); sys.stderr.flush()
        s_out, s_err = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(s_out, 1); os.dup2(s_err, 2); os.close(s_out); os.close(s_err)
        out.seek(0); err.seek(0)
        res.append([code, out.read().decode(errors="replace"), err.read().decode(errors="replace")])
print("\n@@RESULTS@@" + json.dumps(res))
"""


def run_cli_many(*commands: list[str], timeout: float = 300) -> list[tuple[int, str, str]]:
    """Several `chipswap ARGS` runs in ONE fresh process (torch imported once), each with its own real file
    descriptors 1 and 2, so anything written to the terminal (a logging warning, a C-level write) is seen."""
    import json

    r = subprocess.run(
        [sys.executable, "-c", _MANY, json.dumps([list(c) for c in commands])],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert "@@RESULTS@@" in r.stdout, r.stderr[-3000:]
    return [tuple(x) for x in json.loads(r.stdout.split("@@RESULTS@@", 1)[1])]


def measured_figures(fleet: dict[str, Any], source_prefix: str = "measured") -> list[dict[str, Any]]:
    """The figures of a report's fleet that a bench run measured (source starting with `source_prefix`): the
    figure used, or, when the run never saturated and the projection above it is used (a lower bound, issue
    39), the run kept beside it in `overridden`."""
    figures = (fleet["throughput"], *fleet.get("overridden", ()))
    return [f for f in figures if f and str(f.get("source", "")).startswith(source_prefix)]

