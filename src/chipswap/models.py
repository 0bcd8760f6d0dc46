"""Model specs -> real PyTorch modules, without hub downloads.

A spec is one of:
  * a shipped preset name (``distilbert-base``, ``llama-3-70b``, ``tiny-bert`` ...; data/models/*.json),
  * a path to a transformers ``config.json``,
  * a factory ``package.module:make_model`` (a callable returning an ``nn.Module``; it may also return
    ``(module, example_inputs_dict)``),
  * a saved ``torch.export`` program (``.pt2``).

transformers models are built from their config with random weights (or on the meta
device, so a 70B config needs no weight memory) and wrapped so ``forward`` takes tensors positionally or by
name and returns a tuple.
torch / transformers are imported inside the functions that need them.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError, closest

# task name -> transformers Auto class name
TASKS: dict[str, str] = {
    "base": "AutoModel",
    "sequence-classification": "AutoModelForSequenceClassification",
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "image-classification": "AutoModelForImageClassification",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "encoder": "T5EncoderModel",  # encoder-only half of an encoder-decoder model (T5 family)
}

# model_type -> default task when a config.json does not say
_DEFAULT_TASK = {
    "vit": "image-classification",
    "t5": "encoder",
    "gpt2": "causal-lm",
    "llama": "causal-lm",
    "mistral": "causal-lm",
}

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

# wrapper attribute holding the real model; capture strips this prefix from module paths
WRAPPED_ATTR = "model"


@dataclass(frozen=True)
class ModelRef:
    """A resolved model spec. ``config`` holds the raw config keys plus normalized dimension keys."""

    kind: str  # "preset" | "hf-config" | "factory" | "exported"
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    task: str | None = None
    source: str = ""  # where the spec came from (preset source URL, file path, factory path)
    path: str | None = None  # config.json / .pt2 path, or "module:attr" for factories

    @property
    def model_type(self) -> str | None:
        return self.config.get("model_type")

    @property
    def weightless_ok(self) -> bool:
        """True when build_model(meta=True) can build this model without weight memory."""
        return self.kind in ("preset", "hf-config")


def _presets_dir():
    return resources.files("chipswap.data") / "models"


def preset_names() -> list[str]:
    return sorted(p.name[: -len(".json")] for p in _presets_dir().iterdir() if p.name.endswith(".json"))


def load_preset(name: str) -> dict[str, Any]:
    f = _presets_dir() / f"{name}.json"
    if not f.is_file():
        hint = closest(name, preset_names())
        raise ChipswapError(
            f"unknown model preset: {name!r}; "
            + (f"did you mean {', '.join(hint)}? " if hint else "")
            + f"presets: {', '.join(preset_names())}; or pass a config.json path, a package.module:factory "
            "or a .pt2 file"
        )
    return json.loads(f.read_text())


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
            f"unknown task: {task!r}; "
            + (f"did you mean {', '.join(hint)}? " if hint else "")
            + f"tasks: {', '.join(TASKS)}"
        )


def _validate_hf_config(cfg: dict[str, Any], where: str):
    """Build a transformers PretrainedConfig; anything transformers rejects becomes a ChipswapError."""
    from transformers import AutoConfig

    model_type = cfg.get("model_type")
    if not model_type:
        raise ChipswapError(
            f'config has no model_type: {where}; add "model_type" (e.g. "bert") as config.json does'
        )
    kwargs = {
        k: v for k, v in cfg.items() if k not in ("model_type", "transformers_version", "_name_or_path")
    }
    try:
        return AutoConfig.for_model(model_type, **kwargs)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ChipswapError(
            f"transformers rejects the config {where}: {_short(exc)}; fix the config.json"
        ) from None


def _short(exc: BaseException, limit: int = 160) -> str:
    msg = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
    msg = msg.split(". Should contain one of")[0]
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def resolve_model(spec: str, *, task: str | None = None) -> ModelRef:
    """Turn a user's model spec into a ModelRef (no torch import for presets)."""
    _check_task(task)
    spec = str(spec).strip()
    if not spec:
        raise ChipswapError(
            "empty model spec: ''; pass a preset name, a config.json path, module:factory or .pt2"
        )
    p = Path(spec)
    if spec.endswith(".pt2"):
        if not p.is_file():
            raise ChipswapError(
                f"exported program not found: {spec}; pass the path of a torch.export .pt2 file"
            )
        return ModelRef(kind="exported", name=p.stem, config={}, task=task, source=str(p), path=str(p))
    if spec.endswith(".json") or p.is_file() or p.is_dir():
        f = p / "config.json" if p.is_dir() else p
        if not f.is_file():
            raise ChipswapError(f"config file not found: {spec}; pass a transformers config.json path")
        try:
            cfg = json.loads(f.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ChipswapError(f"config is not valid JSON: {f} ({exc}); fix the file") from None
        if not isinstance(cfg, dict):
            raise ChipswapError(f"config is not a JSON object: {f}; pass a transformers config.json")
        _validate_hf_config(cfg, str(f))
        t = task or _task_from_config(cfg)
        name = cfg.get("_name_or_path") or f.parent.name or f.stem
        ref = ModelRef(
            kind="hf-config", name=str(name), config=_normalize(cfg), task=t, source=str(f), path=str(f)
        )
        # some checks (e.g. heads vs hidden size) only run when the model is built: build once on meta
        try:
            build_model(ref, meta=True)
        except ChipswapError as exc:
            raise ChipswapError(f"transformers rejects the config {f}: {exc}") from None
        return ref
    if ":" in spec and not spec.startswith(("/", ".")):
        mod_name, _, attr = spec.partition(":")
        fn = _import_factory(mod_name, attr, spec)
        if not callable(fn):
            raise ChipswapError(
                f"factory is not callable: {spec}; point to a function that returns a torch.nn.Module"
            )
        return ModelRef(kind="factory", name=attr, config={}, task=task, source=spec, path=spec)
    data = load_preset(spec)
    return ModelRef(
        kind="preset",
        name=data["name"],
        config=_normalize(data["config"]),
        task=task or data.get("task"),
        source=data.get("source", ""),
        path=None,
    )


def _task_from_config(cfg: dict[str, Any]) -> str:
    archs = cfg.get("architectures") or []
    for a in archs:
        if a.endswith("ForSequenceClassification"):
            return "sequence-classification"
        if a.endswith("ForCausalLM") or a.endswith("LMHeadModel"):
            return "causal-lm"
        if a.endswith("ForMaskedLM"):
            return "masked-lm"
        if a.endswith("ForImageClassification"):
            return "image-classification"
        if a.endswith("ForConditionalGeneration") and cfg.get("model_type") == "t5":
            return "encoder"
    return _DEFAULT_TASK.get(str(cfg.get("model_type")), "base")


def _import_factory(mod_name: str, attr: str, spec: str):
    if not mod_name or not attr:
        raise ChipswapError(f"bad factory spec: {spec!r}; use package.module:make_model")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ChipswapError(
            f"cannot import factory module {mod_name!r} from {spec!r}: {exc}; check PYTHONPATH"
        ) from None
    except Exception as exc:  # the module itself raised on import
        raise ChipswapError(
            f"importing factory module {mod_name!r} raised {type(exc).__name__}: {exc}; fix the module"
        ) from None
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
    ref: ModelRef, *, meta: bool = False, task: str | None = None, attn_implementation: str = "eager"
):
    """Build ``ref`` as an eval-mode torch.nn.Module returning a tuple.

    meta=True builds on the meta device (no weight memory). Factories and .pt2 programs are returned as
    they are (a .pt2 program as ``ExportedProgram.module()``).
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
    cfg_dict = {k: v for k, v in ref.config.items() if k not in _derived_keys(ref.config)}
    cfg = _validate_hf_config(cfg_dict, ref.source or ref.name)
    try:
        cfg._attn_implementation = attn_implementation
    except Exception:  # pragma: no cover - very old configs
        pass
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    cls = _auto_class(ref, t)
    torch.manual_seed(0)
    make = cls.from_config if hasattr(cls, "from_config") else cls._from_config
    try:
        if meta:
            with torch.device("meta"):
                model = make(cfg)
        else:
            model = make(cfg)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise ChipswapError(f"transformers cannot build {ref.name} as {t!r}: {_short(exc)}") from None
    model.eval()
    call_kwargs: dict[str, Any] = {"return_dict": True}
    if "use_cache" in inspect.signature(model.forward).parameters:
        call_kwargs["use_cache"] = False
    names = input_names(ref, task=t)
    cls_ = _make_tuple_wrapper()
    # an explicit signature (input names) lets torch.export key dynamic_shapes by input name
    cls_.forward.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None) for n in names]
    )
    wrapper = cls_(model, names, call_kwargs)
    return wrapper.eval()


def _derived_keys(cfg: dict[str, Any]) -> set[str]:
    """Normalized keys that _normalize added (not in the original config under that name)."""
    added = set()
    for key, names in _ALIASES.items():
        if key in cfg and names[0] == key and any(n in cfg for n in names[1:]):
            # e.g. hidden_size added next to d_model: drop ours, transformers derives it via attribute_map
            added.add(key)
    return added


def call_factory(ref: ModelRef):
    """Call a factory spec; returns (module, example_inputs or None)."""
    import torch

    mod_name, _, attr = (ref.path or ref.source).partition(":")
    fn = _import_factory(mod_name, attr, ref.source)
    try:
        out = fn()
    except Exception as exc:
        raise ChipswapError(
            f"factory {ref.source} raised {type(exc).__name__}: {exc}; fix the factory"
        ) from None
    example = None
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
        out, example = out
    if not isinstance(out, torch.nn.Module):
        raise ChipswapError(
            f"factory {ref.source} returned {type(out).__name__}, not a torch.nn.Module; return the model"
        )
    return out.eval(), example


def load_exported(ref: ModelRef):
    import torch

    try:
        return torch.export.load(ref.path)
    except Exception as exc:
        raise ChipswapError(
            f"cannot load exported program {ref.path}: {_short(exc)}; save it with torch.export.save"
        ) from None


def input_names(ref: ModelRef, *, task: str | None = None) -> list[str]:
    """Names of the forward inputs chipswap feeds, in positional order."""
    if ref.kind == "exported":
        ep = load_exported(ref)
        return list(ep.graph_signature.user_inputs)
    if ref.kind == "factory":
        mod, example = call_factory(ref)
        if example:
            return list(example)
        params = inspect.signature(mod.forward).parameters
        return [n for n, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if ref.model_type == "vit":
        return ["pixel_values"]
    t = task or ref.task
    names = ["input_ids", "attention_mask"]
    if ref.model_type == "t5" and t in ("base", "seq2seq-lm"):
        names.append("decoder_input_ids")
    return names


def example_inputs(ref: ModelRef, batch: int, seq_len: int, *, device: str = "cpu", task: str | None = None):
    """Deterministic example inputs: int64 ids below vocab_size, all-ones int64 mask, float pixels (ViT)."""
    import torch

    if batch < 1 or seq_len < 1:
        raise ChipswapError(f"batch and seq_len must be >= 1: {batch}x{seq_len}; pick positive sizes")
    if ref.kind == "factory":
        _, example = call_factory(ref)
        if example:
            return {k: v.to(device) for k, v in example.items()}
    gen = torch.Generator().manual_seed(0)
    out: dict[str, torch.Tensor] = {}
    for name in input_names(ref, task=task):
        if name == "pixel_values":
            c = int(ref.config.get("num_channels", 3))
            s = int(ref.config.get("image_size", 224))
            out[name] = torch.randn(batch, c, s, s, generator=gen).to(device)
        elif name == "attention_mask":
            out[name] = torch.ones(batch, seq_len, dtype=torch.int64, device=device)
        else:  # token ids
            vocab = int(ref.config.get("vocab_size", 1000))
            out[name] = torch.randint(0, vocab, (batch, seq_len), generator=gen, dtype=torch.int64).to(device)
    return out


def parameter_count(ref: ModelRef, *, task: str | None = None) -> int:
    """Number of parameters, counted on a meta-device build (no weight memory)."""
    model = build_model(ref, meta=True, task=task)
    seen = set()
    total = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
    return total
