"""Every input path this round added, fed bad values: one line naming the problem and the fix, exit 2, no
traceback, nothing written. Flags of project / plan / check / compile / shapes / trial, the new
workload fields (stacks, endpoint, scale method, training job, low-traffic floor) and a bench/2 file's
identity block. Each case fails at parse time, before any projection or plan runs (so the file stays fast)."""

from __future__ import annotations

import copy
import json
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from chipswap.bench import read_bench_results
from chipswap.cli.plan import example_path
from chipswap.plan.workload_file import parse_workload
from tests.cli_helpers import one_line_error, run_inproc
from tests.fuzz.test_fuzz_inputs import BENCH

NAN, INF = math.nan, math.inf
MISSING = "@missing"  # stands for a path that does not exist
FOLDER = "@folder"  # stands for an existing, empty folder
LLM = ("project", "llama-3.1-8b", "-i", "trn1.32xlarge")
TRAIN = (*LLM, "--train-tokens", "1e9")


def _bad_run(capsys: pytest.CaptureFixture[str], args: tuple[str, ...], match: str) -> str:
    code, _out, err = run_inproc(capsys, *args)
    assert code == 2, (args, code, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert match in err, err
    return err


# ------------------------------------------------------------------------------------------------ flags
FLAG_CASES = [
    # project: serving layout, stack and sampling
    ((*LLM, "--tp", "abc"), "--tp"),
    ((*LLM, "--tp", "0"), "--tp must be 1..256"),
    ((*LLM, "--tp", "-4"), "--tp must be 1..256"),
    ((*LLM, "--tp", "99999999999999999999"), "--tp must be 1..256"),
    ((*LLM, "--replicas", "0"), "--replicas must be 1..1024"),
    ((*LLM, "--replicas", "99999999999"), "--replicas must be 1..1024"),
    ((*LLM, "--batch", "true"), "--batch"),
    ((*LLM, "--batch", "0"), "--batch must be 1..4096"),
    ((*LLM, "--stack", "nope"), "unknown --stack"),
    ((*LLM, "--stack", ""), "unknown --stack"),
    ((*LLM, "--sampling", "nope"), "unknown --sampling"),
    # project: training shape
    ((*TRAIN, "--nodes", "0"), "--nodes 1..100000"),
    ((*TRAIN, "--nodes", "99999999999999"), "--nodes 1..100000"),
    ((*TRAIN, "--seq-len", "0"), "--seq-len must be 1..1048576"),
    ((*TRAIN, "--seq-len", "9999999999999"), "--seq-len must be 1..1048576"),
    ((*TRAIN, "--global-batch", "0"), "global batch must be 1..1048576"),
    ((*TRAIN, "--global-batch", "999999999999999999"), "global batch must be 1..1048576"),
    ((*TRAIN, "--train-dtype", "fp4"), "--train-dtype bf16"),
    ((*LLM, "--train-tokens", "nan"), "training tokens must be a positive number"),
    ((*LLM, "--train-tokens", "inf"), "training tokens must be a positive number"),
    ((*LLM, "--train-tokens", "-5"), "training tokens must be a positive number"),
    ((*LLM, "--train-tokens", "1e300"), "training tokens must be a positive number"),
    # training-only flags without --train-tokens were silently ignored
    ((*LLM, "--nodes", "2"), "--nodes shape a training projection; add --train-tokens"),
    ((*LLM, "--seq-len", "2048"), "--seq-len shape a training projection"),
    ((*LLM, "--global-batch", "2"), "--global-batch shape a training projection"),
    ((*LLM, "--train-dtype", "fp8"), "--train-dtype shape a training projection"),
    # plan
    (("plan", "--example", "finetune", "--train-hours", "abc"), "--train-hours"),
    (("plan", "--example", "finetune", "--train-hours", "true"), "--train-hours"),
    (("plan", "--example", "finetune", "--train-hours", "nan"), "--train-hours must be"),
    (("plan", "--example", "finetune", "--train-hours", "inf"), "--train-hours must be"),
    (("plan", "--example", "finetune", "--train-hours", "-1"), "--train-hours must be"),
    (("plan", "--example", "finetune", "--train-hours", "0"), "--train-hours must be"),
    (("plan", "--example", "finetune", "--train-hours", "1e300"), "--train-hours must be"),
    (("plan", "--example", "llama-serving", "--train-hours", "5"), "applies to training workloads"),
    (("plan", MISSING, "--quiet"), "workload file not found"),
    (("plan", FOLDER, "--quiet"), "is a directory"),
    (("plan", "--example", "llama-serving", "--accept-bench-mismatch"), "add --bench FILE or drop it"),
    (("plan", "--example", "llama-serving", "--bench", MISSING), "cannot read bench results"),
    (("plan", "--example", "llama-serving", "--bench", FOLDER), "is a folder, not a file"),
    # check / compile
    (("check", "bert-base", "--timeout", "abc"), "--timeout"),
    (("check", "bert-base", "--timeout", "nan"), "--timeout must be a number of seconds"),
    (("check", "bert-base", "--timeout", "inf"), "--timeout must be a number of seconds"),
    (("check", "bert-base", "--timeout", "-1"), "--timeout must be a number of seconds"),
    (("check", "bert-base", "--timeout", "0"), "--timeout must be a number of seconds"),
    (("check", "bert-base", "--timeout", "1e300"), "--timeout must be a number of seconds"),
    # shapes
    (("shapes", "--max-buckets", "abc"), "--max-buckets"),
    (("shapes", "--max-buckets", "0"), "--max-buckets 1 or more"),
    (("shapes", "--max-buckets", "-3"), "--max-buckets 1 or more"),
    (("shapes", "--max-buckets", "99999999999"), "--max-buckets must be at most"),
    (("shapes", MISSING, "--follow-symlinks"), "trace file not found"),
    (("shapes", FOLDER, "--follow-symlinks"), "holds no .csv"),
    # trial
    (("trial", "--example", "nope"), "unknown example"),
    (("trial", MISSING), "workload file not found"),
    (("trial", FOLDER), "is a directory"),
    (("trial", "--example", "llama-serving", "--stack", "nope"), "unknown Neuron stack"),
    (("trial", "--example", "llama-serving", "--stack", ""), "unknown Neuron stack"),
    (("trial", "--example", "llama-serving", "--stack", "vllm"), "unknown Neuron stack"),
    (("trial", "--example", "llama-serving", "--gpu-endpoint", "ftp://x"), "URL must be http(s)"),
    (("trial", "--example", "llama-serving", "--gpu-endpoint", ""), "URL must be http(s)"),
    (("trial", "--example", "llama-serving", "--gpu-endpoint", "http://a b"), "URL must be http(s)"),
    (("trial", "--example", "llama-serving", "--gpu-endpoint", "http://u:p@h:1"), "no credentials"),
]


@pytest.mark.parametrize(("args", "match"), FLAG_CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in FLAG_CASES])
def test_bad_flag_is_one_line_and_writes_nothing(
    args: tuple[str, ...], match: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "folder").mkdir()
    real = {MISSING: str(tmp_path / "missing.toml"), FOLDER: str(tmp_path / "folder")}
    args = tuple(real.get(a, a) for a in args)
    out = tmp_path / "out"
    if args[0] in ("plan", "trial"):
        args = (*args, "--out", str(out), *(("--no-aws",) if args[0] == "plan" else ()))
    _bad_run(capsys, args, match)
    assert not out.exists()  # nothing half-written


