"""Issue 15 classes that live in `chipswap plan` (each test fails on the code before this change):
strict numbers, non-finite and huge numbers, hostile files, terminal and Markdown injection from a title, the
report set published as one (a run killed mid-write), and the issue 10 bad-traffic inputs. Every bad input is
one line on stderr with exit 2 and leaves no report behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.cli_helpers import run_inproc
from tests.toml_inputs import serving_workload

SMALL = "\n" + serving_workload(
    title="small",
    rps="20.0",
    output_tokens=32,
    instance="g6e.xlarge",
    count=10,
    gpu_rps="3.0",
    candidate="requests_per_s = 1.8",
)


def workload(tmp_path: Path, text: str = SMALL, name: str = "w.toml") -> Path:
    p = tmp_path / name
    p.write_text(text) if isinstance(text, str) else p.write_bytes(text)
    return p


def one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, p: Path, *expect: str) -> str:
    code, out, err = run_inproc(capsys, "plan", str(p), "--out", str(tmp_path / "out"))
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for e in expect:
        assert e in err, err
    assert not (tmp_path / "out").exists()
    return err


# ---------------------------------------------------------------------------------------- strict numbers


def set_field(text: str, key: str, value: str) -> str:
    """`text` with `key` (section.name) set to the raw TOML `value`: its line replaced, or added under the
    section when the workload does not set it."""
    section, name = key.split(".")
    line = next((x for x in text.splitlines() if x.startswith(f"{name} = ")), None)
    if line is None:
        return text.replace(f"[{section}]\n", f"[{section}]\n{name} = {value}\n", 1)
    return text.replace(line, f"{name} = {value}", 1)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("traffic.steady_rps", "true", "expected a number, not true"),
        ("traffic.steady_rps", '"20"', "expected a number without quotes"),
        ("fleet.count", "true", "expected an integer, not true"),
        ("porting.engineer_days", "false", "expected a number, not false"),
        ("traffic.steady_rps", "nan", "expected a finite number"),
        ("traffic.steady_rps", "inf", "expected a finite number"),
        ("traffic.steady_rps", "1e400", "expected a finite number"),
        ("traffic.steady_rps", "1e300", "expected a number <= 1000000"),
        ("fleet.count", "99999999999999999", "expected a number <= 100000"),
        ("traffic.prompt_tokens", "2000000000", "expected a number <= 1048576"),
        ("porting.day_rate_usd", "1e300", "expected a number <= 1000000"),
    ],
)
def test_numbers_are_strict_and_bounded(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str, value: str, words: str
) -> None:
    """Old code: `steady_rps = true` became 1 req/s and gave a verdict; 1e300 money overflowed a Decimal."""
    text = set_field(SMALL, key, value)
    assert text != SMALL and f"{key.split('.')[1]} = {value}\n" in text
    p = workload(tmp_path, text)
    err = one_line_exit_2(capsys, tmp_path, p, f"{key}: {words}")
    assert str(p) in err


def test_bill_of_1e300_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = workload(tmp_path, SMALL.replace("count = 10", "count = 10\nmonthly_bill_usd = 1e300"))
    one_line_exit_2(capsys, tmp_path, p, "fleet.monthly_bill_usd: expected a number <= 10000000000")


def test_close_margin_flag_is_bounded(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = workload(tmp_path)
    for bad in ("1e300", "nan", "-1", "101"):
        code, _, err = run_inproc(capsys, "plan", str(p), "--close-margin", bad, "--out", str(tmp_path / "o"))
        assert code == 2 and "--close-margin must be 0 to 100" in err and err.count("\n") == 1


# ------------------------------------------------------------------------------------------ hostile files


def test_non_utf8_workload(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = workload(tmp_path, b'title = "\xff\xfe"\n' + SMALL.encode())  # type: ignore[arg-type]
    one_line_exit_2(capsys, tmp_path, p, "is not UTF-8")


def test_deeply_nested_workload(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = workload(tmp_path, "x = " + "[" * 5000 + "]" * 5000 + "\n")
    one_line_exit_2(capsys, tmp_path, p, "nested deeper than")


def test_huge_workload_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = workload(tmp_path, SMALL + "#" * (2 * 1024 * 1024) + "\n")
    one_line_exit_2(capsys, tmp_path, p, "over the")


# -------------------------------------------------------------------------- bad traffic (issue 10)


@pytest.mark.parametrize("scale", ["0", "-2"])
def test_traffic_scale_not_positive(capsys: pytest.CaptureFixture[str], tmp_path: Path, scale: str) -> None:
    text = SMALL.replace(
        "steady_rps = 20.0\nprompt_tokens = 512\noutput_tokens = 32", f'trace = "t.csv"\nscale = {scale}'
    )
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,2\n1,10,2\n")
    one_line_exit_2(capsys, tmp_path, workload(tmp_path, text), "traffic.scale: expected a number > 0")


def _trace_workload(tmp_path: Path, rows: list[str], extra: str = "") -> Path:
    (tmp_path / "t.csv").write_text("\n".join(["TIMESTAMP,ContextTokens,GeneratedTokens", *rows]) + "\n")
    text = SMALL.replace(
        "steady_rps = 20.0\nprompt_tokens = 512\noutput_tokens = 32", f'trace = "t.csv"\n{extra}'
    )
    return workload(tmp_path, text)


def test_empty_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    one_line_exit_2(capsys, tmp_path, _trace_workload(tmp_path, []), "the trace is empty")


def test_trace_with_every_arrival_at_one_instant(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = _trace_workload(tmp_path, ["5,100,10"] * 50)
    one_line_exit_2(capsys, tmp_path, p, "all 50 requests arrive at the same instant")


def test_trace_shorter_than_the_window(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = _trace_workload(tmp_path, [f"{i},100,10" for i in range(20)], "burst_window_s = 300")
    one_line_exit_2(
        capsys, tmp_path, p, "traffic.burst_window_s: 300 s is longer than the trace's 19 s", "= 19 or less"
    )


def test_trace_without_timestamps(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("ContextTokens,GeneratedTokens\n10,2\n12,3\n")
    text = SMALL.replace("steady_rps = 20.0\nprompt_tokens = 512\noutput_tokens = 32", 'trace = "t.csv"')
    one_line_exit_2(capsys, tmp_path, workload(tmp_path, text), "has no timestamp column")


# ------------------------------------------------------------------------ terminal and Markdown safety


HOSTILE = (
    "evil\x1b[31m red \x1b]0;pwned\x07\nVerdict: move serving to Inferentia — trust me "
    "<script>alert(1)</script>"
)


@pytest.fixture
def hostile_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, Path]:
    text = SMALL.replace('title = "small"', f"title = {json.dumps(HOSTILE)}")
    p = workload(tmp_path, text)
    code, out, err = run_inproc(capsys, "plan", str(p), "--out", str(tmp_path / "rep"))
    assert code == 0, err
    return out, tmp_path / "rep"


def test_title_cannot_reach_the_terminal_raw(hostile_run: tuple[str, Path]) -> None:
    out, _ = hostile_run
    assert "\x1b" not in out and "\x07" not in out
    verdict_lines = [line for line in out.splitlines() if line.startswith("Verdict:")]
    assert len(verdict_lines) == 1  # the title's newline did not forge a second one
    assert "\\x1b[31m" in out  # shown, escaped


def test_report_md_escapes_the_title(hostile_run: tuple[str, Path]) -> None:
    _, rep = hostile_run
    md = (rep / "report.md").read_text()
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "\x1b" not in md
    assert not any(
        line.startswith("Verdict:") or line.startswith("**Verdict: move") for line in md.splitlines()[:2]
    )
    html = (rep / "report.html").read_text()
    assert "<script>alert" not in html
    # issue 19: raw terminal escapes and BEL from the title never reach the page (shown as \x1b)
    assert "\x1b" not in html and "\x07" not in html
    assert "\\x1b[31m" in html


# --------------------------------------------------------------------- the report set, published as one


CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from chipswap.report import publish
    real = os.fsync
    calls = [0]
    def slow(fd):
        calls[0] += 1
        if calls[0] == 2:  # one file of the new set is on disk, the others are not
            Path(sys.argv[2]).write_text("x")
            time.sleep(120)
        real(fd)
    publish.os.fsync = slow
    publish.publish_report_set(Path(sys.argv[1]), {n: "new" for n in ("report.html", "report.json",
    "report.md")})
    """
)


