"""chipswap.projection.hfconfig + work.dims_from_config: any Hugging Face decoder config read from its fields
(issue 27): published configs of families chipswap has no code for give their published sizes and project
without a refusal; the MoE layer pattern, nested text_config and unread fields; a config without
`architectures` asks for --task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chipswap import models
from chipswap.errors import ChipswapError
from chipswap.projection import api
from chipswap.projection.flops import model_work
from chipswap.projection.work import dims_from_config, work_from_config

CONFIGS = Path(__file__).parent / "hf_configs"


def load(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def work_of(name: str, **over):
    return work_from_config({**load(name), **over}, name=name, task="causal-lm")


# (fixture, published total, published active or None, active counts the input embedding, tolerance);
# sources and conventions: tests/hf_configs/SOURCES.md. Scout's 109 B includes its vision encoder.
PUBLISHED = [
    ("gemma-2-9b", 9.24e9, None, True, 0.01),
    ("seed-oss-36b", 36e9, None, True, 0.02),
    ("minimax-m2", 230e9, 10e9, False, 0.05),
    ("llama-4-scout", 109e9, 17e9, True, 0.03),
    ("llama-4-maverick", 400e9, 17e9, True, 0.03),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, True, 0.03),
    ("mimo-v2-flash", 309e9, 15e9, True, 0.04),
    ("gpt-oss-20b", 20.9e9, 3.6e9, False, 0.01),
]


@pytest.mark.parametrize("name,total,active,with_embedding,tol", PUBLISHED)
def test_published_configs_give_the_published_parameter_counts(name, total, active, with_embedding, tol):
    w = work_of(name)
    assert abs(w.params - total) / total < tol
    if active is not None:
        got = w.active_params - (0 if with_embedding else w.embedding_params)
        assert abs(got - active) / active < tol
        assert w.active_params - w.embedding_params < w.params / 5  # sparse: a small share of the experts


@pytest.mark.parametrize("name", [p[0] for p in PUBLISHED])
def test_published_configs_project_without_a_refusal(name):
    w = work_of(name)
    # 4,000-token prompts: a MoE model on a GPU goes through the MoE physics, fitted on 3.7K-59.5K prompts
    p = api.project_serving(w, "p5en.48xlarge", prompt_tokens=4000, output_tokens=100)
    if w.is_moe and not p.fits:  # MoE on a GPU: the MoE physics' held-out band, or a refusal saying why
        assert "MoE" in p.reason
        return
    assert p.fits, p.reason
    assert p.requests_per_s is not None and p.requests_per_s.value > 0


def test_llama4_maverick_interleaves_dense_and_moe_layers_and_keeps_the_shared_expert():
    mav = work_of("llama-4-maverick")
    d = mav.dims
    assert d.moe_layers == 24 and d.dense_intermediate == 16384  # interleave_moe_layer_step 2 of 48
    assert d.shared_expert_intermediate == 8192  # Llama 4's one shared expert (no config field says it)
    # every layer MoE would be ~778 B (the figure of the model_type list this replaced)
    every = work_of("llama-4-maverick", text_config={**load("llama-4-maverick")["text_config"],
                                                      "interleave_moe_layer_step": 1})  # fmt: skip
    assert every.params > 1.8 * mav.params
    scout = work_of("llama-4-scout")
    assert scout.dims.moe_layers == 0 and scout.dims.shared_expert_intermediate == 8192


@pytest.mark.parametrize(
    "over,moe_layers",
    [
        ({"decoder_sparse_step": 2}, 24),
        ({"mlp_only_layers": [0, 1, 2, 3]}, 44),
        ({"first_k_dense_replace": 3}, 45),
        ({"moe_layers": [5, 6, 7]}, 3),
        ({"moe_layer_freq": [1, 0] * 24}, 24),
        ({"first_k_dense_replace": 1, "moe_layer_freq": 2}, 23),
        ({"mlp_layer_types": ["dense"] * 8 + ["sparse"] * 40}, 40),
        ({"moe_layer_interval": 2, "moe_layer_start_index": 1, "moe_layer_end_index": -1}, 24),
        ({"moe_layer_interval": 2, "moe_layer_end_index": 40}, 20),
        ({"num_dense_layers": 2}, 46),
    ],
)
def test_moe_layer_pattern_fields(over, moe_layers):
    base = work_of("qwen3-30b-a3b")
    w = work_of("qwen3-30b-a3b", **over)
    assert (w.dims.moe_layers or w.dims.layers) == moe_layers
    # a dense layer (6,144 wide) stores far less than 128 experts: fewer MoE layers, fewer parameters
    assert w.params < base.params
    assert w.params - base.params == pytest.approx(
        (48 - moe_layers) * (3 * 2048 * 6144 - (128 * 3 * 2048 * 768 + 2048 * 128)), rel=1e-9
    )


def test_gpt_oss_20b_is_read_as_published_aliases_that_agree_are_one_field():
    cfg = load("gpt-oss-20b")
    assert cfg["experts_per_token"] == cfg["num_experts_per_tok"] == 4  # the vendor states it twice
    d = work_of("gpt-oss-20b").dims
    assert (d.experts, d.experts_per_token) == (32, 4)
    assert d.sliding_layers == 12 and d.sliding_window == 128  # alternating sliding / full
    # the shipped preset is the same config
    assert models.resolve_model("gpt-oss-20b").config["experts_per_token"] == 4


@pytest.mark.parametrize(
    "name,over,words",
    [
        ("gpt-oss-20b", {"experts_per_token": 2}, "num_experts_per_tok = 4 and experts_per_token = 2"),
        ("gpt-oss-20b", {"num_experts": 16}, "num_local_experts = 32 and num_experts = 16"),
        ("qwen3-30b-a3b", {"n_routed_experts": 64}, "num_experts = 128 and n_routed_experts = 64"),
        ("seed-oss-36b", {"num_layers": 3}, "num_hidden_layers = 64 and num_layers = 3"),
    ],
)
def test_aliases_that_disagree_are_one_line_naming_both(name, over, words):
    with pytest.raises(ChipswapError) as e:
        work_of(name, **over)
    msg = str(e.value)
    assert words in msg and "disagree" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "name,over",
    [
        ("qwen3-30b-a3b", {"n_routed_experts": 128, "num_local_experts": 128, "moe_top_k": 8}),
        ("gpt-oss-20b", {"num_experts_per_token": 4, "n_routed_experts": 32}),
    ],
)
def test_aliases_that_agree_read_as_one(name, over):
    assert work_of(name, **over).dims == work_of(name).dims


def test_a_pattern_with_no_moe_layer_is_one_line():
    with pytest.raises(ChipswapError, match="mlp_only_layers leaves no MoE layer") as e:
        work_of("qwen3-30b-a3b", mlp_only_layers=list(range(48)))
    assert "\n" not in str(e.value)


def test_sliding_window_and_softcap_are_read():
    d = work_of("gemma-2-9b").dims
    assert d.sliding_window == 4096 and d.sliding_layers == 21  # Gemma 2 alternates local / global
    assert d.logit_softcap == 30.0
    types = ["sliding_attention", "full_attention", "sliding_attention"]
    three = work_of("gemma-2-9b", num_hidden_layers=3, layer_types=types).dims
    assert three.sliding_layers == 2
    with pytest.raises(ChipswapError, match="linear_attention"):
        work_of("gemma-2-9b", num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])
    assert work_of("qwen3-30b-a3b").dims.sliding_layers == 0  # use_sliding_window false


@pytest.mark.parametrize(
    "field,value,words",
    [("kv_lora_rank", 512, "latent attention"), ("num_frobnicator_layers", 4, "is not one chipswap reads")],
)
def test_a_field_that_changes_the_work_and_is_not_read_is_one_line_naming_it(field, value, words):
    with pytest.raises(ChipswapError) as e:
        work_of("seed-oss-36b", **{field: value})
    msg = str(e.value)
    assert field in msg and words in msg and "\n" not in msg
    work_of("seed-oss-36b", **{field: None})  # unset: read as absent


def test_an_unknown_family_is_read_as_llama_style_from_its_fields():
    cfg = {**load("seed-oss-36b"), "model_type": "brand_new_decoder", "architectures": ["NewForCausalLM"]}
    known = work_of("seed-oss-36b")
    new = work_from_config(cfg, name="new", task="causal-lm")
    assert new.dims.gated_mlp and new.matmul_params == known.matmul_params
    with pytest.raises(ChipswapError, match="no closed-form work for model_type 'mamba'"):
        dims_from_config({"model_type": "mamba", "hidden_size": 8}, name="m")


def _tiny_llama4(tmp_path: Path, **top) -> Path:
    text = {k: v for k, v in load("llama-4-maverick")["text_config"].items()}
    text.update(hidden_size=64, intermediate_size=32, intermediate_size_mlp=64, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                vocab_size=128, max_position_embeddings=256, attention_chunk_size=64, pad_token_id=0,
                bos_token_id=1, eos_token_id=2)  # fmt: skip
    cfg = {**load("llama-4-maverick"), "text_config": text, **top}
    cfg["vision_config"] = {**cfg["vision_config"], "hidden_size": 32, "intermediate_size": 64,
                            "num_attention_heads": 2, "num_hidden_layers": 1, "image_size": 28,
                            "vision_output_dim": 32, "projector_input_dim": 32,
                            "projector_output_dim": 32}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_a_nested_text_config_is_a_causal_lm_not_seq2seq(tmp_path):
    ref = models.resolve_model(str(_tiny_llama4(tmp_path)))
    assert ref.task == "causal-lm" and not ref.task_guessed
    w = model_work(ref)
    assert w.kind == "decoder" and w.dims.moe_layers == 2 and w.dims.shared_expert_intermediate == 32


def test_text_config_keys_agree():
    from chipswap.models.spec import TEXT_CONFIG_KEYS
    from chipswap.projection.hfconfig import TEXT_CONFIG_KEYS as READ

    assert READ == TEXT_CONFIG_KEYS


def test_a_config_without_architectures_asks_for_task(tmp_path):
    cfg = {k: v for k, v in load("seed-oss-36b").items() if k != "architectures"}
    cfg.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, vocab_size=128, bos_token_id=0, pad_token_id=1,
               eos_token_id=2)  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    ref = models.resolve_model(str(path))
    assert ref.task_guessed
    with pytest.raises(ChipswapError, match="--task causal-lm") as e:
        model_work(ref)
    assert "\n" not in str(e.value)
    assert model_work(ref, task="causal-lm").kind == "decoder"
    assert model_work(models.resolve_model(str(path), task="causal-lm")).kind == "decoder"


def test_mimo_v2_value_heads_and_sliding_layers():
    """MiMo-V2-Flash: 192-wide query / key heads, 128-wide value heads (every attention weight, KV byte and
    attention FLOP is linear in their sum: counted at the mean width, exactly), 8 KV heads on its 39
    sliding-window layers and 4 on the 9 full ones (counted 8 everywhere, an upper bound said in a note)."""
    d = work_of("mimo-v2-flash").dims
    assert d.head_dim == (192 + 128) // 2 and d.kv_heads == 8 and d.sliding_layers == 39
    assert d.moe_layers == 47 and any("upper bound" in n for n in d.notes)
    kv = work_of("mimo-v2-flash").kv_bytes_per_token_total("bf16")
    assert kv == 48 * 8 * (192 + 128) * 2  # K and V of their own widths
    with pytest.raises(ChipswapError, match="swa_head_dim = 128") as e:
        work_of("mimo-v2-flash", swa_head_dim=128)
    assert "\n" not in str(e.value)
