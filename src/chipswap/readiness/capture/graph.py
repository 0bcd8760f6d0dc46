"""FX graph (core ATen) -> chipswap.readiness.rules.OpUse records, with dtypes, module path and source
location."""

from __future__ import annotations

import operator
import os
import re
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path
from typing import Any

from chipswap.readiness.rules import OpUse

# Symbolic-shape bookkeeping that torch.export inserts for dynamic dims (size reads, range constraints,
# runtime asserts): not model compute, never a finding, and their stack traces point into torch itself.
SYMBOLIC_BOOKKEEPING = frozenset(
    {
        "aten::sym_size",
        "aten::sym_stride",
        "aten::sym_numel",
        "aten::sym_storage_offset",
        "aten::sym_constrain_range",
        "aten::sym_constrain_range_for_size",
        "aten::_assert_scalar",
        "aten::_assert_async",
        "aten::_functional_assert_scalar",
        "aten::_functional_assert_async",
        "python::sym_constrain_range_for_size",
        "python::_assert_scalar",
    }
)
# Top-level packages under site-packages that are library internals, whatever path they were loaded from.
_LIB_PACKAGES = frozenset({"torch", "functorch", "torchgen", "chipswap"})
_BOOKKEEPING_MODULES = ("_empty_nn_module_stack_from_metadata_hook",)

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


@lru_cache(maxsize=1)
def _dirs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(library dirs: torch, chipswap, stdlib), (third-party dirs: site-packages)."""
    import torch

    import chipswap

    lib = [
        str(Path(torch.__file__).parent),
        str(Path(chipswap.__file__).parent),
        sysconfig.get_paths()["stdlib"],
    ]
    third = [p for p in sys.path if p.rstrip(os.sep).endswith(("site-packages", "dist-packages"))]
    third += [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return tuple(lib), tuple(dict.fromkeys(third))


def parse_frames(stack_trace: str | None) -> list[tuple[str, int, str, str]]:
    """(file, line, function, code) frames of an FX stack_trace string, innermost last."""
    if not stack_trace:
        return []
    lines = stack_trace.splitlines()
    frames = []
    for i, ln in enumerate(lines):
        m = _FRAME.search(ln)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.search(lines[i + 1]) else ""
            frames.append((m["file"], int(m["line"]), m["func"], code))
    return frames


@lru_cache(maxsize=4096)
def _place(path: str) -> str:
    """'lib' (torch, chipswap, stdlib), 'third' (site-packages) or 'user'."""
    lib, third = _dirs()

    def under(p: str, dirs: tuple[str, ...]) -> bool:
        return any(p.startswith(d.rstrip(os.sep) + os.sep) for d in dirs if d)

    real = os.path.realpath(path)
    for p in (path, real):
        for marker in ("/site-packages/", "/dist-packages/"):
            if marker in p and p.split(marker, 1)[1].split("/", 1)[0] in _LIB_PACKAGES:
                return "lib"
        if under(p, lib):
            return "lib"
    return "third" if under(path, third) or under(real, third) else "user"


def pick_frame(frames: list[tuple[str, int, str, str]]) -> tuple[str, int, str, str] | None:
    """Innermost frame in user code, else innermost outside torch/chipswap/stdlib (e.g. transformers)."""
    real = [f for f in frames if not f[0].startswith("<")]
    user = [f for f in real if _place(f[0]) == "user"]
    if user:
        return user[-1]
    nonlib = [f for f in real if _place(f[0]) != "lib"]
    return nonlib[-1] if nonlib else None


@lru_cache(maxsize=4096)
def rel(path: str) -> str:
    """Short path: relative to site-packages for installed libraries, to the cwd for user code."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


def _dtype(t: Any) -> str | None:
    d = getattr(t, "dtype", None)
    return str(d).replace("torch.", "") if d is not None else None


def _flat(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        out = []
        for v in x:
            out.extend(_flat(v))
        return out
    if isinstance(x, dict):
        return _flat(list(x.values()))
    return [x]


def _tensor_str(v: Any) -> str:
    shape = getattr(v, "shape", None)
    dt = _dtype(v)
    if shape is None or dt is None:
        return str(v)
    return f"{dt}[{', '.join(str(s) for s in shape)}]"


@lru_cache(maxsize=4096)
def _composite(opname: str) -> bool:
    import torch

    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(opname, "CompositeExplicitAutograd"))
    except Exception:  # pragma: no cover - unknown op names
        return False


def op_kind(target: Any) -> tuple[str, str, bool]:
    """(kind, overload, composite) for an FX call_function target."""
    import torch

    if isinstance(target, torch._ops.OpOverload):
        ns = target.namespace
        name = target._schema.name.split("::", 1)[-1]
        return f"{ns}::{name}", target._overloadname, _composite(target.name())
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order::{target.name()}", "default", False
    if isinstance(target, torch._ops.OpOverloadPacket):
        return f"{target._qualified_op_name}", "default", False
    name = getattr(target, "__name__", None) or str(target)
    if getattr(target, "__module__", None) in ("_operator", "operator") or target in vars(operator).values():
        return f"python::{name}", "default", False
    return f"python::{name}", "default", False


def _unbacked_syms(val: Any) -> set[Any]:
    shape = getattr(val, "shape", None)
    if shape is not None and all(type(d) is int for d in shape):
        return set()  # static tensor: nothing symbolic to look for
    if val is None or isinstance(val, (int, float, bool)):
        return set()
    try:
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        return set(free_unbacked_symbols(val))
    except Exception:
        return set()


