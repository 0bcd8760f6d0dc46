"""Identity by evidence, not by name (chipswap.bench.evidence, plan.bench_check).

Pure: the physics floors from the model's weights and the instance's HBM bandwidth / FLOPS, the tokenizer and
server-metadata agreement, the labels, and the length gap between the benched and the workload's lengths.

Live (slow), against a real OpenAI-compatible server on loopback running a random GPT-2 (real transformers
decoding): a ~330 k-parameter random model served under the name `Mistral-Nemo-Instruct-2407` is refused on
physics for a workload that declares Mistral-Nemo-Instruct-2407 on g5.xlarge (floor and measurement in the
line); the tiny model itself (the workload declares it: the honest stand-in for "the real model", since no
real 12 B model runs here) served under another name is accepted with "identity: tokenizer and server
metadata agree". This machine has no GPU, so the host detection beside the server is stood in for a g5.xlarge
(as tests/test_bench_identity.py does for inf2): what is tested is the model's identity, not the machine's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chipswap.bench.evidence import (
    LABEL_BOTH,
    LABEL_NAME,
    Declared,
    Evidence,
    judge,
    length_note,
    tpot_floor_ms,
    ttft_floor_ms,
    workload_lengths,
)
from tests.cli_helpers import measured_figures, run_inproc

# mistralai/Mistral-Nemo-Instruct-2407 config.json (huggingface.co, the published dimensions)
MISTRAL_NEMO = {
    "_name_or_path": "mistralai/Mistral-Nemo-Instruct-2407",
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_size": 5120,
    "intermediate_size": 14336,
    "num_hidden_layers": 40,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 131072,
    "max_position_embeddings": 1024000,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _declared(**kw) -> Declared:
    base = dict(
        model="m",
        instance="g5.xlarge",
        weight_bytes=24.5e9,
        weight_dtype="bf16",
        parameters=12.2e9,
        devices=1,
        device_name="A10G",
        hbm_bytes_s=600e9,
        peak_flops=70e12,
        max_positions=1024000,
        vocab_size=131072,
    )
    base.update(kw)
    return Declared(**base)


def test_the_floors_are_weights_over_bandwidth_and_prefill_flops_over_peak():
    d = _declared(devices=4)
    assert tpot_floor_ms(d) == pytest.approx(24.5e9 / (4 * 600e9) * 1000)
    assert ttft_floor_ms(d, 1000) == pytest.approx(2 * 12.2e9 * 1000 / (4 * 70e12) * 1000)
    assert tpot_floor_ms(_declared(hbm_bytes_s=None)) is None and ttft_floor_ms(d, None) is None


def test_a_tpot_under_the_floor_is_refused_with_the_floor_and_the_measurement():
    d = _declared()
    floor = tpot_floor_ms(d)
    assert floor is not None
    fast = judge(Evidence(tpot_p50_ms=floor / 10), d, name_problem=None)
    assert len(fast.problems) == 1 and fast.problems[0].startswith("physics: the measured TPOT p50")
    assert f"{floor / 10:.3g} ms" in fast.problems[0] and f"floor {floor:.3g} ms" in fast.problems[0]
    ok = judge(Evidence(tpot_p50_ms=floor * 1.5), d, name_problem=None)
    assert ok.problems == () and ok.label == LABEL_NAME  # nothing but the name behind it
    # the TTFT floor: a 1,000-token prefill of 12.2 B parameters on one 70 TFLOPS device
    tf = ttft_floor_ms(d, 1000)
    assert tf is not None
    pre = judge(Evidence(ttft_p50_ms=tf / 5, prompt=(1000, 1000, 1000)), d, name_problem=None)
    assert pre.problems and "FLOPs floor" in pre.problems[0] and f"{tf:.3g} ms" in pre.problems[0]


def test_another_name_is_the_same_model_when_tokenizer_and_metadata_agree():
    d = _declared(vocab_size=1000, max_positions=1024)
    agree = Evidence(max_context=1024, tokenizer_vocab=1000, tokens_compared=8, tokens_agree=8)
    got = judge(agree, d, name_problem="the bench measured x, but the workload's model is m")
    assert got.problems == () and got.label == LABEL_BOTH
    # only one of the two: the name still decides
    meta_only = judge(Evidence(max_context=1024), d, name_problem="named x")
    assert meta_only.problems == ("named x",)
    # a tokenizer that counts otherwise, a vocabulary of another size, a context over the positions
    other = Evidence(max_context=4096, tokenizer_vocab=50257, tokens_compared=8, tokens_agree=1)
    bad = judge(other, d, name_problem=None)
    assert len(bad.problems) == 3 and any("7 of 8" in p for p in bad.problems)
    assert any("50,257 tokens" in p for p in bad.problems) and any(
        "4,096 tokens of context" in p for p in bad.problems
    )


def test_the_length_note_states_the_gap_against_a_trace():
    trace = [100] * 60 + [7168] * 40  # a trace whose p50 is 100 tokens and p99 7,168
    want = workload_lengths(trace)
    assert want == (100.0, 7168.0)
    ev = Evidence(prompt=(64, 224, 224), output=(100, 200, 200))
    note = length_note(ev, want, (100, 200))
    assert note is not None and "p99 224" in note and "7,168" in note and "optimistic" in note
    assert f"p99 {7168 - 224:,} tokens ({(7168 - 224) / 7168:.0%}) shorter" in note  # the gap itself
    assert length_note(Evidence(prompt=(100, 7000, 7168), output=(100, 200, 200)), want, (100, 200)) is None
    longer = length_note(Evidence(prompt=(4000, 9000, 9000), output=(100, 200, 200)), want, (100, 200))
    assert longer is not None and "pessimistic" in longer


# ------------------------------------------------------------------------------------------------ live
WORKLOAD = """title = "identity"
kind = "serving"

