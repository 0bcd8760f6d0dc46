"""A cache that cannot be re-signed (issue 32, item 5): every entry.json carries an HMAC-SHA256 tag under a
key kept outside the cache folder (chipswap.compile.signing), checked at every load and by `cache verify`.

The headline test compiles a real AOTInductor entry, swaps the shared object inside its ``model.pt2`` for one
whose ELF constructor writes a marker file, rewrites the manifest to match (sizes, sha256), and shows that
`serve` and `compile` refuse it (the marker never appears) and `cache verify` flags it (exit 1, naming the
entry); the same entry re-signed with the real key does run the constructor, so the tag is what stops it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from chipswap.compile import signing
from chipswap.compile.cache import ArtifactCache
from chipswap.compile.keys import KeyParts
from tests.cli_helpers import one_line_error, run_inproc

ROOT = Path(__file__).resolve().parents[1]


def _parts(backend: str = "onnxruntime") -> KeyParts:
    return KeyParts.make(
        graph="g" * 64, weights="w" * 64, inputs=[("input_ids", (1, 8), "int64")], backend=backend,
        backend_version="t", flags={},
    )


def _build(d: Path) -> None:
    (d / "model.bin").write_bytes(b"artifact bytes")
    (d / "io.json").write_text("{}")


def _doc(entry_path: Path) -> dict:
    return json.loads((entry_path / "entry.json").read_text())


def _write_doc(entry_path: Path, doc: dict) -> None:
    (entry_path / "entry.json").write_text(json.dumps(doc, indent=1, sort_keys=True))


def _rehash(entry_path: Path, doc: dict, rel: str) -> None:
    """What someone who can write the cache folder can do: make the manifest match a replaced file."""
    data = (entry_path / rel).read_bytes()
    doc["files"][rel] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


# ------------------------------------------------------------------------------------------ a real AOTI entry
EVIL_C = r"""
#include <stdio.h>
__attribute__((constructor)) static void chipswap_test_payload(void) {
  FILE *f = fopen("%s", "w");
  if (f) { fputs("native code ran\n", f); fclose(f); }
}
"""


def _tiny_target():
    import torch

    from chipswap.compile.compiler import CompileTarget

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(50, 8)
            self.out = torch.nn.Linear(8, 2)

        def forward(self, input_ids, attention_mask):
            h = self.emb(input_ids) * attention_mask.unsqueeze(-1).to(torch.float32)
            return (self.out(h.mean(1)),)

    torch.manual_seed(0)
    return CompileTarget("tiny-signing", Tiny().eval(), {"vocab_size": 50, "max_position_embeddings": 64})


@pytest.fixture(scope="module")
def aoti_cache(tmp_path_factory):
    """(compiled set file, cache dir) of one real AOTInductor bucket, compiled once for this module."""
    from chipswap.compile.compiler import compile_plan, plan_from_args, save_compiled_set

    if not (shutil.which("g++") or shutil.which("c++")):
        pytest.skip("no C++ compiler for AOTInductor")
    root = tmp_path_factory.mktemp("aoti-signing")
    report = compile_plan(
        _tiny_target(), plan_from_args([8], [1]), backend="aotinductor", cache=ArtifactCache(root / "cache"),
        progress=False,
    )
    assert report.ok, report.to_json()
    return save_compiled_set(report, root / "compiled.json"), root / "cache"


def _payload_package(tmp_path: Path, pkg: Path) -> tuple[Path, Path]:
    """(a copy of the AOTInductor package ``pkg`` whose shared object is one with a constructor, marker)."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the test's shared object")
    marker = tmp_path / "NATIVE_MARKER"
    (tmp_path / "evil.c").write_text(EVIL_C % marker)
    so = tmp_path / "evil.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(tmp_path / "evil.c")], check=True)
    swapped = tmp_path / "swapped.pt2"
    with zipfile.ZipFile(pkg) as zin, zipfile.ZipFile(swapped, "w") as z:
        names = [i.filename for i in zin.infolist()]
        sos = [n for n in names if n.endswith(".so")]
        assert sos, names  # the package really is native code
        for info in zin.infolist():
            z.writestr(info, so.read_bytes() if info.filename in sos else zin.read(info.filename))
    return swapped, marker


