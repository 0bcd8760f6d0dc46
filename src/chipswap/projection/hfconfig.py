"""Reading a decoder's work from any Hugging Face config: which config fields mean which size (aliases as a
table), the few family traits a config does not state (a table; unknown families are Llama-style), which
layers are mixture-of-experts layers, and which fields would change the work but are not read (each refused
in one line naming it).

What it is for: chipswap.projection.work.dims_from_config builds ModelDims from what this module reads, so a
new model family needs no code, only its config (issue 27). The tables are the whole rule: a field chipswap
reads is in FIELDS or MOE_PATTERN_FIELDS, a field it knowingly ignores (it does not change the matmul
weights, FLOPs or bytes) is in IGNORED, a field it knows changes the work and cannot model is in UNMODELLED,
and any other field that looks like a size (SIZE_LIKE) is refused as unknown.

Pure: plain dicts in, plain values out. No I/O, no torch, no transformers; may not read files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

# size -> config field names, in the order tried (transformers' attribute names and the aliases of other
# families' configs: GPT-2 n_embd, T5 d_model, Falcon n_head_kv, ChatGLM kv_channels, Megatron-style ...)
FIELDS: dict[str, tuple[str, ...]] = {
    "hidden": ("hidden_size", "d_model", "n_embd", "dim", "model_dim"),
    "layers": ("num_hidden_layers", "num_layers", "n_layer", "n_layers"),
    "heads": ("num_attention_heads", "num_heads", "n_head", "n_heads", "attention_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads", "multi_query_group_num"),
    "head_dim": ("head_dim", "d_kv", "kv_channels", "attention_head_dim"),
    "intermediate": ("intermediate_size", "d_ff", "hidden_dim", "n_inner", "ffn_dim", "ffn_hidden_size"),
    "vocab": ("vocab_size", "padded_vocab_size", "n_vocab"),
    "max_positions": ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"),
    # mixture of experts: routed experts per MoE layer, experts per token, one expert's MLP width (absent:
    # intermediate_size, the Mixtral / Llama 4 / MiniMax convention), the always-on shared expert (a width,
    # or a count of expert-wide shared experts), and the MLP width of the dense layers of an MoE model
    "experts": (
        "num_local_experts",
        "num_experts",
        "n_routed_experts",
        "moe_num_experts",
        "num_routed_experts",
    ),
    "top_k": (
        "num_experts_per_tok",
        "num_experts_per_token",
        "experts_per_token",  # gpt-oss gives it beside num_experts_per_tok (the same number)
        "moe_top_k",
        "top_k_experts",
        "moe_k",
        "moe_topk",
    ),
    "expert_width": ("moe_intermediate_size", "expert_intermediate_size", "moe_ffn_hidden_size"),
    "shared_width": ("shared_expert_intermediate_size", "shared_intermediate_size"),
    "shared_count": ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"),
    "dense_width": ("intermediate_size_mlp", "dense_intermediate_size"),
    # attention that sees a bounded window on some layers (Mistral, Gemma 2/3, gpt-oss, MiMo, Llama 4 chunks)
    "sliding_window": ("sliding_window", "sliding_window_size", "attention_chunk_size"),
    # logit soft-capping (Gemma 2): an elementwise tanh, read and reported, no matmul work
    "softcap": ("final_logit_softcapping", "attn_logit_softcapping"),
    # value heads of another width than the query / key heads (MiMo-V2: 192 / 128)
    "v_head_dim": ("v_head_dim",),
    # the attention shape of the sliding-window layers when the config gives it apart (MiMo-V2)
    "swa_heads": ("swa_num_attention_heads",),
    "swa_kv_heads": ("swa_num_key_value_heads",),
    "swa_head_dim": ("swa_head_dim",),
    "swa_v_head_dim": ("swa_v_head_dim",),
    # Gemma 4: the full-attention layers' own head width and KV heads, the last layers reusing an earlier
    # layer's KV cache, per-layer input embeddings (width per layer, their vocabulary)
    "full_head_dim": ("global_head_dim",),
    "full_kv_heads": ("num_global_key_value_heads",),
    "kv_shared": ("num_kv_shared_layers",),
    "per_layer_input": ("hidden_size_per_layer_input",),
    "per_layer_vocab": ("vocab_size_per_layer_input",),
}
# switches chipswap reads (Gemma 4): keys reused as values on the full layers, MLPs twice as wide on the
# KV-sharing layers, a dense MLP beside the experts on every layer
FLAGS = ("attention_k_eq_v", "use_double_wide_mlp", "enable_moe_block")
# per_layer_config entries (transformers' heterogeneous configs): the keys chipswap reads on a layer
PER_LAYER_KEYS = {"head_dim": "full_head_dim", "num_key_value_heads": "full_kv_heads"}

# fields that say which layers are MoE layers (dense layers use the dense MLP width):
#   moe_layers [i, ...] (Llama 4), mlp_layer_types ["dense" | "sparse", ...] (MiMo-V2), moe_layer_freq
#   (an int: every n-th layer, DeepSeek; a list of 0/1 per layer), interleave_moe_layer_step (Llama 4: layer
#   i is MoE when (i + 1) % step == 0), decoder_sparse_step (Qwen MoE: the same rule), first_k_dense_replace
#   (DeepSeek, GLM-4.5: the first k layers dense), mlp_only_layers [i, ...] (Qwen MoE: these layers dense),
#   moe_layer_interval / moe_layer_start_index / moe_layer_end_index (ERNIE 4.5: MoE when (i + 1) % interval
#   == 0 and start <= i <= end, end -1 = the last layer), num_dense_layers (LFM2-MoE, AFMoE: the first n
#   dense)
MOE_PATTERN_FIELDS = (
    "moe_layers",
    "mlp_layer_types",
    "moe_layer_freq",
    "interleave_moe_layer_step",
    "decoder_sparse_step",
    "moe_layer_interval",
    "first_k_dense_replace",
    "num_dense_layers",
    "moe_layer_start_index",
    "moe_layer_end_index",
    "mlp_only_layers",
)
# layer_types entries: what each layer's attention sees (bounded-window kinds count as sliding layers)
LAYER_TYPES = {
    "full_attention": "full",
    "global_attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "sliding",
    "local_attention": "sliding",
}


@dataclass(frozen=True)
class Family:
    """What a family's config does not state. gated: three MLP matrices (SwiGLU) instead of two. biases:
    linear layers carry biases. norms: norm weight vectors per layer (in units of hidden). tied: the LM head
    reuses the embedding when the config does not say. positions: the field giving learned position rows.
    shared_experts: always-on shared experts of the expert width in every MoE layer (Llama 4: one).
    window_pattern: with no layer_types, every n-th layer attends fully and the others over the sliding
    window (Gemma 2: 2; a config's sliding_window_pattern says it for Gemma 3); 0 = every layer windowed.
    mlp_ratio: the MLP width in units of hidden when the config gives none (GPT-2-style n_inner = null: 4).
    window_switch: a window applies only when use_sliding_window is true, on the layers from
    max_window_layers on (Qwen2 / Qwen3)."""

    gated: bool = True
    biases: bool = False
    norms: int = 2
    tied: bool = True
    positions: str = ""
    shared_experts: int = 0
    window_pattern: int = 0
    mlp_ratio: int = 0
    window_switch: bool = False  # the window applies only under use_sliding_window (Qwen: default off)


# Llama-style is the default: gated MLP, two RMSNorms, no biases, rotary positions. A config.json written by
# transformers omits tie_word_embeddings only when it is True (the PretrainedConfig default), so an unknown
# family is tied unless its config says otherwise; the hand-written presets of the families below omit it.
DEFAULT_FAMILY = Family()
FAMILIES: dict[str, Family] = {
    **dict.fromkeys(
        ("llama", "mistral", "mixtral", "seed_oss", "minimax_m2"),
        Family(tied=False),
    ),
    **dict.fromkeys(("qwen2", "qwen3", "qwen3_moe", "qwen2_moe"), Family(tied=False, window_switch=True)),
    # Llama 4: chunked attention on the RoPE layers, every 4th layer (no_rope_layer_interval) global
    "llama4_text": Family(tied=False, shared_experts=1, window_pattern=4),
    "llama4": Family(tied=False, shared_experts=1, window_pattern=4),
    "gemma2": Family(norms=4, window_pattern=2),
    **dict.fromkeys(("gemma3", "gemma3_text", "gemma4", "gemma4_text"), Family(norms=4, window_pattern=6)),
    "gpt2": Family(gated=False, biases=True, norms=4, positions="n_positions", mlp_ratio=4),
    "gptj": Family(gated=False, tied=False, mlp_ratio=4),
    "codegen": Family(gated=False, tied=False, mlp_ratio=4),
    "falcon": Family(gated=False, mlp_ratio=4),
    "gpt_neox": Family(gated=False, biases=True, norms=4, tied=False),
    "gpt_bigcode": Family(gated=False, biases=True, norms=4, positions="n_positions", mlp_ratio=4),
    "starcoder2": Family(gated=False, biases=True, norms=4),
    "phi": Family(gated=False, biases=True, norms=2, tied=False),
    "opt": Family(gated=False, biases=True, norms=4, positions="max_position_embeddings"),
    "bloom": Family(gated=False, biases=True, norms=4, mlp_ratio=4),
}
# families that are not attention transformers: no closed form here (a measured figure is needed)
NOT_TRANSFORMERS = frozenset(
    {"mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm", "recurrent_gemma", "jamba", "zamba", "zamba2",
     "bamba", "falcon_h1", "lfm2", "nemotron_h", "granitemoehybrid", "qwen3_next", "minimax"}
)  # fmt: skip

# fields known to change the work that chipswap does not model: refused, naming the field
UNMODELLED: dict[str, str] = {
    "kv_lora_rank": "multi-head latent attention (low-rank KV)",
    "q_lora_rank": "low-rank query projection",
    "qk_rope_head_dim": "split rotary / non-rotary head dims (latent attention)",
    "qk_nope_head_dim": "split rotary / non-rotary head dims (latent attention)",
    "ssm_state_size": "state-space layers",
    "state_size": "state-space layers",
    "linear_num_key_heads": "linear-attention layers",
    "hybrid_override_pattern": "hybrid attention / state-space layers",
    "zero_expert_num": "zero-compute experts",
    "expert_layer_period": "an MoE layer pattern chipswap does not read",
}
# fields that change the work at some values only: (field, values) -> what it does
UNMODELLED_VALUES: dict[str, tuple[tuple[Any, ...], str]] = {
    "use_bidirectional_attention": (("all",), "every token attends both ways (not a causal decoder)"),
}
# fields whose value does not change matmul weights, FLOPs or bytes beyond what the fitted terms absorb
# (rotary settings, norms, routing rules, dropout, token ids, speculative-decoding heads not run when serving)
IGNORED = frozenset(
    {"rotary_dim", "partial_rotary_factor", "no_rope_layer_interval", "no_rope_layers", "rope_dim",
     "max_window_layers", "n_group", "topk_group", "num_mtp_modules", "mtp_transformer_layers",
     "num_nextn_predict_layers", "num_mtp_layers", "num_labels", "type_vocab_size", "pretraining_tp",
     "attn_type_list", "num_key_value_groups", "embedding_multiplier", "logits_scaling",
     "num_channels", "image_size", "patch_size", "mm_tokens_per_image",
     "original_max_position_embeddings", "max_window_size", "pad_vocab_size_multiple", "window_size",
     "moe_router_topk", "routed_scaling_factor", "num_experts_per_group", "use_sliding_window",
     "max_batch_size", "attention_window_size", "n_ctx", "moe_norm_min", "unpadded_vocab_size"}
)  # fmt: skip
# the sub-config holding a multimodal model's language model (the keys models.spec.TEXT_CONFIG_KEYS names,
# which the task guess reads; a pure core may not import models, and a test checks the two agree)
TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config")
# a field name that looks like a size, or like an MoE setting: an unknown one is refused (it may change the
# work)
SIZE_LIKE = re.compile(
    r"(^num_|^n_|_size$|_dim$|_dims$|_layers$|_heads$|_experts$|_rank$|_step$|_freq$|_interval$|^moe_|expert)"
)


def text_part(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's config: a multimodal config's nested text_config (with the outer model_type
    when it states none), else the config itself."""
    for key in TEXT_CONFIG_KEYS:
        sub = cfg.get(key)
        if isinstance(sub, dict) and any(k in sub for k in FIELDS["hidden"]):
            merged = dict(sub)
            merged.setdefault("model_type", cfg.get("model_type"))
            if "tie_word_embeddings" not in merged and "tie_word_embeddings" in cfg:
                merged["tie_word_embeddings"] = cfg["tie_word_embeddings"]
            return merged
    return cfg


def family(model_type: str) -> Family:
    return FAMILIES.get(model_type, DEFAULT_FAMILY)


def field(cfg: dict[str, Any], size: str) -> tuple[str, Any] | None:
    """(field name, value) of the first alias of `size` the config sets (None values skipped)."""
    for key in FIELDS[size]:
        v = cfg.get(key)
        if v is not None:
            return key, v
    return None


def positive(cfg: dict[str, Any], size: str, where: str, *, zero_ok: bool = False) -> int | None:
    """The positive integer `size` from the config, None when absent (or 0 with zero_ok); a bad value is
    one line naming the field."""
    found = field(cfg, size)
    if found is None:
        return None
    key, v = found
    if isinstance(v, bool) or not isinstance(v, int) or v < (0 if zero_ok else 1):
        raise ChipswapError(f"{where}: {key} must be a positive integer, got {v!r}; fix the config")
    return int(v) or None


def need(cfg: dict[str, Any], size: str, where: str) -> int:
    v = positive(cfg, size, where)
    if v is None:
        names = FIELDS[size]
        raise ChipswapError(
            f"{where}: config has no {names[0]} (or {', '.join(names[1:]) or 'alias'}); add the model's "
            f"{size} size to the config"
        )
    return v


def moe_layer_count(cfg: dict[str, Any], layers: int, where: str) -> int:
    """How many of the `layers` blocks are MoE layers (see MOE_PATTERN_FIELDS); every block when no pattern
    field is set. A pattern that names no MoE layer, or a malformed one, is one line naming the field."""
    mask = [True] * layers

    def ints(key: str) -> list[int]:
        v = cfg.get(key)
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
            raise ChipswapError(
                f"{where}: {key} must be a list of layer numbers, got {one_line(repr(v), 60)}"
            )
        return v

    if cfg.get("moe_layers") is not None:
        chosen = set(ints("moe_layers"))
        mask = [i in chosen for i in range(layers)]
    elif cfg.get("mlp_layer_types") is not None:
        kinds = cfg["mlp_layer_types"]
        if not isinstance(kinds, list) or len(kinds) != layers or set(kinds) - {"dense", "sparse"}:
            raise ChipswapError(
                f"{where}: mlp_layer_types must list 'dense' or 'sparse' for each of the {layers} layers"
            )
        mask = [k == "sparse" for k in kinds]
    else:
        freq = cfg.get("moe_layer_freq")
        if isinstance(freq, list):
            if len(freq) != layers:
                raise ChipswapError(
                    f"{where}: moe_layer_freq lists {len(freq)} layers, the model has {layers}"
                )
            mask = [bool(x) for x in freq]
        elif freq is not None:
            f = _step(freq, "moe_layer_freq", where)
            mask = [m and i % f == 0 for i, m in enumerate(mask)]
        for key in ("interleave_moe_layer_step", "decoder_sparse_step", "moe_layer_interval"):
            if cfg.get(key) is not None:
                s = _step(cfg[key], key, where)
                mask = [m and (i + 1) % s == 0 for i, m in enumerate(mask)]
        for key in ("first_k_dense_replace", "num_dense_layers", "moe_layer_start_index"):
            if cfg.get(key) is not None:
                k = _step(cfg[key], key, where, zero_ok=True)
                mask = [m and i >= k for i, m in enumerate(mask)]
        end = cfg.get("moe_layer_end_index")
        if end is not None and end != -1:
            end = _step(end, "moe_layer_end_index", where, zero_ok=True)
            mask = [m and i <= end for i, m in enumerate(mask)]
        if cfg.get("mlp_only_layers") is not None:
            dense = set(ints("mlp_only_layers"))
            mask = [m and i not in dense for i, m in enumerate(mask)]
    n = sum(mask)
    if n == 0:
        set_fields = [k for k in MOE_PATTERN_FIELDS if cfg.get(k) is not None]
        raise ChipswapError(
            f"{where}: {', '.join(set_fields) or 'the MoE layer pattern'} leaves no MoE layer among the "
            f"{layers}; fix the config (or drop the expert fields for a dense model)"
        )
    return n


def _step(v: Any, key: str, where: str, zero_ok: bool = False) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < (0 if zero_ok else 1):
        raise ChipswapError(f"{where}: {key} must be a positive integer, got {v!r}; fix the config")
    return v


def window_layers(cfg: dict[str, Any], layers: int, where: str, fam: Family = DEFAULT_FAMILY) -> list[bool]:
    """Which of the `layers` blocks attend over a bounded window (True) rather than every position: from
    layer_types when given (or MiMo's hybrid_layer_pattern), else Llama 4's no_rope_layers (chunked on the
    RoPE layers), else the window pattern (sliding_window_pattern or the family's: every n-th layer full),
    else every layer when a window is set (Mistral); Qwen: only under use_sliding_window, from
    max_window_layers on. No window field: none. An unknown layer type is one line naming it."""
    window = field(cfg, "sliding_window")
    if window is None or not window[1]:
        return [False] * layers
    pattern = cfg.get("hybrid_layer_pattern")
    if isinstance(pattern, list) and pattern:  # MiMo-V2: 1 = a sliding-window layer, 0 = full attention
        if len(pattern) != layers or any(x not in (0, 1) for x in pattern):
            raise ChipswapError(
                f"{where}: hybrid_layer_pattern must give 0 or 1 for each of the {layers} layers; fix it"
            )
        return [x == 1 for x in pattern]
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        unknown = sorted({str(t) for t in types} - set(LAYER_TYPES))
        if unknown:
            raise ChipswapError(
                f"{where}: layer_types has {one_line(', '.join(unknown), 80)}, a kind of layer chipswap does "
                f"not size (it reads {', '.join(LAYER_TYPES)}); give a measured figure for this model"
            )
        mask = [LAYER_TYPES[str(t)] == "sliding" for t in types[:layers]]
        return mask + [False] * (layers - len(mask))
    nope = cfg.get("no_rope_layers")
    if window[0] == "attention_chunk_size" and isinstance(nope, list) and len(nope) == layers:
        return [bool(x) for x in nope]  # Llama 4: 1 = a RoPE layer, chunked; 0 = a global NoPE layer
    if window[0] == "attention_chunk_size" and not fam.window_pattern:
        return [False] * layers  # chunked layers of a family with no known pattern: counted as full
    if fam.window_switch or cfg.get("use_sliding_window") is not None:
        if cfg.get("use_sliding_window") is not True:
            return [False] * layers  # Qwen2 / Qwen3 configs carry a window they do not use
        first = cfg.get("max_window_layers")
        first = first if isinstance(first, int) and not isinstance(first, bool) and first >= 0 else 0
        return [i >= first for i in range(layers)]
    every = cfg.get("sliding_window_pattern") or cfg.get("no_rope_layer_interval") or fam.window_pattern
    if isinstance(every, int) and not isinstance(every, bool) and every > 0:
        return [(i + 1) % every != 0 for i in range(layers)]
    return [True] * layers


def sliding_layer_count(cfg: dict[str, Any], layers: int, where: str, fam: Family = DEFAULT_FAMILY) -> int:
    """How many blocks attend over a bounded window (window_layers)."""
    return sum(window_layers(cfg, layers, where, fam))


def kv_shared_layers(
    cfg: dict[str, Any], layers: int, where: str, fam: Family = DEFAULT_FAMILY
) -> tuple[int, int]:
    """(sliding, full) counts of the last num_kv_shared_layers blocks, which reuse an earlier layer's KV
    cache (Gemma 4). More shared layers than blocks is one line naming the field."""
    n = positive(cfg, "kv_shared", where, zero_ok=True) or 0
    if n >= layers and n:
        raise ChipswapError(
            f"{where}: num_kv_shared_layers {n} leaves no layer with a KV cache of its own among the "
            f"{layers}; fix the config"
        )
    tail = window_layers(cfg, layers, where, fam)[layers - n :] if n else []
    return sum(tail), n - sum(tail)


def per_layer_shapes(cfg: dict[str, Any], where: str) -> dict[str, int]:
    """The full-attention layers' own head width and KV heads from per_layer_config (transformers'
    heterogeneous configs: layer -> overrides), when it overrides only those and only on full-attention
    layers, with one value each; anything else is one line naming it (a per-layer shape not sized)."""
    plc = cfg.get("per_layer_config")
    if not plc:
        return {}
    if not isinstance(plc, dict) or not all(isinstance(v, dict) for v in plc.values()):
        raise ChipswapError(f"{where}: per_layer_config must map layers to their overrides; fix the config")
    given = cfg.get("layer_types")
    types: list[Any] = given if isinstance(given, list) else []
    found: dict[str, set[Any]] = {}
    for layer, over in plc.items():
        idx = int(layer) if str(layer).isdigit() else -1
        kind = types[idx] if 0 <= idx < len(types) else None
        for key, v in over.items():
            if key not in PER_LAYER_KEYS or LAYER_TYPES.get(str(kind)) != "full":
                raise ChipswapError(
                    f"{where}: per_layer_config sets {one_line(str(key), 40)} on layer "
                    f"{one_line(str(layer), 20)} ({kind or 'an unknown layer type'}): chipswap sizes a "
                    "head width and KV heads of the full-attention layers only; give a measured figure "
                    "for this model"
                )
            found.setdefault(PER_LAYER_KEYS[key], set()).add(v)
    out = {}
    for name, values in found.items():
        if len(values) != 1 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values
        ):
            raise ChipswapError(
                f"{where}: per_layer_config gives the full-attention layers {name.replace('full_', '')} "
                f"{one_line(repr(sorted(values, key=str)), 40)}; one positive value per layer kind is sized"
            )
        out[name] = next(iter(values))
    return out