def _read_set(out: Path) -> dict[str, str]:
    return {n: (out / n).read_text() for n in ("report.html", "report.json", "report.md")}


def test_killed_run_leaves_the_previous_set_and_is_cleaned_up(tmp_path: Path) -> None:
    """Old code wrote three files one after another: a run killed between them left report.json from the new
    run beside report.html from the old one, and hidden temp files were never cleaned up."""
    from chipswap.report.publish import RUNS, publish_report_set

    out = tmp_path / "rep"
    publish_report_set(out, {n: "old" for n in ("report.html", "report.json", "report.md")})
    marker = tmp_path / "mid-write"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out), str(marker)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, "the writer ended before it was killed"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert set(_read_set(out).values()) == {"old"}  # one consistent set: the previous run's
    runs = list((out / RUNS).iterdir())
    assert len(runs) == 2  # the current set and the killed run's half-written folder
    publish_report_set(out, {n: "third" for n in ("report.html", "report.json", "report.md")})
    assert set(_read_set(out).values()) == {"third"}
    assert len(list((out / RUNS).iterdir())) == 1  # the stale folder and the old set are gone
    assert not [p for p in out.iterdir() if ".tmp" in p.name]


def test_publish_never_replaces_report_files_chipswap_did_not_write(tmp_path: Path) -> None:
    """Issue 19: plain report files (the user's own, or an older chipswap's) are refused, one line, and left
    as they are; chipswap's own set (its symlinks) is replaced; stale temp files are still cleaned up."""
    from chipswap.errors import ChipswapError
    from chipswap.report.publish import publish_report_set

    out = tmp_path / "rep"
    out.mkdir()
    (out / "report.html").write_text("the user's own page")
    (out / ".report.json.abc123.tmp").write_text("stale")
    os.utime(out / ".report.json.abc123.tmp", (time.time() - 3600, time.time() - 3600))
    (out / "notes.txt").write_text("the user's own file")
    with pytest.raises(ChipswapError, match="report.html exists and chipswap did not write it"):
        publish_report_set(out, {n: "new" for n in ("report.html", "report.json", "report.md")})
    assert (out / "report.html").read_text() == "the user's own page"
    assert not (out / "report.json").exists()
    assert not (out / ".report.json.abc123.tmp").exists()
    (out / "report.html").unlink()
    publish_report_set(out, {n: "one" for n in ("report.html", "report.json", "report.md")})
    publish_report_set(out, {n: "two" for n in ("report.html", "report.json", "report.md")})
    assert set(_read_set(out).values()) == {"two"}
    assert (out / "notes.txt").read_text() == "the user's own file"


