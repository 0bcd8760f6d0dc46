"""Issue 28: pinned training layouts (--train-layout, job.layout), the conventional layout beside chipswap's
best, and the parts of the training model the issue names: selective recompute, context parallelism that
shards the state, uneven pipeline stages, TP collectives exposed on the PyTorch stack, the real refusal
cause."""

from __future__ import annotations

import pytest

from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.projection.api import model_work
from chipswap.projection.training.layout import LayoutError, LayoutPin, parse_layout, pinned_layouts
from chipswap.projection.training.model import Layout, layouts, memory, stage_layers, step_time
from chipswap.projection.training.project import coef_of, load_calibration, project_training, system_of
from tests.cli_helpers import run_inproc

CAT = load_catalog()
COEF = coef_of(load_calibration())
W8 = model_work("llama-3-8b")


def _sys(name: str):
    inst = CAT.instance(name)
    return system_of(inst, CAT.chip(inst.accelerator))


P5 = _sys("p5.48xlarge")


def test_parse_layout_reads_every_key() -> None:
    pin = parse_layout("tp=8, pp=1,cp=1,dp=8,sharding=none,recompute=selective,micro_batch=2")
    assert pin == LayoutPin(tp=8, pp=1, cp=1, dp=8, sharding="ddp", recompute="selective", micro_batch=2)
    assert parse_layout("recompute=full").given() == {"recompute": "full"}


def test_every_bad_key_or_value_is_its_own_line() -> None:
    with pytest.raises(LayoutError) as exc:
        parse_layout("tp=x,foo=1,recompute=partial,sharding=fsdp,pp")
    lines = exc.value.lines
    assert len(lines) == 4 and all("\n" not in line for line in lines)
    assert any("'pp' is not key=value" in x for x in lines) and any("unknown key 'foo'" in x for x in lines)
    assert any("tp=x" in x for x in lines) and any("recompute=partial" in x for x in lines)


def test_cli_prints_one_line_per_bad_key_and_exits_2(capsys) -> None:
    code, _, err = run_inproc(
        capsys, "project", "llama-3-8b", "-i", "p5.48xlarge", "--train-tokens", "1e9",
        "--train-layout", "tp=0,zz=1",
    )  # fmt: skip
    assert code == 2
    lines = [x for x in err.splitlines() if x.startswith("chipswap: error:")]
    assert len(lines) == 2 and "tp=0" in lines[0] and "zz" in lines[1]


def test_impossible_pins_name_the_problem() -> None:
    with pytest.raises(LayoutError, match="does not fit 8 GPUs"):
        pinned_layouts(W8, P5, LayoutPin(tp=8, pp=2, dp=8), nodes=1, seq_len=4096, global_batch=512)
    with pytest.raises(LayoutError, match="does not divide the model's 32 attention heads"):
        pinned_layouts(W8, P5, LayoutPin(tp=3), nodes=1, seq_len=4096, global_batch=512)


def test_a_pinned_layout_is_what_is_projected() -> None:
    pin = parse_layout("tp=8,sharding=none,recompute=selective,micro_batch=1")
    t = project_training(W8, "p5.48xlarge", tokens=1e10, catalog=CAT, layout=pin)
    assert t.pinned and (t.layout.tp, t.layout.dp, t.layout.recompute) == (8, 1, "selective")
    assert t.tokens_per_s_per_node.band == pytest.approx(t.family_band)  # no widening for a pinned layout
    assert t.best is not None and t.best_tokens_per_s_per_node > t.tokens_per_s_per_node.value
    assert t.as_dict()["pinned"] is True


def test_unpinned_shows_conventional_fsdp_with_full_recompute_where_memory_needs_it() -> None:
    w70 = model_work("llama-3-70b")
    t = project_training(w70, "p5.48xlarge", tokens=1e10, seq_len=8192, nodes=8, catalog=CAT)
    conv = t.conventional
    assert conv is not None and t.layout == conv and conv.sharding == "fsdp" and conv.tp == 1
    assert not memory(
        w70, P5, Layout(1, 1, 64, 1, "fsdp", "none", 1, 1, conv.global_batch), 8192, "bf16"
    ).fits
    assert conv.recompute == "full"
    best = t.best_tokens_per_s_per_node
    assert best is not None and best >= t.tokens_per_s_per_node.value
    assert t.tokens_per_s_per_node.high >= best * (1 + t.family_band) * (1 - 1e-9)


