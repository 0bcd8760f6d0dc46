"""JAX / Flax readiness capture: lower an entry point to HLO on the CPU and turn its instructions into OpUse
records.

An entry point is ``module:function`` returning ``(fn, args)`` (positional example arguments, a tuple or
list), ``(fn, kwargs)`` (a dict) or ``(fn, args, kwargs)``. chipswap runs ``jax.jit(fn).lower(*args,
**kwargs)`` on the CPU (nothing is compiled or executed) and reads the HLO text with debug info: every
instruction's opcode, element types, shapes and the source frames JAX recorded for it. Each instruction
becomes ``OpUse(kind="hlo::<opcode>")`` with its user source line; the rule engine gives it a status from the
HLO evidence table (data/neuron_rules/hlo.toml) and applies the same rules as to PyTorch graphs (integer
sort/topk, scatter-add into integers, dynamic dimensions, custom calls neuronx-cc does not recognise, float64,
...).

What lowering itself rejects is sorted in two: a value-dependent size or branch (``jnp.unique`` without
``size=``, ``if x > 0`` on a traced value) is a data-dependent finding at the user's line; anything else (the
function raises, x64 dtypes requested with x64 disabled, arguments that are not arrays) is bad input, one
ChipswapError line.

jax is imported inside the functions. May not write files or print.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.readiness.rules import CaptureIssue, Inventory, OpUse
from chipswap.textsafe import one_line

# HLO element type -> the dtype names the rules use (torch spelling)
HLO_DTYPES = {
    "pred": "bool",
    "s4": "int4",
    "s8": "int8",
    "s16": "int16",
    "s32": "int32",
    "s64": "int64",
    "u4": "uint4",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "c64": "complex64",
    "c128": "complex128",
    "f8e4m3fn": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
    "f8e4m3fnuz": "float8_e4m3fnuz",
    "f8e5m2fnuz": "float8_e5m2fnuz",
    "f8e4m3b11fnuz": "float8_e4m3b11fnuz",
    "f8e4m3": "float8_e4m3",
    "f8e3m4": "float8_e3m4",
    "f8e8m0fnu": "float8_e8m0fnu",
    "f4e2m1fn": "float4_e2m1fn_x2",
}
# HLO ops that hold a scalar computation (to_apply): the region is part of the op, not ops of its own
_REGION_OWNERS = frozenset(
    {
        "reduce",
        "reduce-window",
        "sort",
        "scatter",
        "select-and-scatter",
        "all-reduce",
        "reduce-scatter",
        "map",
    }
)
# instructions that only pass values around (arguments, tuples): not ops, like placeholders in a torch graph
_PLUMBING = frozenset({"parameter", "tuple", "get-tuple-element"})
# packages whose frames are library code, not the user's line
_LIB_PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "chex",
    "numpy",
    "chipswap",
    "ml_dtypes",
    "equinox",
    "haiku",
)

_TYPE = re.compile(r"^(?P<et>[a-z0-9]+)\[(?P<dims>[^\]]*)\]")


@dataclass
class _Instr:
    name: str
    opcode: str
    types: list[str]  # element types of the result (tuple results: each element)
    dynamic: bool
    operands: list[str]
    attrs: dict[str, str]
    frame: int | None
    root: bool
    shape: str


@dataclass
class _Comp:
    name: str
    instrs: list[_Instr]
    entry: bool


# ---------------------------------------------------------------------------------------------- lowering


def lower_entry(fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any], *, name: str) -> str:
    """HLO text (with debug info) of ``jax.jit(fn).lower(*args, **kwargs)``; errors sorted into findings/bad
    input.

    Returns the HLO text; raises _DataDependent for a value-dependent failure, ChipswapError for bad input.
    """
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            lowered = jax.jit(fn).lower(*args, **kwargs)
        except KeyboardInterrupt:
            raise
        except SystemExit as exc:
            raise ChipswapError(
                f"JAX entry point {name} called exit({exc.code!r}) while tracing; fix it"
            ) from None
        except BaseException as exc:  # noqa: BLE001 - sorted below: a finding or bad input
            if _is_value_dependent(exc):
                raise _DataDependent(exc) from None
            loc, code = exc_location(exc)
            where = f" at {loc} ({one_line(code, 100)})" if loc else ""
            raise ChipswapError(
                f"JAX entry point {name} raised {type(exc).__name__} while lowering: "
                f"{one_line(_first_line(exc), 200)}{where}; fix the function or its example arguments"
            ) from None
    for w in caught:
        text = str(w.message)
        if "is not available" in text and ("float64" in text or "int64" in text or "complex128" in text):
            raise ChipswapError(
                f"JAX entry point {name} needs 64-bit types but x64 is disabled ({one_line(text, 140)}); "
                "call "
                "jax.config.update('jax_enable_x64', True) in the entry point, or use 32-bit dtypes"
            )
    try:
        return lowered.as_text(dialect="hlo", debug_info=True)
    except Exception as exc:  # noqa: BLE001 - StableHLO that has no HLO form: dynamic shapes
        raise _Dynamic(exc) from None


class _DataDependent(Exception):
    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


class _Dynamic(Exception):
    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _is_value_dependent(exc: BaseException) -> bool:
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(
        names
        & {
            "ConcretizationTypeError",
            "TracerBoolConversionError",
            "TracerIntegerConversionError",
            "TracerArrayConversionError",
            "NonConcreteBooleanIndexError",
        }
    )


def _is_lib(path: str) -> bool:
    """Frames of jax/flax/numpy, chipswap itself and the standard library are not the user's line."""
    import sysconfig

    import chipswap

    p = path.replace("\\", "/")
    if p.startswith("<"):
        return True
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in p:
            return p.split(marker, 1)[1].split("/", 1)[0] in _LIB_PACKAGES
    own = os.path.dirname(chipswap.__file__).replace("\\", "/") + "/"
    std = sysconfig.get_paths()["stdlib"].replace("\\", "/") + "/"
    return p.startswith(own) or p.startswith(std)