# embedding widths that change nothing when they equal the hidden size (OPT-350m projects 512 -> 1,024)
SAME_AS_HIDDEN = frozenset({"word_embed_proj_dim", "embedding_size", "input_embedding_size", "emb_dim"})


def attention_shape(
    cfg: dict[str, Any], heads: int, kv_heads: int, head_dim: int, where: str
) -> tuple[int, int, str]:
    """(KV heads, head width, note) as the closed form counts them. Value heads of another width v: every
    attention weight, KV-cache byte and attention FLOP is linear in (head_dim + v), so the head width counted
    is their mean (exact). Sliding-window layers with more KV heads than the full layers (MiMo-V2: 8 vs 4)
    count them on every layer (an upper bound, said in the note); other per-layer shapes are refused."""
    v = positive(cfg, "v_head_dim", where) or head_dim
    for size, full in (("swa_heads", heads), ("swa_head_dim", head_dim), ("swa_v_head_dim", v)):
        got = positive(cfg, size, where)
        if got is not None and got != full:
            raise ChipswapError(
                f"{where}: config field {FIELDS[size][0]} = {got} differs from the full-attention layers' "
                f"{full}; per-layer attention shapes are not sized; give a measured figure for this model"
            )
    if (head_dim + v) % 2:
        raise ChipswapError(f"{where}: head_dim {head_dim} + v_head_dim {v} is odd; fix the config")
    note = ""
    swa_kv = positive(cfg, "swa_kv_heads", where)
    if swa_kv is not None and swa_kv != kv_heads:
        note = (
            f"KV heads: {swa_kv} on the sliding-window layers, {kv_heads} on the others; counted as "
            f"{max(swa_kv, kv_heads)} on every layer (an upper bound)"
        )
        kv_heads = max(swa_kv, kv_heads)
    return kv_heads, (head_dim + v) // 2, note