def test_selective_recompute_sits_between_none_and_full() -> None:
    lay = {rc: Layout(1, 1, 8, 1, "fsdp", rc, 1, 1, 64) for rc in ("none", "selective", "full")}
    mem = {k: memory(W8, P5, v, 8192, "bf16").activations for k, v in lay.items()}
    t = {k: step_time(W8, P5, v, COEF, seq_len=8192, dtype="bf16", nodes=1).compute_s for k, v in lay.items()}
    assert mem["none"] > mem["selective"] > mem["full"]
    assert t["none"] < t["selective"] < t["full"]


def test_context_parallelism_shards_activations_and_the_training_state() -> None:
    """CP8 at 262,144 tokens: the state is sharded over DP x CP and each rank holds 1/8 of the sequence."""
    cp1 = memory(W8, P5, Layout(1, 1, 8, 1, "fsdp", "full", 1, 1, 8), 262144, "bf16")
    cp8 = memory(W8, P5, Layout(1, 1, 1, 8, "fsdp", "full", 1, 1, 8), 262144, "bf16")
    assert cp8.optimizer == pytest.approx(cp1.optimizer)  # 8 shards either way
    assert cp8.activations < cp1.activations / 6 and cp8.fits and not cp1.fits


def test_pipeline_stages_need_not_divide_the_layers() -> None:
    from chipswap.projection.platforms import shipped_dir
    from chipswap.projection.reference_tables import _Models

    w405 = _Models(shipped_dir()).works["llama-3.1-405b"]
    assert w405.dims.layers == 126 and stage_layers(126, 16) == 8
    pps = {x.pp for x in layouts(w405, P5, nodes=16, seq_len=8192, global_batch=2048)}
    assert {4, 8, 16} <= pps  # 126 layers split unevenly
    even = step_time(w405, P5, Layout(8, 2, 8, global_batch=2048), COEF, seq_len=8192, dtype="bf16", nodes=16)
    uneven = step_time(
        w405, P5, Layout(8, 16, 1, global_batch=2048), COEF, seq_len=8192, dtype="bf16", nodes=16
    )
    assert uneven.compute_s > even.compute_s * 126 / 128 * 8 / 8  # the busiest stage carries 8 of 126 layers


def test_tensor_parallel_costs_more_on_the_pytorch_stack() -> None:
    """FSDP8 x TP8 against plain FSDP64 at equal (full) recompute: PyTorch's TP collectives are exposed."""

    def ratio(stack: str) -> float:
        args = {"seq_len": 8192, "dtype": "bf16", "nodes": 8, "stack": stack}
        a = step_time(W8, P5, Layout(1, 1, 64, 1, "fsdp", "full", 1, 1, 512), COEF, **args)
        b = step_time(W8, P5, Layout(8, 1, 8, 1, "fsdp", "full", 1, 1, 512), COEF, **args)
        return b.tokens_per_s_per_device / a.tokens_per_s_per_device

    assert 0.6 < ratio("pytorch") < 0.8
    assert ratio("pytorch") < ratio("megatron") < 1.0


def test_a_batch_that_cannot_split_says_so() -> None:
    with pytest.raises(ChipswapError, match="global batch of 1 sequence cannot split over 512 GPUs") as exc:
        project_training(W8, "p5.48xlarge", tokens=1e9, nodes=64, global_batch=1, catalog=CAT)
    assert "does not fit" not in str(exc.value)


def test_a_family_without_a_calibration_entry_is_refused_with_the_reason() -> None:
    """Trainium2 is projected by transfer (issue 41); a calibration without its entry still refuses."""
    cal = load_calibration()
    bare = {**cal, "families": {k: v for k, v in cal["families"].items() if k != "Trainium2"}}
    with pytest.raises(ChipswapError, match="no published training throughput"):
        project_training(W8, "trn2.48xlarge", tokens=1e9, catalog=CAT, calibration=bare)


