"""chipswap.models: presets, config.json, factories and .pt2 resolve to buildable modules, no downloads."""

from __future__ import annotations

import json

import pytest
import torch

from chipswap import models
from chipswap.errors import ChipswapError
from chipswap.models.inputs import _audio_samples
from tests.zoo_configs import CONFIGS

REAL = [
    "distilbert-base",
    "bert-base",
    "roberta-base",
    "gpt2",
    "llama-3-8b",
    "llama-3-70b",
    "mistral-7b",
    "t5-base",
    "vit-base",
]


def test_every_issue_preset_ships_with_source_and_dims():
    names = models.preset_names()
    for name in REAL:
        assert name in names
        data = models.load_preset(name)
        assert data["source"].startswith("https://huggingface.co/") and data["as_of"]
        ref = models.resolve_model(name)
        assert ref.kind == "preset" and ref.name == name
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
            assert isinstance(ref.config.get(key), int), (name, key)
        if name != "vit-base":
            assert ref.config["vocab_size"] > 1000 and ref.config["max_position_embeddings"] >= 512


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,published",
    [("llama-3-8b", 8.03e9), ("mistral-7b", 7.24e9), ("gpt2", 124.4e6), ("llama-3-70b", 70.6e9)],
)
def test_meta_build_parameter_count_matches_published_size(name, published):
    ref = models.resolve_model(name)
    n = models.parameter_count(ref, task="causal-lm")
    assert abs(n - published) / published < 0.01, n


def test_meta_build_allocates_no_weights():
    ref = models.resolve_model("llama-3-70b")
    m = models.build_model(ref, meta=True)
    assert all(p.is_meta for p in m.parameters())
    assert not m.training


def test_unknown_preset_lists_closest_names():
    with pytest.raises(ChipswapError) as e:
        models.resolve_model("distilbert")
    assert "distilbert-base" in str(e.value) and "did you mean" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-gpt2", "tiny-t5", "tiny-vit", "tiny-llama"])
def test_tiny_presets_forward_returns_tuple(name):
    ref = models.resolve_model(name)
    m = models.build_model(ref)
    x = models.example_inputs(ref, 2, 8)
    out = m(**x)
    assert isinstance(out, tuple) and isinstance(out[0], torch.Tensor)
    out_pos = m(*x.values())
    assert torch.equal(out[0], out_pos[0])
    if "input_ids" in x:
        assert x["input_ids"].dtype == torch.int64 and x["attention_mask"].dtype == torch.int64
        assert int(x["input_ids"].max()) < ref.config["vocab_size"]
        assert out[0].shape[0] == 2
    else:
        assert list(x) == ["pixel_values"] and x["pixel_values"].shape[-1] == ref.config["image_size"]