def _rel(path: str) -> str:
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    try:
        return os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    except ValueError:
        return path


def exc_location(exc: BaseException) -> tuple[str | None, str]:
    """Innermost user frame of an exception raised while tracing: ('file:line', code)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _is_lib(f.filename)]
    if not frames:
        return None, ""
    f = frames[-1]
    return f"{_rel(f.filename)}:{f.lineno}", (f.line or "").strip()


# ---------------------------------------------------------------------------------------------- parsing


def _split_top(text: str) -> list[str]:
    """Split on commas at bracket depth 0."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _close(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return len(text) - 1


def _parse_type(t: str) -> tuple[list[str], bool]:
    t = re.sub(r"/\*.*?\*/", "", t).strip()
    if t.startswith("("):
        parts = _split_top(t[1:-1])
        types: list[str] = []
        dyn = False
        for p in parts:
            ts, d = _parse_type(p)
            types += ts
            dyn = dyn or d
        return types, dyn
    m = _TYPE.match(t)
    if not m:
        return ([t.split("[")[0]] if t else []), False
    dims = m.group("dims")
    return [m.group("et")], ("?" in dims or "<=" in dims)


def _parse_instr(line: str) -> _Instr | None:
    s = line.strip()
    root = s.startswith("ROOT ")
    if root:
        s = s[5:]
    if " = " not in s:
        return None
    name, rest = s.split(" = ", 1)
    if rest.startswith("("):
        end = _close(rest, 0)
        type_text, rest = rest[: end + 1], rest[end + 1 :].lstrip()
    else:
        type_text, _, rest = rest.partition(" ")
    m = re.match(r"([a-z][a-z0-9\-]*)\(", rest)
    if not m:
        return None
    opcode = m.group(1)
    open_at = m.end() - 1
    close_at = _close(rest, open_at)
    operands = [o.split()[-1] for o in _split_top(rest[open_at + 1 : close_at]) if o]
    attrs: dict[str, str] = {}
    for part in _split_top(rest[close_at + 1 :].lstrip(", ")):
        if "=" in part:
            k, _, v = part.partition("=")
            attrs[k.strip()] = v.strip()
    frame = None
    meta = attrs.get("metadata", "")
    fm = re.search(r"stack_frame_id=(\d+)", meta)
    if fm:
        frame = int(fm.group(1))
    types, dyn = _parse_type(type_text)
    return _Instr(name, opcode, types, dyn, operands, attrs, frame, root, type_text)