def _swap_in_payload(tmp_path: Path, cset: Path, cache_src: Path) -> tuple[Path, str, Path]:
    """A copy of the cache whose bucket's model.pt2 carries a shared object with a constructor, its manifest
    rewritten to match (the old tag left as it was). (cache dir, bucket key, marker path)."""
    cache = tmp_path / "cache"
    shutil.copytree(cache_src, cache, symlinks=True)
    key = json.loads(cset.read_text())["buckets"][0]["key"]
    entry = cache / "entries" / key
    swapped, marker = _payload_package(tmp_path, entry / "model.pt2")
    os.replace(swapped, entry / "model.pt2")
    doc = _doc(entry)
    _rehash(entry, doc, "model.pt2")
    _write_doc(entry, doc)
    return cache, key, marker


@pytest.mark.slow
def test_resigned_aoti_entry_is_refused_by_serve_compile_and_verify(tmp_path, capsys, aoti_cache):
    cset, cache_src = aoti_cache
    code, out, _ = run_inproc(capsys, "cache", "verify", "--cache-dir", str(cache_src))
    assert code == 0 and "0 unsigned, 0 corrupt" in out  # the honest cache is clean
    cache, key, marker = _swap_in_payload(tmp_path, cset, cache_src)

    code, _, err = run_inproc(capsys, "serve", str(cset), "--port", "0", "--cache-dir", str(cache))
    assert code == 2 and not marker.exists(), err
    last = err.strip().splitlines()[-1]
    assert last.startswith("chipswap: error: the model failed to load: cache entry " + key), err
    assert "signature does not match" in last and f"chipswap cache rm {key}" in last and "recompile" in last

    code, out, _ = run_inproc(capsys, "cache", "verify", "--cache-dir", str(cache))
    assert code == 1 and f"unsigned cache entry {key}" in out and "1 unsigned" in out
    assert not marker.exists()

    from chipswap.compile.compiler import compile_plan, plan_from_args

    # compile's cache-hit path: never loaded; the build replaces it with a signed entry of its own, says so
    # (on a copy of the tampered cache: the checks below need the planted entry)
    copy = tmp_path / "tampered-copy"
    shutil.copytree(cache, copy, symlinks=True)
    compile_plan(_tiny_target(), plan_from_args([8], [1]), backend="aotinductor",
                 cache=ArtifactCache(copy), progress=False)  # fmt: skip
    assert f"cache entry {key}" in capsys.readouterr().err
    assert not marker.exists() and ArtifactCache(copy).get(key).state == "ready"

    # someone with their own key cannot sign it either
    doc = _doc(cache / "entries" / key)
    doc["tag"] = signing.tag(os.urandom(32), doc)
    _write_doc(cache / "entries" / key, doc)
    code, out, _ = run_inproc(capsys, "cache", "verify", "--cache-dir", str(cache), "--json")
    assert code == 1 and list(json.loads(out)["unsigned"]) == [key]

    # control: signed with the real key (which only the user can read) the payload is live and runs
    doc["tag"] = signing.tag(signing.read_key(), doc)
    _write_doc(cache / "entries" / key, doc)
    load = f"from chipswap.serve.served import load_router; load_router({str(cset)!r}, " \
           f"__import__('chipswap.compile.cache').compile.cache.ArtifactCache({str(cache)!r}))"
    subprocess.run([sys.executable, "-c", load], cwd=ROOT, capture_output=True, timeout=300)
    assert marker.exists(), "the test payload is live once the tag matches"


@pytest.mark.slow
def test_a_file_swapped_between_the_check_and_the_load_is_refused(tmp_path, aoti_cache, monkeypatch):
    """The race a writer of the cache folder could win: the entry verifies, then its package is replaced
    before torch opens it. The package is loaded from a private copy hashed as it was copied."""
    from chipswap.compile.backends.aoti import WEIGHTS_FILE, AOTInductorBackend, load_weights
    from chipswap.nativeguard import NativeCodeRefused

    cset, cache_src = aoti_cache
    cache = tmp_path / "cache"
    shutil.copytree(cache_src, cache, symlinks=True)
    doc = json.loads(cset.read_text())
    entry = cache / "entries" / doc["buckets"][0]["key"]
    weights = load_weights(cache / "entries" / doc["weights_key"] / WEIGHTS_FILE)
    import torch

    art = AOTInductorBackend().load(entry, weights=weights)  # untouched: loads from its private copy, runs
    target = _tiny_target()
    inputs = target.inputs_for(1, 8)
    with torch.no_grad():
        want = target.model(**inputs)[0]
    assert float((art(inputs)[0] - want).abs().max()) < 1e-4  # the private copy is gone; the package runs
    swapped, marker = _payload_package(tmp_path, entry / "model.pt2")
    real_get = ArtifactCache.get

    def get_then_swap(self, key):
        e = real_get(self, key)
        os.replace(swapped, entry / "model.pt2")  # after the check, before the load
        return e

    monkeypatch.setattr(ArtifactCache, "get", get_then_swap)
    with pytest.raises(NativeCodeRefused, match="changed while it was being loaded"):
        AOTInductorBackend().load(entry, weights=weights)
    assert not marker.exists()


