"""Sliding-window attention in the work model and the time models (issue 27): a window layer's attention
FLOPs, KV read and KV cache see at most its window; the layer patterns (Gemma 2/3 local/global, Mistral,
Qwen's use_sliding_window + max_window_layers, Llama 4's chunked layers); a model without a window projects
exactly as before (the single-kind formulas, bit for bit)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chipswap.models import load_preset
from chipswap.projection import api
from chipswap.projection.serving.physics import phys_poly
from chipswap.projection.work import (
    attended_keys,
    dtype_bytes,
    prefill_keys,
    work_from_config,
    work_from_dims,
)

CONFIGS = Path(__file__).parent / "hf_configs"
CAT = api.load_catalog()


def hf(name: str, **over):
    return work_from_config({**json.loads((CONFIGS / f"{name}.json").read_text()), **over}, name=name,
                            task="causal-lm")  # fmt: skip


def preset(name: str, **over):
    return work_from_config({**load_preset(name)["config"], **over}, name=name, task="causal-lm")


# --- a model without a window: the single-kind formulas, bit for bit ------------------------------------


def test_a_dense_llama_has_one_full_attention_kind_and_the_old_closed_forms_exactly():
    w = preset("llama-3.1-8b")
    d = w.dims
    assert len(d.attention_kinds()) == 1 and d.attention_kinds()[0].window == 0
    for tp in (1, 2, 4, 8, 32):
        # the formulas of the work model before windows (2 K/V x layers x KV heads per device x head_dim)
        assert (
            w.kv_bytes_per_token("bf16", tp) == 2.0 * d.layers * math.ceil(d.kv_heads / tp) * d.head_dim * 2.0
        )
        for tokens in (1, 777, 4096, 100_000):
            assert w.kv_cache_bytes(tokens, "bf16", tp) == w.kv_bytes_per_token("bf16", tp) * tokens
    for b, c in ((1, 1), (8, 5000), (64, 131_000)):
        assert w.decode_flops(b, c) == (
            2.0 * b * w.matmul_params + b * (4.0 * 1 * c * d.heads * d.head_dim * d.layers)
            + 2.0 * b * w.head_params
        )  # fmt: skip
        assert w.decode_bytes(b, c, "bf16") == w.streamed_weight_bytes("bf16") + float(b) * c * (
            2.0 * d.layers * d.kv_heads * d.head_dim * dtype_bytes("bf16")
        )
        assert w.prefill_flops(b, c) == (
            2.0 * (float(b) * c) * w.matmul_params + b * (4.0 * c * c * d.heads * d.head_dim * d.layers)
            + 2.0 * b * w.head_params
        )  # fmt: skip


@pytest.mark.parametrize("instance", ["inf2.48xlarge", "trn2.48xlarge", "p5.48xlarge", "g6e.xlarge"])
def test_a_dense_llama_projects_exactly_as_the_single_kind_polynomial(instance):
    """No window terms, and every call is the polynomial of the model before windows, to the last bit; the
    physical model's attention / KV coefficient is its one-kind formula."""
    w = preset("llama-3.1-8b")
    p = api.project_serving(w, instance, prompt_tokens=1500, output_tokens=250, catalog=CAT)
    poly = p.times.llm
    assert poly.windows == ()
    for b, c in ((1, 100), (8, 1750), (32, 40_000)):
        assert poly.decode_step_s(b, c) == poly.d0 + b * (poly.d_b + c * poly.d_bc)
        assert poly.prefill_s(b, c) == poly.p0 + b * (poly.p_b + c * (poly.p_bl + c * poly.p_bll))
    inst = CAT.instance(instance)
    platform = api.platform_for_instance(inst, CAT)
    ctx = api.stack_context(None, inst, platform, CAT)
    if ctx.physics is None:
        return
    tp = p.config.tp_degree
    dev = platform.device(inst.accelerator)
    ph = ctx.physics
    phys = phys_poly(w, dev, ph, tp=tp, batch=8, prompt=2048, schedule=ctx.schedule)
    d = w.dims
    heads = math.ceil(d.heads / tp)
    kv = 2.0 * d.layers * math.ceil(d.kv_heads / tp) * d.head_dim * 2.0
    group = heads / max(1, math.ceil(d.kv_heads / tp))
    peak, attn = dev.need_peak("bf16"), ph.get("attn_eff")
    kv_hbm = dev.hbm_bytes_s * ph.get("kv_bw_eff")
    qk = 4.0 * heads * d.head_dim * d.layers
    assert phys.d_bc == kv * (1.0 + ph.get("gqa_expand") * (group - 1.0)) / kv_hbm + qk / (peak * attn)
    assert phys.p_bll == 0.5 * qk / (peak * attn)


