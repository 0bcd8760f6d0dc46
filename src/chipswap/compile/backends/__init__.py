"""Compiler backends behind one small interface: compile a module for one fixed input shape, load it back.

A backend turns (model, example inputs of one bucket shape) into artifact files in a folder, and turns that
folder back into a callable that takes a dict of named tensors and returns a tuple of tensors. Shapes are
frozen at compile time: every backend rejects any other shape with an error (never a silent resize), like a
Neuron NEFF.

Backends:
- ``onnxruntime``  default on CPU; one ``model.onnx`` per bucket; ONNX Runtime validates input shapes.
- ``aotinductor``  ``torch._inductor.aoti_compile_and_package`` without embedded weights; all buckets of one
                   model share one copy of the weights (``load(..., weights=...)``).
- ``neuron``       ``torch_neuronx.trace`` / save / load; runs only where the AWS Neuron SDK is installed.

torch / onnx / onnxruntime are imported inside the functions that need them. An artifact folder's ``io.json``
is read through chipswap.datafile and checked field by field (``read_io``): a cache may come from elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable

from chipswap.compile.backends.base import (
    Backend,
    LoadedArtifact,
    TensorSpec,
    check_inputs,
    read_io,
    spec_of,
    write_io,
)
from chipswap.errors import ChipswapError, closest


def _registry() -> dict[str, Callable[[], Backend]]:
    from chipswap.compile.backends.aoti import AOTInductorBackend
    from chipswap.compile.backends.neuron import NeuronBackend
    from chipswap.compile.backends.ort import OnnxRuntimeBackend

    return {
        "onnxruntime": OnnxRuntimeBackend,
        "aotinductor": AOTInductorBackend,
        "neuron": NeuronBackend,
    }


BACKEND_NAMES = ("onnxruntime", "aotinductor", "neuron")
DEFAULT_BACKEND = "onnxruntime"


def get_backend(name: str) -> Backend:
    reg = _registry()
    if name not in reg:
        hint = closest(name, reg)
        did = f" (did you mean {hint[0]}?)" if hint else ""
        raise ChipswapError(f"unknown backend: {name!r}{did}; choose one of {', '.join(BACKEND_NAMES)}")
    return reg[name]()


__all__ = [
    "BACKEND_NAMES",
    "DEFAULT_BACKEND",
    "Backend",
    "LoadedArtifact",
    "TensorSpec",
    "check_inputs",
    "get_backend",
    "read_io",
    "spec_of",
    "write_io",
]
