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
plus the KV cache read (decode) or written (prefill). Sliding-window layers are an attention kind of their own
(AttentionKind): their attention FLOPs, KV reads and KV cache see at most their window (attended_keys,
prefill_keys); the time models take each kind's terms from here (attention_terms, kv_terms), so a model
without a window is one full-attention kind and every sum over kinds is its one formula exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.projection import hfconfig as hf

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


def attended_keys(context: float, window: int) -> float:
    """Keys one decode query attends to at `context` positions on a layer whose attention sees `window` keys
    (0 = every position); also the positions such a layer's KV cache holds for a sequence of `context`."""
    if not window or context <= window:
        return context
    return float(window)


def prefill_keys(length: float, window: int) -> float:
    """Keys per query of a prefill of `length` tokens, in the full-count convention (length x keys = twice
    the causal query-key pairs, as L x L is under full attention): `length` under full attention; past a
    window W, 2W - W^2 / L (the first W queries see 1..W keys, every later one W)."""
    if not window or length <= window:
        return length
    return 2.0 * window - window * window / length


@dataclass(frozen=True)
class AttentionKind:
    """The attention layers of one kind (ModelDims.attention_kinds): `layers` blocks with `kv_heads` KV heads
    of `head_dim` (query heads: the model's), seeing `window` keys (0 = full attention); `cached` of them
    hold a KV cache of their own (the others reuse an earlier layer's); values_are_keys: no value
    projection (keys reused as values)."""

    layers: int
    kv_heads: int
    head_dim: int
    window: int = 0
    cached: int = 0
    values_are_keys: bool = False


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
    # MoE layers among the blocks (0 = every block; Llama 4 Maverick interleaves dense and MoE blocks) and
    # the MLP width of the dense blocks of an MoE model (0 = intermediate)
    moe_layers: int = 0
    dense_intermediate: int = 0
    # attention over a bounded window on `sliding_layers` of the blocks (0 = none): their attention FLOPs,
    # KV reads and KV cache see at most `sliding_window` keys (AttentionKind, attended_keys)
    sliding_window: int = 0
    sliding_layers: int = 0
    # the full-attention layers' own shape when it differs (Gemma 4: global_head_dim, num_global_key_value_
    # heads; 0 = as the others) and keys reused as values there (attention_k_eq_v: no value projection)
    full_head_dim: int = 0
    full_kv_heads: int = 0
    full_values_are_keys: bool = False
    # layers that reuse an earlier layer's KV cache (Gemma 4 num_kv_shared_layers, the last ones): no K / V
    # projections, no cache of their own; they still read the cache. (sliding, full) counts
    kv_shared: tuple[int, int] = (0, 0)
    # per-layer input embeddings (Gemma 4 PLE): width per layer and their vocabulary (0 = none)
    per_layer_input: int = 0
    per_layer_vocab: int = 0
    wide_mlp_layers: int = 0  # layers whose MLP is twice intermediate wide (Gemma 4 use_double_wide_mlp)
    logit_softcap: float = 0.0  # Gemma 2 logit soft-capping: an elementwise tanh, no matmul work
    notes: tuple[str, ...] = ()  # what the closed form assumed about this config (shown with the projection)

    def attention_kinds(self) -> tuple[AttentionKind, ...]:
        """The full-attention layers and the sliding-window layers as AttentionKinds (one kind for a model
        without a window: every attention sum over the kinds is then the single-kind formula exactly)."""
        sliding = min(self.sliding_layers, self.layers) if self.sliding_window else 0
        full = self.layers - sliding
        kinds = []
        if full:
            kinds.append(
                AttentionKind(
                    full,
                    self.full_kv_heads or self.kv_heads,
                    self.full_head_dim or self.head_dim,
                    0,
                    full - self.kv_shared[1],
                    self.full_values_are_keys,
                )  # fmt: skip
            )
        if sliding:
            kinds.append(
                AttentionKind(
                    sliding, self.kv_heads, self.head_dim, self.sliding_window, sliding - self.kv_shared[0]
                )
            )
        return tuple(kinds)

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
    # MoE: the matmul weights of every expert (what a step that touches all experts reads: a prefill of
    # many tokens); 0 = matmul_params (dense). A decode step of a batch reads the experts its tokens touch:
    # see decode_weight_bytes.
    streamed_params: int = 0
    expert_params: int = 0  # MoE: weights of one routed expert summed over the MoE layers

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

    @property
    def active_params(self) -> int:
        """Parameters one token uses: every parameter less the routed experts it is not sent to (= params
        for a dense model). Embeddings count, as the published "active" figures of Qwen3 MoE and Llama 4
        count them."""
        d = self.dims
        if not d.experts:
            return self.params
        return int(self.params - (d.experts - d.experts_per_token) * self.expert_params)

    def kv_terms(
        self, dtype: str = "bf16", tp: int = 0, *, read: bool = False
    ) -> tuple[tuple[int, float], ...]:
        """(window, KV bytes per key position) of each attention kind: on ONE device of a tensor-parallel
        group of `tp` devices (0 = the whole model, no split): 2 (K and V) x layers x KV heads per device x
        head_dim x dtype bytes. KV heads are split across the group; when tp exceeds them each device holds
        (a replica of) at least one. Layers that reuse another layer's cache hold none (read=False: the
        cache) but read it (read=True: a decode step's read)."""
        b = dtype_bytes(dtype)
        out = []
        for k in self.dims.attention_kinds():
            heads = math.ceil(k.kv_heads / tp) if tp else k.kv_heads
            out.append((k.window, 2.0 * (k.layers if read else k.cached) * heads * k.head_dim * b))
        return tuple(out)

    def kv_bytes_per_token(self, dtype: str = "bf16", tp: int = 1) -> float:
        """KV-cache bytes per token on ONE device of a tensor-parallel group of `tp` devices at a context
        within every window (kv_terms summed); a sequence's cache is kv_cache_bytes."""
        return sum(per for _, per in self.kv_terms(dtype, max(1, tp)))

    def kv_bytes_per_token_total(self, dtype: str = "bf16") -> float:
        return sum(per for _, per in self.kv_terms(dtype))

    def kv_cache_bytes(self, tokens: float, dtype: str = "bf16", tp: int = 1) -> float:
        """KV cache of one sequence of `tokens` positions on one device of a TP group: a sliding-window
        layer holds the last `window` positions only (attended_keys)."""
        return sum(per * attended_keys(tokens, w) for w, per in self.kv_terms(dtype, max(1, tp)))

    def attention_terms(self, tp: int = 0) -> tuple[tuple[int, float], ...]:
        """(window, FLOPs per query-key pair) of each attention kind: QK^T and AV, 2 matmuls x 2 FLOPs x
        heads x head_dim x layers; on one device of a TP group of `tp` (a device computes ceil(heads / tp)
        heads: heads that do not divide evenly are padded, as the Neuron stacks do), 0 = the whole model."""
        d = self.dims
        heads = math.ceil(d.heads / tp) if tp else d.heads
        return tuple((k.window, 4.0 * heads * k.head_dim * k.layers) for k in d.attention_kinds())

    # --- FLOPs -----------------------------------------------------------------------------------
    def _attention_flops(self, queries: float, context: float, prefill: bool = False) -> float:
        """QK^T and AV over every layer: 4 x queries x keys x heads x head_dim per layer, where keys is the
        context (decode: attended_keys) or the prompt (prefill: prefill_keys), bounded on window layers."""
        d = self.dims
        keys = prefill_keys if prefill else attended_keys
        return sum(
            4.0 * queries * keys(context, k.window) * d.heads * k.head_dim * k.layers
            for k in d.attention_kinds()
        )

    def _head_flops(self, rows: float) -> float:
        return 2.0 * rows * self.head_params

    def prefill_flops(self, batch: int, length: int) -> float:
        """One prefill (context encoding) of `batch` prompts of `length` tokens; logits for the last token
        of each prompt only (what a serving stack computes)."""
        tokens = float(batch) * length
        return (
            2.0 * tokens * self.matmul_params
            + batch * self._attention_flops(length, length, prefill=True)
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
            + batch * self._attention_flops(length, length, prefill=True)
            + self._head_flops(head_rows)
            + batch * d.patch_flops
        )

    def train_flops_per_token(self, seq_len: int) -> float:
        """Forward + backward per trained token at sequence length `seq_len`: 3 x the forward (backward
        costs two forwards), logits for every token."""
        forward = 2.0 * (self.matmul_params + self.head_params) + self._attention_flops(
            1, seq_len, prefill=True
        )
        return 3.0 * forward

    # --- bytes -----------------------------------------------------------------------------------
    def decode_bytes(self, batch: int, context: int, weight_dtype: str, kv_dtype: str = "bf16") -> float:
        """HBM bytes of one decode step over the whole model (all devices): weights once + the KV read (the
        keys each layer attends to)."""
        return self.streamed_weight_bytes(weight_dtype) + sum(
            float(batch) * attended_keys(context, w) * per for w, per in self.kv_terms(kv_dtype, read=True)
        )

    def prefill_bytes(self, batch: int, length: int, weight_dtype: str, kv_dtype: str = "bf16") -> float:
        """HBM bytes of one prefill: weights once + the KV cache written."""
        return self.streamed_weight_bytes(weight_dtype) + float(
            batch
        ) * length * self.kv_bytes_per_token_total(kv_dtype)