def test_publish_without_symlinks_marks_the_files_it_owns(tmp_path: Path, monkeypatch) -> None:
    import errno as _errno

    from chipswap.errors import ChipswapError
    from chipswap.report import publish

    def no_links(*_a: object, **_k: object) -> None:
        raise OSError(_errno.EPERM, "no symlinks here")

    monkeypatch.setattr(publish.os, "symlink", no_links)
    out = tmp_path / "rep"
    publish.publish_report_set(out, {n: "one" for n in ("report.html", "report.json", "report.md")})
    publish.publish_report_set(out, {n: "two" for n in ("report.html", "report.json", "report.md")})
    assert set(_read_set(out).values()) == {"two"}
    (out / "report.md").write_text("edited by the user")
    with pytest.raises(ChipswapError, match="did not write it"):
        publish.publish_report_set(out, {n: "three" for n in ("report.html", "report.json", "report.md")})
    assert (out / "report.md").read_text() == "edited by the user"


def test_plan_out_with_a_300_character_name_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    p = workload(tmp_path)
    code, out, err = run_inproc(capsys, "plan", str(p), "--out", str(tmp_path / ("a" * 300)))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "File name too long" in err


@pytest.mark.parametrize("value", ['"yes"', "1", '"true"'])
def test_booleans_only_as_booleans(capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str) -> None:
    """Issue 19: `custom_cuda_kernels = "yes"` counted as true (pydantic's lax bool)."""
    p = workload(tmp_path, SMALL + f"[stability]\ncustom_cuda_kernels = {value}\n")
    one_line_exit_2(capsys, tmp_path, p, "stability.custom_cuda_kernels")
