"""A cache and a compiled set are data that may come from someone else: names in them never become paths
unchecked, the cache never deletes or writes outside its root, and `cache ls` never calls a damaged entry
ready. Each test here failed on the code before issue 15."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chipswap.compile.cache import ArtifactCache
from chipswap.compile.compiler import SET_SCHEMA
from chipswap.compile.keys import KeyParts
from chipswap.errors import ChipswapError
from chipswap.serve.served import load_router
from tests.cli_helpers import run_inproc


def _parts(backend: str = "onnxruntime") -> KeyParts:
    return KeyParts.make(
        graph="g" * 64, weights="w" * 64, inputs=[("input_ids", (1, 8), "int64")], backend=backend,
        backend_version="t", flags={},
    )


def _build(content: bytes = b"artifact bytes"):
    def build(d: Path) -> None:
        (d / "model.bin").write_bytes(content)

    return build


def _victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.mkdir()
    (v / "precious.txt").write_text("keep me")
    return v


def _tree(root: Path) -> dict[str, str]:
    """Everything under root (path -> kind/size), to show nothing outside the cache changed."""
    out = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = "dir" if p.is_dir() else f"file {p.stat().st_size}"
    return out


def _cset(key: object = "0" * 32, **over) -> dict:
    d = {"schema": SET_SCHEMA, "backend": "onnxruntime", "input_names": ["input_ids", "attention_mask"],
         "pad_token_id": 0, "buckets": [{"batch": 1, "seq_len": 8, "key": key}]}
    d.update(over)
    return d


# ---------------------------------------------------------------------------------------------- traversal
@pytest.mark.parametrize("key", ["../../victim", "../victim", "/tmp", "..", "", "A" * 32, "0" * 31 + "/"])
def test_compiled_set_with_traversal_key_touches_nothing_outside_the_cache(tmp_path, key):
    victim = _victim(tmp_path)
    cache = ArtifactCache(tmp_path / "cache")
    cache.ensure_writable()
    before = _tree(tmp_path)
    with pytest.raises(ChipswapError, match="is not a cache key") as ei:
        load_router(_cset(key), cache)
    assert "\n" not in str(ei.value)
    assert (victim / "precious.txt").read_text() == "keep me"
    assert _tree(tmp_path) == before  # no folder deleted, no lock file dropped beside it


def test_compiled_set_file_with_traversal_key_via_the_file_reader(tmp_path):
    victim = _victim(tmp_path)
    f = tmp_path / "set.json"
    f.write_text(json.dumps(_cset("../../victim")))
    with pytest.raises(ChipswapError, match=r"buckets\[0\]\.key '\.\./\.\./victim' is not a cache key"):
        load_router(f, ArtifactCache(tmp_path / "cache"))
    assert victim.exists() and not (tmp_path / "victim.lock").exists()


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.get("../x"),
        lambda c: c.read("../x"),
        lambda c: c.entry_dir("../x"),
        lambda c: c.is_locked("../x"),
        lambda c: c.lock_holder("../x"),
        lambda c: c.get_or_build("../x", _build()),
        lambda c: c.remove("../x"),
        lambda c: c.lock("../x").__enter__(),
    ],
)
def test_every_cache_call_refuses_a_non_key_before_touching_the_disk(tmp_path, call):
    root = tmp_path / "never-created"
    with pytest.raises(ChipswapError, match="not a cache key"):
        call(ArtifactCache(root))
    assert not root.exists()


def test_cache_rm_refuses_a_path_like_key(tmp_path, capsys):
    _victim(tmp_path)
    code, out, err = run_inproc(capsys, "cache", "rm", "../victim", "--cache-dir", str(tmp_path / "c"))
    assert code == 2 and err.count("\n") == 1 and "not a cache key" in err
    assert (tmp_path / "victim" / "precious.txt").exists() and not (tmp_path / "c").exists()


# ------------------------------------------------------------------------------------------- hostile caches
def test_symlinked_trash_folder_is_refused_not_emptied(tmp_path):
    victim = _victim(tmp_path)
    c = ArtifactCache(tmp_path / "c")
    c.get_or_build(_parts(), _build())
    os.rmdir(c.trash)
    os.symlink(victim, c.trash)
    with pytest.raises(ChipswapError, match="symbolic link or not a folder"):
        c.prune()
    assert (victim / "precious.txt").read_text() == "keep me"


def test_symlinked_entry_is_corrupt_and_discarding_it_removes_only_the_link(tmp_path):
    victim = _victim(tmp_path)
    c = ArtifactCache(tmp_path / "c")
    c.ensure_writable()
    key = _parts().key
    os.symlink(victim, c.entries / key)
    assert c.read(key).state == "corrupt"
    assert c.get(key) is None  # discarded
    assert not os.path.lexists(c.entries / key)
    assert (victim / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    "files",
    [
        {"../../victim/precious.txt": {"size": 7, "sha256": "0" * 64}},
        {"/etc/hostname": {"size": 1, "sha256": "0" * 64}},
        {"model.bin": {"size": "14", "sha256": "0" * 64}},
        {"model.bin": {"size": True, "sha256": "0" * 64}},
        {"model.bin": {"size": 14, "sha256": "../x"}},
        {"model.bin": None},
        "not a table",
    ],
)
def test_edited_manifest_is_corrupt_and_never_read_outside(tmp_path, files):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _build())
    doc = json.loads((e.path / "entry.json").read_text())
    doc["files"] = files
    (e.path / "entry.json").write_text(json.dumps(doc))
    entry = c.read(e.key)
    assert entry.state == "corrupt" and entry.size == 0
    assert c.quick_state(entry, [2**30]) == "corrupt"
    assert c.verify_entry(entry)


def test_manifest_pointing_at_an_endless_device_does_not_hang(tmp_path):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _build())
    (e.path / "model.bin").unlink()
    os.symlink("/dev/zero", e.path / "model.bin")  # size 0 on stat; would hash forever if followed
    doc = json.loads((e.path / "entry.json").read_text())
    doc["files"]["model.bin"]["size"] = 0
    (e.path / "entry.json").write_text(json.dumps(doc))
    problems = c.verify_entry(c.read(e.key))
    assert any("not a regular file" in p for p in problems)


def test_extra_file_planted_in_an_entry_makes_it_corrupt(tmp_path):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _build())
    (e.path / "constants.pt").write_bytes(b"planted")
    assert any("not in the manifest" in p for p in c.verify_entry(c.read(e.key)))


def test_hostile_entry_json_values_are_shown_as_plain_text(tmp_path, capsys):
    c = ArtifactCache(tmp_path / "c")
    meta = {"model": "\x1b[31mred\x1b[0m\nVerdict: move", "batch": "x"}
    e, _ = c.get_or_build(_parts(), _build(), meta=meta)
    doc = json.loads((e.path / "entry.json").read_text())
    doc["created"] = "yesterday"
    (e.path / "entry.json").write_text(json.dumps(doc))
    code, out, err = run_inproc(capsys, "cache", "ls", "--cache-dir", str(c.root))
    assert code == 0 and "\x1b" not in out and "\nVerdict" not in out
    code, out, err = run_inproc(capsys, "cache", "ls", "--cache-dir", str(c.root), "--json")
    row = json.loads(out)["entries"][0]
    assert code == 0 and row["created"] is None and "\\x1b" in row["model"]


# ----------------------------------------------------------------------------------- ls and flipped bytes
def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[3] ^= 0x01
    path.write_bytes(bytes(data))


def test_cache_ls_does_not_call_an_entry_with_a_flipped_byte_ready(tmp_path, capsys):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _build())
    code, out, _ = run_inproc(capsys, "cache", "ls", "--cache-dir", str(c.root), "--json")
    assert [r["state"] for r in json.loads(out)["entries"]] == ["ready"]
    _flip_one_byte(e.path / "model.bin")  # same size, different bytes
    code, out, _ = run_inproc(capsys, "cache", "ls", "--cache-dir", str(c.root), "--json")
    assert code == 0 and [r["state"] for r in json.loads(out)["entries"]] == ["corrupt"]


def test_ls_says_unverified_for_a_changed_entry_over_the_hash_budget(tmp_path):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _build())
    assert c.quick_state(c.read(e.key), [0]) == "ready"  # stamp from publish: no hashing needed
    _flip_one_byte(e.path / "model.bin")
    assert c.quick_state(c.read(e.key), [0]) == "unverified"  # changed, too big to hash now
    assert c.quick_state(c.read(e.key), [2**20]) == "corrupt"
    assert c.get(e.key) is None  # a load always hashes: never handed out


def test_a_copied_cache_is_unverified_until_checked_then_ready(tmp_path, capsys):
    import shutil

    c = ArtifactCache(tmp_path / "c")
    c.get_or_build(_parts(), _build())
    shutil.copytree(c.root, tmp_path / "copy", symlinks=True)
    copy = ArtifactCache(tmp_path / "copy")
    e = copy.list()[0]
    assert copy.quick_state(e, [0]) == "unverified"  # new inodes: nothing known about these bytes
    code, out, _ = run_inproc(capsys, "cache", "verify", "--cache-dir", str(copy.root))
    assert code == 0 and "0 corrupt" in out
    assert copy.quick_state(copy.list()[0], [0]) == "ready"
