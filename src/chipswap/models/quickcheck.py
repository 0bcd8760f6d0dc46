"""Which config.json files transformers is certain to accept, decided from the config alone (issue 38): a
config of a decoder family in FAMILIES whose every key is one this table knows, each value of the exact type
transformers' config class declares for it, with the sizes consistent (heads divide the width, KV heads divide
the heads, an even head width, experts per token within the experts). Such a config needs no transformers
import and no meta-device build to be accepted, so `chipswap project CONFIG.json` answers without torch.

The rule is one-sided: `accepts` says True only when it is sure; anything else (another family, a key or a
value this table does not know, another transformers version than the one the table mirrors, a task other
than causal-lm / base) is False, and the caller checks the config with transformers as before: the same
error line for a config transformers rejects. The table is stricter than transformers, never looser:
tests/test_models_quickcheck.py builds every config it accepts (the shipped presets and a few hundred
mutations of them) with transformers and fails if one is rejected. Figures do not depend on this module: the
work is the closed form of chipswap.projection.work either way.

Pure (`accepts`: plain dicts in, a bool out; no torch, no transformers import, no files), except
`installed_transformers`, which reads the installed transformers' version from its package metadata.
"""

from __future__ import annotations

import math
from typing import Any

# the transformers releases whose config classes this table mirrors (checked by the tests against the
# installed classes; another version means the slow check, until the tests pass on it and it is added here)
TRANSFORMERS_VERSIONS = ("5.25.0",)
TASKS = ("causal-lm", "base")  # the heads every family below has
ACTIVATIONS = ("silu", "gelu", "relu", "gelu_new", "gelu_pytorch_tanh")
DTYPES = ("float32", "float16", "bfloat16")
MAX_TEXT = 200  # metadata strings (names, versions)
MAX_IDS = 64  # entries of a token-id list

# value kinds: "size" an int >= 1; "size?" that or None; "count" an int >= 0; "flag" a bool; "eps" a float
# (never an int: transformers' float fields refuse ints) > 0; "unit" a float in [0, 1]; "rate" an int or a
# float in [0, 1]; "theta" a number > 0; "act" an activation in ACTIVATIONS; "id" an int or None; "ids" an
# int, a list of ints or None; "one" 1 or None; "none" None only; "empty" None or []; "step1" the int 1;
# "rope" None or a Llama 3 rope_scaling table; "dtype"; "text" a short string; "names" a short list of them.
COMMON = {
    "model_type": "text", "architectures": "names", "transformers_version": "text", "_name_or_path": "text",
    "torch_dtype": "dtype", "dtype": "dtype",
    "vocab_size": "size", "hidden_size": "size", "intermediate_size": "size", "num_hidden_layers": "size",
    "num_attention_heads": "size", "hidden_act": "act", "max_position_embeddings": "size",
    "initializer_range": "unit", "rms_norm_eps": "eps", "use_cache": "flag", "tie_word_embeddings": "flag",
    "pad_token_id": "id", "bos_token_id": "id", "eos_token_id": "ids", "rope_theta": "theta",
    "rope_scaling": "rope", "attention_dropout": "rate",
}  # fmt: skip
_SLIDING = {"sliding_window": "size?"}
_QWEN = {"use_sliding_window": "flag", "sliding_window": "size?", "max_window_layers": "count"}
_ROUTER = {"num_experts_per_tok": "size", "output_router_logits": "flag", "router_aux_loss_coef": "eps"}
FAMILIES: dict[str, dict[str, str]] = {
    "llama": {"num_key_value_heads": "size?", "head_dim": "size?", "pretraining_tp": "one",
              "attention_bias": "flag", "mlp_bias": "flag"},
    "mistral": {"num_key_value_heads": "size", "head_dim": "size?", **_SLIDING},
    "qwen2": {"num_key_value_heads": "size?", **_QWEN},
    "qwen3": {"num_key_value_heads": "size?", "head_dim": "size", "attention_bias": "flag", **_QWEN},
    "mixtral": {"num_key_value_heads": "size", "head_dim": "size?", **_SLIDING, **_ROUTER,
                "num_local_experts": "size", "router_jitter_noise": "unit"},
    # Qwen3MoeConfig declares no head_dim: a config's head_dim is kept as an attribute, which the attention
    # reads (Qwen3-30B-A3B's config.json gives it)
    "qwen3_moe": {"num_key_value_heads": "size", "head_dim": "size", "attention_bias": "flag",
                  "use_sliding_window": "flag", "sliding_window": "size?",
                  **_ROUTER, "num_experts": "size", "moe_intermediate_size": "size", "norm_topk_prob": "flag",
                  "decoder_sparse_step": "step1", "mlp_only_layers": "empty"},
}  # fmt: skip
_ROPE_KEYS = {"rope_type", "factor", "low_freq_factor", "high_freq_factor",
              "original_max_position_embeddings"}  # fmt: skip


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _float(v: Any) -> bool:
    return isinstance(v, float) and math.isfinite(v)


