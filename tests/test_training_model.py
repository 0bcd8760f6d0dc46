"""The layout-aware training model (training.model) and its API (projection.training): memory rejects
layouts that do not fit, communication grows with scale, dtypes follow the chip, bands come from the file."""

from __future__ import annotations

import pytest

from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.projection.api import model_work
from chipswap.projection.training.layout import parse_layout
from chipswap.projection.training.model import Layout, memory, step_time
from chipswap.projection.training.project import coef_of, load_calibration, project_training, system_of

CAT = load_catalog()
W8 = model_work("llama-3-8b")
W70 = model_work("llama-3-70b")
CAL = load_calibration()
COEF = coef_of(CAL)


def _sys(name: str):
    inst = CAT.instance(name)
    return system_of(inst, CAT.chip(inst.accelerator))


def test_memory_rejects_unsharded_70b_and_accepts_sharded() -> None:
    p5 = _sys("p5.48xlarge")
    ddp = Layout(tp=1, pp=1, dp=8, sharding="ddp", global_batch=512)
    assert not memory(W70, p5, ddp, 4096, "bf16").fits  # 70B x 18 bytes on one GPU
    sharded = Layout(tp=8, pp=4, dp=1, sharding="ddp", recompute="full", global_batch=512)  # 4 nodes
    m = memory(W70, p5, sharded, 4096, "bf16")
    assert m.fits and m.total < m.usable


def test_fsdp_and_zero1_shard_the_optimizer_state() -> None:
    p5 = _sys("p5.48xlarge")
    parts = {
        sh: memory(W8, p5, Layout(1, 1, 8, sharding=sh, global_batch=512), 4096, "bf16")
        for sh in ("ddp", "zero1", "fsdp")
    }
    assert parts["ddp"].optimizer > parts["zero1"].optimizer == pytest.approx(parts["fsdp"].optimizer)
    assert parts["fsdp"].weights < parts["zero1"].weights == parts["ddp"].weights


def test_data_parallel_over_efa_is_exposed_on_a_thin_network() -> None:
    """Same layout, more nodes: the gradient collectives cross EFA and stop hiding behind compute."""
    p4d = _sys("p4d.24xlarge")
    one = step_time(
        W8, p4d, Layout(1, 1, 8, sharding="zero1", global_batch=64), COEF, seq_len=4096, dtype="bf16", nodes=1
    )
    many = step_time(
        W8,
        p4d,
        Layout(1, 1, 256, sharding="zero1", global_batch=256),
        COEF,
        seq_len=4096,
        dtype="bf16",
        nodes=32,
    )
    assert many.dp_comm_total_s > 10 * one.dp_comm_total_s
    assert many.tokens_per_s_per_device < one.tokens_per_s_per_device


def test_pipeline_bubble_shrinks_with_micro_batches() -> None:
    p5 = _sys("p5.48xlarge")
    few = step_time(W70, p5, Layout(8, 4, 1, global_batch=4), COEF, seq_len=4096, dtype="bf16", nodes=4)
    lots = step_time(W70, p5, Layout(8, 4, 1, global_batch=64), COEF, seq_len=4096, dtype="bf16", nodes=4)
    assert few.bubble_s / few.compute_s > 5 * lots.bubble_s / lots.compute_s


def test_fp8_speed_up_is_the_measured_one_per_stack() -> None:
    """fp8 gains what each stack's published fp8 rows show, not the 2x of the peak-FLOPs ratio: Megatron's
    tuned recipes gain, the PyTorch FSDP stack only as much as LLM Foundry's fp8 rows show."""
    ratio = {}
    for stack in ("megatron", "pytorch"):
        bf = project_training(W8, "p5.48xlarge", tokens=1e10, dtype="bf16", catalog=CAT, stack=stack)
        f8 = project_training(W8, "p5.48xlarge", tokens=1e10, dtype="fp8", catalog=CAT, stack=stack)
        ratio[stack] = f8.tokens_per_s_per_node.value / bf.tokens_per_s_per_node.value
        assert f8.hours is not None and bf.hours is not None and f8.hours.value <= bf.hours.value
        assert any(n.startswith("fp8 tensorwise") for n in f8.notes) and f8.fp8_recipe == "tensorwise"
    s8 = dict(COEF.values)
    assert 1.05 < ratio["megatron"] < min(2.0, s8["s8_megatron"] + 1e-9)
    # issue 41: the PyTorch stack has no fp8 rows of its own: the cross-stack speed-up, never the 1.0 floor
    assert 1.05 < ratio["pytorch"] <= ratio["megatron"]


