"""Which inputs a model takes, from its forward signature and config (token ids, pixels, audio samples or
features, decoder ids, labels), and example tensors of a given batch and length. torch / transformers are
imported inside the functions; nothing is built here.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.models.entry import call_factory, load_exported
from chipswap.models.spec import (
    _DEFAULT_TASK,
    _INPUT_KINDS,
    _NOT_INPUTS,
    TASKS,
    ModelInputs,
    ModelRef,
    _auto_class,
    _check_task,
    _derived_keys,
    _validate_hf_config,
)

# ---------------------------------------------------------------------------------------------- inputs


def _hf_config(ref: ModelRef):
    cfg_dict = {k: v for k, v in ref.config.items() if k not in _derived_keys(ref.config)}
    return _validate_hf_config(cfg_dict, ref.source or ref.name)


def _sub(cfg: Any, key: str, default: Any = None) -> Any:
    """A config attribute, or the same attribute of its vision/audio/text sub-config."""
    for c in (cfg, getattr(cfg, "vision_config", None), getattr(cfg, "audio_config", None)):
        if c is not None and getattr(c, key, None) is not None:
            return getattr(c, key)
    return default


def _head_class(ref: ModelRef, task: str, cfg: Any) -> Any:
    """The concrete transformers class the task builds for this config (no model is built)."""
    cls = _auto_class(ref, task)
    mapping = getattr(cls, "_model_mapping", None)
    if mapping is None:
        return cls
    try:
        found = mapping[type(cfg)]
        if isinstance(found, (tuple, list)):  # several heads for one config (deit: with/without teacher)
            archs = set(getattr(cfg, "architectures", None) or ())
            return next((c for c in found if c.__name__ in archs), found[0])  # as transformers picks it
        return found
    except KeyError:
        ok = [t for t in TASKS if t != "encoder" and _has_head(t, cfg)]
        raise ChipswapError(
            f"{ref.name} ({ref.model_type}) has no {task!r} head in transformers; "
            f"use --task {' or '.join(ok) if ok else 'base'}"
        ) from None


def _has_head(task: str, cfg: Any) -> bool:
    import transformers

    cls = getattr(transformers, TASKS[task], None)
    return cls is not None and type(cfg) in getattr(cls, "_model_mapping", {})


def _audio_samples(cfg: Any, frames: int) -> int:
    """Waveform length whose conv feature extractor gives ``frames`` frames (wav2vec2-style configs)."""
    kernels = list(getattr(cfg, "conv_kernel", None) or [])
    strides = list(getattr(cfg, "conv_stride", None) or [])
    length = max(frames, 1)
    for k, s in reversed(list(zip(kernels, strides, strict=False))):
        length = (length - 1) * int(s) + int(k)
    return length


def model_inputs(ref: ModelRef, *, task: str | None = None) -> ModelInputs:
    """Inputs of a preset / config model from its forward signature and config (no model is built)."""
    t = task or ref.task or _DEFAULT_TASK.get(str(ref.model_type), "base")
    _check_task(t)
    cfg = _hf_config(ref)
    enc_dec = bool(getattr(cfg, "is_encoder_decoder", False))
    encoder_only = t == "encoder"
    cls = _head_class(ref, "base" if encoder_only and ref.model_type not in ("t5", "mt5", "umt5") else t, cfg)
    main = getattr(cls, "main_input_name", "input_ids") or "input_ids"
    params = inspect.signature(cls.forward).parameters
    accepted = [
        n
        for n, p in params.items()
        if n not in _NOT_INPUTS and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if encoder_only:
        accepted = [n for n in accepted if not n.startswith("decoder_") and n != "labels"]
    if main not in accepted:
        accepted.insert(0, main)
    defaults = [main]
    if main == "input_ids" and "attention_mask" in accepted:
        defaults.append("attention_mask")
    if (
        "pixel_values" in accepted
        and main != "pixel_values"
        and getattr(cfg, "vision_config", None) is not None
    ):
        defaults.append("pixel_values")
    if enc_dec and not encoder_only and "decoder_input_ids" in accepted:
        defaults.append("decoder_input_ids")

    fixed: dict[str, tuple[tuple[int, ...], str]] = {}
    if "pixel_values" in accepted:
        size = _sub(cfg, "image_size", 224)
        h, w = (size[0], size[-1]) if isinstance(size, (list, tuple)) else (size, size)
        fixed["pixel_values"] = ((int(_sub(cfg, "num_channels", 3)), int(h), int(w)), "float32")
    if "input_features" in accepted:
        mels = getattr(cfg, "num_mel_bins", None)
        src = getattr(cfg, "max_source_positions", None)
        if mels and src:  # whisper-style: the encoder wants exactly 2 x max_source_positions frames
            fixed["input_features"] = ((int(mels), 2 * int(src)), "float32")
        elif getattr(cfg, "input_feat_per_channel", None):
            frames = min(128, int(getattr(cfg, "max_source_positions", 128) or 128))
            feats = int(cfg.input_feat_per_channel) * int(getattr(cfg, "input_channels", 1) or 1)
            fixed["input_features"] = ((frames, feats), "float32")
    if main == "input_values":
        fixed["input_values"] = ((_audio_samples(cfg, 128),), "float32")

    labels = ""
    if "labels" in accepted:
        labels = (
            "class"
            if t in ("sequence-classification", "image-classification", "audio-classification")
            else ("tokens" if t in ("causal-lm", "masked-lm", "seq2seq-lm", "speech-seq2seq") else "")
        )
    text_cfg = getattr(cfg, "text_config", None)
    vocab = int(getattr(cfg, "vocab_size", None) or getattr(text_cfg, "vocab_size", None) or 1000)
    highs = {
        "input_ids": vocab,
        "decoder_input_ids": vocab,
        "labels": int(getattr(cfg, "num_labels", 2) or 2) if labels == "class" else vocab,
        "token_type_ids": 1,
        "position_ids": int(ref.config.get("max_position_embeddings") or 1),
    }
    dec_max = getattr(cfg, "max_target_positions", None) if enc_dec else None
    return ModelInputs(
        accepted=tuple(dict.fromkeys(accepted)),
        defaults=tuple(dict.fromkeys(defaults)),
        fixed=fixed,
        labels=labels,
        highs=highs,
        decoder_max=int(dec_max) if dec_max else None,
    )


def check_input_kinds(name: str, dims: Sequence[int], dtype: str, model: str) -> None:
    """Known input names must have their rank and dtype family (a mismatch is bad input, exit 2)."""
    kind = _INPUT_KINDS.get(name)
    if kind is None:
        return
    rank, family = kind
    if len(dims) != rank:
        raise ChipswapError(
            f"input {name} of {model} has {len(dims)} dimension(s) ({'x'.join(map(str, dims))}), the model "
            f"takes {rank}; pass --shape {name}=" + "x".join(["B"] + ["N"] * (rank - 1))
        )
    is_float = dtype.startswith(("float", "bfloat", "complex"))
    if (family == "float") != is_float:
        want = "float32" if family == "float" else "int64"
        raise ChipswapError(
            f"input {name} of {model} is {dtype}, the model takes {family} values; pass :{want} in --shape"
        )


def input_names(ref: ModelRef, *, task: str | None = None) -> list[str]:
    """Names of the forward inputs chipswap feeds by default, in positional order."""
    if ref.kind == "exported":
        ep = load_exported(ref)
        return list(ep.graph_signature.user_inputs)
    if ref.kind == "factory":
        mod, example = call_factory(ref)
        if example:
            return list(example)
        params = inspect.signature(mod.forward).parameters
        return [n for n, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return list(model_inputs(ref, task=task).defaults)


def example_inputs(ref: ModelRef, batch: int, seq_len: int, *, device: str = "cpu", task: str | None = None):
    """Deterministic example inputs: ids below vocab_size, all-ones masks, N(0,1) floats (pixels, audio)."""
    import torch

    if batch < 1 or seq_len < 1:
        raise ChipswapError(f"batch and seq_len must be >= 1: {batch}x{seq_len}; pick positive sizes")
    gen = torch.Generator().manual_seed(0)
    out: dict[str, torch.Tensor] = {}
    if ref.kind in ("factory", "exported"):
        if ref.kind == "factory":
            _, example = call_factory(ref)
            if example:
                return {k: v.to(device) for k, v in example.items()}
        # no example tensors: token inputs by the forward's parameter names (batch x seq int64)
        for name in input_names(ref, task=task):
            if "mask" in name:
                out[name] = torch.ones(batch, seq_len, dtype=torch.int64, device=device)
            else:
                ids = torch.randint(0, 1000, (batch, seq_len), generator=gen, dtype=torch.int64)
                out[name] = ids.to(device)
        return out
    info = model_inputs(ref, task=task)
    for name, (dims, dt) in info.spec(batch, seq_len).items():
        dtype = getattr(torch, dt)
        if dtype.is_floating_point:
            out[name] = torch.randn(*dims, generator=gen).to(dtype).to(device)
        elif "mask" in name:
            out[name] = torch.ones(*dims, dtype=dtype, device=device)
        else:
            high = max(int(info.highs.get(name, 1000)), 1)
            out[name] = torch.randint(0, high, dims, generator=gen, dtype=dtype).to(device)
    return out