def _number(v: Any) -> bool:
    return _int(v) or _float(v)


def _text(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= MAX_TEXT and v.isprintable()


def _rope(v: Any, cfg: dict[str, Any]) -> bool:
    """None, or exactly Llama 3.1's rope_scaling: {"rope_type": "llama3", factor >= 1, 0 < low < high,
    original_max_position_embeddings <= max_position_embeddings}."""
    if v is None:
        return True
    if not isinstance(v, dict) or set(v) != _ROPE_KEYS or v["rope_type"] != "llama3":
        return False
    factor, low, high = v["factor"], v["low_freq_factor"], v["high_freq_factor"]
    orig, positions = v["original_max_position_embeddings"], cfg.get("max_position_embeddings")
    if not (_number(factor) and _number(low) and _number(high) and _int(orig) and _int(positions)):
        return False
    return factor >= 1 and 0 < low < high <= 1e6 and 1 <= orig <= positions


_KINDS = {
    "size": lambda v: _int(v) and v >= 1,
    "size?": lambda v: v is None or (_int(v) and v >= 1),
    "count": lambda v: _int(v) and v >= 0,
    "flag": lambda v: isinstance(v, bool),
    "eps": lambda v: _float(v) and 0 < v < 1,
    "unit": lambda v: _float(v) and 0 <= v <= 1,
    "rate": lambda v: _number(v) and 0 <= v <= 1,
    "theta": lambda v: _number(v) and 0 < v <= 1e12,
    "act": lambda v: v in ACTIVATIONS,
    "id": lambda v: v is None or (_int(v) and 0 <= v),
    "ids": lambda v: (
        v is None
        or (_int(v) and 0 <= v)
        or (isinstance(v, list) and 0 < len(v) <= MAX_IDS and all(_int(x) and x >= 0 for x in v))
    ),
    "one": lambda v: v is None or (_int(v) and v == 1),
    "none": lambda v: v is None,
    "empty": lambda v: v is None or v == [],
    "step1": lambda v: _int(v) and v == 1,
    "dtype": lambda v: v in DTYPES,
    "text": _text,
    "names": lambda v: isinstance(v, list) and 0 < len(v) <= 8 and all(_text(x) for x in v),
}


def _sizes_consistent(cfg: dict[str, Any]) -> bool:
    """The shape rules transformers checks at config or build time, made stricter: heads divide the width,
    KV heads divide the heads, an even head width (rotary), token ids inside the vocabulary, experts per
    token within the experts."""
    hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    if not (_int(hidden) and _int(heads)) or heads < 1 or hidden % heads:
        return False
    kv = cfg.get("num_key_value_heads")
    kv = heads if kv is None else kv
    if not _int(kv) or kv < 1 or heads % kv:
        return False
    head_dim = cfg.get("head_dim")
    head_dim = hidden // heads if head_dim is None else head_dim
    if not _int(head_dim) or head_dim < 2 or head_dim % 2:
        return False
    vocab = cfg.get("vocab_size")
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):  # the padding row must be in the table
        ids = cfg.get(key)
        for i in ids if isinstance(ids, list) else [ids]:
            if i is not None and not (_int(i) and _int(vocab) and 0 <= i < vocab):
                return False
    experts = cfg.get("num_local_experts", cfg.get("num_experts"))
    top_k = cfg.get("num_experts_per_tok")
    if (experts is None) != (top_k is None):
        return False
    return experts is None or (_int(experts) and _int(top_k) and 1 <= top_k <= experts)


def accepts(cfg: dict[str, Any], task: str, transformers_version: str | None) -> bool:
    """True when transformers `transformers_version` certainly accepts `cfg` (a config.json as read) for
    `task`, building it included; False means "check it with transformers", not "rejected"."""
    if transformers_version not in TRANSFORMERS_VERSIONS or task not in TASKS:
        return False
    model_type = cfg.get("model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        return False
    for key, value in cfg.items():
        kind = family.get(key) or COMMON.get(key)
        if kind is None:
            return False
        if kind == "rope":
            if not _rope(value, cfg):
                return False
        elif not _KINDS[kind](value):
            return False
    required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    return all(k in cfg for k in required) and _sizes_consistent(cfg)


def installed_transformers() -> str | None:
    """The installed transformers' version from its package metadata (no import of transformers)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers")
    except PackageNotFoundError:
        return None
