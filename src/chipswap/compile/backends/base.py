"""The backend interface: what a compiled bucket's artifact folder holds and how it is checked.

TensorSpec / io.json (``write_io``, ``read_io``: every field checked, the folder may come from elsewhere),
LoadedArtifact, the Backend base class every backend implements, and the input check that refuses any shape
but the compiled one. torch is imported only for type checking here.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chipswap.datafile import read_json, strict_int
from chipswap.errors import ChipswapError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    # the weights a backend that keeps them outside the artifact is loaded with (one dict for every bucket)
    Weights = Mapping[str, torch.Tensor] | None

IO_FILE = "io.json"
MAX_IO_BYTES = 1 * 2**20
MAX_TENSORS = 256  # inputs or outputs of one compiled bucket
MAX_DIMS = 8
MAX_DIM = 2**31 - 1


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without the "torch." prefix, e.g. "int64"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> TensorSpec:
        return TensorSpec(str(d["name"]), tuple(int(x) for x in d["shape"]), str(d["dtype"]))


def spec_of(name: str, t: torch.Tensor) -> TensorSpec:
    return TensorSpec(name, tuple(int(x) for x in t.shape), str(t.dtype).removeprefix("torch."))


@dataclass
class LoadedArtifact:
    """A compiled bucket, ready to run: ``artifact(inputs) -> tuple of tensors``."""

    backend: str
    inputs: tuple[TensorSpec, ...]
    output_names: tuple[str, ...]
    run: Callable[[Mapping[str, torch.Tensor]], tuple[torch.Tensor, ...]]
    extra: dict[str, Any] = field(default_factory=dict)

    def __call__(self, inputs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return self.run(inputs)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.inputs[0].shape


class Backend(ABC):
    """What every backend implements; subclasses give their name and whether ``load`` needs the weights:
    ``class OnnxRuntimeBackend(Backend, name="onnxruntime", needs_weights=False)``."""

    name: str
    #: True when ``load`` needs the model weights passed in (they are not inside the artifact).
    needs_weights: bool

    def __init_subclass__(cls, *, name: str, needs_weights: bool, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.name, cls.needs_weights = name, needs_weights

    @abstractmethod
    def version(self) -> str:
        """Backend + compiler versions; part of the cache key."""

    @abstractmethod
    def default_flags(self) -> dict[str, str]:
        """Compiler flags that change the artifact; part of the cache key."""

    @abstractmethod
    def check_available(self) -> None:
        """Raise ChipswapError naming what is missing when this backend cannot run here."""

    def compile(
        self,
        model: torch.nn.Module,
        example_inputs: Mapping[str, torch.Tensor],
        out_dir: Path,
        *,
        flags: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Compile ``model`` for exactly the shapes of ``example_inputs``; write files into ``out_dir``;
        return them. ``flags`` override the backend's defaults."""
        merged = {**self.default_flags(), **(flags or {})}
        return self._compile(model, example_inputs, Path(out_dir), merged)

    @abstractmethod
    def _compile(
        self, model: Any, example_inputs: Mapping[str, Any], out_dir: Path, fl: dict[str, str]
    ) -> list[str]:
        """The backend's compile, with the merged flags."""

    @abstractmethod
    def load(self, artifact_dir: Path, *, weights: Weights = None) -> LoadedArtifact:
        """Load a compiled bucket back (in any process)."""


def write_io(
    out_dir: Path, example_inputs: Mapping[str, torch.Tensor], output_names: list[str], **extra: Any
) -> str:
    """Write the bucket's io.json (inputs, outputs and any backend-specific `extra` keys)."""
    data = {
        "inputs": [spec_of(k, v).to_json() for k, v in example_inputs.items()],
        "outputs": list(output_names),
        **extra,
    }
    (out_dir / IO_FILE).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return IO_FILE


def artifact_files(out_dir: Path) -> list[str]:
    """What a backend's compile returns: the names of the files it left in `out_dir`, sorted."""
    return sorted(p.name for p in out_dir.iterdir() if p.is_file())


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 256:
        raise ChipswapError(f"{what} is not a tensor name")
    return value


def parse_io(data: Any) -> tuple[tuple[TensorSpec, ...], tuple[str, ...]]:
    """Input specs and output names from an ``io.json`` document, every field checked (strict ints, bounded
    counts and ranks, names as short strings)."""
    if not isinstance(data, Mapping):
        raise ChipswapError("not a JSON object")
    inputs, outputs = data.get("inputs"), data.get("outputs")
    if not isinstance(inputs, list) or not 0 < len(inputs) <= MAX_TENSORS:
        raise ChipswapError(f"'inputs' is not a list of 1 to {MAX_TENSORS} tensor specs")
    if not isinstance(outputs, list) or len(outputs) > MAX_TENSORS:
        raise ChipswapError(f"'outputs' is not a list of up to {MAX_TENSORS} names")
    specs = []
    for i, d in enumerate(inputs):
        if not isinstance(d, Mapping) or not isinstance(d.get("shape"), list) or len(d["shape"]) > MAX_DIMS:
            raise ChipswapError(f"inputs[{i}] is not a tensor spec with a shape of at most {MAX_DIMS} dims")
        shape = tuple(strict_int(x, f"inputs[{i}].shape", hi=MAX_DIM) for x in d["shape"])
        name = _name(d.get("name"), f"inputs[{i}].name")
        specs.append(TensorSpec(name, shape, _name(d.get("dtype"), f"inputs[{i}].dtype")))
    return tuple(specs), tuple(_name(o, f"outputs[{i}]") for i, o in enumerate(outputs))


def read_io(artifact_dir: Path) -> tuple[tuple[TensorSpec, ...], tuple[str, ...]]:
    try:
        return parse_io(read_json(artifact_dir / IO_FILE, IO_FILE, max_bytes=MAX_IO_BYTES))
    except ChipswapError as exc:
        raise ChipswapError(
            f"artifact folder has no readable {IO_FILE}: {artifact_dir} ({exc}); recompile it with chipswap "
            "compile"
        ) from None


def check_inputs(specs: tuple[TensorSpec, ...], inputs: Mapping[str, torch.Tensor], backend: str) -> None:
    """The same shape check everywhere: the compiled shape, exactly, or a clear error (never a resize)."""
    for s in specs:
        if s.name not in inputs:
            raise ChipswapError(
                f"missing input {s.name!r} for the {backend} artifact; pass all of {[x.name for x in specs]}"
            )
        got = tuple(int(x) for x in inputs[s.name].shape)
        if got != s.shape:
            raise ChipswapError(
                f"input {s.name!r} has shape {list(got)} but the {backend} artifact was compiled for "
                f"{list(s.shape)};"
                " pad to a compiled bucket (chipswap.serve.Router does this) or compile this shape"
            )


def output_names_of(outputs: Any) -> list[str]:
    if isinstance(outputs, Mapping):
        return [str(k) for k in outputs]
    if isinstance(outputs, (tuple, list)):
        return [f"output_{i}" for i in range(len(outputs))]
    return ["output_0"]


def as_tuple(outputs: Any) -> tuple[Any, ...]:
    if isinstance(outputs, Mapping):
        return tuple(outputs.values())
    if isinstance(outputs, (tuple, list)):
        return tuple(outputs)
    return (outputs,)
