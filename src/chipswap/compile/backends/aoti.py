"""AOTInductor backend: one ``model.pt2`` per bucket, compiled WITHOUT embedded weights.

``aot_inductor.package_constants_in_so=False`` keeps the weights out of the shared object, so N buckets of one
model load the same weight tensors (``load_constants(..., user_managed=True)`` stores the caller's pointers,
no copy). ``chipswap.compile.compiler`` stores the weights once per model in the cache (``weights.pt``) and
passes them
to every bucket.

A wrong input shape would abort the whole process inside the compiled code, so ``AOTI_RUNTIME_CHECK_INPUTS=1``
is set before anything runs, and inputs are checked in Python first (a one-line ChipswapError).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chipswap.compile.backends import base  # the interface every backend implements
from chipswap.datafile import read_json
from chipswap.errors import ChipswapError

if TYPE_CHECKING:  # pragma: no cover
    import torch

PACKAGE_FILE = "model.pt2"
CONSTANTS_FILE = "constants.pt"  # lifted tensor constants (small, not weights), when the graph has any
WEIGHTS_FILE = "weights.pt"  # one per model, stored by chipswap.compile.compiler as its own cache entry


def model_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer by fully qualified name (tied weights keep one storage)."""
    out: dict[str, Any] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        out[n] = p.detach()
    for n, b in model.named_buffers(remove_duplicate=False):
        out[n] = b.detach()
    return out


def save_weights(model: torch.nn.Module, path: Path) -> None:
    import torch

    torch.save(model_weights(model), str(path))


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    """Load a weights file once (memory-mapped); pass the result to every bucket's ``load``."""
    import torch

    try:
        return torch.load(str(path), mmap=True, weights_only=True)
    except Exception as exc:
        raise ChipswapError(f"cannot read weights file {path}: {exc}; run chipswap cache verify") from None


class AOTInductorBackend(base.Backend, name="aotinductor", needs_weights=True):
    def version(self) -> str:
        import torch

        return f"torch-{torch.__version__}+aotinductor"

    def default_flags(self) -> dict[str, str]:
        return {"embed_weights": "0", "max_autotune": "0"}

    def check_available(self) -> None:
        import shutil

        if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
            raise ChipswapError(
                "the aotinductor backend needs a C++ compiler and none was found; install g++ or use "
                "--backend onnxruntime"
            )

    def _compile(
        self, model: Any, example_inputs: Mapping[str, Any], out_dir: Path, fl: dict[str, str]
    ) -> list[str]:
        import torch
        import torch._inductor

        self.check_available()
        kwargs = dict(example_inputs)
        with torch.no_grad():
            eager = model(**kwargs)
        outputs = base.output_names_of(eager)
        log = io.StringIO()
        try:
            with contextlib.redirect_stdout(log), torch.no_grad():
                ep = torch.export.export(model, (), kwargs=kwargs, strict=False)
                configs: dict[str, Any] = {
                    "aot_inductor.package_constants_in_so": fl["embed_weights"] == "1",
                    "max_autotune": fl["max_autotune"] == "1",
                }
                torch._inductor.aoti_compile_and_package(
                    ep, package_path=str(out_dir / PACKAGE_FILE), inductor_configs=configs
                )
        except ChipswapError:
            raise
        except Exception as exc:
            msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            raise ChipswapError(
                f"AOTInductor compile failed ({type(exc).__name__}: {msg}); try --backend onnxruntime"
            ) from None
        consts = {k: v for k, v in ep.constants.items() if isinstance(v, torch.Tensor)}
        if consts:
            torch.save(consts, str(out_dir / CONSTANTS_FILE))
        base.write_io(
            out_dir,
            kwargs,
            outputs,
            weights="embedded" if fl["embed_weights"] == "1" else "external",
            device=str(next(iter(kwargs.values())).device.type),
        )
        return base.artifact_files(out_dir)

    def load(
        self,
        artifact_dir: Path,
        *,
        weights: base.Weights = None,
        copy_weights: bool = False,
        trust_native: bool = False,
    ) -> base.LoadedArtifact:
        """Load one bucket. ``weights`` (same dict for every bucket) are shared, not copied, unless
        ``copy_weights``. The package is native code: it loads only from a ready, signed entry of a chipswap
        cache that matches its sha256 manifest now, and from a private copy of it
        (``chipswap.compile.trust.verified_copy``), unless ``trust_native`` (a folder the caller compiled)."""
        artifact_dir = Path(artifact_dir)
        if trust_native:
            return self._load(artifact_dir, artifact_dir, weights, copy_weights)
        from chipswap.compile.trust import verified_copy

        with verified_copy(artifact_dir) as private:
            return self._load(private, artifact_dir, weights, copy_weights)

    def _load(
        self, src: Path, artifact_dir: Path, weights: base.Weights, copy_weights: bool
    ) -> base.LoadedArtifact:
        """Load the bucket whose files are in ``src``; ``artifact_dir`` (their origin) is for messages."""
        os.environ.setdefault("AOTI_RUNTIME_CHECK_INPUTS", "1")
        import torch
        import torch._inductor

        specs, outputs = base.read_io(src)
        meta = read_json(src / base.IO_FILE, base.IO_FILE)  # base.read_io has checked it parses
        try:
            cm = torch._inductor.aoti_load_package(str(src / PACKAGE_FILE))
        except Exception as exc:
            raise ChipswapError(
                f"cannot load AOTInductor package {artifact_dir / PACKAGE_FILE}: "
                f"{str(exc).splitlines()[0][:200]};"
                " run chipswap cache verify and recompile"
            ) from None
        if meta.get("weights") == "external":
            local: dict[str, Any] = {}
            if (src / CONSTANTS_FILE).exists():
                local = torch.load(str(src / CONSTANTS_FILE), weights_only=True)
            if weights is None:
                raise ChipswapError(
                    f"the AOTInductor artifact {artifact_dir.name} was compiled without weights and none "
                    "were given;"
                    " load it through chipswap.serve (which passes the model's weights.pt)"
                )
            constants: dict[str, Any] = {}
            missing = []
            for fqn in cm.get_constant_fqns():
                if fqn in weights:
                    constants[fqn] = weights[fqn]
                elif fqn in local:
                    constants[fqn] = local[fqn]
                else:
                    missing.append(fqn)
            if missing:
                raise ChipswapError(
                    f"weights do not match the compiled graph: missing {missing[:3]} ({len(missing)} in all);"
                    " recompile with the same model"
                )
            cm.load_constants(constants, check_full_update=True, user_managed=not copy_weights)

        def run(inputs: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
            base.check_inputs(specs, inputs, "aotinductor")
            with torch.no_grad():
                res = cm(**{s.name: inputs[s.name] for s in specs})
            return base.as_tuple(res)

        return base.LoadedArtifact("aotinductor", specs, outputs, run, {"package": cm, "weights": weights})
