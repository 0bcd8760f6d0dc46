"""Zoo: transformers architectures from small configs check with 0 crashes and 0 false blockers.

* 8 shipped tiny presets (bert, distilbert, roberta, gpt2, llama, mistral, t5, vit) with a stable op
  inventory: tests/snapshots/check_zoo_ops.json holds, per preset, the core-ATen op counts by status. It
  depends on the torch and transformers versions (torch 2.13, transformers 5.x); after an intended upgrade,
  regenerate it with CHIPSWAP_UPDATE_SNAPSHOTS=1 and review the diff.
* 23 more architectures from tests/zoo_configs.py (text encoders, decoders, encoder-decoders, audio, vision
  CNNs and transformers, mixture of experts), each checked with the inputs chipswap derives from the model's
  forward signature and config. Every one is clean except the MoE models, whose single finding is the
  data-dependent expert routing at the experts loop (docs/readiness.md, "Zoo", justifies it).
* The decoders also with --training: backward and optimizer ops are captured, still 0 false blockers.
"""

from __future__ import annotations

import inspect
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from chipswap.readiness.check import run_check
from tests.zoo_configs import CONFIGS, FAMILY, MOE_EXPERTS, PRESETS

SNAP = Path(__file__).parent / "snapshots" / "check_zoo_ops.json"
UPDATE = os.environ.get("CHIPSWAP_UPDATE_SNAPSHOTS") == "1"


def _inventory(report) -> dict:
    a = report.assessment
    return {s: a.counts(s) for s in ("supported", "unsupported", "unknown")}


def _not_info(report) -> list[tuple[str, str, str | None]]:
    return [(f.rule, f.op, f.location) for f in report.findings if f.severity != "info"]


@pytest.fixture(scope="module")
def snapshot():
    return json.loads(SNAP.read_text()) if SNAP.exists() else {}


@pytest.fixture(scope="module")
def updated():
    out: dict = {}
    yield out
    if UPDATE and out:
        old = json.loads(SNAP.read_text()) if SNAP.exists() else {}
        old.update(out)
        SNAP.write_text(json.dumps(dict(sorted(old.items())), indent=1, sort_keys=True) + "\n")


def test_zoo_covers_at_least_20_architectures_in_every_family():
    families = Counter({**FAMILY, **PRESETS}.values())
    assert len(CONFIGS) + len(PRESETS) >= 20
    for family in (
        "text encoder",
        "decoder",
        "encoder-decoder",
        "vision CNN",
        "vision transformer",
        "mixture of experts",
    ):
        assert families[family] >= 2, family


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_zoo_checks_clean_with_stable_inventory(preset, snapshot, updated):
    report = run_check(
        preset, ["input_ids=1x16:int64", "attention_mask=1x16:int64"] if preset != "tiny-vit" else None
    )
    assert report.exit_code == 0, [(f.rule, f.location) for f in report.blockers]
    assert report.inventory.exported and not report.inventory.issues
    inv = _inventory(report)
    assert sum(inv["supported"].values()) > 20
    # module paths come from nn_module_stack with the wrapper prefix removed
    paths = {op.module_path for op, _ in report.assessment.statuses}
    assert all(not p.startswith("model.model.") for p in paths)
    if UPDATE:
        updated[preset] = inv
    else:
        assert preset in snapshot, "no snapshot: run with CHIPSWAP_UPDATE_SNAPSHOTS=1"
        assert inv == snapshot[preset]


def _experts_loop_line(class_name: str) -> tuple[str, int]:
    """(file name, line) of the loop over the experts hit in a transformers experts class: where routing sizes
    become data-dependent. Read from the installed transformers source, not copied from output."""
    import transformers

    module = {"MixtralExperts": "mixtral", "Qwen2MoeExperts": "qwen2_moe"}[class_name]
    mod = __import__(f"transformers.models.{module}.modeling_{module}", fromlist=[class_name])
    cls = getattr(mod, class_name)
    lines, start = inspect.getsourcelines(cls.forward)
    for i, text in enumerate(lines):
        if text.strip().startswith("for ") and "expert_hit" in text:
            return Path(inspect.getsourcefile(cls)).name, start + i
    raise AssertionError(f"no loop over expert_hit in {class_name} (transformers {transformers.__version__})")


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_zoo_architecture_checks_with_no_false_blockers(arch, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CONFIGS[arch]))
    report = run_check(str(cfg), target="trn1")
    assert report.inventory.shapes, arch
    counted = sum(report.phase_counts().values())
    assert counted > 15, (arch, counted)
    if arch in MOE_EXPERTS:
        # the one finding: routing at the experts loop, with the fix, and an inventory of the rest of the
        # model
        file, line = _experts_loop_line(MOE_EXPERTS[arch])
        assert _not_info(report) == [("CHIP_MOE_ROUTING", MOE_EXPERTS[arch], report.blockers[0].location)]
        hit = report.blockers[0]
        assert hit.location.endswith(f"{file}:{line}") and hit.module_path.endswith("mlp.experts")
        assert "capacity" in hit.fix and "NxD Inference" in hit.fix
        assert any(MOE_EXPERTS[arch] in n and "left out" in n for n in report.notes)
        kinds = set(report.assessment.counts("supported"))
        assert {"aten::topk", "aten::mm"} <= kinds  # the router and attention are in the inventory
        assert report.exit_code == 1
    else:
        assert _not_info(report) == [], arch
        assert report.exit_code == 0 and report.inventory.exported


