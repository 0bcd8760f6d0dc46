"""Running a user's entry point: a factory (``package.module:make_model`` or ``file.py:make_model``) or a
saved ``torch.export`` program (``.pt2``).

Factories are the user's own code, imported from ``sys.path``, an explicit file, or the folders given as
``factory_dirs`` (never the current folder by accident, never the standard library); one that raises or exits
is one error line. A ``.pt2`` is loaded with weights-only semantics and never unpickles anything unless
``trust_pickle`` is set. torch is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError, closest
from chipswap.models.spec import ModelRef, _quiet_transformers, _short
from chipswap.textsafe import one_line

# ---------------------------------------------------------------------------------------------- factories


def _split_factory(spec: str) -> tuple[str, str]:
    mod_name, _, attr = spec.rpartition(":")
    if not mod_name or not attr or not all(part.isidentifier() for part in attr.split(".")):
        raise ChipswapError(
            f"bad factory spec: {one_line(spec)!r}; "
            "use package.module:make_model or path/to/file.py:make_model"
        )
    return mod_name, attr


def _hidden_path_entries(trusted: Sequence[str]) -> set[str]:
    """sys.path entries that mean 'the current folder' and were not asked for (PYTHONPATH, --factory-path)."""
    cwd = Path.cwd().resolve()
    asked = {str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    asked |= set(trusted)
    hidden = set()
    for entry in sys.path:
        try:
            is_cwd = entry in ("", ".") or Path(entry).resolve() == cwd
        except OSError:
            continue
        if is_cwd and str(cwd) not in asked:
            hidden.add(entry)
    return hidden


@contextlib.contextmanager
def _import_path(extra: Sequence[str], trusted: Sequence[str]) -> Iterator[None]:
    """sys.path for importing a factory: explicit folders first, the current folder only when asked for."""
    saved = list(sys.path)
    hidden = _hidden_path_entries(trusted)
    sys.path[:] = [*extra, *(p for p in saved if p not in hidden)]
    try:
        yield
    finally:
        sys.path[:] = saved


def _guarded(what: str, fix: str, fn: Any, *args: Any) -> Any:
    """Run user code (a factory import or call); an exception or exit is one error line, never a traceback."""
    from chipswap.deadline import DeadlinePassed

    try:
        return fn(*args)
    except (ChipswapError, KeyboardInterrupt, DeadlinePassed):
        raise
    except SystemExit as exc:
        raise ChipswapError(f"{what} called exit({exc.code!r}); {fix}") from None
    except BaseException as exc:  # noqa: BLE001 - user code: anything it raises is reported, not propagated
        raise ChipswapError(f"{what} raised {type(exc).__name__}: {_short(exc, 200)}; {fix}") from None


def _import_factory(mod_name: str, attr: str, spec: str, dirs: Sequence[str] = ()):
    top = mod_name.split(".")[0]
    if mod_name.endswith(".py") or "/" in mod_name or os.sep in mod_name:
        mod = _import_file(Path(mod_name), spec)
    else:
        if not all(part.isidentifier() for part in mod_name.split(".")):
            raise ChipswapError(
                f"bad factory spec: {one_line(spec)!r}; "
                "use package.module:make_model or path/to/file.py:make_model"
            )
        if top in sys.stdlib_module_names or top in sys.builtin_module_names or top == "chipswap":
            raise ChipswapError(
                f"factory {one_line(spec)!r} names a function of {top!r}, not a model factory; "
                "point to your own "
                "function that returns a torch.nn.Module (or a JAX entry point)"
            )
        if mod_name in sys.modules:  # already imported (and run) in this process: nothing new executes
            return _attr(sys.modules[mod_name], mod_name, attr)
        with _import_path(dirs, dirs):
            spec_found = None
            try:
                spec_found = importlib.util.find_spec(mod_name)
            except (ImportError, ValueError):
                spec_found = None
            except BaseException as exc:  # noqa: BLE001 - a parent package raised on import
                raise ChipswapError(
                    f"importing factory module {mod_name!r} raised {type(exc).__name__}: {_short(exc)}; "
                    "fix the module"
                ) from None
            if spec_found is None:
                local = Path.cwd() / (mod_name.replace(".", "/") + ".py")
                pkg = Path.cwd() / mod_name.split(".")[0]
                here = (
                    " (a copy is in the current folder, which chipswap does not import from unless asked: "
                    "pass --factory-path . or set PYTHONPATH=.)"
                    if local.exists() or pkg.is_dir()
                    else ""
                )
                raise ChipswapError(
                    f"cannot import factory module {mod_name!r} from {one_line(spec)!r}{here}; "
                    "install the package, set PYTHONPATH, or pass --factory-path DIR"
                )
            mod = _guarded(
                f"importing factory module {mod_name!r}", "fix the module", importlib.import_module, mod_name
            )
    return _attr(mod, mod_name, attr)


def _attr(mod: Any, mod_name: str, attr: str) -> Any:
    obj: Any = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(mod) if not n.startswith("_")]
            hint = closest(part, names)
            raise ChipswapError(
                f"factory {attr!r} not found in module {mod_name!r}"
                + (f"; did you mean {', '.join(hint)}?" if hint else "; check the name after the colon")
            )
        obj = getattr(obj, part)
    return obj


def _import_file(path: Path, spec: str) -> Any:
    """Import an explicitly named factory file (its folder is importable while it loads)."""
    if path.suffix != ".py" or not path.is_file():
        raise ChipswapError(
            f"factory file not found: {one_line(str(path))} (from {one_line(spec)!r}); "
            "pass an existing .py file as path/to/file.py:make_model"
        )
    real = path.resolve()
    name = "chipswap_factory_" + re.sub(r"\W", "_", str(real))[-80:]
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, real)
    if loader_spec is None or loader_spec.loader is None:
        raise ChipswapError(f"cannot load factory file {path}; pass a Python source file")
    mod = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = mod

    def load() -> None:
        with _import_path([str(real.parent)], [str(real.parent)]):
            loader_spec.loader.exec_module(mod)  # type: ignore[union-attr]

    try:
        _guarded(f"importing factory file {path}", "fix the file", load)
    except ChipswapError:
        sys.modules.pop(name, None)
        raise
    return mod


def call_entry(ref: ModelRef) -> Any:
    """Import and call a factory / entry point with no arguments; what it returns, unchecked."""
    mod_name, attr = _split_factory(ref.path or ref.source)
    fn = _import_factory(mod_name, attr, ref.source, ref.factory_dirs)
    if not callable(fn):
        raise ChipswapError(f"factory is not callable: {one_line(ref.source)}; point to a function")
    return _guarded(f"factory {one_line(ref.source)}", "fix the factory", fn)


def is_torch_module(obj: Any) -> bool:
    mod = sys.modules.get("torch")
    return mod is not None and isinstance(obj, mod.nn.Module)


def split_factory_output(ref: ModelRef, out: Any) -> tuple[Any, dict[str, Any] | None]:
    """(module, example inputs or None) from what a PyTorch factory returned."""
    import torch

    example = None
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
        out, example = out
    if not isinstance(out, torch.nn.Module):
        raise ChipswapError(
            f"factory {one_line(ref.source)} returned {type(out).__name__}, not a torch.nn.Module; "
            "return the "
            "model (or (model, {input_name: example_tensor}); a JAX entry point returns (fn, args))"
        )
    if example is not None:
        bad = [k for k, v in example.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
        if bad:
            raise ChipswapError(
                f"factory {one_line(ref.source)} example inputs must map input names to tensors; "
                f"{one_line(repr(bad[0]), 60)} does not; return (model, {{'x': torch.randn(2, 8)}})"
            )
    return out.eval(), example


def call_factory(ref: ModelRef):
    """Call a PyTorch factory spec; returns (module, example_inputs or None)."""
    return split_factory_output(ref, call_entry(ref))


# ---------------------------------------------------------------------------------------------- .pt2


class _NeedsPickle(BaseException):
    """Raised inside torch.export.load when the archive wants to unpickle something (BaseException: torch's
    own
    `except Exception` fallbacks must not swallow it)."""


@contextlib.contextmanager
def _weights_only() -> Iterator[None]:
    """torch.load forced to weights_only=True; pickle.loads and script-object loads refused."""
    import pickle

    import torch

    real_load = torch.load

    def safe_load(*args: Any, **kwargs: Any) -> Any:
        kwargs["weights_only"] = True
        try:
            return real_load(*args, **kwargs)
        except pickle.UnpicklingError:
            raise _NeedsPickle("it holds pickled Python objects, not plain tensors") from None

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise _NeedsPickle("it holds a pickled Python object")

    saved = (torch.load, pickle.loads, torch._C._pickle_load_obj)
    torch.load = safe_load  # type: ignore[assignment]
    pickle.loads = refuse  # type: ignore[assignment]
    torch._C._pickle_load_obj = refuse
    try:
        yield
    finally:
        torch.load, pickle.loads, torch._C._pickle_load_obj = saved  # type: ignore[assignment]


def load_exported(ref: ModelRef):
    """Load a .pt2; without ref.trust_pickle nothing in it is unpickled (a payload is refused, not run), and
    without ref.trust_native no shared object in it is loaded (chipswap.nativeguard)."""
    import torch

    from chipswap.nativeguard import NativeCodeRefused, no_aoti_load, quiet_torch_export, refuse_native

    where = one_line(ref.path or ref.source)
    if not ref.trust_native:
        refuse_native(ref.path or ref.source)
    guard = quiet_torch_export() if ref.trust_native else no_aoti_load(f"exported program {where}")
    try:
        with guard:
            if ref.trust_pickle:
                with _quiet_transformers():
                    return torch.export.load(ref.path)
            with _weights_only():
                return torch.export.load(ref.path)
    except NativeCodeRefused:
        raise
    except _NeedsPickle as exc:
        raise ChipswapError(
            f"exported program {where} needs unpickling ({one_line(str(exc), 120)}); chipswap loads .pt2 "
            "files with weights-only semantics; re-save it with torch.export.save from plain tensors, "
            "or pass "
            "--trust-pickle if you trust whoever made the file"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a corrupt or foreign archive is bad input
        why = _short(exc)
        if "warnings above" in why:  # torch's own message points at the traceback chipswap keeps quiet
            why = "a record torch needs is missing or damaged"
        raise ChipswapError(
            f"cannot load exported program {where}: {why}; save it with torch.export.save"
        ) from None