# sizes whose aliases may name different things in one config (a chunk vs a window; a trained context vs
# a serving one; the logit vs the attention soft-cap): the first alias set is read, the others not compared
ALIASES_MAY_DIFFER = frozenset({"max_positions", "sliding_window", "softcap"})


def check_aliases(cfg: dict[str, Any], where: str) -> None:
    """Published configs state some sizes twice under two names (gpt-oss: experts_per_token beside
    num_experts_per_tok): aliases that agree are read as one; aliases that disagree are one line naming
    both (chipswap would otherwise pick one silently)."""
    for size, names in FIELDS.items():
        if size in ALIASES_MAY_DIFFER:
            continue
        given = [(k, cfg[k]) for k in names if cfg.get(k) is not None]
        for key, v in given[1:]:
            if v != given[0][1]:
                raise ChipswapError(
                    f"{where}: config fields {given[0][0]} = {one_line(repr(given[0][1]), 30)} and {key} = "
                    f"{one_line(repr(v), 30)} name the same {size.replace('_', ' ')} and disagree; fix the "
                    "config so they agree (or keep one)"
                )


def check_unread_fields(cfg: dict[str, Any], where: str) -> None:
    """Refuse, in one line naming it, a field that changes the work and that chipswap does not read: a
    known one (UNMODELLED) set to a non-empty value, or an unknown size-like field (SIZE_LIKE); and
    aliases of one size that disagree (check_aliases)."""
    check_aliases(cfg, where)
    known = {k for names in FIELDS.values() for k in names} | set(MOE_PATTERN_FIELDS) | set(FLAGS)
    hidden = field(cfg, "hidden")
    for key, v in cfg.items():
        if key in UNMODELLED_VALUES and v in UNMODELLED_VALUES[key][0]:
            raise ChipswapError(
                f"{where}: config field {key} = {one_line(repr(v), 40)} ({UNMODELLED_VALUES[key][1]}) "
                "changes the model's work and chipswap does not size it; give a measured figure for this "
                "model"
            )
        if v is None or v is False or v == 0 or isinstance(v, dict) or key in known or key in IGNORED:
            continue
        if key in SAME_AS_HIDDEN and hidden is not None and v == hidden[1]:
            continue
        if key in UNMODELLED:
            raise ChipswapError(
                f"{where}: config field {key} = {one_line(repr(v), 40)} ({UNMODELLED[key]}) changes the "
                "model's work and chipswap does not size it; give a measured figure for this model"
            )
        if SIZE_LIKE.search(key) and isinstance(v, (int, float, list)) and not key.endswith("_token_id"):
            raise ChipswapError(
                f"{where}: config field {key} = {one_line(repr(v), 40)} is not one chipswap reads, and a "
                "size like it may change the model's work; give a measured figure for this model (or remove "
                "the field if it does not apply)"
            )
