"""Cache keys: what makes two compiles the same (model graph, weights, input shapes, backend, compiler
versions and flags, chipswap version) and its digest. Never a path, so a moved
project or a copied cache still hits.

torch is imported inside the digest functions only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chipswap import __version__

if TYPE_CHECKING:  # pragma: no cover
    import torch

KEY_LEN = 32  # hex digits of a key

# ------------------------------------------------------------------------------------------------- keys
def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()


@dataclass(frozen=True)
class KeyParts:
    """Everything that changes a compiled artifact. ``key`` is the sha256 of their canonical JSON."""

    graph: str
    weights: str
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]
    backend: str
    backend_version: str
    flags: tuple[tuple[str, str], ...] = ()
    chipswap: str = __version__
    kind: str = "artifact"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "graph": self.graph,
            "weights": self.weights,
            "inputs": [[n, list(s), d] for n, s, d in self.inputs],
            "backend": self.backend,
            "backend_version": self.backend_version,
            "flags": dict(self.flags),
            "chipswap": self.chipswap,
        }

    @property
    def key(self) -> str:
        return hashlib.sha256(canonical_json(self.to_json())).hexdigest()[:KEY_LEN]

    @staticmethod
    def make(
        *,
        graph: str,
        weights: str,
        inputs: Mapping[str, Any] | Sequence[tuple[str, Sequence[int], str]],
        backend: str,
        backend_version: str,
        flags: Mapping[str, str] | None = None,
        kind: str = "artifact",
    ) -> KeyParts:
        if isinstance(inputs, Mapping):
            specs = tuple(
                (str(n), tuple(int(x) for x in t.shape), str(t.dtype).removeprefix("torch."))
                for n, t in inputs.items()
            )
        else:
            specs = tuple((str(n), tuple(int(x) for x in s), str(d)) for n, s, d in inputs)
        return KeyParts(
            graph=graph,
            weights=weights,
            inputs=specs,
            backend=backend,
            backend_version=backend_version,
            flags=tuple(sorted((str(k), str(v)) for k, v in (flags or {}).items())),
            kind=kind,
        )


_DROP_CONFIG_KEYS = {"_name_or_path", "name_or_path", "_commit_hash", "transformers_version"}


def graph_digest(model: torch.nn.Module) -> str:
    """Architecture digest: module tree (classes + extra_repr), parameter names/shapes/dtypes/ties, config,
    the source of each class's forward, and the versions of the libraries those classes come from. No
    paths."""
    import inspect
    import sys

    h = hashlib.sha256()
    classes: dict[str, type] = {}
    for name, mod in model.named_modules(remove_duplicate=False):
        cls = type(mod)
        qn = f"{cls.__module__}.{cls.__qualname__}"
        classes[qn] = cls
        try:
            extra = mod.extra_repr()
        except Exception:  # some third-party extra_repr need state we do not have
            extra = ""
        h.update(canonical_json([name, qn, extra, bool(mod.training)]))
    ptr_ids: dict[int, int] = {}
    tensors = list(model.named_parameters(remove_duplicate=False)) + list(
        model.named_buffers(remove_duplicate=False)
    )
    for name, t in tensors:
        tie = ptr_ids.setdefault(id(t), len(ptr_ids))
        h.update(canonical_json([name, list(t.shape), str(t.dtype), t.device.type, tie]))
    for qn in sorted(classes):
        cls = classes[qn]
        try:
            src = inspect.getsource(cls.forward)
        except (OSError, TypeError):
            src = ""
        top = cls.__module__.split(".")[0]
        ver = getattr(sys.modules.get(top), "__version__", "")
        h.update(canonical_json([qn, hashlib.sha256(src.encode()).hexdigest(), top, ver]))
    cfg = getattr(model, "config", None)
    if cfg is None:
        for mod in model.modules():
            cfg = getattr(mod, "config", None)
            if cfg is not None:
                break
    if cfg is not None:
        d = cfg.to_dict() if hasattr(cfg, "to_dict") else (dict(cfg) if isinstance(cfg, Mapping) else {})
        h.update(canonical_json({k: v for k, v in d.items() if k not in _DROP_CONFIG_KEYS}))
    return h.hexdigest()


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter and buffer (name, dtype, shape, bytes), in name order."""
    h = hashlib.sha256()
    seen: dict[str, Any] = {}
    for n, t in model.named_parameters(remove_duplicate=False):
        seen[n] = t
    for n, t in model.named_buffers(remove_duplicate=False):
        seen[n] = t
    for n in sorted(seen):
        t = seen[n].detach()
        h.update(canonical_json([n, str(t.dtype), list(t.shape)]))
        if t.device.type == "meta":
            h.update(b"meta")
            continue
        flat = t.contiguous().cpu().reshape(-1)
        if flat.numel():
            import torch

            h.update(flat.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
