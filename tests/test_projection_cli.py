"""`chipswap project` and `chipswap calibrate` through the real CLI entry point: JSON output, tables, and
one-line exit-2 errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import run_inproc, run_json

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"


def test_project_json_for_one_shape(capsys):
    data = run_json(
        capsys,
        "project",
        "llama-3-8b",
        "-i",
        "inf2.xlarge",
        "-i",
        "p5.48xlarge",
        "--prompt-tokens",
        "2048",
        "--output-tokens",
        "128",
        "--json",
    )
    inf2, p5 = data["projections"]
    assert inf2["fits"] and inf2["config"]["tp_degree"] == 2 and inf2["family"] == "Inferentia2"
    assert p5["requests_per_s"]["value"] > 10 * inf2["requests_per_s"]["value"]
    assert inf2["requests_per_s"]["source"] == "projected" and inf2["band"] > 0
    assert data["work_source"] == "closed form"


def test_project_table_on_the_bundled_trace_and_a_model_that_does_not_fit(capsys):
    code, out, err = run_inproc(
        capsys, "project", "llama-3-70b", "--instance", "inf2.xlarge", "-i", "trn1.32xlarge"
    )
    assert code == 0, err
    assert "8,819 requests from bundled Azure code trace" in out
    assert "does not fit" in out and "131.4 GiB" in out
    assert "trn1.32xlarge" in out and "±" in out and "configurations not chosen" in out


def test_project_training(capsys):
    code, out, err = run_inproc(
        capsys,
        "project",
        "llama-3-8b",
        "-i",
        "trn1.32xlarge",
        "-i",
        "p5.48xlarge",
        "--train-tokens",
        "2e9",
        "--seq-len",
        "8192",
        "--json",
    )
    assert code == 0, err
    trn, p5 = json.loads(out)["training"]
    assert trn["dtype"] == "bf16" and p5["dtype"] == "bf16"  # like for like by default
    assert trn["hours"]["value"] > 2 * p5["hours"]["value"]
    for r in (trn, p5):
        assert r["layout"]["tp"] * r["layout"]["pp"] * r["layout"]["cp"] * r["layout"]["dp"] >= 8
        assert r["tokens_per_s_per_node"]["band"] > 0
        assert r["band_basis"].startswith(("leave-one-source-out", "one source"))  # issue 41: per stack


def test_project_training_table_names_layout_and_band(capsys):
    code, out, err = run_inproc(
        capsys, "project", "llama-3-8b", "-i", "p4d.24xlarge", "--train-tokens", "1e10",
        "--train-dtype", "bf16", "--nodes", "8",
    )  # fmt: skip
    assert code == 0, err
    assert "TP" in out and "global batch" in out and "±" in out and "step time" in out and "not chosen" in out


def test_project_encoder_mode(capsys):
    code, out, err = run_inproc(
        capsys, "project", "distilbert-base", "-i", "inf2.xlarge", "--prompt-tokens", "128", "--bucket", "128"
    )
    assert code == 0, err
    assert "inferences/s" in out and "Inferentia2, encoder" in out


ONE_REQUEST = ["llama-3-8b", "-i", "inf2.xlarge", "--prompt-tokens", "9", "--output-tokens", "1"]


@pytest.mark.parametrize(
    "args,words",
    [
        (
            ["llama-3-8b", "-i", "inf9.huge", "--prompt-tokens", "10", "--output-tokens", "1"],
            "unknown instance type",
        ),
        (
            [
                "llama-3-8b",
                "-i",
                "trn2.48xlarge",
                "--stack",
                "tnx-2.18",
                "--prompt-tokens",
                "10",
                "--output-tokens",
                "1",
            ],
            "measured",
        ),
        (
            [
                "llama-3-8b",
                "-i",
                "inf2.xlarge",
                "--stack",
                "vllm-neuron",
                "--prompt-tokens",
                "9",
                "--output-tokens",
                "1",
            ],
            "unknown --stack",
        ),
        (
            [
                "llama-3-8b",
                "-i",
                "inf2.xlarge",
                "--stack",
                "trtllm",
                "--prompt-tokens",
                "9",
                "--output-tokens",
                "1",
            ],
            "gpu stack",
        ),
        (
            ["llama-3-8b", "-i", "inf2.xlarge", "--tp", "0", "--prompt-tokens", "9", "--output-tokens", "1"],
            "--tp must be",
        ),
        (
            ["llama-3-8b", "-i", "trn1.32xlarge", "--train-tokens", "1e9", "--tp", "8"],
            "pin an LLM serving layout",
        ),
        (["llama-3-8b", "-i", "inf2.xlarge", "--prompt-tokens", "10"], "--output-tokens is missing"),
        (["llama-3-8b", "-i", "inf2.xlarge", "--output-tokens", "10"], "without --prompt-tokens"),
        (["llama-3-8b", "-i", "inf2.xlarge", "--prompt-tokens", "0", "--output-tokens", "1"], "must be >= 1"),
        (
            [*ONE_REQUEST, "--mode", "x"],
            "unknown --mode",
        ),
        (
            [*ONE_REQUEST, "--dtype", "fp4"],
            "not served",
        ),
        (
            ["llama-3-8b", "-i", "inf2.xlarge", "--train-tokens", "1e9"],
            "Inferentia (inference) instance",
        ),
        (
            ["llama-3-8b", "-i", "trn1.32xlarge", "--train-tokens", "1e9", "--train-dtype", "fp8"],
            "fp8 training is not projected on Trainium",
        ),
        (
            ["nope-model", "-i", "inf2.xlarge", "--prompt-tokens", "9", "--output-tokens", "1"],
            "unknown model preset",
        ),
        (
            ["llama-3-8b", "-i", "inf2.xlarge", "--trace", "missing.csv", "--prompt-tokens", "9"],
            "both --trace",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, args, words):
    code, out, err = run_inproc(capsys, "project", *args)
    assert code == 2, (out, err)
    assert words in err and err.startswith("chipswap: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.slow  # resolve_model builds the 8B config on the meta device (transformers import)
def test_config_missing_a_size_names_the_field(capsys, tmp_path):
    cfg = json.loads(
        (Path(__file__).resolve().parents[1] / "src/chipswap/data/models/llama-3-8b.json").read_text()
    )
    conf = dict(cfg["config"])
    del conf["num_hidden_layers"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(conf))
    code, out, err = run_inproc(
        capsys, "project", str(path), "-i", "inf2.xlarge", "--prompt-tokens", "9", "--output-tokens", "1"
    )
    assert code == 2 and "num_hidden_layers" in err and err.count("\n") == 1


def test_calibrate_bad_reference_and_out(capsys, tmp_path):
    code, out, err = run_inproc(capsys, "calibrate", "--reference", str(tmp_path), "--check")
    assert code == 2 and "reference tables not found" in err
    code, out, err = run_inproc(capsys, "calibrate", "--out", str(tmp_path / "nope"))
    assert code == 2 and "--out folder does not exist" in err


@pytest.mark.slow
@pytest.mark.skipif(
    not (REFERENCE / "neuron-benchmarks").is_dir(), reason="../shared/reference is not checked out"
)
def test_calibrate_writes_files_that_check_clean(capsys, tmp_path):
    code, out, err = run_inproc(
        capsys, "calibrate", "--reference", str(REFERENCE.resolve()), "--out", str(tmp_path), "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert len(data["written"]) == 13 and (tmp_path / "inferentia2.toml").is_file()
    assert (tmp_path / "physics.toml").is_file() and "Trainium2" in data["physics"]["families"]
    (tmp_path / "h100.toml").write_text(
        (tmp_path / "h100.toml").read_text().replace("compute_eff_8 = ", "compute_eff_8 = 1")
    )
    code, out, err = run_inproc(
        capsys, "calibrate", "--reference", str(REFERENCE.resolve()), "--out", str(tmp_path), "--check"
    )
    assert code == 1 and "H100" in out