def test_trial_out_that_exists_or_is_a_file_is_refused(tmp_path: Path, capsys) -> None:
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "mine.txt").write_text("keep")
    _bad_run(capsys, ("trial", "--example", "llama-serving", "--out", str(kit)), "pass --force")
    assert [p.name for p in kit.iterdir()] == ["mine.txt"]
    f = tmp_path / "f.toml"
    f.write_text("x")
    _bad_run(capsys, ("trial", "--example", "llama-serving", "--out", str(f), "--force"), "is a file")
    assert f.read_text() == "x"
    both = ("trial", str(example_path("llama-serving")), "--example", "llama-serving")
    _bad_run(capsys, (*both, "--out", str(tmp_path / "k")), "not both")


def test_check_and_compile_refuse_a_missing_or_folder_model_with_trust_native(tmp_path: Path, capsys) -> None:
    for cmd in (("check",), ("compile", "--seq-len", "16")):
        for model in (tmp_path / "missing.pt2", tmp_path):
            code, _out, err = run_inproc(capsys, cmd[0], str(model), *cmd[1:], "--trust-native")
            assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err


# ------------------------------------------------------------------------------------------ workload fields
WORKLOAD_CASES = [
    ("llama-serving", "targets", "stack", v, m)
    for v, m in (("", "neuron serving stack"), ("vllm", "neuron serving stack"), (5, "string"),
                 (True, "string"), (["nxdi-vllm"], "string"), ("x" * 100_000, "at most 40"))
] + [
    ("llama-serving", "fleet", "gpu_stack", v, m)
    for v, m in (("", "gpu serving stack"), ("nxdi-vllm", "gpu serving stack"), (5, "string"),
                 ("x" * 100_000, "at most 40"))
] + [
    ("llama-serving", "targets", "chunked_prefill", v, "true or false") for v in ("yes", 1, 0, NAN, "true")
] + [
    ("llama-serving", "fleet", "endpoint", v, m)
    for v, m in (("", "http(s)://"), ("ftp://x", "http(s)://"), ("http://", "http(s)://"),
                 ("http://a b", "http(s)://"), ("http://h:8000\n", "http(s)://"), (5, "string"),
                 (True, "string"), ("http://" + "x" * 100_000, "at most 2048"))
] + [
    ("llama-serving", "traffic", "scale_method", v, "superpose") for v in ("", "copy", 5, True)
] + [
    ("finetune", "job", "gpu_hours", v, m)
    for v, m in ((True, "not true"), (NAN, "finite"), (INF, "finite"), (-1, "> 0"), (0, "> 0"),
                 (1e300, "<="), (10**30, "<="), ("20", "without quotes"))
] + [
    ("finetune", "job", "dtype", v, "'bf16', 'fp8' or 'best'") for v in ("", "fp4", True, 5)
] + [
    ("finetune", "job", "global_batch", v, m)
    for v, m in ((True, "not true"), (NAN, "finite"), (INF, "finite"), (0, "> 0"), (-1, "> 0"),
                 (1.5, "whole number"), (10**30, "<="), ("64", "without quotes"))
] + [
    ("llama-serving", "verdict", "low_traffic_tokens_per_s", v, m)
    for v, m in ((True, "not true"), (NAN, "finite"), (INF, "finite"), (-1, "> 0"), (1e300, "<="),
                 ("5", "without quotes"))
]  # fmt: skip