def test_projection_states_layout_band_and_dtype() -> None:
    for name in ("p5.48xlarge", "p4d.24xlarge", "trn1.32xlarge"):
        t = project_training(W8, name, tokens=1e10, dtype="bf16", catalog=CAT)
        assert t.dtype == "bf16" and t.layout.devices == t.nodes * _sys(name).devices_per_node
        fam = CAL["families"][t.family]
        fig = t.tokens_per_s_per_node
        # the band of the stack and dtype where its rows gave one (issue 41), else the family's
        band = fam.get(f"band_{t.stack}_bf16", fam["band"])
        chosen = fam.get(f"band_chosen_{t.stack}_bf16", fam.get("band_chosen_bf16", fam["band_chosen"]))
        assert t.family_band == pytest.approx(band) and not t.pinned
        # unpinned: at least the CLI default's own held-out band, and wide enough to reach chipswap's best
        assert fig.band >= max(band, chosen) - 1e-12
        assert t.best_tokens_per_s_per_node is not None
        assert fig.high >= t.best_tokens_per_s_per_node * (1 + t.family_band) * (1 - 1e-9)
        assert t.band_basis.startswith(("leave-one-source-out", "one source"))
        assert t.memory_gib["total_gib"] <= t.memory_gib["usable_gib"]
    # like for like, the GPU generations keep their order
    a100 = project_training(W8, "p4d.24xlarge", tokens=1e10, catalog=CAT).tokens_per_s_per_node.value
    h100 = project_training(W8, "p5.48xlarge", tokens=1e10, catalog=CAT).tokens_per_s_per_node.value
    assert h100 > 2 * a100


def test_per_node_throughput_changes_with_nodes_through_communication() -> None:
    from chipswap.projection.training.layout import LayoutPin

    full_shard = LayoutPin(tp=1, sharding="fsdp")  # FSDP over every GPU: its gathers cross EFA at 32 nodes
    runs = [
        project_training(W8, "p4d.24xlarge", tokens=1e10, nodes=n, catalog=CAT, layout=full_shard)
        for n in (1, 32)
    ]
    assert runs[1].tokens_per_s_per_node.value < runs[0].tokens_per_s_per_node.value
    overhead = lambda r: 1 - r.breakdown["compute"] - r.breakdown["elementwise_memory"]  # noqa: E731
    assert overhead(runs[1]) > overhead(runs[0])


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"instance": "trn1.32xlarge", "dtype": "fp8"}, "fp8 training is not projected on Trainium"),
        ({"instance": "p4d.24xlarge", "dtype": "fp8"}, "fp8 training is not projected on A100"),
        ({"instance": "p5.48xlarge", "dtype": "fp8", "fp8_recipe": "mxfp8"}, "mxfp8 .* needs Blackwell"),
        ({"instance": "p5.48xlarge", "dtype": "fp8", "fp8_recipe": "blockwise" * 9}, "unknown fp8 recipe"),
        ({"instance": "p5.48xlarge", "fp8_recipe": "rowwise"}, "applies to fp8 training"),
        ({"instance": "inf2.xlarge"}, "Inferentia"),
        ({"instance": "p5.48xlarge", "nodes": 0}, "nodes must be"),
        ({"instance": "p5.48xlarge", "tokens": float("nan")}, "training tokens must be"),
    ],
)
def test_bad_inputs_are_one_line(kw: dict, match: str) -> None:
    kw = {"tokens": 1e9, **kw}
    with pytest.raises(ChipswapError, match=match) as exc:
        project_training(W8, kw.pop("instance"), catalog=CAT, **kw)
    assert "\n" not in str(exc.value)


