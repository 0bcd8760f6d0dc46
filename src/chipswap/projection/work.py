"""Closed-form work of a dense transformer: parameters, weight bytes, FLOPs and bytes moved per call shape.

What it is for: the projection engine (chipswap.projection.predict) turns this work into seconds on a
calibrated
platform; the calibration (chipswap.projection.fitting) uses the same formulas on the published benchmark
rows, so a
prediction and its error band come from one definition. projection/flops.py checks these formulas against
PyTorch's FLOP counter on the real transformers graphs.

Pure: no I/O, no torch, no clock. It may not read files or know about instances or prices.

Conventions: a FLOP is one multiply or one add (a multiply-accumulate is 2 FLOPs); only matrix products are
counted (elementwise ops, norms and softmax are < 1 % of a dense transformer's FLOPs and are what the fitted
overheads absorb). Attention is counted over the full length (no causal halving), as the compiled Neuron
graphs and most GPU kernels' FLOP counters do. Bytes are HBM traffic: every matmul weight read once per call,
plus the KV cache read (decode) or written (prefill).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from chipswap.errors import ChipswapError

GiB = float(2**30)  # bytes in a GiB (the one definition the projection uses)

# bytes per element of each weight / activation dtype chipswap projects
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp4": 0.5,
    "int4": 0.5,
}

KINDS = ("decoder", "encoder")  # a causal LM (prefill + decode) or an encoder (one forward per request)


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of `dtype`; an unknown dtype is a one-line error listing the known ones."""
    found = DTYPE_BYTES.get(dtype.lower())
    if found is None:
        raise ChipswapError(f"unknown dtype: {dtype!r}; use one of {', '.join(DTYPE_BYTES)}")
    return found


@dataclass(frozen=True)
class ModelDims:
    """The sizes that fix a dense transformer's work. Built from a config by `dims_from_config`.

    Fields:
      name: label for reports. kind: "decoder" (causal LM) or "encoder".
      hidden: model width d. layers: transformer blocks L. heads / kv_heads: query and key-value heads
      (kv_heads < heads = grouped-query attention). head_dim: per-head width (usually hidden / heads).
      intermediate: MLP width. gated_mlp: three MLP matrices (SwiGLU, Llama/Mistral) instead of two.
      vocab: vocabulary size. tied_embeddings: the LM head reuses the embedding matrix.
      positions: learned position-embedding rows (0 for rotary / relative positions).
      biases: linear layers carry biases (BERT, GPT-2) - only changes the parameter count.
      norm_params_per_layer: weights of the norms in one block (2d for two RMSNorms, 4d for two LayerNorms).
      embed_dim: width of the token embedding when it differs from hidden (ALBERT), else 0.
      shared_layers: one block's weights reused by every block (ALBERT): compute is per block, memory once.
      head: the task head the forward computes: "lm" (logits over the vocabulary), "classifier"
        (pooled sequence classification), "none" (hidden states only), "mlm" (masked-LM logits per token).
      patch_tokens / patch_flops: vision encoders (ViT): tokens per image and the patch-embedding FLOPs.
    """

    name: str
    kind: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    gated_mlp: bool = False
    tied_embeddings: bool = False
    positions: int = 0
    biases: bool = False
    norm_params_per_layer: int = 0
    embed_dim: int = 0
    shared_layers: bool = False
    head: str = "none"
    num_labels: int = 2
    max_positions: int = 0
    patch_tokens: int = 0
    patch_flops: float = 0.0
    pooler: bool = True  # a classifier head pools through a hidden x hidden layer first (BERT-style; not ViT)
    # mixture of experts (0 = dense): routed experts per MoE layer, experts each token uses (top-k), the MLP
    # width of one expert, and the width of an always-on shared expert (0 = none)
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ChipswapError(f"model kind {self.kind!r} is not one of {', '.join(KINDS)}")
        for f in ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate"):
            if int(getattr(self, f)) < 1:
                raise ChipswapError(f"model {self.name}: {f} must be >= 1, got {getattr(self, f)}")
        if self.heads % self.kv_heads:
            raise ChipswapError(
                f"model {self.name}: attention heads ({self.heads}) are not a multiple of key-value heads "
                f"({self.kv_heads}); fix num_key_value_heads"
            )