def _example(name: str) -> dict[str, Any]:
    return tomllib.loads(example_path(name).read_text())


@pytest.mark.parametrize(
    ("example", "section", "key", "value", "match"),
    WORKLOAD_CASES,
    ids=[f"{s}.{k}={str(v)[:12]!r}" for _e, s, k, v, _m in WORKLOAD_CASES],
)
def test_bad_workload_field_is_one_line(example: str, section: str, key: str, value: Any, match: str) -> None:
    data = _example(example)
    data.setdefault(section, {})[key] = value
    msg = one_line_error(None, parse_workload, data, "w.toml")
    assert section in msg and key in msg and match in msg, msg


def test_bad_workload_field_through_the_cli_writes_nothing(tmp_path: Path, capsys) -> None:
    bad = '[fleet]\nendpoint = "http://h:1 x"'
    text = example_path("llama-serving").read_text().replace("[fleet]", bad, 1)
    w = tmp_path / "w.toml"
    w.write_text(text)
    for args in (("plan", str(w), "--no-aws"), ("trial", str(w))):
        _bad_run(capsys, (*args, "--out", str(tmp_path / "out")), "http(s)://")
        assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------ bench identity block
IDENTITY_CASES = [
    (("model", "parameters"), "5", "model.parameters"),
    (("model", "parameters"), True, "model.parameters"),
    (("model", "parameters"), NAN, "NaN is not a number JSON allows"),  # refused as the file is read
    (("model", "parameters"), INF, "Infinity is not a number JSON allows"),
    (("model", "parameters"), -1, "model.parameters"),
    (("model", "parameters"), 10**30, "model.parameters"),
    (("model", "name"), 5, "model.name"),
    (("model", "name"), "x" * 100_000, "model.name"),
    (("model", "config_sha256"), "zz", "config_sha256"),
    (("model",), [], "identity.model must be an object"),
    (("shapes", "compiled"), "1x16", "shapes.compiled"),
    (("shapes", "compiled"), [[1]], "shapes.compiled[0]"),
    (("shapes", "compiled"), [[0, 16]], "shapes.compiled[0]"),
    (("shapes", "compiled"), [[1, NAN]], "not valid JSON"),
    (("shapes", "compiled"), [[1, 16]] * 20_000, "shapes.compiled"),
    (("shapes", "max_length"), 1.5, "shapes.max_length"),
    (("shapes", "prompt_tokens", "p99"), NAN, "not valid JSON"),
    (("shapes", "prompt_tokens", "p99"), INF, "not valid JSON"),
    (("shapes", "prompt_tokens", "p99"), 1e300, "prompt_tokens.p99"),
    (("shapes", "prompt_tokens", "p99"), -1, "prompt_tokens.p99"),
    (("shapes", "prompt_tokens", "p99"), True, "prompt_tokens.p99"),
    (("server", "software"), ["a"], "server.software"),
    (("server",), "vllm", "identity.server must be an object"),
    (("host", "gpus"), "H100", "host.gpus"),
    (("host", "gpus"), [5], "host.gpus"),
    (("host", "beside_server"), "yes", "beside_server"),
    (("host", "cpus"), -2, "host.cpus"),
    (("host", "neuron_devices"), 1e300, "host.neuron_devices"),
    ((), "not an object", "identity must be an object"),
    ((), None, "identity must be an object"),  # the key missing
]


