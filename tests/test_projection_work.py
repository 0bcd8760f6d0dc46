"""chipswap.projection.work: closed-form parameters, weight / KV bytes and FLOPs of dense transformers, and
the
one-line errors for configs it cannot size."""

from __future__ import annotations

import pytest

from chipswap.errors import ChipswapError
from chipswap.models import load_preset
from chipswap.projection.work import dims_from_config, dtype_bytes, work_from_config


def preset_work(name: str, task: str | None = None):
    data = load_preset(name)
    return work_from_config(data["config"], name=name, task=task or data.get("task"))


@pytest.mark.parametrize(
    "name,published",
    [("llama-3-8b", 8.03e9), ("llama-3-70b", 70.6e9), ("mistral-7b", 7.24e9), ("gpt2", 124.4e6)],
)
def test_parameter_count_matches_the_published_size(name, published):
    assert abs(preset_work(name).params - published) / published < 0.005


def test_llama3_8b_kv_cache_and_weights():
    w = preset_work("llama-3-8b")
    # 2 (K, V) x 32 layers x 8 KV heads x 128 head_dim x 2 bytes
    assert w.kv_bytes_per_token_total("bf16") == 2 * 32 * 8 * 128 * 2
    # split over a TP group: 8 KV heads over 4 devices = 2 each; over 32 devices each keeps a replica of one
    assert w.kv_bytes_per_token("bf16", tp=4) == 2 * 32 * 2 * 128 * 2
    assert w.kv_bytes_per_token("bf16", tp=32) == 2 * 32 * 1 * 128 * 2
    assert w.weight_bytes("int8") == pytest.approx(w.weight_bytes("bf16") / 2)
    assert w.streamed_weight_bytes("bf16") < w.weight_bytes(
        "bf16"
    )  # embedding rows are gathered, not streamed


def test_flops_follow_the_dense_transformer_rule_of_thumb():
    w = preset_work("llama-3-8b")
    # prefill ~ 2 x params x tokens for short prompts (attention is small at 128 tokens)
    tokens = 4 * 128
    assert w.prefill_flops(4, 128) == pytest.approx(2 * w.matmul_params * tokens, rel=0.05)
    # training ~ 6 x params per token plus attention
    assert w.train_flops_per_token(2048) == pytest.approx(6 * w.params, rel=0.12)
    # monotone in every argument
    assert w.decode_flops(8, 4096) > w.decode_flops(8, 1024) > w.decode_flops(1, 1024)
    assert w.prefill_flops(2, 1024) > w.prefill_flops(1, 1024)
    assert w.decode_bytes(8, 4096, "bf16") > w.decode_bytes(8, 1024, "bf16")


def test_encoder_heads_change_the_work():
    cfg = load_preset("bert-base")["config"]
    plain = work_from_config(cfg, name="bert", task="base")
    mlm = work_from_config(cfg, name="bert", task="masked-lm")
    cls = work_from_config(cfg, name="bert", task="sequence-classification")
    assert plain.kind == mlm.kind == "encoder"
    assert mlm.encoder_flops(1, 128) > cls.encoder_flops(1, 128) > plain.encoder_flops(1, 128)


def test_missing_size_is_one_line_naming_the_field():
    cfg = dict(load_preset("llama-3-8b")["config"])
    del cfg["num_attention_heads"]
    with pytest.raises(ChipswapError) as e:
        dims_from_config(cfg, name="mine")
    msg = str(e.value)
    assert "num_attention_heads" in msg and "\n" not in msg


def test_bad_sizes_and_unknown_architectures_are_refused():
    cfg = dict(load_preset("llama-3-8b")["config"], num_key_value_heads=7)
    with pytest.raises(ChipswapError, match="key-value heads"):
        dims_from_config(cfg, name="mine")
    with pytest.raises(ChipswapError, match="positive integer"):
        dims_from_config(dict(load_preset("llama-3-8b")["config"], hidden_size=True), name="mine")
    with pytest.raises(ChipswapError, match="no closed-form work for model_type 'mamba'"):
        dims_from_config({"model_type": "mamba", "hidden_size": 8}, name="m")
    with pytest.raises(ChipswapError, match="unknown dtype"):
        dtype_bytes("fp12")


def test_causal_lm_config_used_as_encoder_has_no_decode():
    w = work_from_config(load_preset("llama-3-8b")["config"], name="x", task="sequence-classification")
    assert w.kind == "encoder"
