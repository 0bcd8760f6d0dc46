"""Model specs as data: the ModelRef a spec resolves to, the shipped presets, task names, and the bounds every
config.json number is checked against (``CONFIG_BOUNDS``) before anything is built.

Reads only the shipped presets (data/models/*.json); imports nothing from torch at module import.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from chipswap.errors import ChipswapError, closest
from chipswap.textsafe import one_line

# task name -> transformers Auto class name
TASKS: dict[str, str] = {
    "base": "AutoModel",
    "sequence-classification": "AutoModelForSequenceClassification",
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "image-classification": "AutoModelForImageClassification",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "speech-seq2seq": "AutoModelForSpeechSeq2Seq",
    "audio-classification": "AutoModelForAudioClassification",
    "ctc": "AutoModelForCTC",
    "encoder": "T5EncoderModel",  # the encoder half of an encoder-decoder model (T5EncoderModel for T5)
}

# model_type -> default task when a config.json does not say
_DEFAULT_TASK = {
    "vit": "image-classification",
    "t5": "encoder",
    "gpt2": "causal-lm",
    "llama": "causal-lm",
    "mistral": "causal-lm",
}

# the sub-config holding a multimodal model's language model (Llama 4, Gemma 3: text_config)
TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config")

# architecture suffix in config.json -> task
_ARCH_TASKS = (
    ("ForSequenceClassification", "sequence-classification"),
    ("ForCausalLM", "causal-lm"),
    ("LMHeadModel", "causal-lm"),
    ("ForMaskedLM", "masked-lm"),
    ("ForImageClassification", "image-classification"),
    ("ForAudioClassification", "audio-classification"),
    ("ForCTC", "ctc"),
    ("ForSpeechSeq2Seq", "speech-seq2seq"),
)

# config attribute aliases -> the normalized names put in ModelRef.config
_ALIASES = {
    "hidden_size": ("hidden_size", "d_model", "n_embd", "dim"),
    "num_hidden_layers": ("num_hidden_layers", "num_layers", "n_layer", "n_layers"),
    "num_attention_heads": ("num_attention_heads", "num_heads", "n_head", "n_heads"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions"),
    "intermediate_size": ("intermediate_size", "d_ff", "hidden_dim", "n_inner"),
    "num_key_value_heads": ("num_key_value_heads",),
    "vocab_size": ("vocab_size",),
}

# Upper bounds on config numbers that size what gets built (checked before anything is built, so a 1 MB config
# cannot ask for a million layers). Each is far above any published model; see docs/readiness.md.
_LAYERS = 1024
_WIDTH = 131_072
CONFIG_BOUNDS: dict[str, int] = {
    **dict.fromkeys(
        (
            "num_hidden_layers",
            "num_layers",
            "n_layer",
            "n_layers",
            "encoder_layers",
            "decoder_layers",
            "num_decoder_layers",
            "num_encoder_layers",
            "num_feat_extract_layers",
            "num_stages",
        ),
        _LAYERS,
    ),
    **dict.fromkeys(
        ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "embedding_size", "d_kv"), _WIDTH
    ),
    **dict.fromkeys(
        (
            "intermediate_size",
            "d_ff",
            "ffn_dim",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "n_inner",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "head_dim",
        ),
        1 << 20,
    ),
    **dict.fromkeys(
        (
            "num_attention_heads",
            "num_heads",
            "n_head",
            "n_heads",
            "num_key_value_heads",
            "encoder_attention_heads",
            "decoder_attention_heads",
        ),
        4096,
    ),
    **dict.fromkeys(
        ("num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok", "top_k"), 4096
    ),
    "vocab_size": 1 << 24,
    "type_vocab_size": 1 << 16,
    "num_labels": 1 << 20,
    # positions: Llama 4 Scout publishes 10,485,760 (meta builds allocate nothing per position)
    **dict.fromkeys(
        ("max_position_embeddings", "n_positions", "max_source_positions", "max_target_positions"), 1 << 24
    ),
    "image_size": 16_384,
    "patch_size": 16_384,
    "num_channels": 4096,
    "num_mel_bins": 4096,
    "window_size": 16_384,
}
# list-valued config fields (per-stage sizes): bound on the length and on each entry
CONFIG_LIST_BOUNDS: dict[str, int] = {
    "hidden_sizes": _WIDTH,
    "depths": _LAYERS,
    "num_heads": 4096,
    "conv_dim": _WIDTH,
    "conv_stride": 4096,
    "conv_kernel": 4096,
    "layer_types": 1,  # entries are strings; only the length is bounded
    # per-stage lists of hierarchical vision models (segformer, levit, pvt, swin-like; issue 19)
    **dict.fromkeys(
        ("sr_ratios", "patch_sizes", "strides", "mlp_ratios", "key_dim", "attention_ratio"), 4096
    ),
    "mlp_ratio": 4096,
}
MAX_LIST = 1024
# weight memory above this many parameters: build on the meta device (no weights, no eager run)
META_PARAMS = 300_000_000

# wrapper attribute holding the real model; capture strips this prefix from module paths
WRAPPED_ATTR = "model"

# forward parameters that are never model inputs chipswap feeds
_NOT_INPUTS = frozenset(
    {
        "self",
        "kwargs",
        "args",
        "cache",
        "past_key_values",
        "use_cache",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "encoder_outputs",
        "inputs_embeds",
        "decoder_inputs_embeds",
        "interpolate_pos_encoding",
        "return_loss",
        "cache_position",
        "logits_to_keep",
        "head_mask",
        "decoder_head_mask",
        "cross_attn_head_mask",
        "mask_time_indices",
        "bool_masked_pos",
    }
)
# rank and dtype family of the inputs chipswap knows how to make
_INPUT_KINDS: dict[str, tuple[int, str]] = {
    "input_ids": (2, "int"),
    "attention_mask": (2, "int"),
    "token_type_ids": (2, "int"),
    "position_ids": (2, "int"),
    "decoder_input_ids": (2, "int"),
    "decoder_attention_mask": (2, "int"),
    "pixel_values": (4, "float"),
    "pixel_mask": (3, "int"),
    "input_values": (2, "float"),
    "input_features": (3, "float"),
}

_PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class ModelRef:
    """A resolved model spec. ``config`` holds the raw config keys plus normalized dimension keys."""

    kind: str  # "preset" | "hf-config" | "factory" | "exported"
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    task: str | None = None
    source: str = ""  # where the spec came from (preset source URL, file path, factory path)
    path: str | None = None  # config.json / .pt2 path, or "module:attr" / "file.py:attr" for factories
    trust_pickle: bool = False  # a .pt2 may unpickle objects (only with --trust-pickle)
    trust_native: bool = False  # a .pt2 may load its AOTInductor shared objects (only with --trust-native)
    factory_dirs: tuple[str, ...] = ()  # extra folders a factory may be imported from (--factory-path)
    # the task was guessed: a config.json with no `architectures` and no --task (readiness checks the bare
    # model; a projection asks for --task, since a decoder LM and an encoder do different work)
    task_guessed: bool = False

    @property
    def model_type(self) -> str | None:
        return self.config.get("model_type")

    @property
    def weightless_ok(self) -> bool:
        """True when build_model(meta=True) can build this model without weight memory."""
        return self.kind in ("preset", "hf-config")


@dataclass(frozen=True)
class ModelInputs:
    """What a model's forward takes, derived from its signature and config.

    ``accepted``: every tensor input the forward takes (``--shape`` may name any of them); ``defaults``: the
    ones
    chipswap feeds when no shapes are given; ``labels``: how training labels look (``"tokens"`` (batch x seq),
    ``"class"`` (batch,) or ``""`` when the head takes none); ``highs``: exclusive upper bound of integer
    values.
    """

    accepted: tuple[str, ...]
    defaults: tuple[str, ...]
    fixed: Mapping[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)  # per-sample dims, dtype
    labels: str = ""
    highs: Mapping[str, int] = field(default_factory=dict)
    decoder_max: int | None = None  # longest decoder sequence (max_target_positions)

    def spec(self, batch: int, seq: int, *, training: bool = False) -> dict[str, tuple[tuple[int, ...], str]]:
        """One shape set: text inputs batch x seq, fixed-size inputs (pixels, audio) batch x their size."""
        names = list(self.defaults)
        if training and self.labels and "labels" in self.accepted:
            names.append("labels")
        out: dict[str, tuple[tuple[int, ...], str]] = {}
        for name in names:
            if name in self.fixed:
                dims, dt = self.fixed[name]
                out[name] = ((batch, *dims), dt)
            elif name == "labels" and self.labels == "class":
                out[name] = ((batch,), "int64")
            elif name.startswith("decoder_") and self.decoder_max:
                out[name] = ((batch, min(seq, self.decoder_max)), "int64")
            elif name == "labels" and "decoder_input_ids" in self.defaults and self.decoder_max:
                out[name] = ((batch, min(seq, self.decoder_max)), "int64")
            else:
                out[name] = ((batch, seq), "int64")
        return out


# ---------------------------------------------------------------------------------------------- presets


def _presets_dir():
    return resources.files("chipswap.data") / "models"


def preset_names() -> list[str]:
    return sorted(p.name[: -len(".json")] for p in _presets_dir().iterdir() if p.name.endswith(".json"))


def load_preset(name: str) -> dict[str, Any]:
    """A shipped preset by *name*; anything that is not a plain name (a path, '..') is refused."""
    names = preset_names()
    if not _PRESET_NAME.match(name or "") or ".." in name or name not in names:
        hint = closest(name, names) if _PRESET_NAME.match(name or "") else []
        raise ChipswapError(
            f"unknown model preset: {one_line(name, 80)!r}; "
            + (f"did you mean {', '.join(hint)}? " if hint else "")
            + f"presets: {', '.join(names)}; or pass a config.json path, a package.module:factory "
            "or a .pt2 file"
        )
    from chipswap.datafile import parse_json

    data = parse_json((_presets_dir() / f"{name}.json").read_text(), "model preset", name)
    return data


# ---------------------------------------------------------------------------------------------- configs


def _normalize(cfg: dict[str, Any]) -> dict[str, Any]:
    out = dict(cfg)
    for key, names in _ALIASES.items():
        if key in out:
            continue
        for n in names:
            if n in cfg and cfg[n] is not None:
                out[key] = cfg[n]
                break
    return out


def _check_task(task: str | None) -> None:
    if task is not None and task not in TASKS:
        hint = closest(task, TASKS)
        raise ChipswapError(
            f"unknown task: {one_line(task, 80)!r}; "
            + (f"did you mean {', '.join(hint)}? " if hint else "")
            + f"tasks: {', '.join(TASKS)}"
        )


def check_config_bounds(cfg: Mapping[str, Any], where: str, _depth: int = 0) -> None:
    """Every number that sizes the built model is a number within its bound (nested sub-configs too)."""
    if _depth > 4:
        raise ChipswapError(
            f"config {where} nests sub-configs deeper than 4 levels; not a transformers config"
        )
    for key, value in cfg.items():
        if isinstance(value, Mapping) and key.endswith("config"):
            check_config_bounds(value, f"{where} ({key})", _depth + 1)
            continue
        if key in CONFIG_LIST_BOUNDS and isinstance(value, (list, tuple)):
            if len(value) > MAX_LIST:
                raise ChipswapError(
                    f"config {where}: {key} has {len(value):,} entries, over the limit of {MAX_LIST}; "
                    "fix the config"
                )
            hi = CONFIG_LIST_BOUNDS[key]
            for i, v in enumerate(value):
                if key == "layer_types":
                    continue
                _bounded_number(v, f"{key}[{i}]", hi, where)
            continue
        hi_ = CONFIG_BOUNDS.get(key)
        if hi_ is not None and value is not None:
            if isinstance(value, (list, tuple)) and key in ("image_size", "patch_size"):
                if len(value) > 3:
                    raise ChipswapError(f"config {where}: {key} must be a number or [height, width]; fix it")
                for i, v in enumerate(value):
                    _bounded_number(v, f"{key}[{i}]", hi_, where)
            elif isinstance(value, (list, tuple)):  # a per-stage list (num_attention_heads = [1, 2, 5, 8])
                if len(value) > MAX_LIST:
                    raise ChipswapError(
                        f"config {where}: {key} has {len(value):,} entries, over the limit of {MAX_LIST}; "
                        "fix the config"
                    )
                for i, v in enumerate(value):
                    _bounded_number(v, f"{key}[{i}]", hi_, where)
            else:
                _bounded_number(value, key, hi_, where)


def _bounded_number(value: Any, key: str, hi: int, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ChipswapError(
            f"config {where}: {key} must be a number, got {one_line(repr(value), 60)}; write a plain number"
        )
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise ChipswapError(f"config {where}: {key} must be a whole number, got {value!r}; fix the config")
    if value < 0 or value > hi:
        raise ChipswapError(
            f"config {where}: {key} is {value:,}, outside [0, {hi:,}] (the bound chipswap checks before "
            "building anything); fix the config"
        )


def _validate_hf_config(cfg: dict[str, Any], where: str, *, build: bool = True):
    """Build a transformers PretrainedConfig; anything transformers rejects becomes a ChipswapError.
    `build=False`: only the checks that need no transformers (model_type, bounds); returns None."""
    model_type = cfg.get("model_type")
    if not model_type or not isinstance(model_type, str):
        raise ChipswapError(
            f'config has no model_type: {where}; add "model_type" (e.g. "bert") as config.json does'
        )
    check_config_bounds(cfg, where)
    if not build:
        return None
    from transformers import AutoConfig

    kwargs = {
        k: v for k, v in cfg.items() if k not in ("model_type", "transformers_version", "_name_or_path")
    }
    try:
        with _quiet_transformers():
            return AutoConfig.for_model(model_type, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any rejection of a data file is a one-line error
        raise ChipswapError(
            f"transformers rejects the config {where}: {_short(exc)}; fix the config.json"
        ) from None


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers logs config warnings (token ids outside the vocabulary, ...); chipswap reports errors
    itself."""
    import logging

    lg = logging.getLogger("transformers")
    level = lg.level
    lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        lg.setLevel(level)


def _short(exc: BaseException, limit: int = 200) -> str:
    """The exception's message on one line (a multi-line message keeps its detail, joined), cut at limit."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = text.split(". Should contain one of")[0]
    return one_line(text, limit)


def _auto_class(ref: ModelRef, task: str):
    import transformers

    cls_name = TASKS[task]
    if task == "encoder" and ref.model_type not in ("t5", "mt5", "umt5"):
        cls_name = "AutoModel"
    cls = getattr(transformers, cls_name, None)
    if cls is None:
        raise ChipswapError(f"transformers has no {cls_name}; upgrade transformers or choose another --task")
    return cls


def _derived_keys(cfg: dict[str, Any]) -> set[str]:
    """Normalized keys that _normalize added (not in the original config under that name)."""
    added = set()
    for key, names in _ALIASES.items():
        if key in cfg and names[0] == key and any(n in cfg for n in names[1:]):
            # e.g. hidden_size added next to d_model: drop ours, transformers derives it via attribute_map
            added.add(key)
    return added