def test_a_model_too_big_for_one_node_says_so() -> None:
    with pytest.raises(ChipswapError, match="does not fit on 1 x p4d.24xlarge"):
        project_training(model_work("llama-3-70b"), "p4d.24xlarge", tokens=1e9, seq_len=8192, catalog=CAT)


def test_the_seed_fine_tune_against_published_per_node_figures() -> None:
    """The seed's '20 h on p5 vs 26 h on trn1' fine-tune (ported from the old per-device model's test)."""
    # like for like: the published trn1 row's own layout and scale (NxD, TP32 x DP32 ZeRO-1 on 32 nodes)
    pin = parse_layout("tp=32,pp=1,cp=1,sharding=zero1")
    trn = project_training(W8, "trn1.32xlarge", tokens=1e9, seq_len=8192, catalog=CAT, nodes=32,
                           global_batch=1024, layout=pin)  # fmt: skip
    p5 = project_training(
        W8, "p5.48xlarge", tokens=1e9, seq_len=8192, dtype="fp8", catalog=CAT, stack="megatron"
    )
    # published per node: trn1 ~12,275 tokens/s (Llama-3.1-8B, 32 nodes); p5 between 12,036 x 8 (NeMo 24.07)
    # and 14,451 x 8 (Megatron-Bridge 25.11), Llama 3 8B FP8
    assert trn.tokens_per_s_per_node.low <= 12_275 <= trn.tokens_per_s_per_node.high
    fig = p5.tokens_per_s_per_node
    assert 12_036 * 8 / (1 + fig.band) <= fig.value <= 14_451 * 8 * (1 + fig.band)
    assert fig.value / trn.tokens_per_s_per_node.value > 4  # not the seed's 1.3x
    assert trn.hours is not None
    assert trn.hours.value == pytest.approx(1e9 / (trn.tokens_per_s_per_node.value * 32) / 3600)


def test_memory_follows_the_stack() -> None:
    """What a stack holds at the peak: PyTorch's unfused loss 10 bytes a logit against Megatron's fused 4 (and
    LLM Foundry's fused 4); DTensor TP keeps the gathered matmul inputs whole; PyTorch's "selective" is
    op-level SAC (less kept than Megatron's attention-core recompute, at more recompute time)."""
    p5 = _sys("p5.48xlarge")
    lay = Layout(1, 1, 8, 1, "fsdp", "full", 2, 1, 64)
    m = {s: memory(W8, p5, lay, 8192, "bf16", s) for s in ("pytorch", "megatron", "composer")}
    assert m["pytorch"].logits == pytest.approx(2.5 * m["megatron"].logits)
    assert m["composer"].logits == pytest.approx(m["megatron"].logits)
    tp = Layout(8, 1, 1, 1, "ddp", "full", 2, 1, 2)
    assert (
        memory(W8, p5, tp, 8192, "bf16", "pytorch").activations
        > memory(W8, p5, tp, 8192, "bf16", "megatron").activations
    )
    sel = Layout(1, 1, 8, 1, "fsdp", "selective", 1, 1, 64)
    a = {s: memory(W8, p5, sel, 8192, "bf16", s).activations for s in ("pytorch", "megatron")}
    t = {
        s: step_time(W8, p5, sel, COEF, seq_len=8192, dtype="bf16", nodes=1, stack=s).compute_s
        for s in ("pytorch", "megatron")
    }
    assert a["pytorch"] < a["megatron"]
    assert t["pytorch"] != t["megatron"]


def test_fsdp_with_pipeline_stages_keeps_the_stage_gathered() -> None:
    """FSDP with PP does not re-shard between micro-batches and accumulates unsharded gradients: 4 bytes a
    parameter of the stage, against two gathered layers without PP."""
    p5 = _sys("p5.48xlarge")
    pp2 = memory(W70, p5, Layout(1, 2, 32, 1, "fsdp", "full", 1, 1, 64), 4096, "bf16")
    assert pp2.buffers == pytest.approx(4.0 * W70.params / 2, rel=0.02)
    pp1 = memory(W70, p5, Layout(1, 1, 64, 1, "fsdp", "full", 1, 1, 64), 4096, "bf16")
    assert pp1.buffers < pp2.buffers / 10


