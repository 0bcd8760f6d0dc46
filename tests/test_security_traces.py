"""Issue 19, bounds on trace files (each test failed before the fix):

* a gzip compression bomb is refused from its first few MiB, before the engine reads it (a 5 MB .csv.gz that
  expands to 5 GiB ran past 3 GB and 99 s); a file projecting past the decompressed-size cap is refused;
* a sparse or binary "CSV" (NUL bytes) is refused before any line is read (a 2 GB sparse CSV took 3.3 GB);
* a line longer than 16 MiB is never held whole by the line-naming reader;
* a symlink in a trace folder that leads outside it is not followed unless --follow-symlinks.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pytest

from chipswap.errors import ChipswapError
from chipswap.traffic import bounds
from chipswap.traffic.source import resolve_source
from tests.cli_helpers import run_inproc

HEADER = b"prompt_tokens,output_tokens\n"


def _one_line_2(code: int, err: str, needle: str) -> None:
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err and needle in err, err


def test_gzip_bomb_is_refused_before_the_engine_reads_it(tmp_path, capsys):
    bomb = tmp_path / "bomb.csv.gz"
    bomb.write_bytes(gzip.compress(HEADER + b"1" * (64 << 20), compresslevel=9))  # ~64 KB -> 64 MiB
    assert bomb.stat().st_size < 200_000
    code, _out, err = run_inproc(capsys, "shapes", str(bomb))
    _one_line_2(code, err, "compression bomb")


def test_a_file_projecting_past_the_decompressed_cap_is_refused(tmp_path, monkeypatch):
    rows = b"".join(b"%d,%d\n" % (i % 997 + 1, i % 13 + 1) for i in range(400_000))
    f = tmp_path / "t.csv.gz"
    f.write_bytes(gzip.compress(HEADER + rows, compresslevel=6))
    resolve_source(f)  # an ordinary ratio: fine
    monkeypatch.setattr(bounds, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    with pytest.raises(ChipswapError, match="would expand to about"):
        resolve_source(f)


def test_sparse_csv_is_refused_without_reading_it(tmp_path, capsys):
    f = tmp_path / "sparse.csv"
    f.write_bytes(HEADER + b"10,5\n")
    os.truncate(f, 2 << 30)  # 2 GiB of holes: no disk used
    code, _out, err = run_inproc(capsys, "shapes", str(f))
    _one_line_2(code, err, "NUL bytes")


def test_the_line_naming_reader_never_holds_a_whole_long_line(tmp_path):
    """locate_text_error used csv.reader over the file object: a 300 MB line was read whole (and decoded)."""
    f = tmp_path / "long.csv"
    f.write_bytes(HEADER + b"10,5\n" + b"7" * (64 << 20) + b",1\n")
    code = (
        "import resource, sys\n"
        "from chipswap.traffic.source import TraceSource, locate_text_error\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        f"err = locate_text_error(TraceSource({str(f)!r}, ({str(f)!r},), 'csv'))\n"
        "print(err)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    msg, rss_kb = r.stdout.strip().splitlines()[-2:]
    assert "longer than 16 MiB" in msg, r.stdout + r.stderr
    assert int(rss_kb) < 64_000, rss_kb  # peak growth: ~33 MB now; the 64 MiB line read whole took ~130 MB


def test_symlink_out_of_a_trace_folder_is_not_followed(tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "shadow.csv").write_bytes(HEADER + b"12,3\n")
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.csv").write_bytes(HEADER + b"10,5\n" * 20)
    (folder / "b.csv").symlink_to(secret / "shadow.csv")
    code, _out, err = run_inproc(capsys, "shapes", str(folder))
    _one_line_2(code, err, "outside the trace folder")
    assert "--follow-symlinks" in err
    code, _out, err = run_inproc(capsys, "shapes", str(folder), "--follow-symlinks", "--mode", "encoder")
    assert code == 0, err
    # a link that stays inside the folder is fine, and the next run refuses again (the flag does not stick)
    (folder / "b.csv").unlink()
    (folder / "c.csv").symlink_to(folder / "a.csv")
    assert len(resolve_source(folder).files) == 2
    (folder / "d.csv").symlink_to(secret / "shadow.csv")
    code, _out, err = run_inproc(capsys, "shapes", str(folder))
    _one_line_2(code, err, "outside the trace folder")