# the zoo's decoders also checked as a training step (1-layer configs keep it quick)
TRAIN = ["qwen2", "phi3", "gemma2", "gpt_neox", "falcon", "opt"]


@pytest.mark.slow
@pytest.mark.parametrize("arch", TRAIN)
def test_zoo_decoders_check_clean_with_training(arch, tmp_path):
    if arch in CONFIGS:
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps(CONFIGS[arch]))
        spec = str(cfg)
    else:
        spec = arch
    report = run_check(
        spec,
        ["input_ids=1x8:int64", "attention_mask=1x8:int64"],
        training=True,
        target="trn1",
        task="causal-lm",
    )
    assert report.exit_code == 0 and _not_info(report) == [], arch
    phases = report.phase_counts()
    assert phases.get("backward", 0) > 50 and phases.get("optimizer", 0) > 0, phases
    # the embedding's gradient is a scatter-add (index_put with accumulate) that exists only in the backward;
    # it is located at the embedding lookup in the forward
    grads = [
        op
        for op, _ in report.assessment.statuses
        if op.phase == "backward" and op.kind == "aten::index_put" and op.attr("accumulate") == "True"
    ]
    assert grads and all(op.data_dtype == "float32" for op in grads)
    assert any(op.location and "modeling_" in op.location for op in grads)


@pytest.mark.slow
def test_distilbert_module_paths_and_source_lines():
    report = run_check("tiny-distilbert", ["input_ids=2x16:int64", "attention_mask=2x16:int64"])
    attn = [
        op
        for op, _ in report.assessment.statuses
        if op.module_path.startswith("distilbert.transformer.layer.0.attention")
    ]
    assert attn and any(op.kind == "aten::addmm" for op in attn)
    assert all(
        op.location and "modeling_distilbert.py:" in op.location for op in attn if op.kind == "aten::bmm"
    )


@pytest.mark.slow
def test_symbolic_export_covers_all_buckets_with_same_ops():
    plan = {"batch_buckets": [2, 4], "sequence_buckets": [8, 16, 32]}
    many = run_check("tiny-bert", plan=None, shapes=plan)
    one = run_check("tiny-bert", ["input_ids=2x8:int64", "attention_mask=2x8:int64"])
    assert len(many.inventory.shapes) == 6 and "symbolic" in many.inventory.method
    kinds_many = set(many.assessment.counts("supported")) | set(many.assessment.counts("unknown"))
    kinds_one = set(one.assessment.counts("supported")) | set(one.assessment.counts("unknown"))
    assert kinds_many == kinds_one
    assert many.exit_code == one.exit_code == 0


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-t5"])
def test_fast_meta_decomposition_matches_run_decompositions(preset):
    from chipswap import models
    from chipswap.readiness.capture import CaptureOptions, capture_module, make_inputs  # noqa: F401

    fast = run_check(preset, ["input_ids=1x16:int64", "attention_mask=1x16:int64"], weightless=True)
    assert fast.weightless and "once per distinct op" in fast.inventory.method
    ref = models.resolve_model(preset)
    module = models.build_model(ref, input_names=["input_ids", "attention_mask"])
    spec = {"input_ids": ((1, 16), "int64"), "attention_mask": ((1, 16), "int64")}
    full = capture_module(
        module, [spec], vocab_size=100, strip="model.", options=CaptureOptions(symbolic=False)
    )
    import torch

    ep = torch.export.export(module, (), make_inputs(spec, vocab_size=100), strict=False)
    from chipswap.readiness.capture import inventory_ops

    reference = inventory_ops(ep, strip="model.")  # run_decompositions, the full re-trace
    count = lambda ops: Counter(o.kind for o in ops if not o.kind.startswith("python::"))  # noqa: E731
    assert count(reference) == count(full.ops) == count(op for op, _ in fast.assessment.statuses)


@pytest.mark.slow
def test_training_step_traces_on_the_meta_device_too():
    """Big configs are checked without weights; their training step must trace there as well."""
    report = run_check("tiny-llama", ["input_ids=1x8:int64"], training=True, weightless=True, target="trn1")
    assert report.weightless and not [i for i in report.inventory.issues if i.kind == "training_unchecked"]
    assert report.phase_counts().get("backward", 0) > 50 and _not_info(report) == []