@pytest.mark.parametrize(
    ("where", "value", "match"),
    IDENTITY_CASES,
    ids=[f"{'.'.join(w)}={str(v)[:12]!r}" for w, v, _ in IDENTITY_CASES],
)
def test_bad_identity_block_is_one_line(
    where: tuple[str, ...], value: Any, match: str, tmp_path: Path
) -> None:
    doc = copy.deepcopy(BENCH)
    if not where:
        doc.pop("identity") if value is None else doc.__setitem__("identity", value)
    else:
        node = doc["identity"]
        for k in where[:-1]:
            node = node[k]
        node[where[-1]] = value
    f = tmp_path / "b.json"
    f.write_text(json.dumps(doc))
    msg = one_line_error(None, read_bench_results, f)
    assert match in msg and "b.json" in msg, msg


def test_bad_identity_through_plan_writes_nothing(tmp_path: Path, capsys) -> None:
    doc = copy.deepcopy(BENCH)
    doc["identity"]["model"]["parameters"] = "5"
    f = tmp_path / "b.json"
    f.write_text(json.dumps(doc))
    out = tmp_path / "r"
    args = ("plan", "--example", "classifier-serving", "--bench", str(f), "--no-aws", "--out", str(out))
    _bad_run(capsys, args, "model.parameters")
    assert not out.exists()
