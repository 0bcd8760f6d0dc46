"""Issue 19, strictness: data that parses but is nonsense is refused with one line (each test failed before).

* bench results with 1e308 (non-physical) throughput or latency figures;
* plan files for compile/check: no schema, ``mode = "banana"``, a bad overflow policy or decode buckets;
* the documented exit codes match what the commands do (``catalog refresh`` exits 3).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from chipswap.bench.results import parse_bench_results
from chipswap.errors import ChipswapError
from chipswap.shapes.planfile import load_plan, parse_plan
from tests.test_loadgen import _doc

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("throughput", "requests_per_s"), 1e308),
        (("latency_ms", "e2e", "p99"), 1e308),
        (("latency_ms", "e2e", "p50"), 1e300),
        (("goodput", "requests_per_s"), 1e308),
        (("duration_s",), 1e308),
    ],
)
def test_bench_figures_outside_physical_ranges_are_refused(path, value):
    doc = copy.deepcopy(_doc())
    parse_bench_results(doc, "ok.json")  # the template itself is fine
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ChipswapError, match=re.escape(".".join(path)) + ".*outside"):
        parse_bench_results(doc, "b.json")


PLAN = {"schema": "chipswap.shapeplan/1", "sequence_buckets": [8, 16], "batch_buckets": [1]}


@pytest.mark.parametrize(
    ("over", "msg"),
    [
        ({"mode": "banana"}, "'mode' is 'banana'; use one of encoder, llm"),
        ({"overflow_policy": "yolo"}, "'overflow_policy' is 'yolo'"),
        ({"decode_buckets": ["x"]}, "decode_buckets"),
    ],
)
def test_plan_keys_compile_does_not_use_are_still_checked(over, msg):
    parse_plan(PLAN, "p.json")
    with pytest.raises(ChipswapError, match=re.escape(msg)):
        parse_plan({**PLAN, **over}, "p.json")


def test_plan_file_without_a_schema_is_refused(tmp_path):
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({k: v for k, v in PLAN.items() if k != "schema"}))
    with pytest.raises(ChipswapError, match="has no 'schema'"):
        load_plan(p)
    p.write_text(json.dumps(PLAN))
    assert load_plan(p).sequence_buckets == (8, 16)


def test_security_doc_states_the_exit_codes_as_they_are():
    from chipswap.economics.aws.access import AwsUnavailableError

    text = (ROOT / "docs" / "security.md").read_text()
    codes = text.split("Exit codes everywhere", 1)[1].split("\n\n", 1)[0]
    assert AwsUnavailableError.exit_code == 3
    assert "**3**" in codes and "catalog refresh" in codes.split("**3**", 1)[1][:200]


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["shapes", "--max-buckets", "1000000000"], "--max-buckets must be at most 256"),
        # issue 42's scale-20 fuzz: --decode-k 1000000000 planned every decode length as a bucket (23 s CPU)
        (["shapes", "--decode-k", "1000000000"], "--decode-k must be at most 256"),
        (["shapes", "-k", "257"], "-k must be at most 256"),
        (["shapes", "--max-batch", "99999999"], "--max-batch must be from 1 to 4,096"),
        (["shapes", "--align", "0"], "--align must be from 1 to 65,536"),
        (["project", "tiny-bert", "-i", "inf2.xlarge", "--nodes", "999999999"], "--nodes 1..100000"),
        (["serve", "tiny-bert", "--eager", "--max-queue", "999999999999"], "queue limits must be 1..100,000"),
        (["serve", "tiny-bert", "--eager", "--max-body-bytes", "99999999999999"], "--max-body-bytes must be"),
    ],
)
def test_every_count_flag_is_bounded(capsys, argv, msg):
    """Issue 19: --max-buckets 1000000000 was accepted (118 s, 1.46 GB); serve's queue and body limits took
    any size."""
    from tests.cli_helpers import run_inproc

    code, _out, err = run_inproc(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and msg in err, err