def test_a_calibration_only_stack_scales_the_efficiency_by_its_own_factor() -> None:
    """meta-2023 (Meta's LLaMA code) runs at its fitted share of the reference stack's efficiency; a user's
    stack never does."""
    from chipswap.projection.training.model import Coef, efficiency

    a100 = _sys("p4de.24xlarge")
    coef = Coef(COEF.values + (("f_meta2023", 0.5),)) if not COEF.has("f_meta2023") else COEF
    ref = efficiency(a100, coef, "megatron")
    assert efficiency(a100, coef, "meta-2023") == pytest.approx(ref * coef.get("f_meta2023"))
    assert efficiency(a100, coef, "pytorch") == pytest.approx(ref)


def test_fp8_recipes_follow_the_measured_pairs() -> None:
    """Issue 41: tensorwise is what the fitted rows ran; mxfp8 (Blackwell) takes the measured recipe ratio
    of the published pair (calibration [fp8_recipes]); rowwise, with no pair, keeps tensorwise's figure and
    a band at least as wide; a stack with no fp8 rows of its own spans the fitted stacks in its band."""
    recipes = CAL["fp8_recipes"]
    assert 0.5 < recipes["mxfp8"] < 1.5 and "GB300" in recipes["mxfp8_basis"]
    lay = parse_layout("tp=1,sharding=fsdp,recompute=full,micro_batch=1")
    kw = {"tokens": 1e10, "dtype": "fp8", "seq_len": 8192, "catalog": CAT, "layout": lay}
    b200 = {r: project_training(W8, "p6-b200.48xlarge", fp8_recipe=r, **kw) for r in ("tensorwise", "mxfp8")}
    ratio = b200["mxfp8"].tokens_per_s_per_node.value / b200["tensorwise"].tokens_per_s_per_node.value
    assert ratio < 1.0 if recipes["mxfp8"] < 1 else ratio > 1.0
    p5 = {r: project_training(W8, "p5.48xlarge", fp8_recipe=r, **kw) for r in ("tensorwise", "rowwise")}
    t, r = p5["tensorwise"].tokens_per_s_per_node, p5["rowwise"].tokens_per_s_per_node
    assert r.value == pytest.approx(t.value) and r.band > t.band
    assert any("no published rowwise pair" in n for n in p5["rowwise"].notes)
    bf = project_training(W8, "p5.48xlarge", **{**kw, "dtype": "bf16"}).tokens_per_s_per_node
    assert t.band > bf.band  # the cross-stack speed-up's spread widens the pytorch stack's fp8 band
    meg = project_training(W8, "p5.48xlarge", stack="megatron", **kw)
    assert not any("cross-stack" in n for n in meg.notes)


def test_trainium2_is_projected_by_transfer_and_labelled() -> None:
    """Issue 41: trn2 from trn1's calibration by spec sheet, its band the measured transfer error (at least
    trn1's own), labelled; bf16 and fp8; the measured transfer tests are in the calibration."""
    tests = {(t["source"], t["target"]): t for t in CAL["held_out"]["transfer"]}
    assert {("A100", "H100"), ("H100", "A100"), ("H100", "B200")} <= set(tests)
    within = max(t["band"] for t in tests.values() if not t["cross_vendor"])
    for dtype in ("bf16", "fp8"):
        t = project_training(W8, "trn2.48xlarge", tokens=1e10, dtype=dtype, catalog=CAT)
        assert t.family == "Trainium2" and t.tokens_per_s_per_node.value > 0
        assert t.family_band >= within - 1e-9
        assert any(n.startswith("transferred from trn1 by spec sheet, ±") for n in t.notes)
    trn1 = project_training(W8, "trn1.32xlarge", tokens=1e10, catalog=CAT).tokens_per_s_per_node.value
    trn2 = project_training(W8, "trn2.48xlarge", tokens=1e10, catalog=CAT).tokens_per_s_per_node.value
    assert 1.5 < trn2 / trn1 < 8  # 16 Trainium2 chips (667 TF bf16 each) against 16 Trainium (190 TF)