def test_a_window_no_prompt_reaches_changes_nothing():
    """Gemma 2 with its 4,096-token window against the same blocks without one: identical figures while
    every request stays inside the window."""
    windowed = hf("gemma-2-9b")
    plain = work_from_dims(replace(windowed.dims, sliding_window=0, sliding_layers=0))
    for inst in ("g6e.xlarge", "inf2.48xlarge"):
        a = api.project_serving(windowed, inst, prompt_tokens=2000, output_tokens=200, catalog=CAT)
        b = api.project_serving(plain, inst, prompt_tokens=2000, output_tokens=200, catalog=CAT)
        assert a.requests_per_s.value == b.requests_per_s.value
        assert a.times.prefill_s(1, 3000) == b.times.prefill_s(1, 3000)
        assert a.times.decode_step_s(8, 4096) == b.times.decode_step_s(8, 4096)
        assert a.times.decode_step_s(8, 8000) < b.times.decode_step_s(8, 8000)


# --- windows bound the work ------------------------------------------------------------------------------


@given(st.integers(1, 10**6), st.integers(1, 65536))
def test_prefill_keys_are_twice_the_causal_pairs_per_query(length, window):
    keys = prefill_keys(length, window)
    pairs = sum_min = window * (window + 1) / 2 + (length - window) * window if length > window else None
    if pairs is None:
        assert keys == length
    else:  # L x keys / 2 is the number of causal query-key pairs to within W/2 (the L^2/2 convention)
        assert abs(length * keys / 2 - sum_min) <= window / 2 + 1e-6 * length * window
    assert keys <= min(length, 2 * window)
    assert prefill_keys(length + 1, window) >= keys  # monotone in the prompt


def test_mistral_decode_and_kv_cache_stop_growing_at_the_window():
    w = preset("mistral-7b")  # sliding_window 4096 on every layer
    assert w.dims.sliding_layers == w.dims.layers and attended_keys(10_000, 4096) == 4096
    assert (
        w.decode_bytes(8, 16_000, "bf16") == w.decode_bytes(8, 4096, "bf16") > w.decode_bytes(8, 2000, "bf16")
    )
    assert w.decode_flops(8, 16_000) == w.decode_flops(8, 4096)
    assert w.kv_cache_bytes(16_000) == w.kv_cache_bytes(4096) == 4096 * w.kv_bytes_per_token()
    p = api.project_serving(w, "g6e.xlarge", prompt_tokens=16_000, output_tokens=500, catalog=CAT)
    assert p.times.decode_step_s(8, 16_000) == p.times.decode_step_s(8, 4096)


def test_gemma2_half_its_layers_see_the_window():
    w = hf("gemma-2-9b")
    d = w.dims  # 42 layers, every 2nd global: 21 local over 4,096 keys
    full = 4.0 * d.heads * d.head_dim
    assert w.decode_flops(1, 10_000) - w.decode_flops(1, 0) == pytest.approx(full * (21 * 10_000 + 21 * 4096))
    per_layer = 2.0 * d.kv_heads * d.head_dim * 2
    assert w.kv_cache_bytes(10_000) == pytest.approx(per_layer * (21 * 10_000 + 21 * 4096))


def test_the_layout_search_fits_more_sequences_when_the_cache_is_windowed():
    w = preset("mistral-7b")
    plain = work_from_dims(replace(w.dims, sliding_window=0, sliding_layers=0))
    long = dict(prompt_tokens=16_000, output_tokens=500, catalog=CAT, tp=1)
    a, b = (api.project_serving(x, "g6e.xlarge", **long) for x in (w, plain))
    assert a.config.max_batch > 2 * b.config.max_batch  # 4,096 of 16,499 positions held per layer
    assert a.config.kv_tokens > b.config.kv_tokens
    short = dict(long, prompt_tokens=2000, output_tokens=200)
    a, b = (api.project_serving(x, "g6e.xlarge", **short) for x in (w, plain))
    assert a.config.max_batch == b.config.max_batch


# --- the layer patterns ------------------------------------------------------------------------------------


def test_qwen_windows_apply_under_use_sliding_window_from_max_window_layers():
    assert hf("qwen3-30b-a3b").dims.sliding_layers == 0  # use_sliding_window false
    on = hf("qwen3-30b-a3b", use_sliding_window=True, sliding_window=4096, max_window_layers=28)
    assert on.dims.sliding_layers == 20 and on.dims.sliding_window == 4096
    # a Qwen config that says nothing carries a window it does not use (transformers' default: off)
    assert preset("qwen3-32b", sliding_window=4096).dims.sliding_layers == 0


def test_llama4_chunked_layers_are_the_rope_layers():
    scout = hf("llama-4-scout")
    assert scout.dims.sliding_window == 8192 and scout.dims.sliding_layers == 36  # every 4th layer global
    text = json.loads((CONFIGS / "llama-4-scout.json").read_text())["text_config"]
    given_ = hf("llama-4-scout", text_config={**text, "no_rope_layers": [1, 0] * 24})
    assert given_.dims.sliding_layers == 24


def test_gemma3_pattern_and_layer_types():
    base = hf("gemma-2-9b", model_type="gemma3_text", sliding_window_pattern=6, num_hidden_layers=12)
    assert base.dims.sliding_layers == 10
