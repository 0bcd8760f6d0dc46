"""resolve_model: a model spec (preset name, config.json, factory, .pt2) -> a ModelRef, checked.

The one entry point callers use to name a model. A config is built once on the meta device so checks that
transformers only runs at build time (e.g. heads vs hidden size) are one error line here, not later.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.models.build import build_model
from chipswap.models.checked import already_checked, config_key, remember
from chipswap.models.entry import _import_factory, _split_factory
from chipswap.models.quickcheck import accepts, installed_transformers
from chipswap.models.spec import (
    _ARCH_TASKS,
    _DEFAULT_TASK,
    TEXT_CONFIG_KEYS,
    ModelRef,
    _check_task,
    _normalize,
    _validate_hf_config,
    load_preset,
)
from chipswap.textsafe import one_line

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
    cfg = read_json(f, "config", nonfinite=True)  # as transformers reads it
    if not isinstance(cfg, dict):
        raise ChipswapError(f"config is not a JSON object: {f}; pass a transformers config.json")
    guessed = task is None and _task_from_config(cfg) is None
    t = task or _task_from_config(cfg) or "base"
    key = config_key(cfg, t)  # a config transformers accepted before is not checked again (models/checked.py)
    # a config of a family whose transformers config class chipswap mirrors, with every key and value known,
    # is accepted from the config alone (models/quickcheck.py: no torch, no build); anything else is checked
    # by transformers, with the same error lines as before
    known = already_checked(key) or accepts(cfg, t, installed_transformers())
    if known:
        _validate_hf_config(cfg, str(f), build=False)  # the cheap checks (model_type, bounds) still run
    else:
        _validate_hf_config(cfg, str(f))
    name = cfg.get("_name_or_path") or (f.parent.name if f.name == "config.json" else f.stem) or f.stem
    ref = ModelRef(
        kind="hf-config", name=one_line(name, 80), config=_normalize(cfg), task=t, source=str(f), path=str(f),
        task_guessed=guessed,
    )  # fmt: skip
    if known:
        return ref
    # some checks (e.g. heads vs hidden size) only run when the model is built: build once on meta
    try:
        build_model(ref, meta=True)
    except ChipswapError as exc:
        detail = str(exc).removeprefix("transformers ")
        raise ChipswapError(f"transformers rejects the config {f}: {detail}") from None
    remember(key)
    return ref


def _task_from_config(cfg: dict[str, Any]) -> str | None:
    """The task a config's `architectures` (or its model_type's default) names; None when neither says."""
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
            if any(isinstance(cfg.get(k), dict) for k in TEXT_CONFIG_KEYS):
                return "causal-lm"  # a decoder LM with a vision / audio tower (Llama 4, Gemma 3, ...)
            return "speech-seq2seq" if "num_mel_bins" in cfg else "seq2seq-lm"
    return _DEFAULT_TASK.get(str(cfg.get("model_type")))
