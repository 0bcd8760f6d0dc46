"""Re-fit test of the training calibration: the shipped file is what a fresh fit writes, the
leave-one-source-out errors meet issue 28's targets per family and dtype (the one miss held to its measured
level), the published layouts that ran fit the memory model, and the predicted peaks match the published ones.
Needs ../shared/reference (skipped without it). Not timed."""

from __future__ import annotations

from pathlib import Path

import pytest

from chipswap.projection.training.fit import MIN_FAMILY_ROWS, TARGETS, band_of, calibrate, render
from chipswap.projection.training.project import load_calibration

REF = Path("../shared/reference")
pytestmark = pytest.mark.skipif(not (REF / "gpu-benchmarks").is_dir(), reason="needs ../shared/reference")


@pytest.fixture(scope="module")
def fresh() -> dict:
    return calibrate(REF)


@pytest.mark.slow
def test_shipped_calibration_is_a_fresh_fit(fresh: dict) -> None:
    shipped = load_calibration()
    assert shipped["coefficients"] == pytest.approx(fresh["coefficients"], rel=1e-3)
    for fam, d in fresh["families"].items():
        assert shipped["families"][fam]["band"] == pytest.approx(d["band"], rel=1e-3)


@pytest.mark.slow
def test_held_out_errors_meet_the_targets(fresh: dict) -> None:
    """Issue 28's targets per family and dtype; the one miss (B200 fp8: 2 rows, 1 in band; docs/projection.md
    says why) is held to its measured level so a regression fails."""
    pinned, chosen = fresh["held_out"]["family_dtype"], fresh["held_out"]["chosen"]
    for key in ("A100 bf16", "H100 bf16", "H100 fp8", "Trainium bf16"):
        target = TARGETS["pinned_fp8"] if key.endswith("fp8") else TARGETS["pinned"]
        assert pinned[key]["median_abs_error"] <= target, (key, pinned[key])
        assert pinned[key]["coverage"] >= TARGETS["pinned_coverage"], (key, pinned[key])
    for key in ("A100 bf16", "H100 bf16", "H100 fp8", "B200 fp8", "Trainium bf16"):
        assert chosen[key]["median_abs_error"] <= TARGETS["chosen"], (key, chosen[key])
        assert chosen[key]["coverage"] >= TARGETS["chosen_coverage"], (key, chosen[key])
    # measured miss, bounded: B200's 405B row is projected at full recompute (selective is 3 % over memory)
    assert pinned["B200 fp8"]["median_abs_error"] <= 0.22 and pinned["B200 fp8"]["coverage"] >= 0.5
    for fam, v in fresh["held_out"][
        "families"
    ].items():  # a family with enough rows is covered by its own band
        assert v["rows"] < MIN_FAMILY_ROWS or v["coverage"] >= 0.8, (fam, v)
    # every source was held out once and predicted, the Neuron rows by published table (page)
    assert {
        "llama1-paper", "llama2-paper", "llama3-paper", "nemo-24.07", "megatron-bridge", "llm-foundry",
        "neuron-trn1-decoder", "neuron-trn1-encoder", "neuron-trn1-nlp",
    } == set(fresh["held_out"]["sources"])  # fmt: skip
    dtypes = {(r["family"], r["dtype"]) for r in fresh["rows"]}
    assert {("H100", "bf16"), ("H100", "fp8"), ("A100", "bf16"), ("Trainium", "bf16")} <= dtypes


@pytest.mark.slow
def test_stack_factors_are_fitted_only_where_their_stack_has_rows(fresh: dict) -> None:
    """Each calibration-only stack's efficiency is fitted (its rows ran on it); the stacks a user projects
    with (pytorch, megatron, NxD) carry none, so a projection never borrows a published run's stack."""
    c = fresh["coefficients"]
    assert {"f_meta2023", "f_neuron_nemo", "f_neuron_hf"} <= set(c)
    assert not {"f_pytorch", "f_megatron", "f_neuron"} & set(c)
    stacks = {r["stack"] for r in fresh["rows"]}
    assert {"composer", "megatron", "meta-2023", "neuron", "neuron-nemo", "neuron-hf"} == stacks


@pytest.mark.slow
def test_predicted_peaks_match_the_published_ones(fresh: dict) -> None:
    """Predicted vs published peak memory per GPU for every row that prints one (data/training/
    published_memory.csv): torchtitan's 2024-12 tables within +-20 %; the two 2025 H200 rows are the
    measured miss (compiled loss), bounded."""
    peaks = fresh["published_peaks"]
    assert len(peaks) == 20
    late = [p for p in peaks if p["id"].startswith("tt2506")]
    for p in peaks:
        if p not in late:
            assert abs(p["error"]) <= TARGETS["memory"], p
    assert len(late) == 2 and all(0 < p["error"] <= 0.45 for p in late)


@pytest.mark.slow
def test_published_layouts_that_ran_fit_in_memory(fresh: dict) -> None:
    """Every row pinned whole to its published layout (LLM Foundry: FSDP, micro-batch, checkpointing) ran,
    so the memory model must not put its peak over the device's memory."""
    whole = [m for m in fresh["memory"] if m["whole_layout_published"]]
    assert len(whole) >= 14
    for m in whole:
        assert m["predicted_peak_gib"] <= m["device_gib"], m


def test_band_covers_the_share_asked() -> None:
    import numpy as np

    errs = np.log(np.array([1.05, 0.9, 1.3, 0.7, 1.1, 1.0, 1.5, 0.95, 1.2, 0.8]))
    b = band_of(errs, 0.8)
    assert np.mean(np.abs(errs) <= np.log1p(b) + 1e-12) >= 0.8
    assert np.mean(np.abs(errs) <= np.log1p(b * 0.9)) < 0.8  # and no wider than needed


@pytest.mark.slow
def test_render_round_trips(fresh: dict) -> None:
    import tomllib

    back = tomllib.loads(render(fresh))
    assert back["coefficients"] == fresh["coefficients"] and len(back["rows"]) == len(fresh["rows"])


@pytest.mark.slow
def test_issue41_stack_bands_and_transfer_tests(fresh: dict) -> None:
    """Issue 41: per stack and dtype a band whose own rows it covers at the 80 % quantile (a one-source stack
    at least the cross-stack band, said so); the transfer tests measured and Trainium2's band at least the
    widest within-vendor one; the mxfp8 recipe ratio from a published pair; the shipped file carries them."""
    h = fresh["held_out"]
    for key, sb in h["stack_bands"].items():
        assert 0 < sb["band"] < 1.5
        assert sb["basis"].startswith("one source") == (sb["sources"] < 2), key
    tests = h["transfer"]
    pairs = {(t["source"], t["target"]) for t in tests}
    assert pairs >= {("A100", "H100"), ("H100", "A100"), ("H100", "B200")}
    within = max(t["band"] for t in tests if not t["cross_vendor"])
    trn2 = fresh["families"]["Trainium2"]
    assert trn2["band_neuron_bf16"] >= within - 1e-9
    assert trn2["transferred"].startswith("transferred from trn1")
    assert 0.5 < fresh["fp8_recipes"]["mxfp8"] < 1.5
    shipped = load_calibration()
    got = shipped["families"]["Trainium2"]["band_neuron_bf16"]
    assert got == pytest.approx(trn2["band_neuron_bf16"], rel=1e-3)
