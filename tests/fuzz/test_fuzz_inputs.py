"""Hostile inputs of every kind chipswap reads, through its public entry points, in this process: plans,
compiled sets, cache folders, workloads, catalogs, traces, model configs, command-line numbers and bench
result files. Each (class, kind) is its own test, so a kind whose fix is in progress can be listed in
KNOWN_OPEN (xfail, strict=False) and starts enforcing once fixed; the list is empty: every kind is enforced.

The contract checked for every input is in tests/fuzz/harness.py and docs/security.md. Seeded (derandomized)
and a fixed number of inputs per kind, whatever the machine's load (never a time budget); `make fuzz` runs
CHIPSWAP_FUZZ_SCALE times as many (see tests/fuzz/conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st

from chipswap.cli.main import main as cli_main
from tests.fuzz import strategies as S
from tests.fuzz.harness import (
    FILE_NODE_CEILING_BYTES,
    FILE_NODE_TIMEOUT_S,
    Sandbox,
    check,
    echoed_controls,
    run,
)

REPO = Path(__file__).resolve().parents[2]
SCALE = float(os.environ.get("CHIPSWAP_FUZZ_SCALE", "1"))
SEED = os.environ.get("CHIPSWAP_FUZZ_SEED")

# (class, kind) -> finding id (docs/security.md) of kinds whose fix is in progress: xfail(strict=False).
KNOWN_OPEN: dict[tuple[str, str], str] = {}


def _settings(cls: str, kind: str, examples: int):
    known = (cls, kind) in KNOWN_OPEN
    s = settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        derandomize=SEED is None,
        database=None,
        print_blob=False,
        # a known-open kind stops at its first failure instead of spending CI time shrinking it
        phases=(Phase.explicit, Phase.generate) if known else tuple(Phase),
        suppress_health_check=list(HealthCheck),
    )

    def wrap(f):
        f = s(f)
        return seed(int(SEED))(f) if SEED is not None else f

    return wrap


def _params(cls: str, kinds: tuple[str, ...]) -> list[Any]:
    out = []
    for kind in kinds:
        ref = KNOWN_OPEN.get((cls, kind))
        marks = [pytest.mark.xfail(strict=False, reason=f"open elsewhere: {ref}")] if ref else []
        out.append(pytest.param(kind, marks=marks, id=kind))
    return out


# Kinds that put a bool, a numeric string or NaN/inf where a number belongs: in a file whose every number is
# validated, that is an error (exit 2), never a result.
STRICT_NUMBER_KINDS = ("bool_number", "numeric_string", "non_finite")


def _allowed(kind: str, usual: tuple[int, ...]) -> tuple[int, ...]:
    return (2,) if kind in STRICT_NUMBER_KINDS else usual


def _check(cls: str, kind: str, outcome: Any, allowed: tuple[int, ...], extra: Any = ()) -> None:
    check(cls, outcome, allowed, extra, known_open=(cls, kind) in KNOWN_OPEN)


def _limits(hostile: S.HostileFile) -> dict[str, int]:
    if hostile.node == "file":
        return {}
    return {"timeout_s": FILE_NODE_TIMEOUT_S, "ceiling_bytes": FILE_NODE_CEILING_BYTES}


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    sandbox = tmp_path_factory.mktemp("fuzz") / "sandbox"  # alone in its parent: a write there shows
    sandbox.mkdir()
    return Sandbox(sandbox, REPO)


# ------------------------------------------------------------------------------- a real cache to start from
@pytest.fixture(scope="module")
def seeded_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A cache with one ready ONNX entry (input_ids + attention_mask, batch 1 x seq 8, a real ORT model built
    with onnx.helper) and one failed entry. Returns (root, ready key, failed key)."""
    import onnx
    from onnx import TensorProto, helper

    from chipswap.compile.backends import write_io
    from chipswap.compile.cache import ArtifactCache
    from chipswap.compile.keys import KeyParts

    root = tmp_path_factory.mktemp("seed") / "cache"
    c = ArtifactCache(root)
    names = ("input_ids", "attention_mask")
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, 8]) for n in names]
    out = helper.make_tensor_value_info("output_0", TensorProto.INT64, [1, 8])
    graph = helper.make_graph([helper.make_node("Add", ["input_ids", "attention_mask"], ["output_0"])],
                              "fuzz", inputs, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9

    def build(d: Path) -> None:
        onnx.save(model, str(d / "model.onnx"))
        import torch

        ex = {n: torch.zeros(1, 8, dtype=torch.long) for n in ("input_ids", "attention_mask")}
        write_io(d, ex, ["output_0"])

    parts = KeyParts.make(graph="fuzz", weights="fuzz", inputs=[("input_ids", (1, 8), "int64")],
                          backend="onnxruntime", backend_version="fuzz")
    ready, _ = c.get_or_build(parts, build, meta={"model": "fuzz", "batch": 1, "seq_len": 8})
    failed_parts = KeyParts.make(graph="fuzz", weights="fuzz", inputs=[("input_ids", (1, 16), "int64")],
                                 backend="onnxruntime", backend_version="fuzz")
    try:
        c.get_or_build(failed_parts, lambda d: 1 / 0)
    except Exception:
        pass
    return root, ready.key, failed_parts.key


def _fresh_cache(box: Sandbox, seeded: tuple[Path, str, str]) -> None:
    if box.cache.exists():
        shutil.rmtree(box.cache)
    shutil.copytree(seeded[0], box.cache, symlinks=True)


# ---------------------------------------------------------------------------------------------------- plans
PLAN = {
    "schema": "chipswap.shapeplan/1", "mode": "encoder", "sequence_buckets": [16, 32], "decode_buckets": [],
    "batch_buckets": [1, 2], "max_length": 32, "overflow_policy": "reject",
    "histogram": {"lengths": [3, 9], "counts": [1, 2]},
}


@pytest.mark.parametrize("kind", _params("plans", S.ALL_KINDS))
def test_fuzz_plans(box: Sandbox, kind: str) -> None:
    """compile --plan (stopped before compiling by the neuron backend's SDK check) and check's plan reader."""
    from chipswap.readiness.check import load_plan as check_load_plan


    @_settings("plans", kind, 5)
    @given(hostile=S.hostile_file(PLAN, kind, S.to_json))
    def case(hostile: S.HostileFile) -> None:
        box.reset()
        f = box.place("plan.json", hostile)
        argv = ["compile", "tiny-distilbert", "--plan", str(f), "--backend", "neuron"]
        _check("plans", kind, run(box, lambda: cli_main(argv), cli=True, **_limits(hostile)), (2,))
        _check("plans", kind, run(box, lambda: check_load_plan(f), cli=False, **_limits(hostile)), (0, 2))

    case()


# -------------------------------------------------------------------------------------------- compiled sets
@pytest.mark.parametrize("kind", _params("compiled_sets", S.ALL_KINDS))
def test_fuzz_compiled_sets(box: Sandbox, seeded_cache: tuple[Path, str, str], kind: str) -> None:
    """chipswap.serve.served.load_router (what `chipswap serve` loads) against a real cache, then one
    request."""
    from chipswap.compile.cache import ArtifactCache
    from chipswap.compile.compiler import SET_SCHEMA
    from chipswap.serve.served import load_router

    template = {
        "schema": SET_SCHEMA, "chipswap": "0.1.0", "model": "fuzz", "backend": "onnxruntime",
        "graph_digest": "g", "weights_digest": "w", "weights_key": None,
        "input_names": ["input_ids", "attention_mask"], "pad_token_id": 0,
        "buckets": [{"batch": 1, "seq_len": 8, "key": seeded_cache[1]}],
    }

    @_settings("compiled_sets", kind, 6)
    @given(hostile=S.hostile_file(template, kind, S.to_json))
    def case(hostile: S.HostileFile) -> None:
        box.reset()
        _fresh_cache(box, seeded_cache)
        f = box.place("set.json", hostile)

        def load_and_route() -> Any:
            router = load_router(f, ArtifactCache(box.cache))
            return router([[1, 2, 3]])

        outcome = run(box, load_and_route, cli=False, **_limits(hostile))
        _check("compiled_sets", kind, outcome, allowed=_allowed(kind, (0, 2)))

    case()


# ----------------------------------------------------------------------------------------------- cache dirs
CACHE_KINDS = (
    *(f"entry_json:{k}" for k in (*S.VALUE_KINDS, *S.STRUCT_KINDS, *S.BYTES_KINDS)),
    "symlink_file", "symlink_entry", "symlink_folder", "planted", "flipped", "lock_garbage", "stamp_garbage",
)
CACHE_COMMANDS = (
    ["ls"], ["ls", "--json"], ["verify"], ["verify", "--discard"], ["prune"], ["prune", "--older-than", "0"],
    ["rm", "{prefix}"], ["rm", "../canary/victim"],
)


def _damage_cache(box: Sandbox, ready: str, kind: str, draw: Any) -> str:
    entry = box.cache / "entries" / ready
    victim = box.canary / "victim"
    if kind.startswith("entry_json:"):
        sub = kind.split(":", 1)[1]
        doc = json.loads((entry / "entry.json").read_text())
        hostile = draw(S.hostile_file(doc, sub, S.to_json))
        (entry / "entry.json").write_bytes(hostile.data or b"")
        return hostile.what
    if kind == "symlink_file":
        (entry / "model.onnx").unlink()
        (entry / "model.onnx").symlink_to(victim / "precious.txt")
    elif kind == "symlink_entry":
        shutil.rmtree(entry)
        entry.symlink_to(victim)
    elif kind == "symlink_folder":
        name = draw(st.sampled_from(["trash", "tmp", "verified", "locks", "entries"]))
        shutil.rmtree(box.cache / name)
        (box.cache / name).symlink_to(victim)
        return f"{name} -> canary"
    elif kind == "planted":
        where = draw(st.sampled_from(["entry", "entries", "tmp", "trash", "locks"]))
        name = draw(st.sampled_from(["..junk", "ABCDEF", "0" * 32 + ".x", "f" * 32, ".hidden", "a b"]))
        base = entry if where == "entry" else box.cache / where
        (base / name).mkdir(exist_ok=True) if draw(st.booleans()) else (base / name).write_text("x")
        return f"planted {where}/{name}"
    elif kind == "flipped":
        data = bytearray((entry / "model.onnx").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (entry / "model.onnx").write_bytes(bytes(data))
    elif kind == "lock_garbage":
        lock = box.cache / "locks" / f"{ready}.lock"
        lock.unlink(missing_ok=True)
        choice = draw(st.sampled_from(["garbage", "dir", "link", "fifo"]))
        if choice == "garbage":
            lock.write_bytes(b"\xff{not json" * 100)
        elif choice == "dir":
            lock.mkdir()
        elif choice == "link":
            lock.symlink_to(victim / "precious.txt")
        else:
            os.mkfifo(lock)
        return f"lock {choice}"
    elif kind == "stamp_garbage":
        stamp = box.cache / "verified" / f"{ready}.json"
        stamp.unlink(missing_ok=True)
        if draw(st.booleans()):
            stamp.symlink_to("/dev/zero")
        else:
            stamp.write_bytes(b"[" * 100_000)
    return kind


@pytest.mark.parametrize("kind", _params("cache", CACHE_KINDS))
def test_fuzz_cache_folders(box: Sandbox, seeded_cache: tuple[Path, str, str], kind: str) -> None:
    """`chipswap cache ls | verify | prune | rm` on a damaged or hostile cache copied from someone else."""

    @_settings("cache", kind, 4)
    @given(data=st.data(), command=st.sampled_from(CACHE_COMMANDS))
    def case(data: st.DataObject, command: list[str]) -> None:
        box.reset()
        _fresh_cache(box, seeded_cache)
        what = _damage_cache(box, seeded_cache[1], kind, data.draw)
        argv = ["cache", *[c.replace("{prefix}", seeded_cache[1][:8]) for c in command],
                "--cache-dir", str(box.cache)]
        outcome = run(box, lambda: cli_main(argv), cli=True)
        extra = echoed_controls(outcome.out + outcome.err)
        _check("cache", kind, outcome, allowed=(0, 1, 2), extra=[f"{what}: {e}" for e in extra])

    case()


# ------------------------------------------------------------------------------------- command-line numbers
FLAG_VALUES = [*S.NUMERIC_STRINGS, "-inf", "1e308", "1e400", "100000000", "-0", "0", "1,2,3", "9" * 50,
               "\x1b[31m"]
FLAG_COMMANDS = {
    "compile_seq_len": ["compile", "tiny-distilbert", "--backend", "neuron", "--seq-len", "{v}"],
    "compile_batch": ["compile", "tiny-distilbert", "--backend", "neuron", "--seq-len", "8", "--batch-sizes",
                      "{v}"],
    "compile_atol": ["compile", "tiny-distilbert", "--backend", "neuron", "--seq-len", "8", "--atol", "{v}"],
    "prune_older": ["cache", "prune", "--older-than", "{v}"],
    "prune_size": ["cache", "prune", "--max-size", "{v}"],
    "shapes_device_memory": ["shapes", "--json", "--device-memory-gib", "{v}"],
    "shapes_bucket_memory": ["shapes", "--json", "--bucket-memory-gib", "{v}"],
    "shapes_compile_s": ["shapes", "--json", "--compile-s-per-bucket", "{v}"],
    "shapes_max_batch": ["shapes", "--json", "--max-batch", "{v}"],
    "shapes_max_length": ["shapes", "--json", "--max-length", "{v}"],
    "cost_throughput": ["cost", "serve", "--instance", "inf2.xlarge", "--throughput", "{v}"],
    "cost_rate": ["cost", "serve", "--instance", "inf2.xlarge", "--throughput", "5", "--rate", "{v}"],
    "project_prompt": ["project", "tiny-distilbert", "-i", "inf2.xlarge", "--prompt-tokens", "{v}"],
    "capacity_count": ["capacity", "inf2.xlarge", "--no-aws", "--count", "{v}"],
}


@pytest.mark.parametrize("kind", _params("flags", tuple(FLAG_COMMANDS)))
def test_fuzz_command_line_numbers(box: Sandbox, kind: str) -> None:

    @_settings("flags", kind, 2)
    @example("nan")
    @example("inf")
    @example("-1")
    @example("100000000")
    @given(value=st.one_of(st.sampled_from(FLAG_VALUES), st.floats().map(repr), st.integers().map(str)))
    def case(value: str) -> None:
        box.reset()
        argv = [a.replace("{v}", value) for a in FLAG_COMMANDS[kind]]
        outcome = run(box, lambda: cli_main(argv), cli=True)
        not_finite = value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity", "1e400")
        allowed = (2,) if not_finite else (0, 2)  # a NaN or infinite limit/figure is never meaningful
        _check("flags", kind, outcome, allowed=allowed, extra=echoed_controls(outcome.out + outcome.err))

    case()


# --------------------------------------------------------------------------------------------------- traces
TRACE_ROWS = [["TIMESTAMP", "ContextTokens", "GeneratedTokens"]] + [
    [f"2023-11-16 18:17:{i:02d}.0000000", 100 + 37 * i, 5 + i] for i in range(20)
]
TRACE_JSONL = [{"TIMESTAMP": r[0], "ContextTokens": r[1], "GeneratedTokens": r[2]} for r in TRACE_ROWS[1:]]
TRACE_KINDS = tuple(k for k in S.ALL_KINDS if k not in ("extra_key",))


@pytest.mark.parametrize("kind", _params("traces", TRACE_KINDS))
def test_fuzz_traces(box: Sandbox, kind: str) -> None:
    """`chipswap shapes TRACE` (CSV and JSONL, llm and encoder mode)."""
    formats = st.sampled_from([("trace.csv", TRACE_ROWS, S.to_csv), ("trace.jsonl", TRACE_JSONL, S.to_jsonl)])

    @_settings("traces", kind, 3)
    @given(fmt=formats, data=st.data(), mode=st.sampled_from(["llm", "encoder"]))
    def case(fmt: tuple[str, Any, Any], data: st.DataObject, mode: str) -> None:
        name, template, encode = fmt
        hostile = data.draw(S.hostile_file(template, kind, encode))
        box.reset()
        f = box.place(name, hostile)
        argv = ["shapes", str(f), "--mode", mode, "--json"]
        outcome = run(box, lambda: cli_main(argv), cli=True, **_limits(hostile))
        _check("traces", kind, outcome, allowed=(0, 2), extra=echoed_controls(outcome.out + outcome.err))

    case()


# ------------------------------------------------------------------------------------------------- catalogs
CATALOG = {
    "price": [{"instance": "trn2.48xlarge", "region": "us-east-2", "term": "on-demand", "usd_per_hour": 35.76,
               "source": "quote", "as_of": "2026-11-01"}],
    "prices": [{"term": "spot", "source": "spot history", "as_of": "2026-11-02",
                "rows": [["trn1.32xlarge", "us-east-1", 3.10],
                         ["inf2.xlarge", "us-east-1", 0.21, "one AZ"]]}],
}


@pytest.mark.parametrize("kind", _params("catalogs", S.ALL_KINDS))
def test_fuzz_catalogs(box: Sandbox, kind: str) -> None:
    """`chipswap catalog --catalog FILE` and `chipswap cost serve --catalog FILE`."""

    @_settings("catalogs", kind, 2)
    @given(hostile=S.hostile_file(CATALOG, kind, S.to_toml), show=st.booleans())
    def case(hostile: S.HostileFile, show: bool) -> None:
        box.reset()
        f = box.place("catalog.toml", hostile)
        argv = (
            ["cost", "serve", "--instance", "trn1.32xlarge", "--throughput", "10", "--term", "spot"]
            if show
            else ["catalog", "--region", "us-east-1"]
        ) + ["--catalog", str(f)]
        outcome = run(box, lambda: cli_main(argv), cli=True, **_limits(hostile))
        extra = echoed_controls(outcome.out + outcome.err)
        _check("catalogs", kind, outcome, allowed=_allowed(kind, (0, 2)), extra=extra)

    case()


# ------------------------------------------------------------------------------------------------ workloads
SERVING = {
    "title": "fuzz serving", "kind": "serving", "horizon_months": 12,
    "traffic": {"steady_rps": 5.0, "prompt_tokens": 512, "output_tokens": 64, "mode": "llm",
                "max_buckets": 4},
    "fleet": {"instance": "g6e.12xlarge", "count": 2, "hours_per_month": 730.0, "region": "us-east-1",
              "term": "on-demand"},
    "slo": {"p99_ms": 2500.0},
    "targets": {"candidates": ["inf2.xlarge", "trn1.32xlarge"]},
    "pricing": {"term": "on-demand"},
    "porting": {"engineer_days": 10.0, "day_rate_usd": 800},
    "stability": {"model_changes_per_month": 0.25, "custom_cuda_kernels": False, "research_churn": False},
    "throughput": {
        "gpu_requests_per_s": 12.0, "gpu_source": "assumption", "target_utilization": 0.7,
        "candidates": {
            "inf2.xlarge": {"speed_factor": 0.13, "p99_ms": 1330.0, "source": "assumption"},
            "trn1.32xlarge": {"speed_factor": 2.1, "source": "assumption"},
        },
    },
}
TRAINING = {
    "title": "fuzz training", "kind": "training", "horizon_months": 12,
    "fleet": {"instance": "p5.48xlarge", "count": 1, "region": "us-east-1", "term": "on-demand"},
    "targets": {"candidates": ["trn1.32xlarge"]},
    "pricing": {"term": "on-demand"},
    "porting": {"engineer_days": 3.0, "day_rate_usd": 800},
    "stability": {"model_changes_per_month": 0.0, "custom_cuda_kernels": False, "research_churn": False},
    "job": {"gpu_hours": 20.0, "gpu_source": "seed example", "runs_per_month": 4.0,
            "candidates": {"trn1.32xlarge": {"hours": 26.0, "source": "seed example"}}},
}


@pytest.mark.parametrize("kind", _params("workloads", S.ALL_KINDS))
def test_fuzz_workloads(box: Sandbox, kind: str) -> None:
    """`chipswap plan WORKLOAD.toml` (terminal summary, report files): also no raw control characters on the
    terminal and no raw HTML in report.md."""

    @_settings("workloads", kind, 2)
    @given(hostile=st.sampled_from([SERVING, TRAINING]).flatmap(lambda t: S.hostile_file(t, kind, S.to_toml)))
    def case(hostile: S.HostileFile) -> None:
        box.reset()
        f = box.place("workload.toml", hostile)
        argv = ["plan", str(f), "--out", str(box.out / "report")]
        outcome = run(box, lambda: cli_main(argv), cli=True, **_limits(hostile))
        extra = echoed_controls(outcome.out + outcome.err)
        md = box.out / "report" / "report.md"
        if md.is_file() and "<script>" in md.read_text(errors="replace"):
            extra.append("raw <script> from the workload in report.md")
        _check("workloads", kind, outcome, allowed=_allowed(kind, (0, 2)), extra=extra)

    case()


# ---------------------------------------------------------------------------------------------- model configs
def _tiny_config() -> dict[str, Any]:
    from importlib import resources

    doc = json.loads(resources.files("chipswap.data").joinpath("models", "tiny-distilbert.json").read_text())
    return dict(doc["config"])


CONFIG_KINDS = tuple(k for k in S.ALL_KINDS if k not in ("long_list",))


@pytest.mark.slow
@pytest.mark.parametrize("kind", _params("configs", CONFIG_KINDS))
def test_fuzz_model_configs(box: Sandbox, kind: str) -> None:
    """`chipswap check config.json` (builds the model with random weights and exports it: the slow class)."""

    @_settings("configs", kind, 1)
    @given(hostile=S.hostile_file(_tiny_config(), kind, S.to_json))
    def case(hostile: S.HostileFile) -> None:
        box.reset()
        f = box.place("config.json", hostile)
        argv = ["check", str(f), "--json"]
        _check("configs", kind, run(box, lambda: cli_main(argv), cli=True, **_limits(hostile)), (0, 1, 2))

    case()


# ----------------------------------------------------------------------------------------------- bench JSONs
LAT = {"n": 10, "p50": 20.0, "p90": 24.0, "p99": 29.0, "mean": 21.0, "max": 30.0}
BENCH = {
    "schema": "chipswap.bench/2",
    "tool": {"name": "chipswap", "version": "0.1.0", "command": "chipswap bench http://127.0.0.1:8000"},
    "measured_at": "2026-11-30T10:00:00Z",
    "machine": {"platform": "linux", "cpus": 2, "load_avg_1m": 0.5},
    "target": {"url": "http://127.0.0.1:8000", "protocol": "chipswap-predict", "model": "m", "server": None},
    "instance": {"name": "inf2.xlarge", "term": "on-demand", "region": "us-east-1", "usd_per_hour": "0.7582",
                 "price_source": "catalog", "price_as_of": "2026-07-20"},
    "load": {"trace": "t.csv", "requests_in_trace": 10, "time_scale": 1.0, "offered_rps": 10.0, "seed": 0},
    "slo": {"e2e_ms": 25.0, "ttft_ms": None, "itl_ms": None},
    "complete": True,
    "stop_reason": "every planned request was sent",
    "counts": {"planned": 10, "sent": 10, "ok": 10, "rejected": 0, "errors": 0, "timeouts": 0, "not_sent": 0},
    "duration_s": 1.0,
    "throughput": {"requests_per_s": 10.0, "input_tokens_per_s": 100.0, "output_tokens_per_s": 0.0},
    "latency_ms": {"e2e": LAT, "ttft": None, "itl": None, "tpot": None},
    "rates": {"error": 0.0, "reject": 0.0, "timeout": 0.0},
    "goodput": {"requests_per_s": 9.0, "fraction_of_sent": 0.9},
    "padding": {"real_tokens": 100, "computed_tokens": 160, "waste_fraction": 0.375},
    "buckets": [{"seq_len": 16, "requests": 6, "share": 0.6, "e2e_ms": LAT, "batch_model_ms_p50": 8.0,
                 "slot_model_ms_p50": 2.0, "mean_fill": 0.75, "padding_waste": 0.3}],
    "send_lag_ms": {"p50": 0.1, "p99": 0.5, "max": 1.0},
    "errors": [],
    "cost": {"per_million_requests_usd": "12.5000", "basis": "goodput at the SLO",
             "per_million_output_tokens_usd": None},
    "identity": {
        "model": {"name": "m", "root": None, "parameters": 66658, "config_sha256": "ab" * 32,
                  "dtype": "float32"},
        "shapes": {"compiled": [[1, 16], [4, 16]], "max_length": 16,
                   "prompt_tokens": {"p50": 8, "p99": 16, "max": 16}},
        "server": {"software": "chipswap serve 0.1.0", "stack": None, "backend": "neuron", "device": "neuron",
                   "headers": {"server": "uvicorn"}, "models_listed": []},
        "host": {"declared_instance": "inf2.xlarge", "beside_server": True, "cpu_model": "x", "cpus": 4,
                 "gpus": [], "neuron_devices": 1, "ec2_instance_type": "inf2.xlarge"},
    },
}


@pytest.mark.parametrize("kind", _params("bench", S.ALL_KINDS))
def test_fuzz_bench_results(box: Sandbox, kind: str) -> None:
    """The measured-results file of `chipswap bench` (issue 12), read the way `plan` reads it; runs once
    chipswap.bench is on the branch."""
    loadgen = pytest.importorskip("chipswap.bench")

    @_settings("bench", kind, 3)
    @given(hostile=S.hostile_file(BENCH, kind, S.to_json))
    def case(hostile: S.HostileFile) -> None:
        box.reset()
        f = box.place("bench.json", hostile)

        def read() -> Any:
            results = loadgen.read_bench_results(f)
            return loadgen.measured_serving(results), loadgen.bucket_latency_table(results)

        outcome = run(box, read, cli=False, **_limits(hostile))
        _check("bench", kind, outcome, allowed=(0, 2))  # informational fields (machine, load) go unread

    case()
