"""The `.pt2` scan reads every member or refuses the archive (issue 32, item 6): a member marked encrypted,
stored with a compression method torch's reader does not read, or with a damaged header used to end the scan
(chipswap.nativeguard), so a native-code member after it went unseen by the first guard. The zips here are
written by zipfile and then patched by hand: the flag bits and compression method in both the local header and
the central directory entry of one member."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest

from chipswap.nativeguard import NativeCodeRefused, native_members, refuse_native, scan_archive
from tests.cli_helpers import one_line_error, run_inproc

ELF = b"\x7fELF" + b"\0" * 60


def _patch_member(path: Path, name: str, *, flags: int | None = None, method: int | None = None,
                  local_name: bytes | None = None) -> None:
    """Set the general purpose flag bits and/or compression method of member ``name`` in its local header
    (offsets 6, 8 from its signature PK 3 4) and its central directory entry (offsets 8, 10 from PK 1 2)."""
    data = bytearray(path.read_bytes())
    raw = name.encode()
    for sig, flag_at, name_at in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
        at = 0
        while True:
            at = data.index(sig, at)
            if data[at + name_at: at + name_at + len(raw)] == raw:
                break
            at += 4
        if flags is not None:
            struct.pack_into("<H", data, at + flag_at, flags)
        if method is not None:
            struct.pack_into("<H", data, at + flag_at + 2, method)
        if local_name is not None and sig == b"PK\x03\x04":
            data[at + name_at: at + name_at + len(raw)] = local_name
    path.write_bytes(bytes(data))


def _archive(tmp_path: Path) -> Path:
    """A .pt2-shaped zip: a plain member, the member to patch, then a weight file that is really an ELF
    object (native code by its first bytes, not its name)."""
    p = tmp_path / "m.pt2"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("m/archive_version", b"0")
        z.writestr("m/data/weights/odd", b"payload bytes")
        z.writestr("m/data/weights/weight_0", ELF)
    return p


@pytest.mark.parametrize(
    ("patch", "why"),
    [
        ({"flags": 0x1}, "marked encrypted"),
        ({"method": 99}, "compression method 99"),  # AES; zipfile raises NotImplementedError on it
        ({"method": 93}, "compression method 93"),  # zstd
        ({"method": zipfile.ZIP_BZIP2}, "compression method 12"),  # zipfile reads it, torch's reader does not
        ({"local_name": b"m/data/weights/oDD"}, "differ"),  # local header disagrees with the directory
    ],
    ids=["encrypted", "aes", "zstd", "bzip2", "bad-header"],
)
def test_an_unreadable_member_is_a_refusal_and_does_not_end_the_scan(tmp_path, patch, why):
    p = _archive(tmp_path)
    _patch_member(p, "m/data/weights/odd", **patch)
    found, unreadable = scan_archive(p)
    assert found == ["m/data/weights/weight_0"]  # the member after the unreadable one was still looked at
    assert [n for n, _ in unreadable] == ["m/data/weights/odd"] and why in unreadable[0][1]
    msg = one_line_error("cannot read", refuse_native, p)
    assert "m/data/weights/odd" in msg and why in msg and "--trust-native" in msg


def test_a_clean_archive_still_scans_clean_and_a_non_zip_is_left_to_torch(tmp_path):
    p = tmp_path / "ok.pt2"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("ok/archive_version", b"0")
        z.writestr("ok/data/weights/w", b"\0" * 64, compress_type=zipfile.ZIP_DEFLATED)
    assert scan_archive(p) == ([], [])
    refuse_native(p)  # no refusal
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a zip at all")
    assert scan_archive(junk) == ([], []) and native_members(junk) == []


def test_check_refuses_an_archive_with_an_encrypted_member_in_one_line(tmp_path, capsys):
    p = _archive(tmp_path)
    _patch_member(p, "m/data/weights/odd", flags=0x1)
    code, out, err = run_inproc(capsys, "check", str(p))
    assert code == 2 and err.count("\n") == 1 and err.startswith("chipswap: error: "), err
    assert "marked encrypted" in err and "Traceback" not in err and not out
    with pytest.raises(NativeCodeRefused):
        refuse_native(p)
