"""Output targets: only a regular file (or a new path) is replaced by an atomic rename. A device node, a FIFO,
standard output are written directly; anything else is one error line. A killed write leaves the old file and
its hidden temp file is removed by the next write. Each test here failed on the code before issue 15."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from chipswap.atomic import atomic_write_text, clean_stale_temps
from chipswap.compile.compiler import check_out_path
from chipswap.errors import ChipswapError


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root (the /dev/null-as-root case)")
def test_null_device_as_root_is_written_not_replaced(tmp_path):
    node = tmp_path / "null"  # a private copy of /dev/null (char 1:3): the real one is never at risk here
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    atomic_write_text(node, "discarded")
    st = os.lstat(node)
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)
    assert _temps(tmp_path) == []
    check_out_path(node)  # compile --out accepts it before compiling


def test_fifo_gets_the_bytes_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader() -> None:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        deadline = time.monotonic() + 10
        buf = b""
        try:
            while time.monotonic() < deadline:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    chunk = None
                if chunk:
                    buf += chunk
                elif chunk == b"" and buf:
                    break
                else:
                    time.sleep(0.01)
        finally:
            os.close(fd)
        got.append(buf)

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.2)  # the reader has the FIFO open
    try:
        atomic_write_text(fifo, "through the pipe")
    finally:
        t.join(timeout=15)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # not swapped for a regular file
    assert got == [b"through the pipe"] and _temps(tmp_path) == []


def test_fifo_without_a_reader_is_one_error_line_not_a_hang(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ChipswapError, match="nothing is reading that FIFO") as ei:
        atomic_write_text(fifo, "x")
    assert "\n" not in str(ei.value) and stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("name", ["-", "/dev/stdout"])
def test_stdout_targets_print_instead_of_replacing_the_link(tmp_path, name):
    code = (
        "import os\n"
        "real_replace = os.replace\n"
        "def guarded(src, dst):  # a regression must fail here, not rename over the real /dev/stdout link\n"
        "    assert not str(dst).startswith('/dev'), dst\n"
        "    real_replace(src, dst)\n"
        "os.replace = guarded\n"
        "from chipswap.atomic import atomic_write_text\n"
        "print('before', flush=True)\n"
        f"atomic_write_text({name!r}, 'payload\\n')\n"
        "print('after')\n"
    )
    out = tmp_path / "captured.txt"
    with open(out, "w") as fh:  # stdout redirected to a file: /dev/stdout must not reopen and truncate it
        r = subprocess.run([sys.executable, "-c", code], stdout=fh, stderr=subprocess.PIPE, text=True,
                           cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "before\npayload\nafter\n"
    assert not (tmp_path / "-").exists()


def test_other_character_devices_are_refused_in_one_line(tmp_path):
    zero = Path("/dev/zero")
    if os.geteuid() == 0:  # root could replace the real node if this regressed: use a private copy (char 1:5)
        zero = tmp_path / "zero"
        os.mknod(zero, stat.S_IFCHR | 0o666, os.makedev(1, 5))
    with pytest.raises(ChipswapError, match="is a character device, not a regular file") as ei:
        atomic_write_text(zero, "x")
    assert "\n" not in str(ei.value) and stat.S_ISCHR(os.lstat(zero).st_mode)
    with pytest.raises(ChipswapError, match=f"--out: cannot write {zero}"):
        check_out_path(zero)


def test_symlink_at_the_target_is_replaced_not_written_through(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    link = tmp_path / "report.json"
    link.symlink_to(precious)
    atomic_write_text(link, "new")
    assert precious.read_text() == "keep" and not link.is_symlink() and link.read_text() == "new"


# ------------------------------------------------------------------------------- killed writes, stale temps
KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    import chipswap.atomic as atomic

    def die(src, dst):  # killed after the temp file is complete, before the rename
        os.kill(os.getpid(), signal.SIGKILL)

    atomic.os.replace = die
    atomic.atomic_write_text(sys.argv[1], "NEW " * 1000)
    """
)


def test_killed_write_keeps_the_old_file_and_the_next_run_removes_its_temp(tmp_path):
    target = tmp_path / "report.json"
    atomic_write_text(target, "OLD")
    r = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(target)], capture_output=True, timeout=60)
    assert r.returncode == -signal.SIGKILL
    assert target.read_text() == "OLD"  # never half a file
    assert len(_temps(tmp_path)) == 1  # what a killed run leaves behind
    atomic_write_text(target, "NEXT")
    assert target.read_text() == "NEXT" and _temps(tmp_path) == []


def test_temp_of_a_live_writer_is_left_alone(tmp_path):
    target = tmp_path / "out.json"
    from chipswap.atomic import _writer_tag

    live = tmp_path / f".out.json.{_writer_tag()}.abc123.tmp"  # this very process: still writing
    live.write_text("in progress")
    foreign = tmp_path / ".out.json.0badf00d-1.xyz.tmp"  # another host: only removed when a day old
    foreign.write_text("elsewhere")
    legacy = tmp_path / ".out.json.k3j4h5g6.tmp"  # the old unmarked format: removed after an hour
    legacy.write_text("old run")
    assert clean_stale_temps(target) == []
    old = time.time() - 2 * 86400
    os.utime(foreign, (old, old))
    os.utime(legacy, (old, old))
    assert sorted(p.name for p in clean_stale_temps(target)) == sorted([foreign.name, legacy.name])
    assert live.exists()