def module_types(node: Any) -> tuple[str, ...]:
    """Class names of the modules enclosing a node, outermost first (from nn_module_stack)."""
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for qual, typ in stack.values():
        if str(qual).startswith(_BOOKKEEPING_MODULES):
            continue
        name = typ.__name__ if isinstance(typ, type) else str(typ).rsplit(".", 1)[-1]
        out.append(name.strip("'>"))
    return tuple(out)


@lru_cache(maxsize=4096)
def _schema_args(target: Any) -> tuple[tuple[int, str, Any, bool], ...]:
    """(position, name, default, is_tensor) of an OpOverload's schema arguments."""
    try:
        args = target._schema.arguments
    except AttributeError:
        return ()
    out = []
    for i, a in enumerate(args):
        text = str(a.type)
        is_tensor = "Tensor" in text
        default = a.default_value if a.has_default_value() else None
        out.append((i, a.name, default, is_tensor))
    return tuple(out)


_ATTR_TYPES = (bool, int, float, str)


def const_attrs(node: Any) -> tuple[tuple[str, str], ...]:
    """Scalar constant arguments of an aten node by schema name (accumulate, reduce, dim, ...)."""
    out = []
    for pos, name, default, is_tensor in _schema_args(node.target):
        if is_tensor:
            continue
        if pos < len(node.args):
            value = node.args[pos]
        else:
            value = node.kwargs.get(name, default)
        if isinstance(value, _ATTR_TYPES) and not hasattr(value, "node"):
            out.append((name, str(value)))
    return tuple(out)


def module_path(node: Any, strip: str | None) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    quals = [v[0] for v in stack.values() if not str(v[0]).startswith(_BOOKKEEPING_MODULES)]
    if not quals:
        return ""
    qual = quals[-1]
    qual = re.sub(r"^L\['self'\]\.?", "", qual)
    if strip and (qual == strip.rstrip(".") or qual.startswith(strip)):
        qual = qual[len(strip) :] if qual.startswith(strip) else ""
    return qual


@lru_cache(maxsize=8192)
def _location_of_trace(stack_trace: str) -> tuple[str | None, str, str]:
    """Cached per trace text: the decoder layers of a big model share identical traces."""
    frames = parse_frames(stack_trace)
    f = pick_frame(frames)
    if f is None:
        return None, "", ""
    text = "\n".join(f"{rel(a)}:{b} in {c}" for a, b, c, _ in frames if not a.startswith("<"))
    return f"{rel(f[0])}:{f[1]}", f[3], text


def node_location(node: Any, _depth: int = 0) -> tuple[str | None, str, str]:
    """(file:line, code, frames text) of the innermost user frame for a node; else from its inputs."""
    found = _location_of_trace(node.meta.get("stack_trace") or "")
    if found[0] is not None:
        return found
    if _depth < 3:  # e.g. a torch.cond node: its predicate carries the user line
        for a in node.all_input_nodes:
            if a.op == "call_function":
                loc = node_location(a, _depth + 1)
                if loc[0]:
                    return loc
    return None, "", ""


def is_bookkeeping(kind: str, val: Any) -> bool:
    """Symbolic-shape bookkeeping node (size read, constraint, runtime assert, SymInt arithmetic)."""
    if kind in SYMBOLIC_BOOKKEEPING:
        return True
    if kind.startswith("python::"):
        import torch

        return isinstance(val, (torch.SymInt, torch.SymBool, torch.SymFloat))
    return False


def graph_ops(gm: Any, *, strip: str | None = None) -> list[OpUse]:
    """One OpUse per call_function node of an FX graph module (nested subgraphs of cond/while included)."""
    import torch

    ops: list[OpUse] = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        kind, overload, composite = op_kind(node.target)
        if is_bookkeeping(kind, node.meta.get("val")):
            continue
        data_dtype = ""
        ins = []
        arg_strs = []
        in_syms: set[Any] = set()
        for a in _flat(list(node.args) + list(node.kwargs.values())):
            if isinstance(a, torch.fx.Node):
                v = a.meta.get("val")
                in_syms |= _unbacked_syms(v)
                dt = _dtype(v)
                if dt:
                    ins.append(dt)
                    data_dtype = data_dtype or dt
                arg_strs.append(f"%{a.name}: {_tensor_str(v)}" if dt else f"%{a.name}")
            else:
                arg_strs.append(repr(a))
        val = node.meta.get("val")
        outs = [d for d in (_dtype(v) for v in _flat(val)) if d]
        orig = node.meta.get("original_aten")
        orig_kind = op_kind(orig)[0] if orig is not None else None
        loc, code, frames = node_location(node)
        out_str = ", ".join(_tensor_str(v) for v in _flat(val) if _dtype(v)) or "-"
        ops.append(
            OpUse(
                kind=kind,
                overload=overload,
                in_dtypes=tuple(dict.fromkeys(ins)),
                out_dtypes=tuple(dict.fromkeys(outs)),
                module_path=module_path(node, strip),
                location=loc,
                code=code,
                node=node.name,
                unbacked=bool(_unbacked_syms(val) - in_syms),  # creates a data-dependent size here
                composite=composite,
                original=orig_kind if orig_kind != kind else None,
                signature=f"%{node.name}: {out_str} = {node.target}({', '.join(arg_strs)})",
                stack=frames,
                data_dtype=data_dtype,
                attrs=const_attrs(node) if isinstance(node.target, torch._ops.OpOverload) else (),
                module_types=module_types(node),
                phase=str(node.meta.get("chipswap_phase", "forward")),
            )
        )
        if kind.startswith("higher_order::"):
            for a in node.args:
                if isinstance(a, torch.fx.Node) and a.op == "get_attr":
                    sub = getattr(gm, str(a.target), None)
                    if sub is not None and hasattr(sub, "graph"):
                        ops.extend(graph_ops(sub, strip=strip))
    return ops
