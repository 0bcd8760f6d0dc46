"""No native code from a data file (issue 19, finding 1, high severity).

torch's ``.pt2`` loader dlopens any AOTInductor shared object stored in the archive, and an ELF constructor
runs at dlopen. These tests build such an archive at test time (a real shared object built by the C
compiler, whose constructor writes a marker file) and assert that ``chipswap check`` and ``chipswap compile``
refuse it with one line, exit 2, and that the marker never appears; ``--trust-native`` is the explicit opt-in
(and shows the payload is live). Also: a corrupt ``.pt2`` and a refused pickle are one line on the real
terminal (torch's multi-line warning traceback kept off it), and compiled packages load only from chipswap's
own cache, by content hash.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch

from chipswap import models
from chipswap.compile.trust import require_cache_entry
from chipswap.errors import ChipswapError
from chipswap.nativeguard import native_members
from tests.cli_helpers import run_cli_many
from tests.test_check_security import _payload_pt2

EVIL_C = r"""
#include <stdio.h>
__attribute__((constructor)) static void chipswap_test_payload(void) {
  FILE *f = fopen("%s", "w");
  if (f) { fputs("native code ran\n", f); fclose(f); }
}
"""


class _AddOne(torch.nn.Module):
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return input_ids + 1


def _plain_pt2(path: Path) -> Path:
    ep = torch.export.export(_AddOne(), (torch.ones(1, 8, dtype=torch.long),))
    torch.export.save(ep, str(path))
    return path


def _evil_pt2(tmp_path: Path, *, hide: bool = False) -> tuple[Path, Path]:
    """A real torch.export archive plus an AOTInductor package whose shared object has an ELF constructor."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the test's shared object")
    marker = tmp_path / "NATIVE_MARKER"
    src = tmp_path / "evil.c"
    src.write_text(EVIL_C % marker)
    so = tmp_path / "evil.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True, capture_output=True)
    base = _plain_pt2(tmp_path / "base.pt2")
    evil = tmp_path / "evil.pt2"
    with zipfile.ZipFile(base) as zin, zipfile.ZipFile(evil, "w") as z:
        root = zin.namelist()[0].split("/")[0]
        for info in zin.infolist():
            z.writestr(info, zin.read(info.filename))
        pkg = f"{root}/data/aotinductor/model"
        z.write(so, f"{pkg}/evil.wrapper.so")
        z.writestr(f"{pkg}/evil.wrapper_metadata.json", json.dumps({"AOTI_DEVICE_KEY": "cpu"}))
    return evil, marker


def _one_error_line(code: int, err: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("chipswap: error: "), err[-2000:]
    assert "Traceback" not in err


def test_pt2_with_native_code_is_refused_by_check_and_compile(tmp_path):
    evil, marker = _evil_pt2(tmp_path)
    corrupt = tmp_path / "corrupt.pt2"
    with zipfile.ZipFile(_plain_pt2(tmp_path / "c.pt2")) as zin, zipfile.ZipFile(corrupt, "w") as z:
        for info in zin.infolist():
            if not info.filename.endswith("archive_version"):  # torch logs a warning traceback for this
                z.writestr(info, zin.read(info.filename))
    pickled, pickle_marker = _payload_pt2(tmp_path)
    (tmp_path / "trusted").mkdir()
    trusted, trusted_marker = _evil_pt2(tmp_path / "trusted")
    cache = str(tmp_path / "cache")
    results = run_cli_many(
        ["check", str(evil)],
        ["compile", str(evil), "--seq-len", "8", "--cache-dir", cache],
        ["check", str(corrupt)],
        ["check", str(pickled)],
        ["check", str(trusted), "--trust-native"],  # the opt-in: torch loads it (and the payload runs)
    )
    for code, _out, err in results[:2]:
        _one_error_line(code, err)
        assert "native code" in err and "--trust-native" in err
        assert not marker.exists(), "the shared object's constructor ran"
    _one_error_line(*results[2][::2])
    assert "warnings above" not in results[2][2]
    _one_error_line(*results[3][::2])
    assert "--trust-pickle" in results[3][2] and not pickle_marker.exists()
    assert trusted_marker.exists(), "the test payload is live: with --trust-native torch dlopens it"
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.so"))


def test_second_guard_refuses_a_package_the_scan_missed(tmp_path, monkeypatch):
    """Even if the archive scan missed a layout, torch's AOTInductor loader is replaced while chipswap reads a
    user's .pt2, so nothing is dlopened."""
    evil, marker = _evil_pt2(tmp_path)
    monkeypatch.setattr("chipswap.nativeguard.native_members", lambda _p: [])
    ref = models.resolve_model(str(evil))
    with pytest.raises(ChipswapError, match="native code"):
        models.load_exported(ref)
    assert not marker.exists()


def test_archive_scan_finds_native_members(tmp_path):
    plain = _plain_pt2(tmp_path / "p.pt2")
    assert native_members(plain) == []
    odd = tmp_path / "odd.pt2"  # an ELF file under an innocent name is still native code
    with zipfile.ZipFile(odd, "w") as z:
        z.writestr("odd/data/weights/weight_0", b"\x7fELF" + b"\0" * 60)
        z.writestr("odd/extra/lib.SO", b"x")
    assert sorted(native_members(odd)) == ["odd/data/weights/weight_0", "odd/extra/lib.SO"]


def test_compiled_packages_load_only_from_a_verified_cache_entry(tmp_path):
    from chipswap.compile.backends.aoti import AOTInductorBackend
    from chipswap.compile.cache import ArtifactCache

    loose = tmp_path / "somewhere"
    loose.mkdir()
    (loose / "model.pt2").write_bytes(b"not checked")
    with pytest.raises(ChipswapError, match="only from its own cache"):
        AOTInductorBackend().load(loose)
    cache = ArtifactCache(tmp_path / "cache")
    fake = cache.root / "entries" / ("a" * 32)  # looks like an entry, but no manifest vouches for it
    fake.mkdir(parents=True)
    (fake / "model.pt2").write_bytes(b"x")
    with pytest.raises(ChipswapError, match="cache manifest"):
        require_cache_entry(fake)
