"""The closed forms the projection uses agree with PyTorch's FLOP counter on the real transformers graphs
(built on the meta device: no weights, no downloads), and a factory model gets its work from graph counts."""

from __future__ import annotations

import textwrap

import pytest

from chipswap import models
from chipswap.errors import ChipswapError
from chipswap.projection.flops import closed_form, graph_flops, model_work

pytestmark = pytest.mark.slow  # builds transformers models (meta device): seconds each

# (preset, task, layers to build: per-layer work is identical, so fewer layers keep the test fast)
CASES = [
    ("tiny-llama", "causal-lm", None),
    ("llama-3-8b", "causal-lm", 2),
    ("mistral-7b", "causal-lm", 2),
    ("gpt2", "causal-lm", 2),
    ("bert-base", "sequence-classification", None),
    ("distilbert-base", "sequence-classification", None),
    ("roberta-base", "sequence-classification", None),
    ("t5-base", "encoder", 2),
    ("vit-base", "image-classification", 2),
]


@pytest.mark.parametrize("name,task,layers", CASES)
def test_closed_form_matches_the_graph_count(name, task, layers):
    ref = models.resolve_model(name)
    if layers is not None:
        from chipswap.projection.flops import _ref_with_layers

        ref = _ref_with_layers(ref, layers)
    work = closed_form(ref, task=task)
    batch, length = 2, 64
    if name == "vit-base":
        length = work.dims.patch_tokens  # the image fixes the token count
    counted, params = graph_flops(ref, batch, length, task=task)
    expected = (
        work.prefill_flops(batch, length) if work.kind == "decoder" else work.encoder_flops(batch, length)
    )
    assert counted == pytest.approx(expected, rel=1e-3), (name, counted, expected)
    assert params == pytest.approx(work.params, rel=2e-3), (name, params, work.params)


def test_graph_count_scales_with_depth_so_a_shallow_build_stands_for_the_full_model():
    ref = models.resolve_model("llama-3-8b")
    from chipswap.projection.flops import _ref_with_layers

    one, _ = graph_flops(_ref_with_layers(ref, 1), 1, 32, task="causal-lm")
    two, _ = graph_flops(_ref_with_layers(ref, 2), 1, 32, task="causal-lm")
    full = closed_form(ref, task="causal-lm").prefill_flops(1, 32)
    per_layer = two - one
    assert one + 31 * per_layer == pytest.approx(full, rel=1e-6)


def test_factory_model_work_comes_from_graph_counts(tmp_path, monkeypatch):
    mod = tmp_path / "tiny_factory_mod.py"
    mod.write_text(
        textwrap.dedent(
            """
            import torch

            class Enc(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.emb = torch.nn.Embedding(100, 32)
                    self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
                def forward(self, input_ids, attention_mask=None):
                    return self.layer(self.emb(input_ids))

            def make():
                return Enc()
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ref = models.resolve_model("tiny_factory_mod:make")
    work = model_work(ref)
    assert work.source.startswith("graph count")
    # linear part: q,k,v,o (4 x 32 x 32) + MLP (2 x 32 x 64) multiply-accumulates per token
    assert work.matmul_params == pytest.approx(4 * 32 * 32 + 2 * 32 * 64, rel=0.02)
    assert work.encoder_flops(1, 256) > 2 * work.encoder_flops(1, 128)  # attention makes it super-linear
    with pytest.raises(ChipswapError, match="config.json"):
        model_work(ref, task="causal-lm")