[model]
{model}
task = "causal-lm"

[traffic]
steady_rps = 2
prompt_tokens = 24
output_tokens = 16
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


def _g5_host(monkeypatch) -> None:
    import chipswap.bench.host as host

    monkeypatch.setattr(
        host,
        "detect_host",
        lambda: {"cpu_model": "AMD EPYC 7R32", "cpus": 4, "gpus": ["NVIDIA A10G"], "neuron_devices": 0,
                 "ec2_instance_type": "g5.xlarge"},
    )  # fmt: skip


def _bench(capsys, url: str, out: Path, *extra: str) -> dict:
    trace = out.parent / "lengths.csv"
    trace.write_text("ContextTokens,GeneratedTokens\n" + "24,16\n" * 20)
    code, _, err = run_inproc(
        capsys, "bench", url, "--protocol", "completions", "--trace", str(trace), "--rate", "4",
        "--requests", "8", "--instance", "g5.xlarge", "--out", str(out), *extra,
    )  # fmt: skip
    assert code == 0, err
    return json.loads(out.read_text())


@pytest.mark.slow
def test_a_renamed_random_model_is_refused_on_physics(tmp_path, capsys, monkeypatch):
    from chipswap.models import resolve_model
    from chipswap.serve.tokenizer import load_tokenizer
    from tests.serve_helpers import run_app
    from tests.test_loadgen_openai import TinyGPT2, make_openai_app

    _g5_host(monkeypatch)
    gpt = TinyGPT2(n_embd=64, n_layer=4)
    n_params = sum(p.numel() for p in gpt.model.parameters())
    assert 250_000 < n_params < 400_000  # the issue's ~330 k-parameter random model
    (tmp_path / "nemo").mkdir()
    (tmp_path / "nemo" / "config.json").write_text(json.dumps(MISTRAL_NEMO))
    from chipswap.projection.api import model_work

    assert model_work(resolve_model(str(tmp_path / "nemo" / "config.json"))).params == pytest.approx(
        12.25e9, rel=0.02
    )  # the config is the 12 B model
    name = "Mistral-Nemo-Instruct-2407"
    app = make_openai_app(
        gpt, load_tokenizer("example"), {}, model_id=name,
        entry={"root": f"/models/{name}", "max_model_len": 1024},
        info={"model_id": f"/models/{name}", "model_dtype": "torch.float32", "max_total_tokens": 1024},
    )  # fmt: skip
    b = tmp_path / "b.json"
    with run_app(app) as url:
        doc = _bench(capsys, url, b)
    tpot = doc["latency_ms"]["tpot"]["p50"]
    wl = tmp_path / "nemo.toml"
    wl.write_text(WORKLOAD.format(model='config = "nemo/config.json"'))
    args = ["plan", str(wl), "--bench", str(b), "--no-aws", "--out", str(tmp_path / "r")]
    code, out, err = run_inproc(capsys, *args)
    assert code == 2 and err.count("\n") == 1, err
    assert "physics: the measured TPOT p50" in err and f"{tpot:.3g} ms" in err, err
    # the floor the line names is the model's streamed weights (fp32, as the server says) over one A10G
    from chipswap.economics.catalog_io import load_catalog

    cat = load_catalog()
    bw = float(cat.chip(cat.instance("g5.xlarge").accelerator).memory_bandwidth_gb_s) * 1e9
    work = model_work(resolve_model(str(tmp_path / "nemo" / "config.json")))
    floor = work.streamed_weight_bytes("fp32") / bw * 1000
    assert f"floor {floor:.3g} ms" in err and tpot < floor
    assert "another machine" not in err and not (tmp_path / "r" / "report.json").exists()


