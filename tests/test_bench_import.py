"""Peers' benchmark results as chipswap.bench/2 (chipswap.bench.importers, `chipswap bench import`,
`plan --bench`): a guidellm benchmarks file produced for real against a loopback server
(tests/peer_results/README.md says how), and `vllm bench serve`, GenAI-Perf and LLMPerf files written
after their writers' documented schemas. Every converted figure is checked against the peer file's own
value; an unknown schema names the formats read and the [figures] route."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chipswap.bench.importers import convert, detect
from chipswap.bench.results import measured_serving, parse_bench_results
from chipswap.errors import ChipswapError
from tests.cli_helpers import run_inproc

PEERS = Path(__file__).parent / "peer_results"


def _load(name: str) -> dict:
    return json.loads((PEERS / name).read_text())


def _guidellm_best(d: dict) -> dict:
    return max(d["benchmarks"], key=lambda b: b["metrics"]["requests_per_second"]["successful"]["mean"])


# file, format, instance to give, (requests/s, e2e p99 ms, TTFT p50 ms, prompt p99) read from the file itself
CASES = {
    "guidellm_benchmarks.json": (
        "guidellm",
        None,
        lambda d: (
            _guidellm_best(d)["metrics"]["requests_per_second"]["successful"]["mean"],
            _guidellm_best(d)["metrics"]["request_latency"]["successful"]["percentiles"]["p99"] * 1000,
            _guidellm_best(d)["metrics"]["time_to_first_token_ms"]["successful"]["percentiles"]["p50"],
            _guidellm_best(d)["metrics"]["prompt_token_count"]["successful"]["percentiles"]["p99"],
        ),
    ),
    "vllm_bench_serve.json": (
        "vllm bench serve",
        None,
        lambda d: (d["request_throughput"], d["p99_e2el_ms"], d["median_ttft_ms"], 1024),
    ),
    "genai_perf_profile_export_genai_perf.json": (
        "GenAI-Perf",
        "g6e.xlarge",
        lambda d: (
            d["request_throughput"]["avg"],
            d["request_latency"]["p99"],
            d["time_to_first_token"]["p50"],
            d["input_sequence_length"]["p99"],
        ),
    ),
    "llmperf_summary.json": (
        "LLMPerf",
        "g6e.xlarge",
        lambda d: (
            d["results_num_completed_requests_per_min"] / 60,
            d["results_end_to_end_latency_s_quantiles_p99"] * 1000,
            d["results_ttft_s_quantiles_p50"] * 1000,
            d["results_number_input_tokens_quantiles_p99"],
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_peer_format_converts_with_its_own_figures(name):
    fmt, instance, want = CASES[name]
    raw = _load(name)
    assert detect(raw) == fmt
    doc = convert(raw, name, instance)
    res = parse_bench_results(doc, name)  # the converted file passes the strict reader
    rps, p99, ttft50, prompt99 = want(raw)
    assert res.requests_per_s == pytest.approx(rps) and res.e2e_p99_ms == pytest.approx(p99)
    assert res.evidence.ttft_p50_ms == pytest.approx(ttft50) and res.evidence.prompt[1] == pytest.approx(
        prompt99
    )
    assert res.instance == (instance or raw.get("instance") or "g5.xlarge")
    m = measured_serving(res)
    assert m.requests_per_s == pytest.approx(rps) and m.basis == "throughput (no SLO given)"


def test_unknown_schema_and_missing_instance_are_one_line_with_the_way_out():
    with pytest.raises(ChipswapError) as e:
        convert({"schema": None, "ok": 1}, "x.json")
    msg = str(e.value)
    for fmt in ("vllm bench serve", "guidellm", "GenAI-Perf", "LLMPerf", "chipswap.bench/2"):
        assert fmt in msg
    assert '[figures."INSTANCE"] source = "measured"' in msg and "\n" not in msg
    with pytest.raises(ChipswapError, match="chipswap bench import g.json --instance NAME"):
        convert(_load("llmperf_summary.json"), "g.json")
    zero = _load("vllm_bench_serve.json") | {"completed": 0, "request_throughput": 0.0}
    with pytest.raises(ChipswapError, match="no successful request"):
        convert(zero, "z.json")


def test_bench_import_writes_chipswap_bench_2_and_refuses_a_conflicting_instance(tmp_path, capsys):
    out = tmp_path / "g.json"
    src = PEERS / "genai_perf_profile_export_genai_perf.json"
    code, stdout, err = run_inproc(
        capsys, "bench", "import", str(src), "--instance", "g6e.xlarge", "--out", str(out)
    )
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["schema"] == "chipswap.bench/2" and doc["instance"]["name"] == "g6e.xlarge"
    assert (
        doc["identity"]["model"]["name"] == "TinyLlama-1.1B-Chat-v1.0"
        and "identity as the file states" in stdout
    )
    src = PEERS / "vllm_bench_serve.json"
    code, _, err = run_inproc(
        capsys, "bench", "import", str(src), "--instance", "g5.xlarge", "--out", str(out)
    )
    assert code == 2 and "says it ran on g6e.12xlarge" in err and err.count("\n") == 1
    code, _, err = run_inproc(
        capsys, "bench", "import", str(src), "--instance", "nope.large", "--out", str(tmp_path / "n.json")
    )
    assert code == 2 and not (tmp_path / "n.json").exists()


WORKLOAD = """title = "guidellm measured"
kind = "serving"