def parse_hlo(text: str) -> tuple[list[_Comp], dict[int, list[tuple[str, int, str]]]]:
    """Computations and stack frames (frame id -> [(file, line, function)], innermost first) of HLO text."""
    files: dict[int, str] = {}
    funcs: dict[int, str] = {}
    locs: dict[int, tuple[int, int, int]] = {}
    parents: dict[int, tuple[int, int]] = {}
    comps: list[_Comp] = []
    section = ""
    cur: _Comp | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = line
            continue
        if cur is None and section and re.match(r"^\d+ ", line):
            num, _, val = line.partition(" ")
            i = int(num)
            if section == "FileNames":
                files[i] = val.strip().strip('"')
            elif section == "FunctionNames":
                funcs[i] = val.strip().strip('"')
            elif section == "FileLocations":
                f = re.search(r"file_name_id=(\d+)", val)
                fn = re.search(r"function_name_id=(\d+)", val)
                ln = re.search(r"\bline=(\d+)", val)
                locs[i] = (
                    int(f.group(1)) if f else 0,
                    int(fn.group(1)) if fn else 0,
                    int(ln.group(1)) if ln else 0,
                )
            elif section == "StackFrames":
                fl = re.search(r"file_location_id=(\d+)", val)
                pa = re.search(r"parent_frame_id=(\d+)", val)
                parents[i] = (int(fl.group(1)) if fl else 0, int(pa.group(1)) if pa else 0)
            continue
        head = re.match(r"^(ENTRY\s+)?(%?[\w.\-]+)\s.*\{\s*$", line)
        if cur is None and head and not line.startswith("HloModule"):
            section = ""
            cur = _Comp(head.group(2).lstrip("%"), [], bool(head.group(1)))
            continue
        if cur is not None:
            if line.strip() == "}":
                comps.append(cur)
                cur = None
                continue
            ins = _parse_instr(line)
            if ins is not None:
                cur.instrs.append(ins)
    # The printed parent_frame_id is the parent's id + 1 (0 and 1 both mean "no parent"): a frame printed as
    # "4 {... parent_frame_id=4}" is called from frame 3.
    frames: dict[int, list[tuple[str, int, str]]] = {}
    for fid in parents:
        chain: list[tuple[str, int, str]] = []
        seen: set[int] = set()
        cur_id = fid
        while cur_id in parents and cur_id not in seen and len(chain) < 64:
            seen.add(cur_id)
            loc_id, parent = parents[cur_id]
            f, fn, ln = locs.get(loc_id, (0, 0, 0))
            chain.append((files.get(f, "?"), ln, funcs.get(fn, "?")))
            cur_id = parent - 1
        frames[fid] = chain
    return comps, frames


# ---------------------------------------------------------------------------------------------- ops


