"""Artifact cache: keys, entry states, atomic publish, corruption handling, bad cache dirs, full disk."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

import chipswap.compile.cache as cachemod
from chipswap.compile.cache import ArtifactCache, CompileFailed
from chipswap.compile.keys import KeyParts, graph_digest, weights_digest
from chipswap.errors import ChipswapError
from tests.cli_helpers import run_inproc


def _parts(**over):
    base = dict(
        graph="g" * 64,
        weights="w" * 64,
        inputs=[("input_ids", (1, 128), "int64")],
        backend="onnxruntime",
        backend_version="ort-1",
        flags={"opset": "18"},
    )
    base.update(over)
    return KeyParts.make(**base)


def _write(content: bytes = b"artifact"):
    def build(d: Path) -> None:
        (d / "model.bin").write_bytes(content)
        (d / "sub").mkdir()
        (d / "sub" / "x.txt").write_text("x")

    return build


def _leftovers(c: ArtifactCache) -> list[str]:
    return sorted(p.name for folder in (c.tmp, c.trash) if folder.exists() for p in folder.iterdir())


def test_key_changes_with_every_part_and_is_stable():
    k = _parts().key
    assert k == _parts().key and len(k) == 32
    changed = [
        _parts(graph="h" * 64),
        _parts(weights="v" * 64),
        _parts(inputs=[("input_ids", (1, 129), "int64")]),
        _parts(inputs=[("input_ids", (1, 128), "int32")]),
        _parts(backend="aotinductor"),
        _parts(backend_version="ort-2"),
        _parts(flags={"opset": "17"}),
    ]
    keys = {p.key for p in changed}
    assert k not in keys and len(keys) == len(changed)
    other_version = KeyParts(**{**_parts().__dict__, "chipswap": "9.9.9"})
    assert other_version.key != k
    # no absolute paths anywhere in what is hashed
    assert "/" not in json.dumps(_parts().to_json()).replace("w" * 64, "")


def _mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()


def test_model_digests(tmp_path, monkeypatch):
    a, b, c = _mlp(0), _mlp(0), _mlp(1)
    assert graph_digest(a) == graph_digest(b) == graph_digest(c)
    assert weights_digest(a) == weights_digest(b) != weights_digest(c)
    wider = torch.nn.Sequential(torch.nn.Linear(4, 9), torch.nn.ReLU(), torch.nn.Linear(9, 2))
    assert graph_digest(wider) != graph_digest(a)
    monkeypatch.chdir(tmp_path)  # a different working directory changes nothing
    assert graph_digest(_mlp(0)) == graph_digest(a)


def test_build_once_then_hit(tmp_path):
    c = ArtifactCache(tmp_path / "c")
    calls = []

    def build(d):
        calls.append(d)
        _write()(d)

    e1, built1 = c.get_or_build(_parts(), build, meta={"model": "m"})
    e2, built2 = c.get_or_build(_parts(), build)
    assert (built1, built2) == (True, False) and len(calls) == 1
    assert e1.path == e2.path == c.entry_dir(_parts().key)
    assert e2.state == "ready" and set(e2.files) == {"model.bin", "sub/x.txt"}
    assert e2.meta["parts"]["backend"] == "onnxruntime" and e2.meta["model"] == "m"
    assert c.verify_entry(e2) == [] and _leftovers(c) == []


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "entry_json"])
def test_corrupt_entry_is_discarded_and_rebuilt(tmp_path, damage):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _write(b"good bytes"))
    f = e.path / "model.bin"
    if damage == "flip":
        f.write_bytes(b"evil bytes")  # same size, different content
    elif damage == "truncate":
        f.write_bytes(b"good")
    elif damage == "delete":
        f.unlink()
    else:
        (e.path / "entry.json").write_text("{not json")
    assert c.get(e.key) is None  # never handed out; discarded
    assert not e.path.exists()
    calls = []
    e2, built = c.get_or_build(_parts(), lambda d: (calls.append(1), _write(b"good bytes")(d)))
    assert built and calls == [1] and (e2.path / "model.bin").read_bytes() == b"good bytes"


def test_failed_entry_keeps_log_and_is_not_retried(tmp_path):
    c = ArtifactCache(tmp_path / "c")
    calls = []

    def bad(d):
        calls.append(1)
        (d / "partial.onnx").write_bytes(b"half")
        raise RuntimeError("unsupported op aten::weird")

    with pytest.raises(CompileFailed, match="unsupported op aten::weird") as ei:
        c.get_or_build(_parts(), bad)
    assert "\n" not in str(ei.value)
    e = c.read(_parts().key)
    assert e is not None and e.state == "failed"
    assert "unsupported op aten::weird" in e.log_path.read_text()
    assert not (e.path / "partial.onnx").exists()  # no half artifact kept
    with pytest.raises(CompileFailed, match="failed to compile before.*--retry-failed"):
        c.get_or_build(_parts(), bad)
    assert calls == [1]  # not retried
    e2, built = c.get_or_build(_parts(), _write(), retry_failed=True)
    assert built and e2.state == "ready" and not e2.log_path.exists()


def test_unwritable_cache_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    c = ArtifactCache(blocker / "cache")
    with pytest.raises(ChipswapError, match="cache dir is not writable.*--cache-dir") as ei:
        c.get_or_build(_parts(), _write())
    assert "\n" not in str(ei.value)


def test_full_disk_during_publish_leaves_nothing(tmp_path, monkeypatch):
    c = ArtifactCache(tmp_path / "c")

    def enospc(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cachemod, "_write_file", enospc)
    with pytest.raises(ChipswapError, match="No space left on device; free disk space") as ei:
        c.get_or_build(_parts(), _write())
    assert "\n" not in str(ei.value)
    assert list(c.entries.iterdir()) == [] and _leftovers(c) == []
    monkeypatch.undo()
    e, built = c.get_or_build(_parts(), _write())  # works once space is back
    assert built and c.verify_entry(e) == []


def test_full_disk_while_compiling_is_not_a_failed_compile(tmp_path):
    c = ArtifactCache(tmp_path / "c")

    def build(d):
        (d / "big").write_bytes(b"x")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ChipswapError, match="No space left"):
        c.get_or_build(_parts(), build)
    assert c.read(_parts().key) is None and _leftovers(c) == []


def test_full_disk_when_replacing_a_corrupt_entry_keeps_no_half_entry(tmp_path, monkeypatch):
    c = ArtifactCache(tmp_path / "c")
    e, _ = c.get_or_build(_parts(), _write(b"good bytes"))
    (e.path / "model.bin").write_bytes(b"evil bytes")
    real_rename = os.rename

    def failing_rename(src, dst):
        if Path(dst).parent == c.entries:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_rename(src, dst)

    monkeypatch.setattr(cachemod.os, "rename", failing_rename)
    with pytest.raises(ChipswapError, match="No space left"):
        c.get_or_build(_parts(), _write(b"good bytes"))
    monkeypatch.undo()
    assert c.get(e.key) is None and _leftovers(c) == []


def test_ls_prune_rm(tmp_path):
    c = ArtifactCache(tmp_path / "c")
    good, _ = c.get_or_build(_parts(), _write())
    with pytest.raises(CompileFailed):
        c.get_or_build(_parts(backend="neuron"), lambda d: 1 / 0)
    bad, _ = c.get_or_build(_parts(backend="aotinductor"), _write(b"abc"))
    (bad.path / "model.bin").write_bytes(b"abd")
    (c.tmp / f"{'f' * 32}.999999.dead").mkdir()  # leftover of a killed writer
    states = {e.key: e.state for e in c.list()}
    assert states[good.key] == "ready" and states[_parts(backend="neuron").key] == "failed"
    removed = dict(c.prune(dry_run=True))
    assert removed == {_parts(backend="neuron").key: "failed", bad.key: "corrupt"}
    assert len(c.list()) == 3
    c.prune()
    assert [e.key for e in c.list()] == [good.key] and _leftovers(c) == []
    assert c.remove(good.key[:8]) == good.key
    assert c.list() == []
    with pytest.raises(ChipswapError, match="no cache entry"):
        c.remove("abcdef12")


def test_locked_state_and_lock_holder(tmp_path):
    c = ArtifactCache(tmp_path / "c")
    key = _parts().key
    with c.lock(key):
        assert c.is_locked(key)
        assert [(e.key, e.state) for e in c.list()] == [(key, "locked")]
        assert c.lock_holder(key)["pid"] == os.getpid()
        with pytest.raises(ChipswapError, match="another process is compiling"):
            # flock is per open file: a second open in the same process conflicts like another process
            with c.lock(key, timeout=0.2):
                pass
    assert not c.is_locked(key) and c.list() == []


def test_default_dir_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPSWAP_CACHE_DIR", str(tmp_path / "env"))
    assert ArtifactCache().root == tmp_path / "env"
    monkeypatch.delenv("CHIPSWAP_CACHE_DIR")
    assert ArtifactCache().root.name == "artifacts" and "chipswap" in str(ArtifactCache().root)



@pytest.mark.parametrize(
    "flag,value",
    [
        ("--older-than", "-1"),
        ("--older-than", "nan"),
        ("--older-than", "inf"),
        ("--max-size", "-1"),
        ("--max-size", "nan"),
        ("--max-size", "inf"),
        ("--max-size", "1e300"),
    ],
)
def test_prune_rejects_bad_limits_and_removes_nothing(tmp_path, capsys, flag, value):
    c = ArtifactCache(tmp_path / "c")
    good, _ = c.get_or_build(_parts(), _write())
    code, out, err = run_inproc(capsys, "cache", "prune", "--cache-dir", str(c.root), flag, value)
    assert code == 2 and out == ""
    assert err.startswith("chipswap: error: ") and err.count("\n") == 1 and flag in err
    assert [e.key for e in c.list()] == [good.key]
    with pytest.raises(ChipswapError, match="finite number"):
        c.prune(older_than_s=float("nan"))
    with pytest.raises(ChipswapError, match="finite number"):
        c.prune(max_bytes=-1)
    assert [e.key for e in c.list()] == [good.key]


def test_rm_json(tmp_path, capsys):
    c = ArtifactCache(tmp_path / "c")
    good, _ = c.get_or_build(_parts(), _write())
    code, out, _ = run_inproc(capsys, "cache", "rm", good.key[:10], "--cache-dir", str(c.root), "--json")
    assert code == 0
    assert json.loads(out)["removed"] == good.key and c.list() == []
