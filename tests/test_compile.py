"""chipswap compile: plan parsing, model/plan checks, per-bucket compile + check, bad input -> exit 2, nothing
half-written."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest

import chipswap.compile.cache as cachemod
from chipswap.compile.cache import ArtifactCache
from chipswap.compile.compiler import (
    BucketPlan,
    check_model_against_plan,
    compile_plan,
    load_plan,
    parse_plan,
    target_from_spec,
)
from chipswap.errors import ChipswapError
from tests.cli_helpers import one_line_error, run_inproc

ROOT = Path(__file__).resolve().parents[1]
CHIPSWAP = [sys.executable, "-m", "chipswap"]


def _plan(**over):
    d = {
        "schema": "chipswap.shapeplan/1",
        "mode": "encoder",
        "sequence_buckets": [32, 16],
        "decode_buckets": [],
        "batch_buckets": [1, 2],
        "max_length": 32,
        "overflow_policy": "reject",
        "histogram": {"lengths": [3, 9], "counts": [1, 2]},
    }
    d.update(over)
    return {k: v for k, v in d.items() if v is not None}


def test_parse_plan_reads_buckets_and_keeps_extras():
    p = parse_plan(_plan())
    assert p.sequence_buckets == (16, 32) and p.batch_buckets == (1, 2) and p.max_length == 32
    assert p.shapes == [(1, 16), (2, 16), (1, 32), (2, 32)]
    assert p.extra["mode"] == "encoder"


@pytest.mark.parametrize(
    "over, msg",
    [
        ({"sequence_buckets": None}, "has no 'sequence_buckets'"),
        ({"batch_buckets": None}, "has no 'batch_buckets'"),
        ({"sequence_buckets": []}, "must be a non-empty list"),
        ({"sequence_buckets": [16, "32"]}, "holds '32', not a positive integer"),
        ({"batch_buckets": [0]}, "holds 0"),
        ({"max_length": -1}, "'max_length' is -1"),
        ({"schema": "chipswap.shapeplan/9"}, "expected 'chipswap.shapeplan/1'"),
    ],
)
def test_bad_plans(over, msg):
    one_line_error(msg, parse_plan, _plan(**over), "p.json")


def test_plan_file_not_json(tmp_path):
    f = tmp_path / "p.json"
    f.write_text("{oops")
    one_line_error("is not JSON", load_plan, f)
    one_line_error("cannot read plan file", load_plan, tmp_path / "missing.json")


def test_model_plan_mismatch():
    plan = BucketPlan((128, 1024), (1,), 1024)
    with pytest.raises(ChipswapError, match="1024 is longer than m's max_position_embeddings 512"):
        check_model_against_plan({"max_position_embeddings": 512, "vocab_size": 100}, plan, "m")
    plan2 = BucketPlan((128,), (1,), 128, {"vocab_size": 30522})
    with pytest.raises(ChipswapError, match="vocab_size 30522 but m has vocab_size 1000"):
        check_model_against_plan({"max_position_embeddings": 512, "vocab_size": 1000}, plan2, "m")
    with pytest.raises(ChipswapError, match="pad_token_id 1000 is outside its vocabulary"):
        check_model_against_plan({"vocab_size": 1000, "pad_token_id": 1000}, BucketPlan((8,), (1,), 8), "m")
    check_model_against_plan({"max_position_embeddings": 1024, "vocab_size": 1000}, plan)  # fits


@pytest.mark.slow
def test_compile_plan_checks_every_bucket_and_reuses_the_cache(tmp_path, monkeypatch):
    target = target_from_spec("tiny-distilbert")
    cache = ArtifactCache(tmp_path / "c")
    plan = parse_plan(_plan())
    flags = {"exporter": "legacy"}
    r1 = compile_plan(target, plan, cache=cache, flags=flags, progress=False)
    assert [(b.batch, b.seq) for b in r1.buckets] == plan.shapes
    assert all(not b.cached for b in r1.buckets) and r1.ok
    assert max(b.max_abs_diff for b in r1.buckets) < 1e-4
    assert len({b.key for b in r1.buckets}) == 4
    r2 = compile_plan(target_from_spec("tiny-distilbert"), plan, cache=cache, flags=flags, progress=False)
    assert all(b.cached for b in r2.buckets) and [b.key for b in r2.buckets] == [b.key for b in r1.buckets]
    # the threshold is enforced: an artifact that is off by 0.01 fails the default --atol 1e-3
    import chipswap.compile.backends as backends_mod

    real_get = backends_mod.get_backend

    class Skewed:
        def __init__(self, be):
            self.be = be

        def __getattr__(self, name):
            return getattr(self.be, name)

        def load(self, d, weights=None):
            art = self.be.load(d, weights=weights)
            inner = art.run
            art.run = lambda feed: tuple(t + 0.01 for t in inner(feed))
            return art

    monkeypatch.setattr(backends_mod, "get_backend", lambda name: Skewed(real_get(name)))
    r3 = compile_plan(target, plan, cache=cache, flags=flags, progress=False)
    assert not r3.ok and all(not b.ok for b in r3.buckets)
    assert all(abs(b.max_abs_diff - 0.01) < 1e-3 for b in r3.buckets)
    cset = r1.compiled_set
    assert cset["pad_token_id"] == 0 and cset["input_names"] == ["input_ids", "attention_mask"]


def _run(args, **kw):
    return subprocess.run(CHIPSWAP + args, capture_output=True, text=True, cwd=ROOT, timeout=300, **kw)


def _one_line_error(r):
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chipswap: error:"), r.stderr
    return lines[0]


def _nothing_written(cache_dir: Path):
    if not cache_dir.exists():
        return
    for sub in ("entries", "tmp", "trash"):
        d = cache_dir / sub
        assert not d.exists() or list(d.iterdir()) == [], f"{sub} not empty"


@pytest.mark.slow
def test_cli_bad_inputs_exit_2_and_write_nothing(tmp_path):
    cache = tmp_path / "cache"
    no_buckets = tmp_path / "plan.json"
    no_buckets.write_text(json.dumps(_plan(sequence_buckets=None)))
    too_long = tmp_path / "long.json"
    too_long.write_text(json.dumps(_plan(sequence_buckets=[128, 1024], max_length=1024)))
    wrong_vocab = tmp_path / "vocab.json"
    wrong_vocab.write_text(json.dumps(_plan(vocab_size=30522)))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cases = [
        (["--plan", str(no_buckets)], "has no 'sequence_buckets'"),
        (["--plan", str(too_long)], "1024 is longer than tiny-distilbert's max_position_embeddings 512"),
        (["--plan", str(wrong_vocab)], "vocab_size 30522 but tiny-distilbert has vocab_size 1000"),
        ([], "no buckets given"),
        (["--seq-len", "1024"], "--seq-len 1024 is longer than the model's max_position_embeddings 512"),
        (["--seq-len", "16,x"], "--seq-len must be comma-separated integers"),
        (["--seq-len", "16", "--backend", "neuron"], "needs the AWS Neuron SDK"),
        (["--seq-len", "16", "--backend", "tensorrt"], "unknown backend"),
    ]
    for args, msg in cases:
        r = _run(["compile", "tiny-distilbert", *args, "--cache-dir", str(cache)])
        assert msg in _one_line_error(r), (args, r.stderr)
        assert not cache.exists(), "a rejected compile must not even create the cache dir"
    r = _run(["compile", "tiny-distilbert", "--seq-len", "16", "--cache-dir", str(blocker / "c")])
    assert "cache dir is not writable" in _one_line_error(r)


@pytest.mark.slow
def test_cli_full_disk_during_publish(tmp_path, monkeypatch, capsys):
    from chipswap.cli.main import main as cli_main

    class _Code:
        def __init__(self, code):
            self.code = code

    class _Info:
        value: _Code

    class _Run:
        """pytest.raises(SystemExit) look-alike that also accepts a command returning normally (exit 0)."""

        def __enter__(self):
            self.info = _Info()
            return self.info

        def __exit__(self, et, ev, tb):
            self.info.value = _Code(ev.code if et is SystemExit else 0)
            return et is SystemExit

    def main(argv):
        cli_main(argv)

    cache = tmp_path / "cache"

    def enospc(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cachemod, "_write_file", enospc)
    with _Run() as ei:
        main(["compile", "tiny-distilbert", "--seq-len", "16", "--cache-dir", str(cache), "--json"])
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device; free disk space" in err[0]
    _nothing_written(cache)
    monkeypatch.undo()
    out = tmp_path / "set.json"
    with _Run() as ei:
        main(
            [
                "compile",
                "tiny-distilbert",
                "--seq-len",
                "16",
                "--cache-dir",
                str(cache),
                "--json",
                "--out",
                str(out),
            ]
        )
    assert ei.value.code == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] and rep["buckets"][0]["seq_len"] == 16 and rep["buckets"][0]["max_abs_diff"] < 1e-4
    assert json.loads(out.read_text())["buckets"][0]["key"] == rep["buckets"][0]["key"]
    # cache commands see it
    with _Run() as ei:
        main(["cache", "ls", "--cache-dir", str(cache), "--json"])
    ls = json.loads(capsys.readouterr().out)
    assert [e["key"] for e in ls["entries"]] == [rep["buckets"][0]["key"]]
    assert ls["entries"][0]["state"] == "ready" and ls["entries"][0]["shape"] == "1x16"
    with _Run() as ei:
        main(["cache", "verify", "--cache-dir", str(cache)])
    assert ei.value.code == 0
    capsys.readouterr()
    key = rep["buckets"][0]["key"]
    onnx = cache / "entries" / key / "model.onnx"
    data = bytearray(onnx.read_bytes())
    data[len(data) // 2] ^= 0xFF
    onnx.write_bytes(bytes(data))
    with _Run() as ei:
        main(["cache", "verify", "--cache-dir", str(cache)])
    assert ei.value.code == 1 and f"corrupt {key[:12]}" in capsys.readouterr().out
    with _Run() as ei:
        main(["cache", "rm", key[:10], "--cache-dir", str(cache)])
    assert ei.value.code == 0 and not (cache / "entries" / key).exists()


def test_failed_compile_is_recorded_with_log_and_not_retried(tmp_path):
    import torch

    from chipswap.compile.cache import CompileFailed
    from chipswap.compile.compiler import CompileTarget

    class Unexportable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(50, 4)
            self.attempts = 0

        def forward(self, input_ids, attention_mask):
            if torch.jit.is_tracing():
                self.attempts += 1
                raise RuntimeError("unsupported op aten::weird")
            return ((self.emb(input_ids) * attention_mask[..., None]).sum(1),)

    m = Unexportable().eval()
    target = CompileTarget("unexportable", m, {"vocab_size": 50, "pad_token_id": 0})
    cache = ArtifactCache(tmp_path / "c")
    plan = BucketPlan((8,), (1,), 8)
    with pytest.raises(CompileFailed, match="unsupported op aten::weird") as ei:
        compile_plan(target, plan, cache=cache, flags={"exporter": "legacy"}, progress=False)
    assert "\n" not in str(ei.value) and m.attempts == 1
    [entry] = cache.list()
    assert entry.state == "failed" and "aten::weird" in entry.log_path.read_text()
    with pytest.raises(CompileFailed, match="failed to compile before"):
        compile_plan(target, plan, cache=cache, flags={"exporter": "legacy"}, progress=False)
    assert m.attempts == 1  # not retried
    with pytest.raises(CompileFailed):
        compile_plan(
            target, plan, cache=cache, flags={"exporter": "legacy"}, progress=False, retry_failed=True
        )
    assert m.attempts == 2



def test_out_path_is_checked_before_any_compile(tmp_path, capsys, monkeypatch):
    import chipswap.compile.compiler as comp

    def boom(*a, **k):
        raise AssertionError("compile_plan must not run when --out is bad")

    monkeypatch.setattr(comp, "compile_plan", boom)
    cache = tmp_path / "cache"
    for out, msg in (
        (tmp_path, "is a directory"),
        (tmp_path / "missing" / "set.json", "does not exist"),
    ):
        code, _, err = run_inproc(
            capsys, "compile", "tiny-distilbert", "--seq-len", "16", "--cache-dir", str(cache), "--out",
            str(out),
        )
        assert code == 2 and err.startswith("chipswap: error: --out") and err.count("\n") == 1, err
        assert msg in err
    assert not cache.exists()


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["--seq-len", "0"], "e.g. --seq-len 128,256"),
        (["--seq-len", "16", "--batch-sizes", "0"], "e.g. --batch-sizes 1,4"),
    ],
)
def test_flag_examples_are_valid(argv, msg, capsys):
    code, _, err = run_inproc(capsys, "compile", "tiny-distilbert", *argv)
    assert code == 2 and msg in err and err.count("\n") == 1


def test_seq_len_longer_than_model_names_the_flag():
    plan = BucketPlan((128, 1024), (1,), 1024)
    with pytest.raises(ChipswapError) as e:
        check_model_against_plan({"max_position_embeddings": 512}, plan, "m", seq_flag=True)
    msg = str(e.value)
    assert msg.startswith("--seq-len 1024 is longer than the model's max_position_embeddings 512")
    assert "plan" not in msg


def test_llm_plan_decode_buckets_get_a_note(tmp_path, capsys, monkeypatch):
    import chipswap.compile.compiler as comp

    def stop(*a, **k):
        raise ChipswapError("stopped before compiling")

    monkeypatch.setattr(comp, "compile_plan", stop)
    p = tmp_path / "llm.json"
    p.write_text(json.dumps(_plan(mode="llm", decode_buckets=[64, 256])))
    args = ("--plan", str(p), "--cache-dir", str(tmp_path / "c"))
    code, _, err = run_inproc(capsys, "compile", "tiny-distilbert", *args)
    notes = [ln for ln in err.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and "decode_buckets [64, 256]" in notes[0] and "not the decode buckets" in notes[0]
