"""`chipswap trial` end to end with real parts: the kit's bench step against real OpenAI-compatible
streaming servers on loopback, both running a GPT-2 built from the shipped tiny config (random weights, real
transformers decoding): tests/test_loadgen_openai.py's server as the Neuron side and `transformers serve` as
the GPU endpoint the workload names, feeding `chipswap plan --bench`; the encoder kit's launch /
bench / stop with `chipswap compile` + `chipswap serve` (ONNX Runtime here; the Neuron launch runs only on
Neuron hosts); the command on a bundled example; and its one-line refusals (nothing to trial, an
existing kit)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_helpers import measured_figures, run_inproc
from tests.serve_helpers import free_port, run_app, stop_process
from tests.trial_helpers import script_env

pytestmark = pytest.mark.slow

WORKLOAD = """title = "tiny trial $(touch PWNED)"
kind = "serving"

[model]
preset = "{preset}"
task = "{task}"

[traffic]
steady_rps = {rps}
prompt_tokens = {prompt}
{output}mode = "{mode}"

[fleet]
instance = "{gpu}"
count = 1
{fleet_extra}
[slo]
{slo}

[targets]
candidates = ["{cand}"]

[porting]
engineer_days = 5
"""


def _workload(tmp_path: Path, name: str, fleet_extra: str = "", **kw) -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(WORKLOAD.format(fleet_extra=fleet_extra, **kw))
    return p


# the model and its traffic, per kit mode (the workload's [model] and [traffic] tables)
# 256-token prompts: inside what the physical model's calibration reaches (fitted on 1.5K-59.5K; a prompt more
# than 3 doublings shorter is outside it and has no projected layout to trial)
LLM = dict(preset="llama-3-8b", task="causal-lm", mode="llm", rps=4, prompt=256, output="output_tokens = 6\n")
ENCODER = dict(
    preset="tiny-bert", task="sequence-classification", mode="encoder", rps=50, prompt=16, output=""
)


def _llm(tmp_path: Path, slo: str = "p99_ms = 20000\nttft_p99_ms = 2000", fleet_extra: str = "") -> Path:
    return _workload(tmp_path, "llm", fleet_extra, **LLM, gpu="g6e.12xlarge", slo=slo, cand="inf2.48xlarge")


def _tiny_gpt2_dir(root: Path) -> Path:
    """A Hugging Face model folder: GPT-2 from the shipped tiny-gpt2 config (random weights, seed 0) and the
    shipped 1k WordPiece tokenizer with no special tokens (so every generated token streams as text)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    from chipswap.models import load_preset
    from chipswap.serve.tokenizer import example_tokenizer_path

    out = root / "tiny-gpt2-hf"
    cfg = dict(load_preset("tiny-gpt2")["config"])
    cfg.pop("model_type")
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", **cfg)).save_pretrained(out)
    tok = json.loads(example_tokenizer_path().read_text())
    for t in tok.get("added_tokens", []):
        t["special"] = False
    (root / "tok.json").write_text(json.dumps(tok))
    PreTrainedTokenizerFast(tokenizer_file=str(root / "tok.json")).save_pretrained(out)
    return out