@pytest.mark.slow
def test_the_real_model_under_another_name_is_accepted_by_tokenizer_and_metadata(
    tmp_path, capsys, monkeypatch
):
    from chipswap.serve.tokenizer import example_tokenizer_path, load_tokenizer
    from tests.serve_helpers import run_app
    from tests.test_loadgen_openai import TinyGPT2, make_openai_app

    _g5_host(monkeypatch)
    app = make_openai_app(
        TinyGPT2(), load_tokenizer("example"), {}, model_id="support-bot-v3",
        entry={"root": "/models/support-bot-v3", "max_model_len": 1024},
        info={"model_id": "/models/support-bot-v3", "model_sha": "0" * 40, "model_dtype": "torch.float32",
              "max_total_tokens": 1024},
    )  # fmt: skip
    b = tmp_path / "b.json"
    with run_app(app) as url:
        doc = _bench(capsys, url, b, "--tokenizer", str(example_tokenizer_path()))
    tok = doc["identity"]["evidence"]["tokenizer"]
    assert tok["compared"] == doc["counts"]["ok"] > 0 and tok["agree"] == tok["compared"]
    wl = tmp_path / "tiny.toml"
    wl.write_text(WORKLOAD.format(model='preset = "tiny-gpt2"'))
    args = ["plan", str(wl), "--bench", str(b), "--no-aws", "--json", "--out", str(tmp_path / "r")]
    code, out, err = run_inproc(capsys, *args)
    assert code == 0, err
    # accepted: the run is the figure used, or (a lower bound below the projection, issue 39) kept beside it
    fleet = json.loads(out)["gpu_fleet"]
    measured = measured_figures(fleet)
    assert measured and LABEL_BOTH in json.dumps(measured), fleet
    # the same file without the tokenizer's evidence: the name alone decides, and "support-bot-v3" is not
    # tiny-gpt2
    d = json.loads(b.read_text())
    d["identity"]["evidence"]["tokenizer"] = {"vocab_size": None, "compared": 0, "agree": 0}
    b2 = tmp_path / "b2.json"
    b2.write_text(json.dumps(d))
    code, out, err = run_inproc(
        capsys, "plan", str(wl), "--bench", str(b2), "--no-aws", "--out", str(tmp_path / "r2")
    )
    assert code == 2 and "support-bot-v3" in err and "tiny-gpt2" in err, err
