"""`chipswap check` through the CLI entry point: exit codes, --json, --out/--markdown, --plan, bad input."""

from __future__ import annotations

import json

import pytest
import torch

from chipswap.cli.main import main
from tests import badmodels


def run(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    return e.value.code, out, err


def test_json_report_has_analyze_keys_and_exit_1_on_blockers(capsys, tmp_path):
    md = tmp_path / "r.md"
    out_file = tmp_path / "r.json"
    code, out, _ = run(
        ["check", "tests.badmodels:make_topk", "--json", "--markdown", str(md), "--out", str(out_file)],
        capsys,
    )
    assert code == 1
    j = json.loads(out)
    assert json.loads(out_file.read_text()) == j
    assert j["exit_code"] == 1 and j["verdict"] == "blocked"
    assert j["support_percentage"].endswith("%") and j["versions"]["neuron_sdk"] == "2.32"
    (f,) = [f for f in j["findings"] if f["rule"] == "NCC_EVRF013"]
    assert f["severity"] == "blocker" and f["location"].endswith(f"badmodels.py:{badmodels.bad_line('topk')}")
    assert f["fix"] and f["source"] and f["as_of"]
    text = md.read_text()
    assert "NCC_EVRF013" in text and "blocked" in text


def test_table_output_and_exit_0(capsys):
    code, out, _ = run(["check", "tests.badmodels:make_good", "--target", "trn2", "--sdk", "2.27"], capsys)
    assert code == 0
    assert "ready" in out and "trn2" in out and "2.27" in out


def test_shape_flags_drive_the_capture(capsys):
    code, out, _ = run(["check", "tests.badmodels:make_good", "--shape", "x=4x8:float32", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["shapes"] == ["x=4x8:float32"]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["check", "no-such-model"], "unknown model preset"),
        (["check", "tiny-bert", "--shape", "input_ids=1by8"], "cannot parse --shape"),
        (["check", "tiny-bert", "--shape", "input_ids=1x8:int65"], "unknown dtype"),
        (["check", "tiny-bert", "--shape", "pixels=1x8:int64"], "unknown input name"),
        (["check", "tiny-bert", "--shape", "input_ids=1x4096:int64"], "max_position_embeddings"),
        (["check", "tiny-bert", "--sdk", "2.99"], "no Neuron rules for SDK"),
        (["check", "tiny-bert", "--target", "inf3"], "unknown target"),
        (["check", "nosuchpkg.mod:make"], "cannot import"),
        (["check", "tests.badmodels:make_raises"], "forward raised RuntimeError"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, needle, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2
    assert err.startswith("chipswap: error: ") and needle in err and err.count("\n") == 1


def test_rejected_config_json_exit_2(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "bert", "hidden_size": 30, "num_attention_heads": 4}))
    code, _, err = run(["check", str(p)], capsys)
    assert code == 2 and "transformers rejects the config" in err


@pytest.mark.slow
def test_plan_file(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "schema": "chipswap.shapeplan/1",
                "sequence_buckets": [8, 16],
                "batch_buckets": [1],
                "other": {"ignored": True},
            }
        )
    )
    code, out, _ = run(["check", "tiny-distilbert", "--plan", str(plan), "--json"], capsys)
    assert code == 0
    assert json.loads(out)["shapes"] == [
        "input_ids=1x8:int64,attention_mask=1x8:int64",
        "input_ids=1x16:int64,attention_mask=1x16:int64",
    ]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "chipswap.shapeplan/1", "sequence_buckets": [0, 8]}))
    code, _, err = run(["check", "tiny-distilbert", "--plan", str(bad)], capsys)
    assert code == 2 and "sequence_buckets" in err


def test_pt2_with_dynamic_dims_is_blocked_until_shapes_are_fixed(tmp_path, capsys):
    m, x = badmodels.make_good()
    x = {"x": torch.randn(4, 8)}
    ep = torch.export.export(m, (), x, dynamic_shapes={"x": {0: torch.export.Dim("batch", min=2, max=64)}})
    p = tmp_path / "good.pt2"
    torch.export.save(ep, str(p))
    code, out, _ = run(["check", str(p), "--json"], capsys)
    j = json.loads(out)
    assert code == 1 and any(
        f["rule"] == "NCC_EMOD025" and "dynamic dims" in f["message"] for f in j["findings"]
    )
    code, out, _ = run(["check", str(p), "--shape", "x=4x8:float32", "--json"], capsys)
    assert code == 0


