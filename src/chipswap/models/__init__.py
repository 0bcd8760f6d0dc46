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

Modules (lowest first; each imports only the ones above it):
- spec.py     ModelRef / ModelInputs, presets, tasks, config bounds and normalisation (data only);
- entry.py    running a factory or loading a saved .pt2 (the user's code; see "Trust" above);
- inputs.py   which inputs a model takes and example tensors;
- build.py    building (and wrapping) the module, representative copies, parameter counts;
- resolve.py  resolve_model: a spec -> a checked ModelRef.
This package's API is what is imported below.
"""

from chipswap.models.build import (
    REPRESENTATIVE_DEPTH,
    build_model,
    count_parameters,
    input_names_for,
    parameter_count,
    representative,
)
from chipswap.models.entry import (
    call_entry,
    call_factory,
    is_torch_module,
    load_exported,
    split_factory_output,
)
from chipswap.models.inputs import check_input_kinds, example_inputs, input_names, model_inputs
from chipswap.models.resolve import resolve_model
from chipswap.models.spec import (
    CONFIG_BOUNDS,
    TASKS,
    WRAPPED_ATTR,
    ModelInputs,
    ModelRef,
    check_config_bounds,
    load_preset,
    preset_names,
)

__all__ = [
    "CONFIG_BOUNDS",
    "REPRESENTATIVE_DEPTH",
    "TASKS",
    "WRAPPED_ATTR",
    "ModelInputs",
    "ModelRef",
    "build_model",
    "call_entry",
    "call_factory",
    "check_config_bounds",
    "check_input_kinds",
    "count_parameters",
    "example_inputs",
    "input_names",
    "input_names_for",
    "is_torch_module",
    "load_exported",
    "load_preset",
    "model_inputs",
    "parameter_count",
    "preset_names",
    "representative",
    "resolve_model",
    "split_factory_output",
]
