"""Numbers from plans, compiled sets and compile flags are strict (a bool or a string is not a number) and
bounded before anything is allocated: a 1 KB plan cannot ask for a 10^9-row batch. Every parse error is one
line, exit 2. The tests marked "failed before issue 15" did."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from chipswap.compile.compiler import SET_SCHEMA, parse_compiled_set, plan_from_args
from chipswap.errors import ChipswapError
from chipswap.shapes.planfile import (
    MAX_BATCH_BUCKET,
    MAX_BUCKET_TOKENS,
    MAX_BUCKETS,
    MAX_SEQUENCE_BUCKET,
    load_plan,
    parse_plan,
)
from tests.cli_helpers import one_line_error, run_inproc


def _plan(**over) -> dict:
    d = {"schema": "chipswap.shapeplan/1", "sequence_buckets": [16, 32], "batch_buckets": [1, 2],
         "max_length": 32}
    d.update(over)
    return d


def _write(tmp_path: Path, doc, name: str = "plan.json") -> Path:
    f = tmp_path / name
    f.write_text(json.dumps(doc))
    return f


def _limited(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI under a 3 GiB data limit: an unbounded allocation fails fast instead of swapping the
    machine, and shows up as a crash."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (3 * 2**30, resource.RLIM_INFINITY))

    return subprocess.run([sys.executable, "-m", "chipswap", *cmd], capture_output=True, text=True,
                          cwd=cwd, timeout=300, preexec_fn=limit)


# ------------------------------------------------------------------------------------------------- plans
def test_plan_with_a_billion_row_batch_bucket_is_refused_before_anything_is_built(tmp_path):
    """Failed before issue 15: compile built the model and tried to allocate the 10^9 x 32 input."""
    plan = _write(tmp_path, _plan(batch_buckets=[1, 1_000_000_000]))
    r = _limited(["compile", "tiny-distilbert", "--plan", str(plan), "--cache-dir", str(tmp_path / "c")],
                 tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "'batch_buckets' holds 1,000,000,000, over the limit of 4,096" in r.stderr
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--seq-len", "16", "--batch-sizes", "100000000"], "--batch-sizes holds 100,000,000, over the"),
        (["--seq-len", "100000000"], "--seq-len holds 100,000,000, over the limit of 1,048,576"),
        (["--seq-len", "1048576", "--batch-sizes", "8"], "over the limit of 4,194,304 per compiled shape"),
        (["--seq-len", ",".join(str(i) for i in range(1, 300))], "over the limit of 256"),
        (["--seq-len", "16", "--atol", "nan"], "--atol must be a finite number >= 0, got nan"),
        (["--seq-len", "16", "--atol", "inf"], "--atol must be a finite number >= 0, got inf"),
    ],
)
def test_compile_flags_are_bounded_and_finite(tmp_path, capsys, monkeypatch, argv, msg):
    """--atol nan failed before issue 15 (it compiled, then every bucket 'failed': exit 1); --batch-sizes
    100000000 allocated a 10^8-row input."""
    import chipswap.compile.compiler as comp

    def never(*a, **k):
        raise AssertionError("must be refused before the model is built")

    monkeypatch.setattr(comp, "target_from_spec", never)
    monkeypatch.setattr(comp, "compile_plan", never)
    cache = str(tmp_path / "c")
    code, out, err = run_inproc(capsys, "compile", "tiny-distilbert", *argv, "--cache-dir", cache)
    assert code == 2 and err.count("\n") == 1 and msg in err, err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "over, msg",
    [
        ({"batch_buckets": [True]}, "holds True, not a positive integer"),
        ({"sequence_buckets": [16, 1.5]}, "holds 1.5, not a positive integer"),
        ({"sequence_buckets": ["128"]}, "holds '128', not a positive integer"),
        ({"max_length": True}, "'max_length' is True, not a positive integer"),
        ({"max_length": 2**40}, "over the limit of 1,048,576"),
        ({"sequence_buckets": [MAX_SEQUENCE_BUCKET + 1]}, "over the limit of 1,048,576"),
        ({"batch_buckets": [MAX_BATCH_BUCKET + 1]}, "over the limit of 4,096"),
        ({"sequence_buckets": list(range(1, MAX_BUCKETS + 2))}, "over the limit of 256"),
        ({"sequence_buckets": [MAX_BUCKET_TOKENS // 8], "batch_buckets": [16]}, "per compiled shape"),
        ({"sequence_buckets": list(range(1, 201)), "batch_buckets": list(range(1, 30))}, "shapes to compile"),
    ],
)
def test_plan_numbers_are_strict_and_bounded(over, msg):
    one_line_error(msg.replace("(", r"\(").replace(")", r"\)"), parse_plan, _plan(**over), "p.json")


@pytest.mark.parametrize(
    "content, msg",
    [
        (b'{"sequence_buckets": [NaN], "batch_buckets": [1]}', "NaN is not a number JSON allows"),
        (b"\xff\xfe{}", "is not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64 levels"),
        (
            b'{"schema": "chipswap.shapeplan/1", "sequence_buckets": [1e999], "batch_buckets": [1]}',
            "not a positive integer",
        ),
        (b'{"sequence_buckets": [8], "batch_buckets": [1]}', "has no 'schema'"),  # issue 19
    ],
)
def test_plan_file_format_errors_are_one_line(tmp_path, content, msg):
    f = tmp_path / "plan.json"
    f.write_bytes(content)
    one_line_error(msg, load_plan, f)


def test_plan_given_as_a_folder_is_one_line(tmp_path):
    with pytest.raises(ChipswapError, match="is a folder, not a file"):
        load_plan(tmp_path)


def test_check_reads_plans_through_the_same_bounds(tmp_path):
    from chipswap.readiness.check import load_plan as check_load_plan

    with pytest.raises(ChipswapError, match="over the limit of 4,096"):
        check_load_plan(_write(tmp_path, _plan(batch_buckets=[10**9])))


def test_flag_bounds_equal_plan_bounds():
    plan_from_args([MAX_SEQUENCE_BUCKET], [MAX_BUCKET_TOKENS // MAX_SEQUENCE_BUCKET])  # at the limit: fine
    with pytest.raises(ChipswapError, match="per compiled shape"):
        plan_from_args([MAX_SEQUENCE_BUCKET], [MAX_BUCKET_TOKENS // MAX_SEQUENCE_BUCKET + 1])


# ------------------------------------------------------------------------------------------- compiled sets
def _cset(**over) -> dict:
    d = {"schema": SET_SCHEMA, "backend": "onnxruntime", "input_names": ["input_ids"], "pad_token_id": 0,
         "buckets": [{"batch": 1, "seq_len": 8, "key": "0" * 32}]}
    d.update(over)
    return d


@pytest.mark.parametrize(
    "over, msg",
    [
        ({"buckets": [{"batch": True, "seq_len": 8, "key": "0" * 32}]}, r"buckets\[0\]\.batch must be an"),
        ({"buckets": [{"batch": 1, "seq_len": "8", "key": "0" * 32}]}, r"seq_len must be an integer"),
        ({"buckets": [{"batch": 1, "seq_len": 8.0, "key": "0" * 32}]}, r"seq_len must be an integer"),
        ({"buckets": [{"batch": 10**9, "seq_len": 8, "key": "0" * 32}]}, r"outside \[1, 4,096\]"),
        ({"buckets": [{"batch": 4096, "seq_len": 2**20, "key": "0" * 32}]}, "over the limit of 4,194,304"),
        ({"buckets": [{"batch": 1, "seq_len": 8, "key": "0" * 32}] * 2}, "repeats the shape"),
        ({"buckets": []}, "non-empty list"),
        ({"pad_token_id": True}, "pad_token_id must be an integer"),
        ({"pad_token_id": -1}, "pad_token_id is -1"),
        ({"backend": "../../evil"}, "is not one of onnxruntime"),
        ({"weights_key": "../w"}, "weights_key '../w' is not a cache key"),
        ({"input_names": "input_ids"}, "'input_names' must be a list"),
        ({"input_names": ["x" * 1000]}, "'input_names' must be a list"),
        ({"schema": "chipswap.compiled/9"}, "not a compiled set"),
    ],
)
def test_compiled_set_fields_are_strict(over, msg):
    """A bool batch size failed before issue 15 (int(True) == 1 was accepted)."""
    one_line_error(msg, parse_compiled_set, _cset(**over), "set.json")


def test_compiled_set_file_errors_are_one_line(tmp_path):
    from chipswap.compile.compiler import read_compiled_set

    for content, msg in ((b"\xff", "not UTF-8"), (b'{"a": NaN}', "NaN"), (b"[" * 1000, "nested deeper")):
        f = tmp_path / "set.json"
        f.write_bytes(content)
        one_line_error(msg, read_compiled_set, f)
    one_line_error("is a folder", read_compiled_set, tmp_path)


def test_io_json_of_a_cached_artifact_is_strict(tmp_path):
    from chipswap.compile.backends import read_io

    for doc in (
        {"inputs": [{"name": "x", "shape": [True, 8], "dtype": "int64"}], "outputs": []},
        {"inputs": [{"name": "x", "shape": [1] * 50, "dtype": "int64"}], "outputs": []},
        {"inputs": [{"name": "x", "shape": [2**40], "dtype": "int64"}], "outputs": []},
        {"inputs": [], "outputs": ["y"]},
        [],
    ):
        (tmp_path / "io.json").write_text(json.dumps(doc))
        with pytest.raises(ChipswapError, match="has no readable io.json") as ei:
            read_io(tmp_path)
        assert "\n" not in str(ei.value)


def test_load_router_refuses_a_bool_batch_before_touching_the_cache(tmp_path):
    """Failed before issue 15: int(True) == 1 made `"batch": true` a batch of one."""
    from chipswap.compile.cache import ArtifactCache
    from chipswap.serve.served import load_router

    cset = _cset(buckets=[{"batch": True, "seq_len": 8, "key": "0" * 32}])
    with pytest.raises(ChipswapError, match=r"buckets\[0\]\.batch must be an integer, got True"):
        load_router(cset, ArtifactCache(tmp_path / "c"))
    assert not (tmp_path / "c").exists()
