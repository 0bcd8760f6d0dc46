"""The closed-form work (chipswap.projection.work, what `project` and `plan` use for every preset and
config.json) against the real transformers model built on the meta device, for every shipped preset (issue
38): parameters, embedding and LM-head sizes, the matmul weights one token uses (dense, and MoE: the
always-on part plus top-k experts), every expert's weights (what a prefill streams), one expert's size, and
KV-cache bytes per token. Exact, except where a stated tolerance says what the closed form leaves out.

Depth: a config whose layers are all alike is built with 2 layers (the closed form of the same 2-layer
config is compared, so the check is exact); a config whose layers differ (layer types, MoE patterns) is built
whole. tests/test_projection_flops.py checks the FLOP formulas on the graphs of dense presets."""

from __future__ import annotations

import pytest

from chipswap import models
from chipswap.models.spec import preset_names
from chipswap.projection.flops import _ref_with_layers, closed_form

pytestmark = pytest.mark.slow  # a meta-device build per preset

VARIES = ("layer_types", "moe_layers", "interleave_moe_layer_step", "mlp_layer_types",
          "hybrid_layer_pattern", "moe_layer_freq", "first_k_dense_replace", "mlp_only_layers")  # fmt: skip
# parameters outside every matmul the closed form counts as "other" (biases, norms, poolers, classifier
# heads, gpt-oss's attention sinks and expert biases): bounded, relative to the total
PARAMS_TOLERANCE = {"causal-lm": 5e-4}
OTHER_TOLERANCE = 3e-3
# where the closed form is known to differ from the built model, the measured ratio closed / built (asserted
# to 1e-9, so any change is seen). MiMo-V2-Flash (hybrid attention: full and sliding layers of different KV
# heads, 192-wide keys and 128-wide values, attention sinks): its closed form counts 10.3 % more KV bytes per
# token and 47.2 M more attention weights (0.33 % of the active matmul weights, 0.015 % of all streamed)
# than transformers' MiMo-V2 model builds; not traced yet (issue 38 keeps every figure unchanged), said
# here so it cannot grow unseen
KNOWN = {
    ("mimo-v2-flash", "kv"): 245760 / 222720,
    ("mimo-v2-flash", "matmul"): 14242807808 / 14195621888,
    ("mimo-v2-flash", "streamed"): 307575652352 / 307528466432,
}


def _ref(name: str):
    ref = models.resolve_model(name)
    return ref if any(k in ref.config for k in VARIES) else _ref_with_layers(ref, 2)


def _built(ref) -> dict[str, int]:
    """Sizes of the meta-device model, by role (each shared tensor once; a tied LM head counted as a
    matmul of its own, as the closed form counts it)."""
    model = models.build_model(ref, meta=True)
    seen: set[int] = set()
    out = dict.fromkeys(("params", "head", "embedding", "dense", "router", "experts", "kv"), 0)
    for name, p in model.named_parameters(remove_duplicate=False):
        n = p.numel()
        if "lm_head" in name:
            out["head"] += n
        if id(p) in seen:
            continue
        seen.add(id(p))
        out["params"] += n
        if "lm_head" in name:
            continue
        weight = p.dim() >= 2 and not name.endswith("bias")
        if "embed" in name or ".wte." in name or ".wpe." in name:
            out["embedding"] += n
        elif ".experts." in name and weight:
            out["experts"] += n
        elif weight and ("router" in name or name.endswith("mlp.gate.weight") or "sparse_moe.gate" in name):
            out["router"] += n
        elif weight:
            out["dense"] += n
    for name, mod in model.named_modules():
        if name.endswith(("k_proj", "v_proj")):
            out["kv"] += mod.out_features
    return out


def _check(name: str, what: str, closed: float, built: float) -> None:
    ratio = KNOWN.get((name, what))
    if ratio is not None:
        assert closed / built == pytest.approx(ratio, rel=1e-9), (name, what, closed, built)
    else:
        assert closed == built, (name, what, closed, built)


@pytest.mark.parametrize("name", preset_names())
def test_the_closed_form_work_is_the_built_models(name):
    ref = _ref(name)
    work = closed_form(ref, task=ref.task)
    got = _built(ref)
    tol = PARAMS_TOLERANCE.get(ref.task or "", OTHER_TOLERANCE)
    assert work.params == pytest.approx(got["params"], rel=tol), (name, work.params, got["params"])
    if ref.task != "causal-lm":
        return
    d = work.dims
    _check(name, "head", work.head_params, got["head"])  # tied or not: one vocab x hidden matmul
    _check(name, "embedding", work.embedding_params, got["embedding"])
    if d.experts:
        one = got["experts"] / d.experts
        _check(name, "expert", work.expert_params, one)
        active = got["dense"] + got["router"] + d.experts_per_token * one
        _check(name, "matmul", work.matmul_params, active)
        _check(name, "streamed", work.streamed_params, got["dense"] + got["router"] + got["experts"])
    else:
        _check(name, "matmul", work.matmul_params, got["dense"])
    if got["kv"]:  # separate K and V projections (GPT-2's fused c_attn has none to count)
        _check(name, "kv", work.kv_bytes_per_token_total("bf16"), 2 * got["kv"])


def test_the_zoo_covers_moe_and_tied_embeddings():
    """The presets above include MoE models of three routers and tied LM heads (so the test means it)."""
    refs = {n: models.resolve_model(n) for n in preset_names()}
    moe = {n for n, r in refs.items() if r.task == "causal-lm" and closed_form(r).dims.experts}
    assert {"gpt-oss-20b", "qwen3-30b-a3b", "mixtral-8x7b"} <= moe
    tied = {n for n, r in refs.items() if r.config.get("tie_word_embeddings") is True}
    assert tied, "no preset with tied embeddings"