@dataclass(frozen=True)
class ModelWork:
    """Everything the projection needs about a model, in closed form. Frozen and cheap to copy.

    Per-layer counts are matmul weights (the ones read every call); `params` is the full count (embeddings,
    norms, biases) that sets memory. All FLOP / byte methods are exact for the formulas in this module's
    docstring and monotone in every argument."""

    dims: ModelDims
    params: int  # every parameter (memory footprint, checkpoint size)
    matmul_params: int  # weights of the per-token matmuls of the transformer blocks, all layers
    head_params: int  # weights of the task head's matmuls (LM head: vocab x hidden)
    embedding_params: int  # token (+ position) embedding rows; gathered, not multiplied
    # or "graph count (torch.utils.flop_counter)" when projection/flops.py made it
    source: str = "closed form"
    # MoE: matmul weights read by one decode step (every expert's: at the batches served, the tokens of a
    # step together touch all experts); 0 = matmul_params (dense)
    streamed_params: int = 0

    # --- sizes -----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.dims.name

    @property
    def kind(self) -> str:
        return self.dims.kind

    def weight_bytes(self, dtype: str) -> float:
        """Bytes of all weights stored in `dtype` (what must fit in device memory, summed over devices)."""
        return self.params * dtype_bytes(dtype)

    def streamed_weight_bytes(self, dtype: str) -> float:
        """Bytes of weights read by one call (matmul weights + head; embedding rows are only gathered)."""
        return ((self.streamed_params or self.matmul_params) + self.head_params) * dtype_bytes(dtype)

    @property
    def is_moe(self) -> bool:
        return self.dims.experts > 0

    def kv_bytes_per_token(self, dtype: str = "bf16", tp: int = 1) -> float:
        """KV-cache bytes per token on ONE device of a tensor-parallel group of `tp` devices:
        2 (K and V) x layers x KV heads per device x head_dim x dtype bytes. KV heads are split across the
        group; when tp exceeds them each device holds (a replica of) at least one."""
        d = self.dims
        per_device_heads = math.ceil(d.kv_heads / max(1, tp))
        return 2.0 * d.layers * per_device_heads * d.head_dim * dtype_bytes(dtype)

    def kv_bytes_per_token_total(self, dtype: str = "bf16") -> float:
        d = self.dims
        return 2.0 * d.layers * d.kv_heads * d.head_dim * dtype_bytes(dtype)

    # --- FLOPs -----------------------------------------------------------------------------------
    def _attention_flops(self, queries: float, keys: float) -> float:
        """QK^T and AV: 2 matmuls x 2 FLOPs x queries x keys x heads x head_dim, every layer."""
        d = self.dims
        return 4.0 * queries * keys * d.heads * d.head_dim * d.layers

    def _head_flops(self, rows: float) -> float:
        return 2.0 * rows * self.head_params

    def prefill_flops(self, batch: int, length: int) -> float:
        """One prefill (context encoding) of `batch` prompts of `length` tokens; logits for the last token
        of each prompt only (what a serving stack computes)."""
        tokens = float(batch) * length
        return (
            2.0 * tokens * self.matmul_params
            + batch * self._attention_flops(length, length)
            + self._head_flops(batch)
        )

    def decode_flops(self, batch: int, context: int) -> float:
        """One decode step: one new token for each of `batch` sequences attending to `context` tokens."""
        return (
            2.0 * batch * self.matmul_params
            + batch * self._attention_flops(1, context)
            + self._head_flops(batch)
        )

    def encoder_flops(self, batch: int, length: int) -> float:
        """One encoder forward of `batch` sequences of `length` tokens (bidirectional attention), with the
        model's task head: a classifier on the pooled token, per-token masked-LM logits, or nothing."""
        d = self.dims
        tokens = float(batch) * length
        head_rows = {"mlm": tokens, "lm": tokens, "classifier": float(batch)}.get(d.head, 0.0)
        return (
            2.0 * tokens * self.matmul_params
            + batch * self._attention_flops(length, length)
            + self._head_flops(head_rows)
            + batch * d.patch_flops
        )

    def train_flops_per_token(self, seq_len: int) -> float:
        """Forward + backward per trained token at sequence length `seq_len`: 3 x the forward (backward
        costs two forwards), logits for every token."""
        forward = 2.0 * (self.matmul_params + self.head_params) + self._attention_flops(1, seq_len)
        return 3.0 * forward

    # --- bytes -----------------------------------------------------------------------------------
    def decode_bytes(self, batch: int, context: int, weight_dtype: str, kv_dtype: str = "bf16") -> float:
        """HBM bytes of one decode step over the whole model (all devices): weights once + the KV read."""
        return self.streamed_weight_bytes(weight_dtype) + float(
            batch
        ) * context * self.kv_bytes_per_token_total(kv_dtype)

    def prefill_bytes(self, batch: int, length: int, weight_dtype: str, kv_dtype: str = "bf16") -> float:
        """HBM bytes of one prefill: weights once + the KV cache written."""
        return self.streamed_weight_bytes(weight_dtype) + float(
            batch
        ) * length * self.kv_bytes_per_token_total(kv_dtype)