# --- building ModelDims from a transformers-style config ----------------------------------------

# encoder families (their heads, learned positions and LayerNorms are not in a decoder's config fields):
# model_type -> (gated MLP, biases, norm params per layer in units of hidden, tied by default). Every other
# model_type is read as a decoder from its config fields (chipswap.projection.hfconfig).
_ENCODERS: dict[str, tuple[bool, bool, int, bool]] = {
    "bert": (False, True, 4, True),
    "roberta": (False, True, 4, True),
    "xlm-roberta": (False, True, 4, True),
    "electra": (False, True, 4, True),
    "distilbert": (False, True, 4, True),
    "albert": (False, True, 4, True),
    "t5": (False, False, 2, True),
    "vit": (False, True, 4, True),
}
_LEARNED_POSITIONS = ("bert", "roberta", "xlm-roberta", "electra", "distilbert", "albert")
DECODER_TASKS = ("causal-lm",)


def dims_from_config(cfg: dict[str, Any], *, name: str, task: str | None = None) -> ModelDims:
    """ModelDims from a transformers-style config dict (preset or config.json; a multimodal config's nested
    text_config). Decoders of any family are read from their config fields (hfconfig.FIELDS); a missing
    size or a field that changes the work but is not read is a one-line error naming the field."""
    where = f"model {name}"
    cfg = hf.text_part(cfg)
    mtype = str(cfg.get("model_type") or "")
    if not mtype:
        raise ChipswapError(f'{where}: config has no model_type; add "model_type" as config.json does')
    if mtype in hf.NOT_TRANSFORMERS:
        raise ChipswapError(
            f"{where}: no closed-form work for model_type {mtype!r} (not an attention transformer: "
            "state-space or hybrid layers); give a measured figure for this model instead"
        )
    if mtype not in _ENCODERS:
        return _decoder_dims(cfg, mtype, name=name, task=task)
    gated, biases, norm_units, tied_default = _ENCODERS[mtype]
    hidden = hf.need(cfg, "hidden", where)
    layers = hf.need(cfg, "layers", where)
    heads = hf.need(cfg, "heads", where)
    intermediate = hf.need(cfg, "intermediate", where)
    vocab = 0 if mtype == "vit" else hf.need(cfg, "vocab", where)
    kv_heads = hf.positive(cfg, "kv_heads", where) or heads
    head_dim = hf.positive(cfg, "head_dim", where) or (hidden // heads)
    if mtype != "t5" and not cfg.get("head_dim") and hidden % heads:
        raise ChipswapError(
            f"{where}: hidden size {hidden} is not a multiple of the {heads} attention heads; add head_dim"
        )
    if mtype == "t5":
        gated = str(cfg.get("feed_forward_proj", "relu")).startswith("gated")
    positions = int(cfg.get("max_position_embeddings") or 0) if mtype in _LEARNED_POSITIONS else 0
    embed_dim = int(cfg.get("embedding_size") or 0) if mtype in ("albert", "electra") else 0
    if embed_dim == hidden:
        embed_dim = 0
    head = _encoder_head(task)
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
    return ModelDims(
        name=name, kind="encoder", hidden=hidden, layers=layers, heads=heads, kv_heads=int(kv_heads),
        head_dim=int(head_dim), intermediate=intermediate, vocab=vocab, gated_mlp=gated,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", tied_default)), positions=positions,
        biases=biases, norm_params_per_layer=norm_units * hidden, embed_dim=embed_dim,
        shared_layers=mtype == "albert", head=head,
        num_labels=int(cfg.get("num_labels") or len(cfg.get("id2label") or {}) or 2),
        max_positions=int(cfg.get("max_position_embeddings") or cfg.get("n_positions") or 0),
        patch_tokens=patch_tokens, patch_flops=patch_flops, pooler=mtype != "vit",
    )  # fmt: skip


def _decoder_dims(cfg: dict[str, Any], mtype: str, *, name: str, task: str | None) -> ModelDims:
    """A decoder of any family from its config fields; the family's unstated traits from hfconfig.FAMILIES
    (Llama-style when the family is not listed)."""
    where = f"model {name}"
    fam = hf.family(mtype)
    hf.check_unread_fields(cfg, where)
    hidden = hf.need(cfg, "hidden", where)
    layers = hf.need(cfg, "layers", where)
    heads = hf.need(cfg, "heads", where)
    intermediate = hf.positive(cfg, "intermediate", where) or fam.mlp_ratio * hidden
    if not intermediate:
        intermediate = hf.need(cfg, "intermediate", where)  # the one-line error naming the field
    vocab = hf.need(cfg, "vocab", where)
    kv_heads = hf.positive(cfg, "kv_heads", where) or heads
    if mtype == "falcon" and cfg.get("multi_query", False) and not cfg.get("new_decoder_architecture"):
        kv_heads = 1
    head_dim = hf.positive(cfg, "head_dim", where)
    if head_dim is None:
        if hidden % heads:
            raise ChipswapError(
                f"{where}: hidden size {hidden} is not a multiple of the {heads} attention heads; add "
                "head_dim"
            )
        head_dim = hidden // heads
    kv_heads, head_dim, note = hf.attention_shape(cfg, heads, int(kv_heads), head_dim, where)
    biases = fam.biases or bool(cfg.get("attention_bias") or cfg.get("mlp_bias") or cfg.get("qkv_bias"))
    positions = int(cfg.get(fam.positions) or 0) if fam.positions else 0
    decoder = task is None or task in DECODER_TASKS
    softcap = hf.field(cfg, "softcap")
    # the full-attention layers' own shape: per_layer_config, else Gemma 4's fields (transformers applies
    # the global KV heads only where keys are reused as values)
    full = hf.per_layer_shapes(cfg, where) or {
        "full_head_dim": hf.positive(cfg, "full_head_dim", where, zero_ok=True) or 0,
        "full_kv_heads": (hf.positive(cfg, "full_kv_heads", where, zero_ok=True) or 0)
        if cfg.get("attention_k_eq_v")
        else 0,
    }
    full = {"full_head_dim": 0, "full_kv_heads": 0, **full}
    ple = hf.positive(cfg, "per_layer_input", where, zero_ok=True) or 0
    shared = hf.kv_shared_layers(cfg, layers, where, fam)
    return ModelDims(
        name=name, kind="decoder" if decoder else "encoder", hidden=hidden, layers=layers, heads=heads,
        kv_heads=int(kv_heads), head_dim=int(head_dim), intermediate=intermediate, vocab=vocab,
        gated_mlp=fam.gated, tied_embeddings=bool(cfg.get("tie_word_embeddings", fam.tied)),
        positions=positions, biases=biases, norm_params_per_layer=fam.norms * hidden,
        head="lm" if decoder else _encoder_head(task),
        num_labels=int(cfg.get("num_labels") or len(cfg.get("id2label") or {}) or 2),
        max_positions=hf.positive(cfg, "max_positions", where, zero_ok=True) or 0,
        sliding_window=hf.positive(cfg, "sliding_window", where, zero_ok=True) or 0,
        sliding_layers=hf.sliding_layer_count(cfg, layers, where, fam),
        full_head_dim=full["full_head_dim"] if full["full_head_dim"] != head_dim else 0,
        full_kv_heads=full["full_kv_heads"] if full["full_kv_heads"] != kv_heads else 0,
        full_values_are_keys=bool(cfg.get("attention_k_eq_v")), kv_shared=shared,
        per_layer_input=ple,
        per_layer_vocab=(hf.positive(cfg, "per_layer_vocab", where, zero_ok=True) or vocab) if ple else 0,
        wide_mlp_layers=sum(shared) if cfg.get("use_double_wide_mlp") else 0,
        logit_softcap=float(softcap[1]) if softcap else 0.0, notes=_notes(note, shared),
        **_moe_sizes(cfg, fam, layers, intermediate, where),  # type: ignore[arg-type]
    )  # fmt: skip


def _notes(note: str, kv_shared: tuple[int, int]) -> tuple[str, ...]:
    """What the closed form assumed about a decoder config, for the projection's notes."""
    out = [note] if note else []
    if sum(kv_shared):
        out.append(
            f"{sum(kv_shared)} layers reuse an earlier layer's KV cache (no cache of their own); their "
            "prefill is counted over every prompt token (an upper bound where the stack runs only the last)"
        )
    return tuple(out)


def _moe_sizes(
    cfg: dict[str, Any], fam: hf.Family, layers: int, intermediate: int, where: str
) -> dict[str, int]:
    """The MoE fields of ModelDims from a config's expert fields (empty for a dense model): experts and
    top-k, one expert's width, the shared experts' total width, which layers are MoE layers and the dense
    layers' MLP width."""
    experts = hf.positive(cfg, "experts", where, zero_ok=True)
    if not experts:
        return {}
    top_k = hf.positive(cfg, "top_k", where)
    if top_k is None:
        raise ChipswapError(
            f"{where}: config gives {experts} experts but no {hf.FIELDS['top_k'][0]} (experts per token); "
            "add it"
        )
    if top_k > experts:
        raise ChipswapError(
            f"{where}: {top_k} experts per token exceeds the {experts} experts; fix the config"
        )
    width = hf.positive(cfg, "expert_width", where) or intermediate
    shared = hf.positive(cfg, "shared_width", where, zero_ok=True) or 0
    if cfg.get("enable_moe_block"):  # Gemma 4: the dense MLP runs beside the experts on every layer
        shared = intermediate
    if not shared:
        count = hf.positive(cfg, "shared_count", where, zero_ok=True) or fam.shared_experts
        shared = count * width
    moe_layers = hf.moe_layer_count(cfg, layers, where)
    dense = hf.positive(cfg, "dense_width", where) or intermediate
    return {
        "experts": experts,
        "experts_per_token": top_k,
        "expert_intermediate": width,
        "shared_expert_intermediate": shared,
        "moe_layers": moe_layers if moe_layers < layers else 0,
        "dense_intermediate": dense if dense != intermediate else 0,
    }


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
    # Q and O projections on every layer; K and V on the layers with a cache of their own (K only where
    # keys are reused as values), each kind at its own head width
    attn = sum(
        k.layers * (d.hidden * d.heads * k.head_dim + d.heads * k.head_dim * d.hidden)
        + k.cached * (1 if k.values_are_keys else 2) * d.hidden * k.kv_heads * k.head_dim
        for k in d.attention_kinds()
    )
    matrices = 3 if d.gated_mlp else 2
    mlp = matrices * d.hidden * d.intermediate
    # per-layer input embeddings (Gemma 4): one hidden -> layers x width projection per token, and a gate
    # and a projection per layer; MLPs twice as wide on `wide_mlp_layers`
    extra = (d.hidden * d.layers * d.per_layer_input + d.layers * 2 * d.hidden * d.per_layer_input
             + d.wide_mlp_layers * mlp)  # fmt: skip
    layers_mm = layers_stored = attn + d.layers * mlp + extra
    one = 0
    if d.experts:
        # MoE: every expert is stored; a token runs its top-k experts, the shared experts and the router on
        # the MoE blocks, the dense MLP on the others
        one = matrices * d.hidden * d.expert_intermediate
        shared = matrices * d.hidden * d.shared_expert_intermediate
        router = d.hidden * d.experts
        n_moe = d.moe_layers or d.layers
        dense = (d.layers - n_moe) * matrices * d.hidden * (d.dense_intermediate or d.intermediate)
        layers_mm = attn + extra + dense + n_moe * (d.experts_per_token * one + shared + router)
        layers_stored = attn + extra + dense + n_moe * (d.experts * one + shared + router)
        one *= n_moe
    bias = (q_out + 2 * kv_out + d.hidden + d.intermediate + d.hidden) if d.biases else 0
    stored_layers = 1 if d.shared_layers else d.layers
    stored_blocks = layers_stored // d.layers if d.shared_layers else layers_stored
    blocks = stored_blocks + stored_layers * (bias + d.norm_params_per_layer)
    embed_width = d.embed_dim or d.hidden
    embeddings = d.vocab * embed_width + d.positions * embed_width
    embeddings += d.per_layer_vocab * d.layers * d.per_layer_input  # gathered per token, never multiplied
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
    params = blocks + embeddings + projection + head_stored + int(patch)
    params += d.norm_params_per_layer // 2  # the final (or embedding) norm
    return ModelWork(
        dims=d,
        params=int(params),
        matmul_params=int(layers_mm),
        head_params=int(head),
        embedding_params=int(embeddings),
        source=source,
        streamed_params=int(layers_stored) if d.experts else 0,
        expert_params=int(one),
    )


def work_from_config(cfg: dict[str, Any], *, name: str, task: str | None = None) -> ModelWork:
    """Closed-form ModelWork from a transformers-style config dict."""
    return work_from_dims(dims_from_config(cfg, name=name, task=task))


# --- MoE decode: the experts a step's batch touches -------------------------------------------------------


def expected_experts_touched(experts: int, top_k: int, tokens: float) -> float:
    """Expected number of distinct experts (of `experts`, per MoE layer) that `tokens` tokens routed top-k
    touch, under uniform routing: E x (1 - (1 - k/E)^tokens). = k at one token, grows with the tokens,
    tends to E. (Real routers are skewed, which touches fewer; uniform is the upper side.)"""
    if experts <= 0 or tokens <= 0:
        return 0.0
    k = min(max(top_k, 0), experts)
    return experts * (1.0 - (1.0 - k / experts) ** tokens)


def decode_weight_params(work: ModelWork, batch: float) -> float:
    """Matmul weights (plus the head) one decode step of `batch` sequences reads: everything but the routed
    experts, plus the experts the batch's tokens touch on each MoE layer (expected_experts_touched). A dense
    model reads all its matmul weights at any batch."""
    if not work.is_moe:
        return float(work.matmul_params + work.head_params)
    d = work.dims
    touched = expected_experts_touched(d.experts, d.experts_per_token, batch)
    return work.streamed_params - (d.experts - touched) * work.expert_params + work.head_params


def decode_weight_bytes(work: ModelWork, batch: float, dtype: str) -> float:
    """HBM bytes of weights one decode step of `batch` sequences reads (see decode_weight_params)."""
    return decode_weight_params(work, batch) * dtype_bytes(dtype)
