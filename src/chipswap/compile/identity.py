"""What a compiled model is, in a form other machines can compare: parameter count, config digest, dtype, and
the device each backend computes on. `chipswap compile` records it in the compiled set, `chipswap serve` lists
it on /v1/models, `chipswap bench` stores it (bench.identity) and `chipswap plan` matches it.

``config_digest`` and ``BACKEND_DEVICE`` are pure; ``model_identity`` reads a built torch module (passed in;
torch is not imported here). May not: read files or build models.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from chipswap.compile.keys import canonical_json

# backend of a compiled set -> the device it computes on (chipswap builds ONNX Runtime and AOTInductor
# for the CPU)
BACKEND_DEVICE = {"onnxruntime": "cpu", "aotinductor": "cpu", "neuron": "neuron"}


def config_digest(config: Mapping[str, Any]) -> str:
    """sha256 of a model config as canonical JSON (sorted keys): the same config gives the same digest on
    the machine that served it and the one that plans."""
    return hashlib.sha256(canonical_json(dict(config))).hexdigest()


def model_identity(model: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    """Parameter count, config digest and weight dtype of a built model."""
    from chipswap.models import count_parameters

    dtype = next((str(p.dtype).removeprefix("torch.") for p in model.parameters()), None)
    return {"parameters": count_parameters(model), "config_sha256": config_digest(config), "dtype": dtype}