# --- building ModelDims from a transformers-style config ----------------------------------------

# config keys, in the order tried, for each dimension (transformers' own attribute names and aliases)
_KEYS: dict[str, tuple[str, ...]] = {
    "hidden": ("hidden_size", "d_model", "n_embd", "dim"),
    "layers": ("num_hidden_layers", "num_layers", "n_layer", "n_layers"),
    "heads": ("num_attention_heads", "num_heads", "n_head", "n_heads"),
    "intermediate": ("intermediate_size", "d_ff", "hidden_dim", "n_inner", "ffn_dim"),
    "vocab": ("vocab_size",),
}
# model_type -> (kind, gated MLP, biases, norm params per layer in units of hidden, tied by default)
_ARCH: dict[str, tuple[str, bool, bool, int, bool]] = {
    "llama": ("decoder", True, False, 2, False),
    "mistral": ("decoder", True, False, 2, False),
    "qwen2": ("decoder", True, False, 2, False),
    "qwen3": ("decoder", True, False, 2, False),
    "mixtral": ("decoder", True, False, 2, False),
    "qwen3_moe": ("decoder", True, False, 2, False),
    "llama4_text": ("decoder", True, False, 2, False),
    "gptj": ("decoder", False, False, 2, False),
    "gpt2": ("decoder", False, True, 4, True),
    "falcon": ("decoder", False, False, 2, True),
    "bert": ("encoder", False, True, 4, True),
    "roberta": ("encoder", False, True, 4, True),
    "xlm-roberta": ("encoder", False, True, 4, True),
    "electra": ("encoder", False, True, 4, True),
    "distilbert": ("encoder", False, True, 4, True),
    "albert": ("encoder", False, True, 4, True),
    "t5": ("encoder", False, False, 2, True),
    "vit": ("encoder", False, True, 4, True),
}
DECODER_TASKS = ("causal-lm",)


def _need(cfg: dict[str, Any], dim: str, where: str) -> int:
    for key in _KEYS[dim]:
        v = cfg.get(key)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ChipswapError(f"{where}: {key} must be a positive integer, got {v!r}; fix the config")
            return int(v)
    raise ChipswapError(
        f"{where}: config has no {_KEYS[dim][0]} (or {', '.join(_KEYS[dim][1:]) or 'alias'}); "
        f"add the model's {dim} size to the config"
    )