# ------------------------------------------------------------------------------------------- any tampering
@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(created=d["created"] + 1),
        lambda d: d.update(host="elsewhere"),
        lambda d: d.update(model="other-model"),
        lambda d: d["parts"].update(backend="aotinductor"),
        lambda d: d.update(state="failed", error="planted"),
        lambda d: d.update(extra_field=1),
        lambda d: d["files"]["io.json"].update(sha256="0" * 64),
        lambda d: d.pop("tag"),  # an entry written before entries were signed
        lambda d: d.update(tag=("0" if d["tag"][0] != "0" else "1") + d["tag"][1:]),
        lambda d: d.update(tag=123),
        lambda d: d.update(tag=d["tag"][:32]),
    ],
    ids=["created", "host", "model", "parts", "state", "extra", "digest", "no-tag", "tag-flip", "tag-int",
         "tag-short"],
)
def test_any_edit_of_the_manifest_or_its_tag_is_refused(tmp_path, capsys, edit):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _build, meta={"model": "m"})
    assert c.get(e.key).state == "ready"  # untouched: loads
    doc = _doc(e.path)
    edit(doc)
    _write_doc(e.path, doc)
    msg = one_line_error("is refused", c.get, e.key)
    assert e.key in msg and f"chipswap cache rm {e.key}" in msg and "recompile" in msg
    assert c.quick_state(c.read(e.key), [2**30]) == "unsigned"
    code, out, _ = run_inproc(capsys, "cache", "verify", "--cache-dir", str(c.root))
    assert code == 1 and e.key in out and "1 unsigned" in out
    code, _, _ = run_inproc(capsys, "cache", "rm", e.key, "--cache-dir", str(c.root))
    assert code == 0
    e2, built = c.get_or_build(_parts(), _build)  # the fix the message names: rm, then recompile
    assert built and c.get(e2.key).state == "ready"
    _write_doc(e2.path, doc)  # unsigned again: a build replaces it with a signed entry (never loads it)
    e3, built = c.get_or_build(_parts(), _build)
    assert built and c.get(e3.key).state == "ready" and "no valid signature" in capsys.readouterr().err


def test_a_changed_file_under_a_valid_tag_is_corrupt_and_never_loaded(tmp_path, capsys):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _build)
    (e.path / "model.bin").write_bytes(b"artifact bytez")  # same size, manifest untouched
    code, out, _ = run_inproc(capsys, "cache", "verify", "--cache-dir", str(c.root))
    assert code == 1 and f"corrupt {e.key}: model.bin: checksum mismatch" in out
    assert c.get(e.key) is None  # discarded, rebuilt on the next compile


def test_a_forged_ls_stamp_does_not_make_a_changed_entry_ready(tmp_path):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _build)
    (e.path / "model.bin").write_bytes(b"artifact bytez")
    stamp = c.verified / f"{e.key}.json"
    forged = json.loads(stamp.read_text())
    st = os.lstat(e.path / "model.bin")  # the fingerprint anyone can read off the changed file
    forged["files"]["model.bin"] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
    stamp.write_text(json.dumps(forged, sort_keys=True))
    assert c.quick_state(c.read(e.key), [0]) == "unverified"
    assert c.quick_state(c.read(e.key), [2**20]) == "corrupt"


def test_a_cache_checked_with_another_key_is_refused(tmp_path):
    c = ArtifactCache(tmp_path / "c", key_path=tmp_path / "a" / "cache.key")
    e, _ = c.get_or_build(_parts(), _build)
    other = ArtifactCache(tmp_path / "c", key_path=tmp_path / "b" / "cache.key")
    signing.load_or_create_key(other.key_path)
    assert "another key signed it" in one_line_error("is refused", other.get, e.key)
    assert c.get(e.key).state == "ready"