def test_a_bad_pin_is_refused_before_any_search(monkeypatch) -> None:
    """Issue 41: the pin is checked whole (heads, layers, devices, batch split) before the layout search
    runs; every bad key is one line, the unreadable keys and the model's checks together."""
    import chipswap.projection.training.project as tr

    calls = []
    monkeypatch.setattr(tr, "search", lambda *a, **k: calls.append(1))
    pin = parse_layout("tp=3,pp=99999,vp=4", defer=True)
    with pytest.raises(LayoutError) as exc:
        project_training(W8, "p5.48xlarge", tokens=1e10, catalog=CAT, layout=pin)
    assert calls == []
    lines = exc.value.lines
    assert any("pp=99999" in x for x in lines) and any("attention heads" in x for x in lines)
    assert len(lines) == len(set(lines)) and all("\n" not in x for x in lines)
    with pytest.raises(LayoutError, match="dp=3: does not divide the global batch"):
        project_training(W8, "p5.48xlarge", catalog=CAT, layout=parse_layout("tp=1,dp=3", defer=True),
                         global_batch=512, nodes=3)  # fmt: skip
    with pytest.raises(LayoutError, match="vp=2: virtual stages need pipeline stages"):
        project_training(W8, "p5.48xlarge", catalog=CAT, layout=parse_layout("pp=1,vp=2", defer=True))


def test_huge_and_repeated_pins_are_short_lines() -> None:
    """A 5,000-digit degree is out of range (never converted), 20,000 repeats of a key are one line, and
    20,000 distinct unknown keys print a bounded number of lines."""
    with pytest.raises(LayoutError) as exc:
        parse_layout("tp=" + "9" * 5000)
    (line,) = exc.value.lines
    assert "expected a whole number 1..1024" in line and len(line) < 200
    with pytest.raises(LayoutError) as exc:
        parse_layout(",".join(["tp=8"] * 20000))
    assert exc.value.lines == ["--train-layout: tp given 20,000 times; give each key once"]
    with pytest.raises(LayoutError) as exc:
        parse_layout(",".join(f"k{i}=1" for i in range(20000)))
    assert len(exc.value.lines) <= 8 and "more problems" in exc.value.lines[-1]


def test_cli_huge_pin_exits_2_without_a_traceback(capsys) -> None:
    code, _, err = run_inproc(
        capsys, "project", "llama-3-8b", "-i", "p5.48xlarge", "--train-tokens", "1e9",
        "--train-layout", "tp=" + "9" * 5000 + ",pp=99,tp=1",
    )  # fmt: skip
    assert code == 2 and "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("chipswap: error:")]
    assert 2 <= len(lines) <= 4 and all(len(x) < 300 for x in lines)


def test_vp_pins_the_virtual_stages() -> None:
    w70 = model_work("llama-3-70b")
    pin = parse_layout("tp=8,pp=4,vp=5")
    t = project_training(w70, "p5.48xlarge", catalog=CAT, layout=pin, nodes=8)
    assert (t.layout.pp, t.layout.vp) == (4, 5)


def test_cli_fp8_recipe_flag(capsys) -> None:
    """--train-fp8-recipe: a training flag (refused without --train-tokens), one line for a bad recipe."""
    code, _, err = run_inproc(
        capsys, "project", "llama-3-8b", "-i", "p5.48xlarge", "--train-fp8-recipe", "rowwise"
    )
    assert code == 2 and "--train-fp8-recipe" in err and "--train-tokens" in err
    code, _, err = run_inproc(
        capsys, "project", "llama-3-8b", "-i", "p5.48xlarge", "--train-tokens", "1e9", "--train-dtype", "fp8",
        "--train-fp8-recipe", "mxfp8",
    )  # fmt: skip
    assert code == 2 and "needs Blackwell" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_inproc(
        capsys, "project", "llama-3-8b", "-i", "p5.48xlarge", "--train-tokens", "1e9", "--train-dtype", "fp8",
        "--train-fp8-recipe", "rowwise", "--json",
    )  # fmt: skip
    assert code == 0, err
    import json

    (t,) = json.loads(out)["training"]
    assert t["fp8_recipe"] == "rowwise" and any("rowwise" in n for n in t["notes"])
