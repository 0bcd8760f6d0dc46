"""Model specs -> real PyTorch modules (or JAX entry points), without hub downloads.

A spec is one of:
  * a shipped preset name (``distilbert-base``, ``llama-3-70b``, ``tiny-bert`` ...; data/models/*.json). A
    preset is a *name*: it never names a file outside the shipped presets;
  * a path to a transformers ``config.json`` (or a folder holding one);
  * a factory ``package.module:make_model`` or ``path/to/file.py:make_model`` (a callable returning an
    ``nn.Module``, or ``(module, {input_name: example_tensor})``; a JAX entry point returns ``(fn, args)``);
  * a saved ``torch.export`` program (``.pt2``), loaded with weights-only semantics.

What a spec may execute (see docs/readiness.md, "Trust"):
  * presets and config.json files are data: parsed, bounded (``CONFIG_BOUNDS``) and built by transformers
    code;
  * a ``.pt2`` never unpickles anything unless ``trust_pickle`` is set (``--trust-pickle``);
  * factories are the user's own code: imported from ``sys.path`` (installed packages, ``PYTHONPATH``), from
    an explicit ``file.py`` path, or from folders given as ``factory_dirs`` (``--factory-path``); never from
    the current folder by accident, never from the standard library. A factory that raises or exits is one
    error line.

transformers models are built from their config with random weights (or on the meta device, so a 70B config
needs no weight memory) and wrapped so ``forward`` takes tensors positionally or by name and returns a tuple.
Which inputs a model takes comes from its forward signature and config (``model_inputs``): token ids, pixels,
audio samples or features, decoder ids, labels. torch / transformers are imported inside the functions that
need them.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import math
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
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
    **dict.fromkeys(
        ("max_position_embeddings", "n_positions", "max_source_positions", "max_target_positions"), 1 << 21
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


def _validate_hf_config(cfg: dict[str, Any], where: str):
    """Build a transformers PretrainedConfig; anything transformers rejects becomes a ChipswapError."""
    from transformers import AutoConfig

    model_type = cfg.get("model_type")
    if not model_type or not isinstance(model_type, str):
        raise ChipswapError(
            f'config has no model_type: {where}; add "model_type" (e.g. "bert") as config.json does'
        )
    check_config_bounds(cfg, where)
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


# ---------------------------------------------------------------------------------------------- resolve

_KINDS = ("preset", "config", "factory", "exported")


def resolve_model(
    spec: str,
    *,
    task: str | None = None,
    kind: str | None = None,
    trust_pickle: bool = False,
    factory_dirs: Sequence[str | Path] = (),
    trust_native: bool = False,
) -> ModelRef:
    """Turn a user's model spec into a ModelRef (no torch import for presets).

    kind: None guesses from the spec (the command line: the user typed it); callers reading a spec from a data
    file say what the field means ("preset" for a workload's model.preset: a name, never a path).
    """
    _check_task(task)
    if kind is not None and kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}")
    spec = str(spec).strip()
    if not spec:
        raise ChipswapError(
            "empty model spec: ''; pass a preset name, a config.json path, module:factory or .pt2"
        )
    dirs = tuple(str(Path(d).resolve()) for d in factory_dirs)
    if kind == "preset":
        return _preset_ref(spec, task)
    p = Path(spec)
    if kind == "exported" or (kind is None and spec.endswith(".pt2")):
        if not p.is_file():
            raise ChipswapError(
                f"exported program not found: {one_line(spec)}; pass the path of a torch.export .pt2 file"
            )
        return ModelRef(
            kind="exported",
            name=p.stem,
            config={},
            task=task,
            source=str(p),
            path=str(p),
            trust_pickle=trust_pickle,
            trust_native=trust_native,
        )
    if kind == "config" or (
        kind is None and (spec.endswith(".json") or (":" not in spec and (p.is_file() or p.is_dir())))
    ):
        return _config_ref(p, spec, task)
    if kind == "factory" or (kind is None and ":" in spec):
        mod_name, attr = _split_factory(spec)
        fn = _import_factory(mod_name, attr, spec, dirs)
        if not callable(fn):
            raise ChipswapError(
                f"factory is not callable: {one_line(spec)}; "
                "point to a function that returns a torch.nn.Module"
            )
        return ModelRef(
            kind="factory", name=attr, config={}, task=task, source=spec, path=spec, factory_dirs=dirs
        )
    return _preset_ref(spec, task)


def _preset_ref(name: str, task: str | None) -> ModelRef:
    data = load_preset(name)
    return ModelRef(
        kind="preset",
        name=data["name"],
        config=_normalize(data["config"]),
        task=task or data.get("task"),
        source=data.get("source", ""),
        path=None,
    )


def _config_ref(p: Path, spec: str, task: str | None) -> ModelRef:
    from chipswap.datafile import read_json

    f = p / "config.json" if p.is_dir() else p
    if not f.is_file():
        raise ChipswapError(f"config file not found: {one_line(spec)}; pass a transformers config.json path")
    cfg = read_json(f, "config")
    if not isinstance(cfg, dict):
        raise ChipswapError(f"config is not a JSON object: {f}; pass a transformers config.json")
    _validate_hf_config(cfg, str(f))
    t = task or _task_from_config(cfg)
    name = cfg.get("_name_or_path") or f.parent.name or f.stem
    ref = ModelRef(
        kind="hf-config", name=one_line(name, 80), config=_normalize(cfg), task=t, source=str(f), path=str(f)
    )
    # some checks (e.g. heads vs hidden size) only run when the model is built: build once on meta
    try:
        build_model(ref, meta=True)
    except ChipswapError as exc:
        detail = str(exc).removeprefix("transformers ")
        raise ChipswapError(f"transformers rejects the config {f}: {detail}") from None
    return ref


def _task_from_config(cfg: dict[str, Any]) -> str:
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list):
        archs = []
    for a in archs:
        if not isinstance(a, str):
            continue
        for suffix, task in _ARCH_TASKS:
            if a.endswith(suffix):
                return task
        if a.endswith("ForConditionalGeneration"):
            if cfg.get("model_type") == "t5":
                return "encoder"
            return "speech-seq2seq" if "num_mel_bins" in cfg else "seq2seq-lm"
    return _DEFAULT_TASK.get(str(cfg.get("model_type")), "base")


# ---------------------------------------------------------------------------------------------- factories


def _split_factory(spec: str) -> tuple[str, str]:
    mod_name, _, attr = spec.rpartition(":")
    if not mod_name or not attr or not all(part.isidentifier() for part in attr.split(".")):
        raise ChipswapError(
            f"bad factory spec: {one_line(spec)!r}; "
            "use package.module:make_model or path/to/file.py:make_model"
        )
    return mod_name, attr


def _hidden_path_entries(trusted: Sequence[str]) -> set[str]:
    """sys.path entries that mean 'the current folder' and were not asked for (PYTHONPATH, --factory-path)."""
    cwd = Path.cwd().resolve()
    asked = {str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    asked |= set(trusted)
    hidden = set()
    for entry in sys.path:
        try:
            is_cwd = entry in ("", ".") or Path(entry).resolve() == cwd
        except OSError:
            continue
        if is_cwd and str(cwd) not in asked:
            hidden.add(entry)
    return hidden


@contextlib.contextmanager
def _import_path(extra: Sequence[str], trusted: Sequence[str]) -> Iterator[None]:
    """sys.path for importing a factory: explicit folders first, the current folder only when asked for."""
    saved = list(sys.path)
    hidden = _hidden_path_entries(trusted)
    sys.path[:] = [*extra, *(p for p in saved if p not in hidden)]
    try:
        yield
    finally:
        sys.path[:] = saved


def _guarded(what: str, fix: str, fn: Any, *args: Any) -> Any:
    """Run user code (a factory import or call); an exception or exit is one error line, never a traceback."""
    from chipswap.deadline import DeadlinePassed

    try:
        return fn(*args)
    except (ChipswapError, KeyboardInterrupt, DeadlinePassed):
        raise
    except SystemExit as exc:
        raise ChipswapError(f"{what} called exit({exc.code!r}); {fix}") from None
    except BaseException as exc:  # noqa: BLE001 - user code: anything it raises is reported, not propagated
        raise ChipswapError(f"{what} raised {type(exc).__name__}: {_short(exc, 200)}; {fix}") from None


def _import_factory(mod_name: str, attr: str, spec: str, dirs: Sequence[str] = ()):
    top = mod_name.split(".")[0]
    if mod_name.endswith(".py") or "/" in mod_name or os.sep in mod_name:
        mod = _import_file(Path(mod_name), spec)
    else:
        if not all(part.isidentifier() for part in mod_name.split(".")):
            raise ChipswapError(
                f"bad factory spec: {one_line(spec)!r}; "
                "use package.module:make_model or path/to/file.py:make_model"
            )
        if top in sys.stdlib_module_names or top in sys.builtin_module_names or top == "chipswap":
            raise ChipswapError(
                f"factory {one_line(spec)!r} names a function of {top!r}, not a model factory; "
                "point to your own "
                "function that returns a torch.nn.Module (or a JAX entry point)"
            )
        if mod_name in sys.modules:  # already imported (and run) in this process: nothing new executes
            return _attr(sys.modules[mod_name], mod_name, attr)
        with _import_path(dirs, dirs):
            spec_found = None
            try:
                spec_found = importlib.util.find_spec(mod_name)
            except (ImportError, ValueError):
                spec_found = None
            except BaseException as exc:  # noqa: BLE001 - a parent package raised on import
                raise ChipswapError(
                    f"importing factory module {mod_name!r} raised {type(exc).__name__}: {_short(exc)}; "
                    "fix the module"
                ) from None
            if spec_found is None:
                local = Path.cwd() / (mod_name.replace(".", "/") + ".py")
                pkg = Path.cwd() / mod_name.split(".")[0]
                here = (
                    " (a copy is in the current folder, which chipswap does not import from unless asked: "
                    "pass --factory-path . or set PYTHONPATH=.)"
                    if local.exists() or pkg.is_dir()
                    else ""
                )
                raise ChipswapError(
                    f"cannot import factory module {mod_name!r} from {one_line(spec)!r}{here}; "
                    "install the package, set PYTHONPATH, or pass --factory-path DIR"
                )
            mod = _guarded(
                f"importing factory module {mod_name!r}", "fix the module", importlib.import_module, mod_name
            )
    return _attr(mod, mod_name, attr)


def _attr(mod: Any, mod_name: str, attr: str) -> Any:
    obj: Any = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(mod) if not n.startswith("_")]
            hint = closest(part, names)
            raise ChipswapError(
                f"factory {attr!r} not found in module {mod_name!r}"
                + (f"; did you mean {', '.join(hint)}?" if hint else "; check the name after the colon")
            )
        obj = getattr(obj, part)
    return obj


def _import_file(path: Path, spec: str) -> Any:
    """Import an explicitly named factory file (its folder is importable while it loads)."""
    if path.suffix != ".py" or not path.is_file():
        raise ChipswapError(
            f"factory file not found: {one_line(str(path))} (from {one_line(spec)!r}); "
            "pass an existing .py file as path/to/file.py:make_model"
        )
    real = path.resolve()
    name = "chipswap_factory_" + re.sub(r"\W", "_", str(real))[-80:]
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, real)
    if loader_spec is None or loader_spec.loader is None:
        raise ChipswapError(f"cannot load factory file {path}; pass a Python source file")
    mod = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = mod

    def load() -> None:
        with _import_path([str(real.parent)], [str(real.parent)]):
            loader_spec.loader.exec_module(mod)  # type: ignore[union-attr]

    try:
        _guarded(f"importing factory file {path}", "fix the file", load)
    except ChipswapError:
        sys.modules.pop(name, None)
        raise
    return mod


def call_entry(ref: ModelRef) -> Any:
    """Import and call a factory / entry point with no arguments; what it returns, unchecked."""
    mod_name, attr = _split_factory(ref.path or ref.source)
    fn = _import_factory(mod_name, attr, ref.source, ref.factory_dirs)
    if not callable(fn):
        raise ChipswapError(f"factory is not callable: {one_line(ref.source)}; point to a function")
    return _guarded(f"factory {one_line(ref.source)}", "fix the factory", fn)


def is_torch_module(obj: Any) -> bool:
    mod = sys.modules.get("torch")
    return mod is not None and isinstance(obj, mod.nn.Module)


def split_factory_output(ref: ModelRef, out: Any) -> tuple[Any, dict[str, Any] | None]:
    """(module, example inputs or None) from what a PyTorch factory returned."""
    import torch

    example = None
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
        out, example = out
    if not isinstance(out, torch.nn.Module):
        raise ChipswapError(
            f"factory {one_line(ref.source)} returned {type(out).__name__}, not a torch.nn.Module; "
            "return the "
            "model (or (model, {input_name: example_tensor}); a JAX entry point returns (fn, args))"
        )
    if example is not None:
        bad = [k for k, v in example.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
        if bad:
            raise ChipswapError(
                f"factory {one_line(ref.source)} example inputs must map input names to tensors; "
                f"{one_line(repr(bad[0]), 60)} does not; return (model, {{'x': torch.randn(2, 8)}})"
            )
    return out.eval(), example


def call_factory(ref: ModelRef):
    """Call a PyTorch factory spec; returns (module, example_inputs or None)."""
    return split_factory_output(ref, call_entry(ref))


# ---------------------------------------------------------------------------------------------- .pt2


class _NeedsPickle(BaseException):
    """Raised inside torch.export.load when the archive wants to unpickle something (BaseException: torch's
    own
    `except Exception` fallbacks must not swallow it)."""


@contextlib.contextmanager
def _weights_only() -> Iterator[None]:
    """torch.load forced to weights_only=True; pickle.loads and script-object loads refused."""
    import pickle

    import torch

    real_load = torch.load

    def safe_load(*args: Any, **kwargs: Any) -> Any:
        kwargs["weights_only"] = True
        try:
            return real_load(*args, **kwargs)
        except pickle.UnpicklingError:
            raise _NeedsPickle("it holds pickled Python objects, not plain tensors") from None

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise _NeedsPickle("it holds a pickled Python object")

    saved = (torch.load, pickle.loads, torch._C._pickle_load_obj)
    torch.load = safe_load  # type: ignore[assignment]
    pickle.loads = refuse  # type: ignore[assignment]
    torch._C._pickle_load_obj = refuse
    try:
        yield
    finally:
        torch.load, pickle.loads, torch._C._pickle_load_obj = saved  # type: ignore[assignment]


def load_exported(ref: ModelRef):
    """Load a .pt2; without ref.trust_pickle nothing in it is unpickled (a payload is refused, not run), and
    without ref.trust_native no shared object in it is loaded (chipswap.nativeguard)."""
    import torch

    from chipswap.nativeguard import NativeCodeRefused, no_aoti_load, quiet_torch_export, refuse_native

    where = one_line(ref.path or ref.source)
    if not ref.trust_native:
        refuse_native(ref.path or ref.source)
    guard = quiet_torch_export() if ref.trust_native else no_aoti_load(f"exported program {where}")
    try:
        with guard:
            if ref.trust_pickle:
                with _quiet_transformers():
                    return torch.export.load(ref.path)
            with _weights_only():
                return torch.export.load(ref.path)
    except NativeCodeRefused:
        raise
    except _NeedsPickle as exc:
        raise ChipswapError(
            f"exported program {where} needs unpickling ({one_line(str(exc), 120)}); chipswap loads .pt2 "
            "files with weights-only semantics; re-save it with torch.export.save from plain tensors, "
            "or pass "
            "--trust-pickle if you trust whoever made the file"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a corrupt or foreign archive is bad input
        why = _short(exc)
        if "warnings above" in why:  # torch's own message points at the traceback chipswap keeps quiet
            why = "a record torch needs is missing or damaged"
        raise ChipswapError(
            f"cannot load exported program {where}: {why}; save it with torch.export.save"
        ) from None


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


# ---------------------------------------------------------------------------------------------- build


def _auto_class(ref: ModelRef, task: str):
    import transformers

    cls_name = TASKS[task]
    if task == "encoder" and ref.model_type not in ("t5", "mt5", "umt5"):
        cls_name = "AutoModel"
    cls = getattr(transformers, cls_name, None)
    if cls is None:
        raise ChipswapError(f"transformers has no {cls_name}; upgrade transformers or choose another --task")
    return cls


def _make_tuple_wrapper():
    import torch

    class TupleOutput(torch.nn.Module):
        """Calls the wrapped transformers model by input name and returns a plain tuple of tensors."""

        def __init__(self, model, names: list[str], call_kwargs: dict[str, Any]):
            super().__init__()
            setattr(self, WRAPPED_ATTR, model)
            self._names = list(names)
            self._call_kwargs = dict(call_kwargs)

        def forward(self, *args, **kwargs):
            kw = dict(zip(self._names, args, strict=False))
            kw.update(kwargs)
            out = getattr(self, WRAPPED_ATTR)(**kw, **self._call_kwargs)
            if hasattr(out, "to_tuple"):
                return tuple(out.to_tuple())
            if isinstance(out, (tuple, list)):
                return tuple(out)
            return (out,)

    return TupleOutput


def build_model(
    ref: ModelRef,
    *,
    meta: bool = False,
    task: str | None = None,
    attn_implementation: str = "eager",
    input_names: Sequence[str] | None = None,
    experts_implementation: str | None = None,
):
    """Build ``ref`` as an eval-mode torch.nn.Module returning a tuple.

    meta=True builds on the meta device (no weight memory). Factories and .pt2 programs are returned as
    they are (a .pt2 program as ``ExportedProgram.module()``). input_names: the forward's parameters (default:
    the model's default inputs). experts_implementation: transformers' MoE dispatch ("eager" runs the model's
    own routing code; None keeps transformers' default).
    """
    import torch

    _check_task(task)
    if ref.kind == "exported":
        return load_exported(ref).module()
    if ref.kind == "factory":
        mod, _ = call_factory(ref)
        if meta:
            mod = mod.to("meta")
        return mod.eval()
    t = task or ref.task or _DEFAULT_TASK.get(str(ref.model_type), "base")
    cfg = _hf_config(ref)
    try:
        cfg._attn_implementation = attn_implementation
    except Exception:  # noqa: BLE001 - very old configs
        pass
    if experts_implementation is not None and hasattr(cfg, "_experts_implementation"):
        cfg._experts_implementation = experts_implementation
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    head = _head_class(
        ref, "base" if t == "encoder" and ref.model_type not in ("t5", "mt5", "umt5") else t, cfg
    )
    if not getattr(cfg, "architectures", None) and isinstance(head, type):
        cfg.architectures = [head.__name__]  # transformers needs it where one config has several heads (deit)
    cls = _auto_class(ref, t)
    torch.manual_seed(0)
    make = cls.from_config if hasattr(cls, "from_config") else cls._from_config
    try:
        with _quiet_transformers():
            if meta:
                with torch.device("meta"):
                    model = make(cfg)
            else:
                model = make(cfg)
    except ChipswapError:
        raise
    except MemoryError:
        raise ChipswapError(f"building {ref.name} ran out of memory; check the config's sizes") from None
    except Exception as exc:  # noqa: BLE001 - transformers rejects the config while building it
        raise ChipswapError(
            f"transformers cannot build {ref.name} ({one_line(ref.model_type, 40)}) as {t!r}: {_short(exc)}; "
            "fix the config"
        ) from None
    if t == "encoder" and ref.model_type not in ("t5", "mt5", "umt5") and hasattr(model, "get_encoder"):
        model = model.get_encoder()
    model.eval()
    call_kwargs: dict[str, Any] = {"return_dict": True}
    params = inspect.signature(model.forward).parameters
    if "use_cache" in params:
        call_kwargs["use_cache"] = False
    if "return_dict" not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        call_kwargs.pop("return_dict")
    names = list(input_names) if input_names is not None else input_names_for(ref, t)
    cls_ = _make_tuple_wrapper()  # a fresh class per build: its forward gets this model's signature
    # an explicit signature (input names) lets torch.export key dynamic_shapes by input name
    cls_.forward.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None) for n in names]
    )
    wrapper = cls_(model, names, call_kwargs)
    return wrapper.eval()


def input_names_for(ref: ModelRef, task: str) -> list[str]:
    return list(model_inputs(ref, task=task).defaults)


def _derived_keys(cfg: dict[str, Any]) -> set[str]:
    """Normalized keys that _normalize added (not in the original config under that name)."""
    added = set()
    for key, names in _ALIASES.items():
        if key in cfg and names[0] == key and any(n in cfg for n in names[1:]):
            # e.g. hidden_size added next to d_model: drop ours, transformers derives it via attribute_map
            added.add(key)
    return added


REPRESENTATIVE_DEPTH = 2  # layers kept when a config with many identical layers is checked as a copy
_DEPTH_KEYS = (
    "num_hidden_layers",
    "num_layers",
    "n_layer",
    "n_layers",
    "num_decoder_layers",
    "encoder_layers",
    "decoder_layers",
)
# config keys that make layers differ from each other: such configs are always checked whole
_LAYER_VARIANTS = (
    "layer_types",
    "mlp_only_layers",
    "first_k_dense_replace",
    "moe_layer_freq",
    "decoder_sparse_step",
    "sliding_window_pattern",
    "no_rope_layers",
    "interleave_moe_layer_step",
    "block_types",
    "attention_layers",
)


def representative(ref: ModelRef) -> tuple[ModelRef, str]:
    """A copy of a transformer config with REPRESENTATIVE_DEPTH of its identical layers, and words saying so.

    Every layer of a standard transformer has the same operators and dtypes, so the findings of a 2-layer
    copy are
    those of the full model (module paths name layers 0 and 1), for a fraction of the export time. Configs
    whose
    layers differ (layer types, MoE every n-th layer, dense first layers), factories and .pt2 programs are
    checked
    whole.
    """
    cfg = ref.config
    depths = {
        k: cfg[k] for k in _DEPTH_KEYS if isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool)
    }
    deepest = max(depths.values(), default=0)
    if ref.kind not in ("preset", "hf-config") or deepest <= REPRESENTATIVE_DEPTH:
        return ref, "the full model"
    built = _hf_config(ref)
    varies = []
    for key in _LAYER_VARIANTS:
        value = getattr(built, key, None)
        if isinstance(value, (list, tuple)) and len(set(map(str, value))) > 1:
            varies.append(key)
        elif key in cfg and value not in (None, [], (), 0, 1):
            varies.append(key)
    if varies:
        return ref, f"the full model (its layers differ: {', '.join(varies)})"
    small = {**cfg, **{k: min(v, REPRESENTATIVE_DEPTH) for k, v in depths.items()}}
    return replace(ref, config=small), (
        f"a {REPRESENTATIVE_DEPTH}-layer copy of its {deepest} identical layers (same operators, dtypes and "
        "findings; --full-model exports every layer)"
    )


def parameter_count(ref: ModelRef, *, task: str | None = None) -> int:
    """Number of parameters, counted on a meta-device build (no weight memory)."""
    return count_parameters(build_model(ref, meta=True, task=task))


def count_parameters(model: Any) -> int:
    seen = set()
    total = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
    return total