def dims_from_config(cfg: dict[str, Any], *, name: str, task: str | None = None) -> ModelDims:
    """ModelDims from a transformers-style config dict (preset or config.json). A missing size is a
    one-line error naming the field; an architecture outside the dense-transformer families is refused."""
    where = f"model {name}"
    mtype = str(cfg.get("model_type") or "")
    if mtype not in _ARCH:
        raise ChipswapError(
            f"{where}: no closed-form work for model_type {mtype!r}; supported: {', '.join(sorted(_ARCH))} "
            "(dense transformers); give a measured figure for this model instead"
        )
    kind, gated, biases, norm_units, tied_default = _ARCH[mtype]
    hidden = _need(cfg, "hidden", where)
    layers = _need(cfg, "layers", where)
    heads = _need(cfg, "heads", where)
    if mtype == "gpt2" and cfg.get("n_inner") is None:
        intermediate = 4 * hidden
    else:
        intermediate = _need(cfg, "intermediate", where)
    vocab = 0 if mtype == "vit" else _need(cfg, "vocab", where)
    kv_heads = cfg.get("num_key_value_heads") or heads
    if mtype == "falcon" and cfg.get("multi_query", False) and not cfg.get("new_decoder_architecture"):
        kv_heads = 1
    head_dim = cfg.get("head_dim") or cfg.get("d_kv") or (hidden // heads)
    if mtype != "t5" and not cfg.get("head_dim") and hidden % heads:
        raise ChipswapError(
            f"{where}: hidden size {hidden} is not a multiple of the {heads} attention heads; add head_dim"
        )
    if mtype in ("llama", "mistral", "qwen2", "qwen3") and cfg.get("hidden_act", "silu") not in (
        "silu",
        "swish",
    ):
        gated = True  # Llama-style blocks are always gated; the activation only changes elementwise work
    if mtype == "t5":
        gated = str(cfg.get("feed_forward_proj", "relu")).startswith("gated")
    tied = bool(cfg.get("tie_word_embeddings", tied_default))
    positions = 0
    if mtype in ("gpt2",):
        positions = int(cfg.get("n_positions") or cfg.get("max_position_embeddings") or 0)
    elif mtype in ("bert", "roberta", "xlm-roberta", "electra", "distilbert", "albert"):
        positions = int(cfg.get("max_position_embeddings") or 0)
    decoder = kind == "decoder" and (task is None or task in DECODER_TASKS)
    if kind == "decoder" and not decoder:
        kind = "encoder"
    head = "lm" if decoder else _encoder_head(task)
    embed_dim = int(cfg.get("embedding_size") or 0) if mtype in ("albert", "electra") else 0
    if embed_dim == hidden:
        embed_dim = 0
    patch_tokens = 0
    patch_flops = 0.0
    if mtype == "vit":
        image = int(cfg.get("image_size", 224))
        patch = int(cfg.get("patch_size", 16))
        channels = int(cfg.get("num_channels", 3))
        n_patches = (image // patch) ** 2
        patch_tokens = n_patches + 1
        patch_flops = 2.0 * n_patches * hidden * channels * patch * patch
        head = "classifier" if task in (None, "image-classification") else "none"
    max_pos = int(cfg.get("max_position_embeddings") or cfg.get("n_positions") or 0)
    moe = _moe_sizes(cfg, mtype, intermediate, where)
    return ModelDims(
        name=name,
        kind="decoder" if decoder else "encoder",
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        intermediate=intermediate,
        vocab=vocab,
        gated_mlp=gated,
        tied_embeddings=tied,
        positions=positions,
        biases=biases,
        norm_params_per_layer=norm_units * hidden,
        embed_dim=embed_dim,
        shared_layers=mtype == "albert",
        head=head,
        num_labels=int(cfg.get("num_labels") or len(cfg.get("id2label") or {}) or 2),
        max_positions=max_pos,
        patch_tokens=patch_tokens,
        patch_flops=patch_flops,
        pooler=mtype != "vit",
        **moe,
    )


# model_type -> (experts key, top-k key, expert width key or None = intermediate_size,
#                shared expert width key or None)
_MOE_KEYS: dict[str, tuple[str, str, str | None, str | None]] = {
    "mixtral": ("num_local_experts", "num_experts_per_tok", None, None),
    "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size", None),
    "llama4_text": ("num_local_experts", "num_experts_per_tok", None, "shared_expert_intermediate_size"),
}


def _moe_sizes(cfg: dict[str, Any], mtype: str, intermediate: int, where: str) -> dict[str, int]:
    """The MoE fields of ModelDims from a config (empty for a dense model). Every MoE layer is assumed
    routed (Mixtral, Qwen3-MoE, Llama 4 Scout: no interleaved dense layers)."""
    keys = _MOE_KEYS.get(mtype)
    if keys is None:
        return {}
    e_key, k_key, w_key, s_key = keys
    out = {}
    for name, key in (("experts", e_key), ("experts_per_token", k_key)):
        v = cfg.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ChipswapError(f"{where}: {key} must be a positive integer, got {v!r}; fix the config")
        out[name] = v
    if out["experts_per_token"] > out["experts"]:
        raise ChipswapError(
            f"{where}: {k_key} ({out['experts_per_token']}) exceeds {e_key} ({out['experts']}); "
            "fix the config"
        )
    width = cfg.get(w_key) if w_key else intermediate
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ChipswapError(f"{where}: {w_key} must be a positive integer, got {width!r}; fix the config")
    out["expert_intermediate"] = width
    shared = cfg.get(s_key, 0) if s_key else 0
    out["shared_expert_intermediate"] = int(shared or 0)
    return out


def _encoder_head(task: str | None) -> str:
    return {
        "sequence-classification": "classifier",
        "masked-lm": "mlm",
        "image-classification": "classifier",
    }.get(task or "", "none")


def work_from_dims(dims: ModelDims, *, source: str = "closed form") -> ModelWork:
    """Parameter counts of a dense transformer from its dims (exact for Llama/Mistral/BERT-style blocks)."""
    d = dims
    q_out = d.heads * d.head_dim
    kv_out = d.kv_heads * d.head_dim
    attn = d.hidden * q_out + 2 * d.hidden * kv_out + q_out * d.hidden
    mlp = (3 if d.gated_mlp else 2) * d.hidden * d.intermediate
    stored_mlp = mlp
    if d.experts:
        # MoE: every expert is stored; a token runs its top-k experts, the shared expert and the router
        one = (3 if d.gated_mlp else 2) * d.hidden * d.expert_intermediate
        shared = (3 if d.gated_mlp else 2) * d.hidden * d.shared_expert_intermediate
        router = d.hidden * d.experts
        mlp = d.experts_per_token * one + shared + router
        stored_mlp = d.experts * one + shared + router
    per_layer_mm = attn + mlp
    per_layer_stored = attn + stored_mlp
    bias = (q_out + 2 * kv_out + d.hidden + d.intermediate + d.hidden) if d.biases else 0
    per_layer_params = per_layer_stored + bias + d.norm_params_per_layer
    stored_layers = 1 if d.shared_layers else d.layers
    embed_width = d.embed_dim or d.hidden
    embeddings = d.vocab * embed_width + d.positions * embed_width
    projection = d.embed_dim * d.hidden if d.embed_dim else 0  # ALBERT/ELECTRA embedding -> hidden
    if d.head == "lm":
        head = d.vocab * d.hidden
        head_stored = 0 if d.tied_embeddings else head
    elif d.head == "mlm":
        head = d.hidden * d.hidden + d.vocab * d.hidden  # transform + decoder (tied)
        head_stored = d.hidden * d.hidden
    elif d.head == "classifier":
        head = (d.hidden * d.hidden if d.pooler else 0) + d.hidden * d.num_labels  # pooler + classifier
        head_stored = head
    else:
        head = 0
        head_stored = 0
    # ViT: the patch projection (a strided conv) + [CLS] token + one position row per token
    patch = (
        d.patch_flops / (2.0 * max(1, d.patch_tokens - 1)) + d.hidden * (d.patch_tokens + 1)
        if d.patch_tokens
        else 0
    )
    params = stored_layers * per_layer_params + embeddings + projection + head_stored + int(patch)
    params += d.norm_params_per_layer // 2  # the final (or embedding) norm
    return ModelWork(
        dims=d,
        params=int(params),
        matmul_params=int(d.layers * per_layer_mm),
        head_params=int(head),
        embedding_params=int(embeddings),
        source=source,
        streamed_params=int(d.layers * per_layer_stored) if d.experts else 0,
    )


def work_from_config(cfg: dict[str, Any], *, name: str, task: str | None = None) -> ModelWork:
    """Closed-form ModelWork from a transformers-style config dict."""
    return work_from_dims(dims_from_config(cfg, name=name, task=task))