@contextlib.contextmanager
def transformers_serve(model: Path) -> Iterator[str]:
    """`transformers serve MODEL` on a loopback port (offline); yields its base URL, stops it by its pid."""
    import httpx

    port = free_port()
    exe = Path(sys.executable).parent / "transformers"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    args = [str(exe), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else "transformers serve exited"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        else:
            raise AssertionError("transformers serve did not answer /health within 180 s")
        yield url
    finally:
        stop_process(proc)


def test_bench_step_against_a_real_openai_server_feeds_plan_bench(tmp_path, capsys):
    """The README's flow: bench the Neuron side (the loadgen tests' tiny GPT-2 server) and the GPU endpoint
    the workload names (`transformers serve`, a third-party OpenAI-compatible server), then
    `chipswap plan WORKLOAD --bench results/*.json` uses both as measured."""
    from chipswap.serve.tokenizer import load_tokenizer
    from tests.test_loadgen_openai import TinyGPT2, make_openai_app

    log: dict = {}
    kit = tmp_path / "kit"
    with (
        run_app(make_openai_app(TinyGPT2(), load_tokenizer("example"), log)) as url,
        transformers_serve(_tiny_gpt2_dir(tmp_path)) as gpu_url,
    ):
        wl = _llm(tmp_path, fleet_extra=f'endpoint = "{gpu_url}"\n')
        code, out, err = run_inproc(capsys, "trial", str(wl), "--out", str(kit))
        assert code == 0, err
        assert f"GPU baseline g6e.12xlarge at {gpu_url}" in out
        assert (kit / "traffic.csv").read_text().splitlines()[1] == "256,6"  # the workload's lengths
        env = script_env(URL=url, RATE="4", REPLAY_S="2", SWEEP_RATES="6", SWEEP_S="2", WARMUP_REQUESTS="2")
        # the kit's default for a vLLM endpoint asks for ignore_eos; transformers serve refuses the field:
        # one line naming the fix, a non-zero exit, no results file
        r = subprocess.run(
            ["bash", str(kit / "bench.sh"), "gpu"], env=env, capture_output=True, text=True, timeout=300
        )
        last = r.stderr.strip().splitlines()[-1]
        # 2 warm-up requests, both refused: a run with 0 successes (5 or more would stop it early)
        assert r.returncode == 1 and last.startswith("bench: error: the warmup run had 0 successful"), (
            r.stderr
        )
        assert "rerun as EXTRA_BODY= ./bench.sh gpu" in last and "HTTP 422" in last, last
        assert not (kit / "results" / "gpu.json").exists()
        # gpu: the endpoint comes from the workload, not the environment; EXTRA_BODY= because transformers
        # serve answers vLLM's ignore_eos (the kit's default for a vLLM endpoint) with HTTP 422
        for side, extra in (("neuron", {}), ("gpu", {"EXTRA_BODY": ""})):
            r = subprocess.run(
                ["bash", str(kit / "bench.sh"), side],
                env={**env, **extra},
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert not list(tmp_path.glob("PWNED*")) and "tiny trial $(touch PWNED)" in r.stdout
    for side, instance in (("neuron", "inf2.48xlarge"), ("gpu", "g6e.12xlarge")):
        runs = sorted(p.name for p in (kit / "results/runs" / side).glob("*.json"))
        assert runs == ["replay.json", "sweep-1.json", "warmup.json"]
        for n in runs:  # every request was sent and answered by the real server
            counts = json.loads((kit / "results/runs" / side / n).read_text())["counts"]
            assert counts["ok"] == counts["sent"] > 0, (n, counts)
        picked = json.loads((kit / f"results/{side}.json").read_text())
        assert picked["target"]["protocol"] == "openai-completions" and picked["instance"]["name"] == instance
        assert picked["slo"]["ttft_ms"] == 2000 and picked["goodput"]["requests_per_s"] > 0
    assert all(e["max_tokens"] == 6 for e in log.values())  # the workload's output length
    gpu_run = json.loads((kit / "results/runs/gpu/replay.json").read_text())
    assert gpu_run["throughput"]["output_tokens_per_s"] > 0  # tokens streamed by transformers serve
    # the follow-up the README names: measurements outrank the projection on both sides
    files = sorted(str(p) for p in (kit / "results").glob("*.json"))
    args = ["plan", str(wl), "--json", "--out", str(tmp_path / "report"), "--no-aws"]
    code, out, err = run_inproc(capsys, *args, *(x for f in files for x in ("--bench", f)))
    # a tiny GPT-2 on this CPU is neither llama-3-8b nor an L40S: refused with one line until accepted
    assert code == 2 and "do not measure this workload" in err and err.count("\n") == 1, err
    benches = [x for f in files for x in ("--bench", f)]
    code, out, err = run_inproc(capsys, *args, "--accept-bench-mismatch", *benches)
    assert code == 0, err
    result = json.loads(out)
    neuron = next(c for c in result["candidates"] if c["instance"] == "inf2.48xlarge")["fleet"]
    for fleet, side in ((neuron, "neuron"), (result["gpu_fleet"], "gpu")):
        picked = json.loads((kit / f"results/{side}.json").read_text())
        # used, or (a lower bound below the projection, issue 39) kept beside the projection
        values = [f["value"] for f in measured_figures(fleet, "measured; mismatch accepted")]
        assert values == [pytest.approx(picked["goodput"]["requests_per_s"], rel=1e-3)], fleet


def _readme_steps(readme: str) -> list[str]:
    """The commands of the README's numbered steps, in order."""
    return re.findall(r"^\d+\. `([^`]+)`", readme, flags=re.M)


def test_encoder_kit_readme_runs_end_to_end_from_the_kit_folder(tmp_path, capsys):
    """Every command of the README's Steps, verbatim, from the kit folder (launch: chipswap compile + serve,
    ONNX Runtime here), ending in its `chipswap plan WORKLOAD --bench results/*.json`."""
    wl = _workload(tmp_path, "enc", **ENCODER, gpu="g5.xlarge", slo="p99_ms = 2000", cand="inf2.xlarge")
    kit = tmp_path / "kit"
    code, out, err = run_inproc(capsys, "trial", str(wl), "--out", str(kit))
    assert code == 0, err
    assert 'SEQ_LEN="${SEQ_LEN:-16}"' in (kit / "launch.sh").read_text()
    steps = _readme_steps((kit / "README.md").read_text())
    assert steps == [
        "./launch.sh",
        "./bench.sh neuron",
        "./stop.sh",
        f"chipswap plan workload/{wl.name} --bench results/*.json",  # the kit's copy (issue 39)
    ]
    port = free_port()
    env = script_env(
        BACKEND="onnxruntime",
        BATCH_SIZES="1",
        REPLICAS="1",
        PORT=str(port),
        READY_TIMEOUT_S="240",
        CHIPSWAP_ORT_THREADS="1",
        URL=f"http://127.0.0.1:{port}",
        RATE="5",
        REPLAY_S="2",
        SWEEP_RATES="5 10",
        SWEEP_S="2",
        WARMUP_REQUESTS="2",
    )

    def step(cmd: str, timeout: int = 400) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", cmd], cwd=kit, env=env, capture_output=True, text=True, timeout=timeout
        )

    try:
        r = step(steps[0])
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:] + _logs(kit)
        assert "launch: ready on" in r.stdout
        r = step(steps[1], 300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    finally:
        s = step(steps[2], 120)
    assert s.returncode == 0 and not list((kit / "run").glob("*.pid"))
    picked = json.loads((kit / "results/neuron.json").read_text())
    assert picked["target"]["protocol"] == "chipswap-predict" and picked["instance"]["name"] == "inf2.xlarge"
    assert picked["counts"]["ok"] > 0 and picked["buckets"][0]["seq_len"] == 16
    compiled = json.loads((kit / "compiled.json").read_text())
    assert "tiny-bert" in json.dumps(compiled)
    # the follow-up, verbatim from the kit folder: it finds the workload and the results; the figure was
    # measured on this CPU, so the plan refuses it as inf2.xlarge's -- and takes it when told to
    r = step(steps[3] + " --no-aws --json --out report", 600)
    assert r.returncode == 2 and "workload file not found" not in r.stderr, r.stderr
    assert "do not measure this workload" in r.stderr and "CPU" in r.stderr and r.stderr.count("\n") == 1
    r = step(steps[3] + " --no-aws --json --out report --accept-bench-mismatch", 600)
    assert r.returncode == 0, r.stderr[-2000:]
    fleet = next(c for c in json.loads(r.stdout)["candidates"] if c["instance"] == "inf2.xlarge")["fleet"]
    assert measured_figures(fleet, "measured; mismatch accepted: another machine"), fleet


def test_the_docs_readme_excerpt_is_the_kits(tmp_path):
    """docs/trial.md's README excerpt is what `chipswap trial` writes today (scripts/trial_docs.py)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "trial_docs.py"
    spec = importlib.util.spec_from_file_location("trial_docs", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out, readme = mod.fresh_kit()
    doc = mod.DOC.read_text()
    assert mod.block(doc) == mod.excerpt(readme)
    # the command's own lines and the kit's file list (issue 39: the hand-kept tree went stale)
    assert mod.block(doc, mod.SUMMARY_BEGIN, mod.SUMMARY_END) == mod.summary(out)


def _logs(kit: Path) -> str:
    return (
        "".join(p.read_text()[-2000:] for p in sorted((kit / "logs").glob("*.log")))
        if (kit / "logs").exists()
        else ""
    )


def test_trial_on_the_classifier_example_writes_the_whole_kit(tmp_path, capsys):
    kit = tmp_path / "kit"
    code, out, err = run_inproc(capsys, "trial", "--example", "classifier-serving", "--out", str(kit))
    assert code == 0, err
    files = sorted(str(p.relative_to(kit)) for p in kit.rglob("*") if p.is_file())
    assert files == sorted(
        [
            "README.md",
            "bench.sh",
            "launch.sh",
            "stop.sh",
            "traffic.csv",
            "trial.json",
            "deploy/sagemaker.json",
            "deploy/k8s/deployment.yaml",
            "deploy/k8s/hpa.yaml",
            "deploy/k8s/prometheus-adapter-rules.yaml",
            "deploy/k8s/service.yaml",
        ]
    )
    trial = json.loads((kit / "trial.json").read_text())
    assert trial["spec"]["neuron"]["instance"] == "inf2.xlarge" and trial["spec"]["verdict"].startswith(
        "move"
    )
    assert trial["follow_up"] == "chipswap plan --example classifier-serving --bench results/*.json"
    assert trial["cost"]["line"] in out and "Trial: " in trial["cost"]["line"]
    readme = (kit / "README.md").read_text()
    assert "exercised only on Neuron hosts" in readme and trial["follow_up"] in readme
    # a second run without --force: one line, exit 2, the kit untouched
    before = (kit / "README.md").stat().st_mtime_ns
    code, out, err = run_inproc(capsys, "trial", "--example", "classifier-serving", "--out", str(kit))
    assert (
        code == 2
        and err.count("\n") == 1
        and "--force" in err
        and (kit / "README.md").stat().st_mtime_ns == before
    )


def test_nothing_to_trial_is_one_line(tmp_path, capsys):
    code, out, err = run_inproc(
        capsys, "trial", str(_llm(tmp_path, "p99_ms = 1")), "--out", str(tmp_path / "k"), "-q"
    )
    # -q: without the stage lines (issue 39) stderr is the error alone, one line
    assert code == 2 and err.count("\n") == 1 and "nothing to trial: no Neuron candidate meets the SLO" in err
    # the blocking objective is named with its value (issue 30), not an unloaded latency of another one
    assert "end-to-end p99 alone is" in err and "> 1 ms" in err and not (tmp_path / "k").exists()
    code, out, err = run_inproc(capsys, "trial", "--example", "finetune", "--out", str(tmp_path / "k"))
    assert code == 2 and "nothing to trial" in err and "'training'" in err and not (tmp_path / "k").exists()
    code, out, err = run_inproc(
        capsys, "trial", "--example", "finetune", "--stack", "tnx-2.18", "--out", str(tmp_path / "k")
    )
    assert code == 2 and err.count("\n") == 1


def test_bad_options_are_one_line_before_any_plan_runs(tmp_path, capsys):
    bad = _llm(tmp_path, fleet_extra='endpoint = "ftp://gpu"\n')
    for argv, words in (
        (["--stack", "nxdi-foo"], "unknown Neuron stack 'nxdi-foo'; use one of nxdi-vllm, nxdi-tgi"),
        (["--stack", "tnx-2.18"], "SDK 2.18 published-tables stack"),
        (["--gpu-endpoint", "http://user:pw@gpu"], "put no credentials in the URL"),
        ([str(bad)], "fleet: expected endpoint to be an http(s):// URL"),
        (["--out", str(bad)], "is a file or a link"),
    ):
        code, out, err = run_inproc(capsys, "trial", "--out", str(tmp_path / "k"), *argv)
        assert code == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "k").exists()
