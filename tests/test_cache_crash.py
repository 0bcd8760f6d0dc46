"""Crash safety and one-compile-per-key, with real processes and real (tiny) ONNX exports.

A zygote process imports torch/onnx once and forks workers on request, so each worker starts in milliseconds
and the test can afford many SIGKILLs. Workers compile tiny MLPs through ArtifactCache.get_or_build, then load
every entry they get and compare it with eager PyTorch, recording the result in a file.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chipswap.compile.cache import ArtifactCache

pytestmark = pytest.mark.slow

ZYGOTE = r"""
import json, os, sys, time, traceback
import torch, onnx, onnxruntime  # preloaded once; workers are forked from here
from chipswap.compile.cache import ArtifactCache
from chipswap.compile.keys import KeyParts
from chipswap.compile.backends.ort import OnnxRuntimeBackend

class MLP(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.a = torch.nn.Parameter(torch.randn(16, 64, generator=g))
        self.b = torch.nn.Parameter(torch.randn(64, 8, generator=g))
    def forward(self, x):
        return (torch.relu(x @ self.a) @ self.b,)

def job(cmd):
    torch.set_num_threads(1)
    cache = ArtifactCache(cmd["cache"])
    be = OnnxRuntimeBackend()
    flags = {"exporter": "legacy"}
    x = torch.linspace(-1, 1, 2 * 16).reshape(2, 16)
    for seed in cmd["seeds"]:
        m = MLP(seed).eval()
        parts = KeyParts.make(graph="tiny-mlp", weights=f"seed-{seed}", inputs={"x": x},
                              backend="onnxruntime",
                              backend_version="test", flags=flags)
        def build(d, m=m, seed=seed):
            with open(cmd["counter"], "a") as fh:
                fh.write(f"{seed} {os.getpid()}\n")
            time.sleep(cmd.get("sleep", 0))
            be.compile(m, {"x": x}, d, flags=flags)
        entry, built = cache.get_or_build(parts, build)
        got = be.load(entry.path)({"x": x})[0]
        with torch.no_grad():
            ref = m(x)[0]
        diff = float((got - ref).abs().max())
        with open(cmd["out"], "a") as fh:
            fh.write(json.dumps({"seed": seed, "built": built, "diff": diff, "pid": os.getpid()}) + "\n")

print("ready", flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "fork":
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                job(cmd)
            except BaseException:
                traceback.print_exc()
                code = 1
            os._exit(code)
        print(pid, flush=True)
    elif cmd["op"] == "wait":
        _, status = os.waitpid(cmd["pid"], 0)
        print(status, flush=True)
    else:
        break
"""


class Zygote:
    def __init__(self) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert self.p.stdout.readline().strip() == "ready"

    def _ask(self, cmd: dict) -> str:
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def fork(self, **cmd) -> int:
        return int(self._ask({"op": "fork", **cmd}))

    def wait(self, pid: int) -> int:
        """Raw waitpid status (0 = clean exit, SIGKILL = killed)."""
        return int(self._ask({"op": "wait", "pid": pid}))

    def close(self) -> None:
        try:
            self.p.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            pass
        self.p.wait(timeout=30)


@pytest.fixture
def zygote():
    z = Zygote()
    yield z
    z.close()


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _check_store(c: ArtifactCache) -> int:
    """Every folder in entries/ is a complete, checksum-valid entry: publish is all or nothing."""
    n = 0
    for d in c.entries.iterdir():
        e = c.read(d.name)
        assert e is not None and e.state == "ready", f"half entry {d.name}: {e and e.state}"
        assert c.verify_entry(e) == [], f"corrupt entry published: {d.name}"
        n += 1
    return n


def test_sigkill_at_random_points_never_loads_a_corrupt_entry(zygote, tmp_path):
    rng = random.Random(1234)
    cache_dir, counter, out = tmp_path / "cache", tmp_path / "compiles.txt", tmp_path / "loads.jsonl"
    c = ArtifactCache(cache_dir)
    # how long one uninterrupted worker takes for 6 fresh keys: kills are drawn uniformly over that window
    t0 = time.monotonic()
    pid = zygote.fork(cache=str(cache_dir), seeds=list(range(1000, 1006)), counter=str(counter), out=str(out))
    assert zygote.wait(pid) == 0
    window = time.monotonic() - t0
    kills, finished, round_no, used = 0, 0, 0, set(range(1000, 1006))
    while kills < 60:
        seeds = [round_no * 3 + j for j in range(6)]  # half new keys, half keys an earlier (killed) round had
        used.update(seeds)
        pid = zygote.fork(cache=str(cache_dir), seeds=seeds, counter=str(counter), out=str(out))
        time.sleep(rng.uniform(0, window))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        status = zygote.wait(pid)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            kills += 1
        else:
            assert status == 0, f"worker failed with status {status}"
            finished += 1
        _check_store(c)
        assert all(r["diff"] < 1e-4 for r in _records(out)), "a worker loaded a wrong artifact"
        assert not any(e.state == "locked" for e in c.list()), "a dead worker left a lock held"
        round_no += 1
    staging_left = len(list(c.tmp.iterdir()))
    # a fresh worker loads every key ever touched: all must load and match eager PyTorch (killed ones rebuilt)
    out2 = tmp_path / "final.jsonl"
    pid = zygote.fork(cache=str(cache_dir), seeds=sorted(used), counter=str(counter), out=str(out2))
    assert zygote.wait(pid) == 0
    final = _records(out2)
    assert sorted(r["seed"] for r in final) == sorted(used)
    assert max(r["diff"] for r in final) < 1e-4
    assert _check_store(c) == len(used)
    c.prune()
    assert list(c.tmp.iterdir()) == [] and list(c.trash.iterdir()) == []
    compiles = len(counter.read_text().splitlines())
    print(
        f"\nSIGKILLs: {kills}, workers that finished first: {finished}, staging folders left by kills: "
        f"{staging_left}, keys: {len(used)}, compiles: {compiles}, loads checked: "
        f"{len(_records(out)) + len(final)}, max abs diff {max(r['diff'] for r in final):.2e}"
    )
    assert kills >= 50


def test_eight_processes_one_key_one_compile(zygote, tmp_path):
    cache_dir, counter, out = tmp_path / "cache", tmp_path / "compiles.txt", tmp_path / "loads.jsonl"
    pids = [
        zygote.fork(cache=str(cache_dir), seeds=[42], counter=str(counter), out=str(out), sleep=1.0)
        for _ in range(8)
    ]
    assert len(set(pids)) == 8
    assert [zygote.wait(p) for p in pids] == [0] * 8
    compiles = counter.read_text().splitlines()
    recs = _records(out)
    assert len(compiles) == 1, f"expected exactly one compile, got {compiles}"
    assert len(recs) == 8 and sum(r["built"] for r in recs) == 1
    assert len({r["pid"] for r in recs}) == 8
    assert max(r["diff"] for r in recs) < 1e-4
    print(f"\n8 processes, compiles: {len(compiles)}, loads: {len(recs)}")
