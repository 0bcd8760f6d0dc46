"""Round 4 hostile pass, clean errors: every input below was a traceback or silently accepted on main.

A TOML integer over Python's 4,300-digit limit in a config, catalog or workload; a bracketed URL host that is
not an IPv6 address; a day rate of 5e-324; imported peer files whose percentiles fall or whose latencies are
negative; a config path that is a folder, FIFO, symlink loop or link to /dev/zero; 20,000 copies of one
problem. Each is one `chipswap: error:` line, exit 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chipswap.bench.importers import convert
from chipswap.errors import ChipswapError
from tests.cli_helpers import one_line_error, run_inproc
from tests.test_plan_safety import SMALL

HUGE = "9" * 5000  # over sys.get_int_max_str_digits() (4,300)


def _one_line(code: int, out: str, err: str, *needles: str) -> str:
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("chipswap: error: ") and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


@pytest.fixture
def user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    xdg = tmp_path / "xdg"
    (xdg / "chipswap").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    return xdg / "chipswap" / "config.toml"


# ------------------------------------------------------------------------------ integer-length limits
def test_a_5000_digit_integer_in_the_user_config_is_one_line(user_config, capsys) -> None:
    user_config.write_text(f"day_rate = {HUGE}\n")
    _one_line(*run_inproc(capsys, "config", "show"), str(user_config), "too many digits")


def test_a_5000_digit_integer_in_a_catalog_is_one_line(tmp_path, capsys) -> None:
    from chipswap.economics.catalog_io import load_catalog

    cat = tmp_path / "cat.toml"
    cat.write_text(f'[[instances]]\nname = "x.large"\nvcpus = {HUGE}\n')
    msg = one_line_error("too many digits", load_catalog, cat)
    assert str(cat) in msg


def test_a_5000_digit_integer_in_a_workload_is_one_line(tmp_path, capsys) -> None:
    w = tmp_path / "w.toml"
    w.write_text(SMALL.replace("output_tokens = 32", f"output_tokens = {HUGE}"))
    assert HUGE in w.read_text()
    _one_line(*run_inproc(capsys, "plan", str(w), "--out", str(tmp_path / "o")), "w.toml", "too many digits")


# ------------------------------------------------------------------------------------------- bench URLs
@pytest.mark.parametrize(
    "url",
    [
        "http://[::ffff:127.1]:8000/",
        "http://[127.0.0.1]:8000/",
        "http://[zz]/",
        "http://[::1",
        "http://h:99999/",
    ],
)
def test_a_bracketed_host_that_is_not_ipv6_is_one_line(url, capsys) -> None:
    err = _one_line(*run_inproc(capsys, "bench", url, "--requests", "1"), "URL")
    assert "[::1]" in err  # the fix shows a good bracketed form


def test_good_urls_still_pass() -> None:
    from chipswap.bench.job import check_url

    assert check_url("http://[::1]:8000/v1/") == "http://[::1]:8000"
    assert check_url("http://[::ffff:127.0.0.1]:8000") == "http://[::ffff:127.0.0.1]:8000"
    assert check_url("https://example.com") == "https://example.com"


# --------------------------------------------------------------------------------------- the day rate
@pytest.mark.parametrize("value", ["5e-324", "0.001", "1e-30"])
def test_a_subnormal_day_rate_in_the_config_is_refused(user_config, capsys, value) -> None:
    user_config.write_text(f"day_rate = {value}\n")
    _one_line(*run_inproc(capsys, "config", "show"), "day_rate", "0.01")


def test_a_subnormal_day_rate_in_the_environment_is_refused(monkeypatch, capsys) -> None:
    monkeypatch.setenv("CHIPSWAP_DAY_RATE", "5e-324")
    _one_line(*run_inproc(capsys, "config", "show"), "CHIPSWAP_DAY_RATE")


# ------------------------------------------------------------------------------------ imported peer files
def _vllm(**fields: object) -> dict:
    doc = {
        "date": "20260101-000000", "backend": "vllm", "model_id": "m", "num_prompts": 10, "completed": 10,
        "failed": 0, "duration": 5.0, "request_throughput": 2.0, "output_throughput": 100.0,
        "median_e2el_ms": 400.0, "p99_e2el_ms": 900.0, "mean_e2el_ms": 450.0,
        "median_ttft_ms": 40.0, "p99_ttft_ms": 90.0, "instance": "inf2.xlarge",
    }  # fmt: skip
    doc.update(fields)
    return doc


def test_a_good_vllm_file_converts() -> None:
    out = convert(_vllm(), "r.json")
    assert out["latency_ms"]["e2e"]["p99"] == 900.0


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"p99_e2el_ms": 100.0}, "e2el p99 (100 ms) is below its p50 (400 ms)"),
        ({"median_ttft_ms": -5.0}, "median_ttft_ms is -5.0"),
        ({"p99_ttft_ms": -1}, "p99_ttft_ms is -1"),
        ({"median_e2el_ms": 0.0, "p99_e2el_ms": 0.0}, "e2el p50 is 0 ms"),
        ({"mean_e2el_ms": "fast"}, "mean_e2el_ms is 'fast'"),
    ],
)
def test_falling_percentiles_and_negative_latencies_are_one_line(fields, needle) -> None:
    msg = one_line_error(None, convert, _vllm(**fields), "r.json")
    assert needle in msg and "r.json" in msg, msg


def test_llmperf_p99_below_p50_is_named(tmp_path, capsys) -> None:
    doc = {
        "model": "m", "results_num_completed_requests": 10, "results_num_requests_started": 10,
        "results_num_completed_requests_per_min": 120.0,
        "results_end_to_end_latency_s_quantiles_p50": 2.0, "results_end_to_end_latency_s_quantiles_p99": 1.0,
    }  # fmt: skip
    f = tmp_path / "s_summary.json"
    f.write_text(json.dumps(doc))
    _one_line(
        *run_inproc(
            capsys, "bench", "import", str(f), "--instance", "inf2.xlarge", "--out", str(tmp_path / "o.json")
        ),
        "end_to_end_latency p99",
    )


# ------------------------------------------------------------------------------ unusable config paths
def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _loop(p: Path) -> None:
    p.symlink_to(p)


def _dev_zero(p: Path) -> None:
    p.symlink_to("/dev/zero")


@pytest.mark.parametrize(
    "make", [Path.mkdir, _fifo, _loop, _dev_zero], ids=["dir", "fifo", "loop", "devzero"]
)
def test_an_unusable_user_config_is_named_not_ignored(user_config, capsys, make) -> None:
    make(user_config)
    _one_line(*run_inproc(capsys, "config", "show"), str(user_config))


@pytest.mark.parametrize(
    "make", [Path.mkdir, _fifo, _loop, _dev_zero], ids=["dir", "fifo", "loop", "devzero"]
)
def test_an_unusable_project_config_is_named_not_ignored(tmp_path, monkeypatch, capsys, make) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    monkeypatch.delenv("CHIPSWAP_PROJECT_CONFIG")
    monkeypatch.chdir(repo)
    make(repo / "chipswap.toml")
    _one_line(*run_inproc(capsys, "config", "show"), str(repo / "chipswap.toml"))


# ------------------------------------------------------------------------- one line per distinct problem
def test_20000_copies_of_one_problem_print_one_line(monkeypatch, capsys) -> None:
    import chipswap.cli.main as climain

    def many(_args: list[str]) -> None:
        exc = ChipswapError("bad key 'tp'")
        exc.lines = ["bad key 'tp'"] * 20_000  # type: ignore[attr-defined]
        raise exc

    monkeypatch.setattr(climain, "check_flags", many)
    code, _, err = run_inproc(capsys, "config", "show")
    assert code == 2 and err.count("\n") == 1, err[:400]
    exc = ChipswapError("x")
    exc.lines = [f"bad key {i}" for i in range(500)]  # type: ignore[attr-defined]
    monkeypatch.setattr(climain, "check_flags", lambda _a: (_ for _ in ()).throw(exc))
    code, _, err = run_inproc(capsys, "config", "show")
    assert code == 2 and err.count("\n") == climain.MAX_ERROR_LINES and "481 more problems" in err, err[-300:]