@pytest.mark.slow
def test_plan_file_read_by_content_and_no_symbolic_bookkeeping_findings(tmp_path, capsys):
    plan = tmp_path / "plan.txt"  # not .json: read by content
    plan.write_text(
        json.dumps({"schema": "chipswap.shapeplan/1", "sequence_buckets": [16, 32, 64], "batch_buckets": [1]})
    )
    code, out, err = run(["check", "tiny-distilbert", "--plan", str(plan), "--json"], capsys)
    assert code == 0, err
    j = json.loads(out)
    assert len(j["shapes"]) == 3 and "1x64" in j["shapes"][-1]
    for f in j["findings"]:
        assert "sym_" not in f["op"] and "assert_scalar" not in f["op"]
        assert "_empty_nn_module_stack" not in (f["module_path"] or "")
        for loc in [f["location"], *f["other_locations"]]:
            assert loc is None or not loc.startswith("torch/")
    (emb,) = [f for f in j["findings"] if f["rule"] == "NCC_EVRF062"]
    assert emb["op"] == "aten::embedding" and emb["location"].endswith("modeling_distilbert.py:98")


def test_bookkeeping_nodes_and_torch_frames_are_not_locations(tmp_path):
    import os

    from chipswap.readiness.capture import graph

    assert graph.is_bookkeeping("aten::sym_size", None)
    assert graph.is_bookkeeping("aten::sym_constrain_range_for_size", None)
    assert graph.is_bookkeeping("aten::_assert_scalar", None)
    assert not graph.is_bookkeeping("aten::embedding", None)
    assert not graph.is_bookkeeping("python::getitem", torch.zeros(1))
    # torch reached through another path (a lib64 symlink, a second venv) is still library code
    site = tmp_path / "lib64" / "python3.11" / "site-packages"
    (site / "torch" / "fx" / "passes").mkdir(parents=True)
    rt = site / "torch" / "fx" / "passes" / "runtime_assert.py"
    rt.write_text("")
    user = tmp_path / "mine.py"
    user.write_text("")
    frames = [(str(user), 7, "forward", "x = emb(ids)"), (str(rt), 24, "insert_deferred_runtime_asserts", "")]
    assert graph.pick_frame(frames) == frames[0]
    assert graph.pick_frame(frames[1:]) is None
    assert os.path.exists(rt)


def test_plan_help_names_where_plans_come_from(capsys):
    code, out, _ = run(["check", "--help"], capsys)
    assert code == 0 and "chipswap shapes --out" in " ".join(out.split())


@pytest.mark.parametrize(
    "target,compiler,absent", [("inf1", "neuron-cc", "neuronx-cc"), ("inf2", "neuronx-cc", None)]
)
def test_compiler_is_labelled_per_target(target, compiler, absent, capsys, tmp_path):
    md = tmp_path / "r.md"
    code, out, _ = run(
        ["check", "tests.badmodels:make_good", "--target", target, "--markdown", str(md)], capsys
    )
    assert code == 0
    head = out.splitlines()[0]
    assert compiler in head and compiler in md.read_text()
    if absent:
        assert absent not in head and absent not in md.read_text().split("## ")[0].split("- Shapes")[0]


def _cfg(tmp_path, layers):
    p = tmp_path / "config.json"
    p.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 32,
                "num_hidden_layers": layers,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "intermediate_size": 64,
                "vocab_size": 128,
                "max_position_embeddings": 64,
                "architectures": ["LlamaForCausalLM"],
            }
        )
    )
    return str(p)


@pytest.mark.slow
def test_repeated_layers_checked_as_a_copy_unless_full_model(tmp_path, capsys):
    cfg = _cfg(tmp_path, 6)
    code, out, _ = run(["check", cfg, "--shape", "input_ids=1x8", "--json"], capsys)
    small = json.loads(out)
    code_full, out, _ = run(["check", cfg, "--shape", "input_ids=1x8", "--json", "--full-model"], capsys)
    full = json.loads(out)
    assert code == code_full == 0
    assert (
        "2-layer copy of its 6 identical layers" in small["checked"] and full["checked"] == "the full model"
    )
    assert sum(small["supported_operators"].values()) < sum(full["supported_operators"].values())
    rules = lambda j: sorted({(f["rule"], f["severity"]) for f in j["findings"]})  # noqa: E731
    assert rules(small) == rules(full)
    assert set(small["supported_operators"]) == set(full["supported_operators"])


def test_training_flag_reports_phases(capsys):
    code, out, err = run(
        ["check", "tests.badmodels:make_good", "--training", "--json", "--target", "trn1"], capsys
    )
    j = json.loads(out)
    assert code == 0, err
    assert j["training"] is True and j["phases"]["backward"] > 0 and j["phases"]["optimizer"] > 0


def test_training_of_a_pt2_is_a_usage_error(tmp_path, capsys):
    m, x = badmodels.make_good()
    p = tmp_path / "good.pt2"
    torch.export.save(torch.export.export(m, (), x), str(p))
    code, _, err = run(["check", str(p), "--training"], capsys)
    assert code == 2 and "--training needs the model's code" in err


def test_help_lists_the_new_flags(capsys):
    code, out, _ = run(["check", "--help"], capsys)
    text = " ".join(out.split())
    for flag in ("--training", "--full-model", "--trust-pickle", "--factory-path"):
        assert flag in text
