"""The model's work from its captured graph: FLOPs counted by PyTorch on the real transformers modules,
built on the meta device (no weight memory, nothing downloaded), and `model_work`: the ModelWork the
projection uses.

What it is for: chipswap.projection.api / the plan call `model_work(ref)`. For presets and config.json files
that
is the closed form of chipswap.projection.work (instant, even for 70B); tests/test_projection_flops.py checks
those
closed forms against `graph_flops` here on the real graphs, so the fast path is validated by the slow one.
A factory model has no config to read sizes from, so its work comes from graph counts at three lengths.

May import torch (inside functions) and chipswap.models (read-only); may not write files.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.projection.work import ModelDims, ModelWork, dims_from_config, work_from_config, work_from_dims

GRAPH_LENGTHS = (32, 64, 128)  # a factory's FLOPs are counted at these lengths to split linear vs quadratic


def _ref_with_layers(ref: Any, layers: int | None) -> Any:
    """A copy of `ref` with fewer layers (work per layer is identical, so counts scale exactly)."""
    if layers is None:
        return ref
    cfg = dict(ref.config)
    for key in ("num_hidden_layers", "num_layers", "n_layer", "n_layers"):
        if key in cfg:
            cfg[key] = layers
    if "num_decoder_layers" in cfg:
        cfg["num_decoder_layers"] = layers
    return replace(ref, config=cfg)


def graph_flops(
    ref: Any, batch: int, length: int, *, task: str | None = None, layers: int | None = None
) -> tuple[float, int]:
    """(FLOPs, parameters) of one forward of the real module at `batch` x `length`, counted by
    torch.utils.flop_counter on the meta device. Causal LMs compute logits for the last token only
    (`logits_to_keep=1`, what a serving prefill does)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from chipswap import models

    ref = _ref_with_layers(ref, layers)
    model = models.build_model(ref, meta=True, task=task)
    inputs = models.example_inputs(ref, batch, length, device="meta", task=task)
    kwargs: dict[str, Any] = {}
    if (task or ref.task) == "causal-lm" and ref.kind in ("preset", "hf-config"):
        kwargs["logits_to_keep"] = 1
    else:
        # an encoder's all-ones mask is the default; building it on meta would need a .item()
        inputs.pop("attention_mask", None)
    seen: set[int] = set()
    params = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            params += p.numel()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        try:
            model(**inputs, **kwargs)
        except Exception as exc:  # a model whose forward fails on meta tensors
            raise ChipswapError(
                f"cannot count the FLOPs of {ref.name} on the meta device: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:160]}; give a config.json or preset instead"
            ) from None
    return float(counter.get_total_flops()), int(params)


def _work_from_graph(ref: Any, task: str | None) -> ModelWork:
    """An encoder-style ModelWork for a factory model: FLOPs per token and per token pair from graph counts
    at three lengths (F(S) = a S + c S^2 + e per sequence), parameters from the module."""
    counts = [graph_flops(ref, 1, s, task=task)[0] for s in GRAPH_LENGTHS]
    _, params = graph_flops(ref, 1, GRAPH_LENGTHS[0], task=task)
    s1, s2, s3 = GRAPH_LENGTHS
    f1, f2, f3 = counts
    # solve the 3x3 system for (c, a, e)
    denom = (s1 - s2) * (s1 - s3) * (s2 - s3)
    c = (s3 * (f2 - f1) + s2 * (f1 - f3) + s1 * (f3 - f2)) / denom
    a = (s3 * s3 * (f1 - f2) + s2 * s2 * (f3 - f1) + s1 * s1 * (f2 - f3)) / denom
    c = max(0.0, c)
    a = max(0.0, a)
    attn_width = max(1, round(c / 4.0))  # 4 x heads x head_dim x layers, folded into one "layer"
    dims = ModelDims(
        name=ref.name,
        kind="encoder",
        hidden=1,
        layers=1,
        heads=1,
        kv_heads=1,
        head_dim=attn_width,
        intermediate=1,
        vocab=0,
        head="none",
        max_positions=0,
    )
    return ModelWork(
        dims=dims,
        params=params,
        matmul_params=int(a / 2.0),
        head_params=0,
        embedding_params=0,
        source=f"graph count (torch.utils.flop_counter at lengths {', '.join(map(str, GRAPH_LENGTHS))})",
    )


def model_work(ref: Any, *, task: str | None = None) -> ModelWork:
    """The ModelWork of a resolved model (chipswap.models.resolve_model's ModelRef).

    Presets and config.json: closed form from the config (sizes checked against graph counts in the tests);
    a config missing a size is a one-line error naming the field. Factories: graph counts (encoder-style work:
    a factory states no layer / KV-head sizes, so it cannot be projected as an LLM). Exported .pt2 programs
    are refused (no sizes, fixed shapes)."""
    t = task or ref.task
    if task is None and getattr(ref, "task_guessed", False):
        raise ChipswapError(
            f"model {ref.name}: its config.json has no `architectures`, so chipswap cannot tell a decoder LM "
            "from an encoder; pass --task causal-lm for a decoder (or the encoder's task, e.g. --task base; "
            "in a workload: model.task)"
        )
    if ref.kind in ("preset", "hf-config"):
        return work_from_config(ref.config, name=ref.name, task=t)
    if ref.kind == "factory":
        if t == "causal-lm":
            raise ChipswapError(
                f"model {ref.name}: a factory gives no num_hidden_layers / num_key_value_heads for the KV "
                "cache; "
                "pass a config.json (or preset) to project it as an LLM"
            )
        return _work_from_graph(ref, t)
    raise ChipswapError(
        f"model {ref.name}: an exported .pt2 program carries no layer sizes and fixed shapes; project the "
        "preset, config.json or factory it was exported from"
    )


def closed_form(ref: Any, *, task: str | None = None) -> ModelWork:
    """The closed-form work of a preset / config (what model_work returns for them), for comparisons."""
    return work_from_dims(dims_from_config(ref.config, name=ref.name, task=task or ref.task))
