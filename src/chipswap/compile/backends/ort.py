"""ONNX Runtime backend: one static-shape ``model.onnx`` per bucket (default on CPU).

Export goes through ``torch.onnx.export``: the dynamo exporter (torch.export + onnxscript) by default, falling
back to the TorchScript exporter when dynamo cannot capture the model (flag ``exporter=auto``). ONNX Runtime
checks every input shape against the static shapes in the graph, so a 129-token input to a 128 bucket is an
error, not a resize.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chipswap.compile.backends import base  # the interface every backend implements
from chipswap.errors import ChipswapError

if TYPE_CHECKING:  # pragma: no cover
    import torch

MODEL_FILE = "model.onnx"
EXPORT_LOG = "export.log"
_TWO_GB = 2_000_000_000


class OnnxRuntimeBackend(base.Backend, name="onnxruntime", needs_weights=False):
    def version(self) -> str:
        import onnx
        import onnxruntime
        import torch

        return f"onnxruntime-{onnxruntime.__version__}+onnx-{onnx.__version__}+torch-{torch.__version__}"

    def default_flags(self) -> dict[str, str]:
        return {"exporter": "auto", "opset": "18", "optimize": "1"}

    def check_available(self) -> None:
        try:
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
        except ImportError as exc:
            raise ChipswapError(
                f"the onnxruntime backend needs onnx and onnxruntime: {exc}; pip install onnx onnxruntime"
            ) from None

    def _compile(
        self, model: Any, example_inputs: Mapping[str, Any], out_dir: Path, fl: dict[str, str]
    ) -> list[str]:
        import torch

        exporter = fl["exporter"]
        if exporter not in ("auto", "dynamo", "legacy"):
            raise ChipswapError(f"unknown onnx exporter flag: {exporter!r}; use auto, dynamo or legacy")
        names = list(example_inputs)
        args = tuple(example_inputs[n] for n in names)
        with torch.no_grad():
            eager = model(**example_inputs)
        outputs = base.output_names_of(eager)
        n_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        big = n_bytes > _TWO_GB
        log = io.StringIO()
        target = out_dir / MODEL_FILE
        errors: list[str] = []
        used = None
        for kind in ["dynamo", "legacy"] if exporter == "auto" else [exporter]:
            _clear(out_dir)
            try:
                with contextlib.redirect_stdout(log), torch.no_grad(), _quiet():
                    # what differs between the two exporters; the rest of the call is shared
                    if kind == "dynamo":
                        extra = {"external_data": big, "optimize": fl["optimize"] == "1", "verbose": False}
                    else:
                        extra = {"do_constant_folding": True}
                    torch.onnx.export(
                        model,
                        args,
                        str(target),
                        input_names=names,
                        output_names=outputs,
                        dynamo=kind == "dynamo",
                        opset_version=int(fl["opset"]),
                        **extra,
                    )
                used = kind
                break
            except Exception as exc:  # exporter failures are many types; keep the message for the log
                errors.append(f"{kind}: {type(exc).__name__}: {exc}")
                log.write(f"\n{kind} export failed: {type(exc).__name__}: {exc}\n")
        if used is None:
            (out_dir / EXPORT_LOG).write_text(log.getvalue())
            first = errors[0].splitlines()[0][:300] if errors else "unknown"
            raise ChipswapError(
                f"ONNX export failed ({first}); try --backend aotinductor or check the model with chipswap "
                "check"
            )
        base.write_io(out_dir, example_inputs, outputs, exporter=used)
        (out_dir / EXPORT_LOG).write_text(log.getvalue())
        return base.artifact_files(out_dir)

    def load(self, artifact_dir: Path, *, weights: base.Weights = None) -> base.LoadedArtifact:
        import onnxruntime as ort
        import torch

        artifact_dir = Path(artifact_dir)
        specs, outputs = base.read_io(artifact_dir)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        threads = os.environ.get("CHIPSWAP_ORT_THREADS")
        if threads:
            opts.intra_op_num_threads = int(threads)
        try:
            sess = ort.InferenceSession(
                str(artifact_dir / MODEL_FILE), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise ChipswapError(
                f"ONNX Runtime cannot load {artifact_dir / MODEL_FILE}: {str(exc).splitlines()[0][:200]};"
                " run chipswap cache verify and recompile"
            ) from None
        feed_names = [i.name for i in sess.get_inputs()]

        def run(inputs: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
            base.check_inputs(specs, inputs, "onnxruntime")
            feed = {n: _np(inputs[n]) for n in feed_names}
            try:
                res = sess.run(None, feed)
            except Exception as exc:  # ORT raises its own exception types
                raise ChipswapError(
                    f"ONNX Runtime rejected the input: {str(exc).splitlines()[0][:200]}; pad to the "
                    "compiled shape"
                ) from None
            return base.as_tuple([torch.from_numpy(r) for r in res])

        return base.LoadedArtifact("onnxruntime", specs, outputs, run, {"session": sess})


def _np(t: Any) -> Any:
    if hasattr(t, "detach"):
        return t.detach().cpu().contiguous().numpy()
    return t


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Exporter chatter (deprecation warnings, 'torchvision is not installed') stays out of the user's
    terminal."""
    import logging
    import warnings

    loggers = [logging.getLogger(n) for n in ("torch.onnx", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _clear(out_dir: Path) -> None:
    for p in out_dir.iterdir():
        if p.is_file():
            p.unlink()
