"""Zoo: 8 transformers architectures at small configs check without errors and with a stable op inventory.

The snapshot (tests/snapshots/check_zoo_ops.json) holds, per preset, the core-ATen op counts by status. It
depends on the torch and transformers versions (torch 2.13, transformers 5.x); after an intended upgrade,
regenerate it with CHIPSWAP_UPDATE_SNAPSHOTS=1 and review the diff.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from chipswap.check import run_check

SNAP = Path(__file__).parent / "snapshots" / "check_zoo_ops.json"
ZOO = [
    "tiny-bert",
    "tiny-distilbert",
    "tiny-roberta",
    "tiny-gpt2",
    "tiny-llama",
    "tiny-mistral",
    "tiny-t5",
    "tiny-vit",
]
UPDATE = os.environ.get("CHIPSWAP_UPDATE_SNAPSHOTS") == "1"


def _inventory(report) -> dict:
    a = report.assessment
    return {s: a.counts(s) for s in ("supported", "unsupported", "unknown")}


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


@pytest.mark.slow
@pytest.mark.parametrize("preset", ZOO)
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
    fast = run_check(preset, ["input_ids=1x16:int64", "attention_mask=1x16:int64"], weightless=True)
    full = run_check(preset, ["input_ids=1x16:int64", "attention_mask=1x16:int64"], weightless=False)
    assert fast.weightless and "once per distinct op" in fast.inventory.method
    assert "run_decompositions" in full.inventory.method
    count = lambda r: Counter(op.kind for op, st in r.assessment.statuses if st.status != "excluded")  # noqa: E731
    assert count(fast) == count(full)
    assert [f.rule for f in fast.findings] == [f.rule for f in full.findings]
