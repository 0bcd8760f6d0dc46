"""Test-suite settings shared by every test.

Hypothesis runs derandomized by default (profile "ci": the same examples on every run and every machine, so
`make test` and CI never fail on a new draw and a failure reproduces exactly); `make test-random` selects the
"random" profile to explore new examples. HYPOTHESIS_PROFILE=<name> picks one explicitly. Neither profile has
a deadline: a busy machine must not turn a slow example into a failure. The `moto` fixture (one fake-AWS
server per module) is shared by the AWS tests. The cache signing key (chipswap.compile.signing) lives in a
temporary folder for the whole run (``CHIPSWAP_CACHE_KEY``, inherited by xdist workers and subprocesses),
never in the user's config folder; so does the memo of config.json files transformers accepted
(``CHIPSWAP_CHECKED_CONFIGS``, chipswap.models.checked), shared by the run's workers. The plan's readiness
memo (chipswap.plan.readiness_memo) is off unless a test turns it on (``CHIPSWAP_READINESS_MEMO``): a test
that plans must run the readiness check it asks for, whatever an earlier test planned.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("random", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
_KEY_DIR: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("CHIPSWAP_CACHE_KEY"):
        import tempfile

        _KEY_DIR.append(tempfile.mkdtemp(prefix="chipswap-test-key-"))
        os.environ["CHIPSWAP_CACHE_KEY"] = os.path.join(_KEY_DIR[0], "cache.key")
    if not os.environ.get("CHIPSWAP_CHECKED_CONFIGS"):  # the accepted-config memo (models/checked.py)
        import tempfile

        _KEY_DIR.append(tempfile.mkdtemp(prefix="chipswap-test-checked-"))
        os.environ["CHIPSWAP_CHECKED_CONFIGS"] = _KEY_DIR[-1]
    os.environ.setdefault("CHIPSWAP_READINESS_MEMO", "off")


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    for d in _KEY_DIR:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def moto() -> Iterator[Any]:
    """One moto server (real AWS HTTP on loopback, tests.aws_helpers) per test module that asks for it."""
    from tests.aws_helpers import moto_server

    with moto_server() as server:
        yield server



@pytest.fixture(scope="session")
def _empty_config_home(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("xdg-config"))


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch: pytest.MonkeyPatch, _empty_config_home: str) -> None:
    """The developer's own chipswap defaults never reach a test: XDG_CONFIG_HOME points at an empty folder
    (unless already pointed under pytest's temporary folders), no project chipswap.toml is searched for,
    and the CHIPSWAP_* config variables (chipswap.cli.config.KEYS) are cleared."""
    from chipswap.cli.config import KEYS

    base = str(os.path.dirname(_empty_config_home))
    if not os.environ.get("XDG_CONFIG_HOME", "").startswith(base):
        monkeypatch.setenv("XDG_CONFIG_HOME", _empty_config_home)
    monkeypatch.setenv("CHIPSWAP_PROJECT_CONFIG", "none")
    for key in KEYS.values():
        monkeypatch.delenv(key.env, raising=False)


# A skip must say why, and the reason may never be time: a test that skips when the machine is slow hides
# the failures it exists to catch (issue 38). Such a skip fails the run.
_TIME_SKIP = ("time budget", "too slow", "ran out of time", "deadline", "timed out", "timeout")


def _for_time(report: pytest.TestReport) -> bool:
    lr = report.longrepr
    reason = str(lr[2] if isinstance(lr, tuple) and len(lr) == 3 else lr or "").lower()
    return any(w in reason for w in _TIME_SKIP)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    """One line that always shows every count, zeros included (pytest's own line leaves zeros out), and a
    failure when a test skipped for time."""
    stats = terminalreporter.stats
    n = {k: len([r for r in stats.get(k, []) if getattr(r, "when", "call") in ("call", "setup")])
         for k in ("passed", "failed", "skipped", "xfailed", "xpassed", "error")}  # fmt: skip
    timed = [r.nodeid for r in stats.get("skipped", []) if _for_time(r)]
    terminalreporter.write_sep("-", "suite counts")
    terminalreporter.write_line(
        f"suite: {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped, {n['xfailed']} xfailed,"
        f" {n['xpassed']} xpassed, {n['error']} errors; {len(timed)} skipped for time (must be 0)"
    )
    for nodeid in timed:
        terminalreporter.write_line(f"suite: FAIL: {nodeid} skipped for time; run a fixed number of inputs")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    skipped = reporter.stats.get("skipped", [])
    if any(_for_time(r) for r in skipped):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