def hlo_inventory(text: str, *, shapes: tuple[str, ...] = ()) -> Inventory:
    """OpUse records for every instruction outside scalar regions; dynamic result shapes become issues."""
    comps, frames = parse_hlo(text)
    by_name = {c.name: c for c in comps}
    regions: set[str] = set()
    inherited: dict[str, int | None] = {}
    for c in comps:
        for ins in c.instrs:
            callees = _callees(ins)
            if ins.opcode in _REGION_OWNERS:
                regions.update(callees)
            else:
                for callee in callees:
                    inherited.setdefault(callee, ins.frame)
    # a nested call chain inherits through every level
    for _ in range(8):
        changed = False
        for c in comps:
            for ins in c.instrs:
                for callee in _callees(ins):
                    if ins.opcode in _REGION_OWNERS:
                        continue
                    parent = ins.frame if ins.frame is not None else inherited.get(c.name)
                    if inherited.get(callee) is None and parent is not None:
                        inherited[callee] = parent
                        changed = True
        if not changed:
            break

    ops: list[OpUse] = []
    issues: list[CaptureIssue] = []
    for c in comps:
        if c.name in regions:
            continue
        types = {ins.name: ins.types for ins in c.instrs}
        # an instruction JAX gave no frame (a constant, a broadcast of one) takes its first user's frame
        user_frame: dict[str, int] = {}
        for ins in reversed(c.instrs):  # users come after what they use
            own = ins.frame if ins.frame is not None else user_frame.get(ins.name)
            if own is not None:
                for o in ins.operands:
                    user_frame.setdefault(o, own)
        for ins in c.instrs:
            if ins.opcode in _PLUMBING:
                continue
            frame = ins.frame if ins.frame is not None else user_frame.get(ins.name, inherited.get(c.name))
            where = _where(frames.get(frame or -1, []))
            in_types = [types.get(o, []) for o in ins.operands]
            in_dtypes = tuple(dict.fromkeys(HLO_DTYPES.get(t, t) for ts in in_types for t in ts))
            out_dtypes = tuple(dict.fromkeys(HLO_DTYPES.get(t, t) for t in ins.types if t not in ("token",)))
            attrs = _attrs(ins, by_name)
            data = HLO_DTYPES.get(in_types[0][0], in_types[0][0]) if in_types and in_types[0] else ""
            ops.append(
                OpUse(
                    kind=f"hlo::{ins.opcode}",
                    in_dtypes=in_dtypes,
                    out_dtypes=out_dtypes,
                    node=ins.name,
                    unbacked=False,
                    signature=f"%{ins.name} = {ins.shape} {ins.opcode}({', '.join(ins.operands)})",
                    data_dtype=data,
                    **where,
                    attrs=attrs,
                )
            )
            if ins.dynamic:
                issues.append(
                    CaptureIssue(
                        kind="dynamic_dim",
                        message=f"HLO {ins.opcode} has a dynamic dimension ({ins.shape}); "
                        "Neuron needs static shapes",
                        op=f"hlo::{ins.opcode}",
                        **{k: v for k, v in where.items() if k != "stack"},
                    )
                )
    method = "jax.jit(...).lower(...) on the CPU, HLO text with debug info"
    return Inventory(ops=tuple(ops), issues=tuple(issues), shapes=shapes, exported=True, method=method)


def _callees(ins: _Instr) -> list[str]:
    out = []
    for key in ("to_apply", "condition", "body", "calls", "true_computation", "false_computation"):
        if key in ins.attrs:
            out.append(ins.attrs[key].lstrip("%"))
    if "branch_computations" in ins.attrs:
        out += [
            b.strip().lstrip("%")
            for b in ins.attrs["branch_computations"].strip("{}").split(",")
            if b.strip()
        ]
    return out


