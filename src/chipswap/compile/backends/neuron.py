"""AWS Neuron backend: ``torch_neuronx.trace`` once per bucket, ``torch.jit.save`` the result,
``torch.jit.load`` it.

EXERCISED ONLY ON NEURON HOSTS (inf2 / trn1 / trn2 with the AWS Neuron SDK: torch-neuronx + neuronx-cc).
Everywhere else ``check_available`` raises a one-line ChipswapError naming the missing SDK. The code path is
the seed's: trace with fixed-shape example inputs, save, load at serving time, pad to the compiled length; a
longer input is a shape error, never a resize.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chipswap.compile.backends import base  # the interface every backend implements
from chipswap.errors import ChipswapError

if TYPE_CHECKING:  # pragma: no cover
    import torch

MODEL_FILE = "model_neuron.pt"
MISSING = (
    "the neuron backend needs the AWS Neuron SDK (torch-neuronx and neuronx-cc), which is not installed here;"
    " run on an inf2/trn1/trn2 host with the Neuron DLAMI, or use --backend onnxruntime or aotinductor"
)


def _import_neuronx() -> Any:
    try:
        import torch_neuronx  # type: ignore[import-not-found]
    except ImportError:
        raise ChipswapError(MISSING) from None
    return torch_neuronx


# needs_weights=False: trace() freezes the weights into the NEFF
class NeuronBackend(base.Backend, name="neuron", needs_weights=False):
    def version(self) -> str:
        tnx = _import_neuronx()
        try:
            import neuronxcc  # type: ignore[import-not-found]

            cc = getattr(neuronxcc, "__version__", "unknown")
        except ImportError:
            cc = "missing"
        return f"torch-neuronx-{getattr(tnx, '__version__', 'unknown')}+neuronx-cc-{cc}"

    def default_flags(self) -> dict[str, str]:
        # passed to neuronx-cc; --auto-cast none keeps fp32 so results match eager PyTorch within --atol
        return {"compiler_args": "--model-type=transformer --auto-cast=none"}

    def check_available(self) -> None:
        _import_neuronx()

    def _compile(
        self, model: Any, example_inputs: Mapping[str, Any], out_dir: Path, fl: dict[str, str]
    ) -> list[str]:
        tnx = _import_neuronx()
        import torch

        names = list(example_inputs)
        args = tuple(example_inputs[n] for n in names)
        with torch.no_grad():
            eager = model(**example_inputs)
        outputs = base.output_names_of(eager)
        log = io.StringIO()
        try:
            with contextlib.redirect_stdout(log):
                traced = tnx.trace(
                    model,
                    args,
                    compiler_args=fl["compiler_args"].split(),
                    compiler_workdir=str(out_dir / "work"),
                )
            torch.jit.save(traced, str(out_dir / MODEL_FILE))
        except Exception as exc:
            (out_dir / "neuronx-cc.log").write_text(log.getvalue())
            raise ChipswapError(
                f"neuronx-cc failed: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else exc!r};"
                " run chipswap check MODEL for the unsupported op"
            ) from None
        import shutil

        shutil.rmtree(out_dir / "work", ignore_errors=True)
        base.write_io(out_dir, example_inputs, outputs)
        return base.artifact_files(out_dir)

    def load(
        self, artifact_dir: Path, *, weights: base.Weights = None, trust_native: bool = False
    ) -> base.LoadedArtifact:
        artifact_dir = Path(artifact_dir)
        with contextlib.ExitStack() as stack:
            if not trust_native:  # TorchScript is code: only a private copy of a verified, signed entry
                from chipswap.compile.trust import verified_copy

                artifact_dir = stack.enter_context(verified_copy(artifact_dir))
            _import_neuronx()  # registers the neuron ops torch.jit.load needs
            import torch

            specs, outputs = base.read_io(artifact_dir)
            mod = torch.jit.load(str(artifact_dir / MODEL_FILE))

        def run(inputs: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
            base.check_inputs(specs, inputs, "neuron")
            return base.as_tuple(mod(*(inputs[s.name] for s in specs)))

        return base.LoadedArtifact("neuron", specs, outputs, run, {"module": mod})
