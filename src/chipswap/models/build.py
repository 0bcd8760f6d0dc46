"""Building a model: transformers classes from a config with random weights (or on the meta device, so a 70B
config needs no weight memory), wrapped so ``forward`` takes tensors positionally or by name and returns a
tuple; representative shallow copies and parameter counts. torch / transformers are imported inside.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.models.entry import call_factory, load_exported
from chipswap.models.inputs import _head_class, _hf_config, model_inputs
from chipswap.models.spec import (
    _DEFAULT_TASK,
    WRAPPED_ATTR,
    ModelRef,
    _auto_class,
    _check_task,
    _quiet_transformers,
    _short,
)
from chipswap.textsafe import one_line

# ---------------------------------------------------------------------------------------------- build


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
    "window_block_indices",  # ViTDet: windowed and global-attention layers
    "residual_block_indices",
    "global_attn_indexes",  # SAM's vision encoder
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
    small = {**cfg, **{k: min(v, REPRESENTATIVE_DEPTH) for k, v in depths.items()}, **_shallow_stages(cfg)}
    small.pop("stage_names", None)  # derived from the depth by transformers' backbone configs
    try:
        _hf_config(replace(ref, config=small))
    except ChipswapError:  # a depth-dependent field the copy cannot rewrite: check every layer instead
        return ref, "the full model (a shallower copy of its config is not valid)"
    return replace(ref, config=small), (
        f"a {REPRESENTATIVE_DEPTH}-layer copy of its {deepest} identical layers (same operators, dtypes and "
        "findings; --full-model exports every layer)"
    )


def _stage(value: Any) -> Any:
    """A backbone output index or "stageN" name moved into the copy's depth (the stem, 0, stays)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > REPRESENTATIVE_DEPTH:
        return REPRESENTATIVE_DEPTH
    if isinstance(value, str) and value.startswith("stage") and value[5:].isdigit():
        return f"stage{min(int(value[5:]), REPRESENTATIVE_DEPTH)}"
    return value


def _shallow_stages(cfg: dict[str, Any]) -> dict[str, Any]:
    """Backbone fields that name layers by depth (DINOv2, ViTDet: out_features=["stage12"], out_indices=[12]),
    rewritten for the shallow copy: the same outputs, taken from its last layer (duplicates dropped)."""
    out: dict[str, Any] = {}
    for key in ("out_features", "out_indices"):
        value = cfg.get(key)
        if isinstance(value, list):
            out[key] = list(dict.fromkeys(_stage(v) for v in value))
    return out


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