def _attrs(ins: _Instr, comps: Mapping[str, _Comp]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    if ins.opcode == "custom-call":
        out.append(("custom_call_target", ins.attrs.get("custom_call_target", "").strip('"')))
    if ins.opcode in ("scatter", "select-and-scatter"):
        region = comps.get(ins.attrs.get("to_apply", "").lstrip("%"))
        root = next((i for i in region.instrs if i.root), None) if region else None
        out.append(("accumulate", str(root is not None and root.opcode != "parameter")))
    if ins.opcode == "reduce":
        out.append(("variadic", str(len(ins.operands) > 2)))
    if ins.opcode == "compare" and "direction" in ins.attrs:
        out.append(("direction", ins.attrs["direction"]))
    return tuple(out)


def _where(chain: list[tuple[str, int, str]]) -> dict[str, Any]:
    """Where an instruction comes from, as OpUse fields: the innermost user frame of a stack (innermost first)
    as location (file:line), code and module_path (its function), and the frames text as stack."""
    user = [f for f in chain if not _is_lib(f[0])]
    stack = "\n".join(f"{_rel(a)}:{b} in {c}" for a, b, c in reversed(chain))
    if not user:
        return {"location": None, "code": "", "module_path": "", "stack": stack}
    path, line, func = user[0]
    code = linecache.getline(path, line).strip() if os.path.isfile(path) else ""
    return {"location": f"{_rel(path)}:{line}", "code": code, "module_path": func, "stack": stack}


# ---------------------------------------------------------------------------------------------- entry


def split_entry(out: Any, name: str) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """(fn, args, kwargs) from what a JAX entry point returned; anything else is bad input."""
    fix = "return (fn, (arg, ...)) with example arrays, e.g. (model.apply, (params, x))"
    if callable(out) and not isinstance(out, tuple):
        raise ChipswapError(f"JAX entry point {name} returned a function but no example arguments; {fix}")
    if not isinstance(out, tuple) or len(out) not in (2, 3) or not callable(out[0]):
        raise ChipswapError(f"JAX entry point {name} returned {type(out).__name__}, not (fn, args); {fix}")
    fn, rest = out[0], out[1:]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}
    for part in rest:
        if part is None:
            continue
        if isinstance(part, dict):
            kwargs.update(part)
        elif isinstance(part, (tuple, list)):
            args = tuple(part)
        else:
            raise ChipswapError(
                f"JAX entry point {name}: example arguments must be a tuple/list (and optionally a dict), "
                "got "
                f"{type(part).__name__}; {fix}"
            )
    if not args and not kwargs:
        raise ChipswapError(f"JAX entry point {name} returned no example arguments; {fix}")
    return fn, args, kwargs


def arg_shapes(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    """One shape string for the report: the leaves of the example arguments."""
    import jax

    parts = []
    leaves = jax.tree_util.tree_leaves((tuple(args), dict(kwargs)))
    for i, leaf in enumerate(leaves[:12]):
        shape = getattr(leaf, "shape", None)
        dtype = getattr(leaf, "dtype", None)
        if shape is not None:
            # without jax_enable_x64 JAX computes a float64 / int64 argument in 32 bits: report what is
            # checked
            used = jax.dtypes.canonicalize_dtype(dtype) if dtype is not None else dtype
            note = f" (given as {dtype}; x64 is disabled)" if used != dtype else ""
            parts.append(f"arg{i}={'x'.join(str(d) for d in shape) or 'scalar'}:{used}{note}")
    if len(leaves) > 12:
        parts.append(f"... {len(leaves) - 12} more leaves")
    return (",".join(parts),)


def capture_jax(fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any], *, name: str) -> Inventory:
    """Lower a JAX function at its example arguments and return the HLO op inventory (or the failure)."""
    shapes = arg_shapes(args, kwargs)
    try:
        text = lower_entry(fn, args, kwargs, name=name)
    except _DataDependent as dd:
        loc, code = exc_location(dd.exc)
        issue = CaptureIssue(
            kind="data_dependent",
            message=f"{type(dd.exc).__name__}: {one_line(_first_line(dd.exc), 200)}",
            location=loc,
            code=code,
            op=type(dd.exc).__name__,
        )
        return Inventory(ops=(), issues=(issue,), shapes=shapes, exported=False, method="jax lowering failed")
    except _Dynamic as dy:
        msg = str(dy.exc)
        m = re.search(r"([^\s:]+\.py):(\d+):\d+: error: (.*)", msg)
        loc = f"{_rel(m.group(1))}:{m.group(2)}" if m else None
        code = (
            linecache.getline(m.group(1), int(m.group(2))).strip() if m and os.path.isfile(m.group(1)) else ""
        )
        issue = CaptureIssue(
            kind="dynamic_dim",
            message="the lowered program has dynamic dimensions "
            f"({one_line(m.group(3) if m else _first_line(dy.exc), 160)})",
            location=loc,
            code=code,
        )
        return Inventory(
            ops=(), issues=(issue,), shapes=shapes, exported=False, method="StableHLO with dynamic shapes"
        )
    return hlo_inventory(text, shapes=shapes)


def jax_versions() -> dict[str, str]:
    mod = sys.modules.get("jax")
    out = {"jax (capture)": getattr(mod, "__version__", "?")}
    flax = sys.modules.get("flax")
    if flax is not None:
        out["flax (capture)"] = getattr(flax, "__version__", "?")
    return out