[model]
preset = "tiny-gpt2"
task = "causal-lm"

[traffic]
steady_rps = 2
prompt_tokens = 24
output_tokens = 8
mode = "llm"

[fleet]
instance = "g5.xlarge"
count = 1

[slo]
p99_ms = 20000

[targets]
candidates = ["inf2.xlarge"]

[porting]
engineer_days = 5
"""


@pytest.mark.slow
def test_a_real_guidellm_file_feeds_plan_bench(tmp_path, capsys):
    wl = tmp_path / "wl.toml"
    wl.write_text(WORKLOAD)
    src = PEERS / "guidellm_benchmarks.json"
    code, out, err = run_inproc(
        capsys, "plan", str(wl), "--bench", str(src), "--no-aws", "--json", "--out", str(tmp_path / "r")
    )
    assert code == 0, err
    gpu = json.loads(out)["gpu_fleet"]["throughput"]
    best = _guidellm_best(_load("guidellm_benchmarks.json"))["metrics"]["requests_per_second"]["successful"]
    assert gpu["source"] == "measured; identity as the file states"  # the report's label says so
    assert gpu["value"] == pytest.approx(best["mean"], rel=1e-3)
    md = (tmp_path / "r" / "report.md").read_text()
    assert "measured; identity as the file states" in md


TRACE_WORKLOAD = """title = "code assistant"
kind = "serving"

[model]
preset = "llama-3-8b"
task = "causal-lm"

[traffic]
trace = "trace.csv"
mode = "llm"

[fleet]
instance = "g6e.12xlarge"
count = 2

[slo]
p99_ms = 60000

[targets]
candidates = ["inf2.48xlarge"]

[porting]
engineer_days = 5
"""


@pytest.mark.slow
def test_the_length_note_fires_for_a_trace_workload(tmp_path, capsys):
    """A trace's lengths (p99 7,168 prompt tokens) against a bench of prompts up to 2,048: the note states the
    gap (it read traffic.prompt_tokens before, which a trace workload does not have)."""
    rows = [
        f"2023-11-16 18:{i // 120:02d}:{i % 120 // 2:02d}.{i % 2 * 5}00,{7168 if i % 5 < 2 else 300},200"
        for i in range(900)
    ]  # 2 requests/s for 450 s
    (tmp_path / "trace.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    wl = tmp_path / "wl.toml"
    wl.write_text(TRACE_WORKLOAD)
    src = PEERS / "vllm_bench_serve.json"
    code, out, err = run_inproc(
        capsys, "plan", str(wl), "--bench", str(src), "--no-aws", "--json", "--out", str(tmp_path / "r")
    )
    assert code == 0, err
    # the run kept up with its offered rate (a lower bound, issue 39): used, or listed beside the projection
    gpu = json.dumps(json.loads(out)["gpu_fleet"])
    sent_p99 = sorted(_load("vllm_bench_serve.json")["input_lens"])[197]
    assert f"p99 {sent_p99:,}" in gpu and "p99 7,168" in gpu and "may be optimistic" in gpu, gpu
    assert f"p99 {7168 - sent_p99:,} tokens" in gpu


@pytest.mark.parametrize(
    "doc",
    [
        {"benchmarks": [{"metrics": []}]},
        {"benchmarks": [{"metrics": {"request_totals": {"successful": "x"}}}], "config": []},
        {"request_throughput": {"avg": 1.0}, "request_count": {"avg": 2}, "input_config": []},
        {"request_throughput": 3.0, "completed": 5, "input_lens": {"a": 1}, "instance": ["x"]},
        {"results_num_completed_requests": 10, "results_num_completed_requests_per_min": "many"},
    ],
)
def test_a_peer_file_of_another_shape_is_one_line_or_a_valid_file(doc):
    """Never a traceback: a field of another shape is one line naming the file, or what was readable
    converts to a file the strict reader accepts."""
    try:
        out = convert(doc, "odd.json", "g5.xlarge")
    except ChipswapError as exc:
        assert "\n" not in str(exc) and "odd.json" in str(exc)
    else:
        assert parse_bench_results(out, "odd.json").ok > 0
