"""Atomic writes leave either the old file or the new one, never a partial file or a stray temp file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from chipswap.atomic import atomic_write_text
from chipswap.errors import ChipswapError


def test_write_replaces_content_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "out.txt"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]


def test_failed_write_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old")

    def full_disk(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(ChipswapError, match="No space left"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_unwritable_folder_is_a_user_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ChipswapError, match="cannot write"):
        atomic_write_text(blocker / "out.txt", "x")


def test_written_file_has_umask_mode_not_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "report.html", "x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_folder_as_target_names_the_real_problem(tmp_path: Path) -> None:
    with pytest.raises(ChipswapError, match="it is a folder; give a file name"):
        atomic_write_text(tmp_path, "x")