def test_config_json_path(tmp_path):
    cfg = {
        "model_type": "bert",
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "vocab_size": 500,
        "architectures": ["BertForMaskedLM"],
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    ref = models.resolve_model(str(p))
    assert ref.kind == "hf-config" and ref.task == "masked-lm"
    out = models.build_model(ref)(**models.example_inputs(ref, 1, 4))
    assert out[0].shape == (1, 4, 500)


@pytest.mark.parametrize(
    "cfg,needle",
    [
        ({"model_type": "bert", "hidden_size": 30, "num_attention_heads": 4}, "multiple"),
        ({"model_type": "no-such-arch"}, "no-such-arch"),
        ({"hidden_size": 32}, "model_type"),
    ],
)
def test_config_transformers_rejects_is_one_line_error(tmp_path, cfg, needle):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(ChipswapError) as e:
        models.resolve_model(str(p))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_factories():
    ref = models.resolve_model("tests.badmodels:make_good")
    assert ref.kind == "factory"
    assert models.input_names(ref) == ["x"]
    assert models.example_inputs(ref, 1, 1)["x"].shape == (2, 8)
    for bad, needle in [
        ("no_such_pkg.mod:f", "cannot import"),
        ("tests.badmodels:nope", "not found"),
        ("tests.badmodels:HERE", "not callable"),
    ]:
        with pytest.raises(ChipswapError, match=needle):
            models.resolve_model(bad)


def test_exported_program_file(tmp_path):
    from tests.badmodels import make_good

    m, x = make_good()
    ep = torch.export.export(m, (), x)
    p = tmp_path / "good.pt2"
    torch.export.save(ep, str(p))
    ref = models.resolve_model(str(p))
    assert ref.kind == "exported" and models.input_names(ref) == ["x"]
    with pytest.raises(ChipswapError, match="not found"):
        models.resolve_model(str(tmp_path / "missing.pt2"))


def test_unknown_task():
    with pytest.raises(ChipswapError, match="unknown task"):
        models.resolve_model("tiny-bert", task="sequence-clasification")


@pytest.mark.parametrize(
    "cfg,task,defaults,fixed",
    [
        (
            {k: v for k, v in CONFIGS["swin"].items() if k != "architectures"},
            None,
            ("pixel_values",),
            {"pixel_values": ((3, 32, 32), "float32")},
        ),
        (
            {"model_type": "clip_vision_model", "image_size": 48, "patch_size": 8, "num_channels": 1},
            None,
            ("pixel_values",),
            {"pixel_values": ((1, 48, 48), "float32")},
        ),
        (
            {"model_type": "bart", "d_model": 16, "encoder_layers": 1, "decoder_layers": 1},
            None,
            ("input_ids", "attention_mask", "decoder_input_ids"),
            {},
        ),
        (
            {"model_type": "bart", "d_model": 16, "encoder_layers": 1, "decoder_layers": 1},
            "encoder",
            ("input_ids", "attention_mask"),
            {},
        ),
        (
            {"model_type": "whisper", "num_mel_bins": 8, "max_source_positions": 10},
            None,
            ("input_features", "decoder_input_ids"),
            {"input_features": ((8, 20), "float32")},
        ),
        (
            {
                "model_type": "wav2vec2",
                "conv_kernel": [10, 3],
                "conv_stride": [5, 2],
                "conv_dim": [8, 8],
                "num_feat_extract_layers": 2,
            },
            None,
            ("input_values",),
            {"input_values": ((1290,), "float32")},
        ),
    ],
)
def test_inputs_come_from_the_forward_signature_and_config(tmp_path, cfg, task, defaults, fixed):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    ref = models.resolve_model(str(p), task=task)
    info = models.model_inputs(ref, task=task)
    assert info.defaults == defaults
    for name, want in fixed.items():
        assert info.fixed[name] == want
    spec = info.spec(2, 8)
    assert all(dims[0] == 2 for dims, _ in spec.values())


def test_wav2vec2_sample_count_gives_the_requested_frames():
    from types import SimpleNamespace

    cfg = SimpleNamespace(conv_kernel=[10, 3, 3], conv_stride=[5, 2, 2])
    n = _audio_samples(cfg, 7)
    frames = n
    for k, s in zip(cfg.conv_kernel, cfg.conv_stride, strict=True):
        frames = (frames - k) // s + 1
    assert frames == 7


def test_training_labels_follow_the_head():
    lm = models.model_inputs(models.resolve_model("tiny-llama"), task="causal-lm")
    cls = models.model_inputs(models.resolve_model("tiny-bert"))
    assert lm.labels == "tokens" and lm.spec(1, 4, training=True)["labels"] == ((1, 4), "int64")
    assert cls.labels == "class" and cls.spec(3, 4, training=True)["labels"] == ((3,), "int64")
    assert cls.highs["labels"] == 2


def test_representative_copy_keeps_identical_layers_only():
    big = models.resolve_model("llama-3-70b")
    small, words = models.representative(big)
    assert small.config["num_hidden_layers"] == models.REPRESENTATIVE_DEPTH and "80 identical layers" in words
    assert big.config["num_hidden_layers"] == 80  # the original is untouched
    tiny = models.resolve_model("tiny-llama")
    assert models.representative(tiny) == (tiny, "the full model")
    varied = replace_config(big, layer_types=["sliding_attention", "full_attention"] * 40)
    assert models.representative(varied)[0] is varied


def replace_config(ref, **changes):
    from dataclasses import replace

    return replace(ref, config={**ref.config, **changes})


def test_head_the_config_lacks_is_a_usage_error():
    with pytest.raises(ChipswapError, match="no 'image-classification' head"):
        models.model_inputs(models.resolve_model("tiny-gpt2"), task="image-classification")