# ------------------------------------------------------------------------------------------------- the key
def test_missing_key_is_one_clear_line_for_verify_and_load(tmp_path, capsys, monkeypatch):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _build)
    gone = tmp_path / "nowhere" / "cache.key"
    monkeypatch.setenv(signing.KEY_ENV, str(gone))
    code, out, err = run_inproc(capsys, "cache", "verify", "--cache-dir", str(c.root))
    assert code == 2 and err.count("\n") == 1 and not out, err
    assert f"no cache key at {gone}" in err and signing.KEY_ENV in err
    assert "no cache key" in one_line_error(None, ArtifactCache(c.root).get, e.key)
    assert not gone.exists()  # a read never creates a key
    code, out, _ = run_inproc(capsys, "cache", "ls", "--cache-dir", str(c.root), "--json")
    assert code == 0 and [r["state"] for r in json.loads(out)["entries"]] == ["unsigned"]
    code, out, _ = run_inproc(capsys, "cache", "verify", "--cache-dir", str(tmp_path / "empty"))
    assert code == 0 and "checked 0 entries" in out  # nothing to check: no key needed


def test_key_is_created_owner_only_outside_the_cache(tmp_path):
    path = tmp_path / "cfg" / "chipswap" / "cache.key"
    key = signing.load_or_create_key(path)
    assert len(key) == 32 and signing.read_key(path) == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert sorted(os.listdir(path.parent)) == ["cache.key"]  # no temp file left
    inside = ArtifactCache(tmp_path / "c", key_path=tmp_path / "c" / "cache.key")
    assert "inside the cache folder" in one_line_error(None, inside.get_or_build, _parts(), _build)


@pytest.mark.parametrize("damage", ["group-readable", "symlink", "garbage", "folder-writable"])
def test_an_unsafe_or_damaged_key_file_is_refused(tmp_path, damage):
    path = tmp_path / "k" / "cache.key"
    signing.load_or_create_key(path)
    if damage == "group-readable":
        path.chmod(0o640)
    elif damage == "symlink":
        real = tmp_path / "k" / "real.key"
        path.rename(real)
        path.symlink_to(real)
    elif damage == "garbage":
        path.write_text("not a key\n")
    else:
        path.parent.chmod(0o777)
    msg = one_line_error(None, signing.read_key, path)
    assert str(path) in msg
    words = {"group-readable": "readable by others", "symlink": "symbolic link", "garbage": "64 hex digits",
             "folder-writable": "folder another user owns or can write"}
    assert words[damage] in msg


_CREATE = """
import sys, time
from pathlib import Path
from chipswap.compile import signing
go, give_up = Path(sys.argv[2]), time.monotonic() + 60
while not go.exists() and time.monotonic() < give_up:  # a start line: every process races at once
    time.sleep(0.001)
print(signing.load_or_create_key(Path(sys.argv[1])).hex())
"""


def test_parallel_processes_creating_the_key_end_with_one_key(tmp_path):
    """Separate processes (not fork: a forked child of a process running JAX's threads can deadlock)."""
    for round_ in range(4):
        path = tmp_path / f"r{round_}" / "cache.key"
        go = tmp_path / f"go{round_}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _CREATE, str(path), str(go)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        time.sleep(0.5)  # let them import and reach the start line
        go.touch()
        keys = [p.communicate(timeout=60)[0].strip() for p in procs]
        assert all(p.returncode == 0 for p in procs)
        assert len(set(keys)) == 1 and keys[0] == signing.read_key(path).hex()
        assert os.listdir(path.parent) == ["cache.key"]


def test_prune_removes_unsigned_entries(tmp_path, capsys):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _build)
    keep, _ = c.get_or_build(_parts("aotinductor"), _build)
    doc = _doc(e.path)
    doc.pop("tag")
    _write_doc(e.path, doc)
    code, out, _ = run_inproc(capsys, "cache", "prune", "--cache-dir", str(c.root), "--json")
    assert code == 0 and [r["key"] for r in json.loads(out)["removed"]] == [e.key]
    assert c.read(e.key) is None and c.get(keep.key).state == "ready"
