"""Issue 19: `chipswap check` has a time limit (--timeout, default 900 s). A forward or a factory that never
returns used to hang the check forever, silently; now it is one error line, exit 2, soon after the limit."""

from __future__ import annotations

import time

import pytest
import torch  # noqa: F401 - imported before any 1 s limit: a timer must not interrupt torch's own import

from chipswap.cli.check import DEFAULT_CHECK_TIMEOUT_S
from tests.cli_helpers import run_inproc

HANG = """
import time
import torch

class Spin(torch.nn.Module):
    def forward(self, input_ids):
        while True:
            pass

def spinning_forward():
    return Spin()

def sleeping_factory():
    time.sleep(10_000)

def swallowing_forward():
    class Stubborn(torch.nn.Module):
        def forward(self, input_ids):
            while True:
                try:
                    time.sleep(10_000)
                except Exception:  # noqa: BLE001 - user code that swallows everything it can
                    pass
    return Stubborn()
"""


@pytest.mark.parametrize(
    ("factory", "extra"),
    [
        ("spinning_forward", ["--shape", "input_ids=1x8:int64"]),
        ("sleeping_factory", []),
        ("swallowing_forward", ["--shape", "input_ids=1x8:int64"]),
    ],
)
def test_check_that_never_returns_is_one_line_after_the_timeout(tmp_path, capsys, factory, extra):
    (tmp_path / "hang.py").write_text(HANG)
    t0 = time.monotonic()
    spec = f"{tmp_path / 'hang.py'}:{factory}"
    code, _out, err = run_inproc(capsys, "check", spec, *extra, "--timeout", "1")
    took = time.monotonic() - t0
    assert code == 2 and err.count("\n") == 1 and "did not finish within 1 s" in err, err
    assert "--timeout" in err and "Traceback" not in err
    assert took < 60  # bounded: the limit plus the model build, not forever


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e99"])
def test_timeout_flag_is_checked(capsys, value):
    code, _out, err = run_inproc(capsys, "check", "tiny-bert", "--timeout", value)
    assert code == 2 and err.count("\n") == 1 and "--timeout must be" in err, err


def test_default_timeout_is_sensible():
    assert 60 <= DEFAULT_CHECK_TIMEOUT_S <= 3600
