"""Capture a model as a core-ATen graph and turn it into an op inventory for the rule engine.

* ``torch.export`` (non-strict) at each bucket shape, or once with symbolic batch/sequence dims when there are
  several buckets: a symbolic export that succeeds is valid for every shape in the range (any shape-specific
  guard would have raised), so it yields the same findings as one export per bucket.
* ``run_decompositions()`` to core ATen.
* When export fails, ``torch.export.draft_export`` collects every failure (data-dependent guards, missing fake
  kernels) with its file:line, and its graph still gives an op inventory.
* Weightless configs are captured on the meta device (fake tensors), so a 70B config needs no weight memory.
* When neither export nor draft_export gets a graph because one module's code is data-dependent (e.g. MoE
  routing: a loop over the experts a batch hits), that failure is reported at its line with the module it runs
  in, and the module (every instance of its class) is stubbed with a same-shaped placeholder so the rest of
  the model still gets an op inventory. The report says which module was left out.
* A factory's example tensors are used as given (their values, not just their shapes).

torch is imported inside the functions. May not read model files or print; errors are ChipswapError.
"""

from __future__ import annotations

import contextlib
import io
import math
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.readiness.capture.decompose import fast_inventory
from chipswap.readiness.rules import CaptureIssue, Inventory, OpUse
from chipswap.textsafe import one_line

# name -> (dims, dtype string)
InputSpec = Mapping[str, tuple[tuple[int, ...], str]]


@dataclass(frozen=True)
class CaptureOptions:
    symbolic: bool = True  # one symbolic export for several buckets when possible
    decompose: bool = True


def spec_str(spec: InputSpec) -> str:
    return ",".join(f"{k}={'x'.join(str(d) for d in dims)}:{dt}" for k, (dims, dt) in spec.items())


# tensors chipswap materializes on the CPU for one capture: beyond this many elements per input, use --shape
# with smaller sizes (or the meta device, which allocates nothing)
MAX_INPUT_ELEMENTS = 1 << 26


def make_inputs(
    spec: InputSpec,
    *,
    device: str = "cpu",
    vocab_size: int | None = None,
    highs: Mapping[str, int] | None = None,
    example: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Tensors for a shape spec: the factory's ``example`` tensors when their shapes match (used as given),
    else
    deterministic ones: integers below ``highs[name]`` (default vocab_size), all-ones masks, N(0,1) floats."""
    import torch

    gen = torch.Generator().manual_seed(0)
    out = {}
    for name, (dims, dt) in spec.items():
        dtype = getattr(torch, dt, None)
        if not isinstance(dtype, torch.dtype):
            raise ChipswapError(
                f"unknown dtype in shape spec: {dt!r} for {name}; use e.g. int64, float32, bfloat16"
            )
        given = (example or {}).get(name)
        if isinstance(given, torch.Tensor) and tuple(given.shape) == tuple(dims) and given.dtype == dtype:
            out[name] = given.to(device) if device == "meta" else given
            continue
        n = math.prod(dims)
        if device != "meta" and n > MAX_INPUT_ELEMENTS:
            raise ChipswapError(
                f"input {name} of {'x'.join(map(str, dims))} is {n:,} elements, over the "
                f"{MAX_INPUT_ELEMENTS:,} "
                "chipswap materializes for one capture; use smaller --shape sizes"
            )
        if device == "meta":
            out[name] = torch.empty(tuple(dims), dtype=dtype, device="meta")
            continue
        if dtype.is_floating_point or dtype.is_complex:
            t = torch.randn(*dims, generator=gen).to(dtype)
        elif dtype == torch.bool:
            t = torch.ones(*dims, dtype=torch.bool)
        elif "mask" in name:
            t = torch.ones(*dims, dtype=dtype)
        else:
            high = (highs or {}).get(name) or (int(vocab_size) if vocab_size else 100)
            t = torch.randint(0, max(int(high), 1), tuple(dims), generator=gen).to(dtype)
        out[name] = t.to(device)
    return out


def _exc_location(exc: BaseException) -> tuple[str | None, str]:
    from chipswap.readiness.capture.graph import pick_frame, rel

    frames = [
        (f.filename, f.lineno or 0, f.name, (f.line or "").strip())
        for f in traceback.extract_tb(exc.__traceback__)
    ]
    f = pick_frame(frames)
    return (f"{rel(f[0])}:{f[1]}", f[3]) if f else (None, "")


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return one_line(text if len(text) <= limit else text[: limit - 3] + "...", limit)


def check_forward(module: Any, inputs: Mapping[str, Any]) -> None:
    """Run the model once eagerly; a forward that raises is a user error (exit 2), not a readiness finding.

    A data-dependent model runs fine eagerly, so this never hides a finding: only code that fails on real
    inputs
    (wrong shapes, a bug, an exit) stops here.
    """
    import torch

    from chipswap.deadline import DeadlinePassed

    try:
        with torch.no_grad():
            module(**inputs)
    except (KeyboardInterrupt, DeadlinePassed):
        raise
    except SystemExit as exc:
        raise ChipswapError(
            f"the model's forward called exit({exc.code!r}); a model must not exit the process"
        ) from None
    except MemoryError:
        raise ChipswapError(
            "the model's forward ran out of memory on the example inputs; use smaller --shape sizes"
        ) from None
    except BaseException as exc:  # noqa: BLE001 - user code: anything it raises is bad input, exit 2
        loc, code = _exc_location(exc)
        where = f" at {loc} ({one_line(code, 120)})" if loc else ""
        raise ChipswapError(
            f"the model's forward raised {type(exc).__name__}: {_one_line(exc, 200)}{where}; "
            "fix the model or the input shapes (--shape)"
        ) from None


def is_data_dependent(exc: BaseException) -> bool:
    """A tracing failure caused by a value-dependent size or branch (not a bug or an unsupported
    construct)."""
    names = {type(e).__name__ for e in _chain(exc)}
    if names & {"GuardOnDataDependentSymNode", "DynamicOutputShapeException", "DataDependentOutputException"}:
        return True
    text = " ".join(str(e) for e in _chain(exc)).lower()
    return "data-dependent" in text or "data dependent" in text


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and len(out) < 8:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def failing_module(exc: BaseException, root: Any) -> tuple[str, Any] | None:
    """(qualified name, module) of the innermost model module whose code raised ``exc`` (from its
    traceback)."""
    import torch

    names = {id(m): n for n, m in root.named_modules()}
    found = None
    for e in _chain(exc):
        for frame, _ in traceback.walk_tb(e.__traceback__):
            obj = frame.f_locals.get("self")
            if (
                isinstance(obj, torch.nn.Module)
                and id(obj) in names
                and obj is not root
                and not type(obj).__module__.startswith("torch.")
            ):
                found = (names[id(obj)], obj)
        if found:
            return found
    return None


@contextlib.contextmanager
def quiet():
    """Silence torch.export's own stdout/stderr dumps and warnings; chipswap reports the failures itself."""
    import logging
    import warnings

    loggers = [logging.getLogger(n) for n in ("torch", "torch.export", "torch._dynamo", "torch.fx")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    sink = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            warnings.simplefilter("ignore")
            yield sink
    finally:
        for lg, lvl in zip(loggers, levels, strict=True):
            lg.setLevel(lvl)


def _dynamic_shapes(specs: Sequence[InputSpec]) -> dict[str, dict[int, Any]] | None:
    """Dims that vary across the shape sets -> torch.export Dims (shared by size pattern)."""
    import torch

    first = specs[0]
    if any(set(s) != set(first) or any(len(s[k][0]) != len(first[k][0]) for k in s) for s in specs):
        return None
    dims: dict[tuple[int, int], Any] = {}
    out: dict[str, dict[int, Any]] = {}
    for name in first:
        rank = len(first[name][0])
        for axis in range(rank):
            values = tuple(s[name][0][axis] for s in specs)
            if len(set(values)) == 1:
                continue
            lo, hi = min(values), max(values)
            key = values  # inputs whose dim follows the same pattern share one symbol
            if key not in dims:
                dims[key] = torch.export.Dim(f"d{len(dims)}", min=max(lo, 2), max=hi) if lo >= 2 else None
            if dims[key] is None:
                return None
            out.setdefault(name, {})[axis] = dims[key]
    return out or None


def _fit_signature(module: Any, dyn: dict[str, Any]) -> dict[str, Any]:
    """dynamic_shapes keyed the way torch.export wants for this forward (a **kwargs forward nests them)."""
    import inspect

    params = inspect.signature(module.forward).parameters
    if all(n in params for n in dyn):
        return dyn
    out: dict[str, Any] = {}
    for name, p in params.items():
        if p.kind == p.VAR_KEYWORD:
            out[name] = dyn
        elif p.kind == p.VAR_POSITIONAL:
            continue  # no positional inputs are passed
        else:
            out[name] = None
    return out


def _issues_from_report(report: Any, strip: str | None) -> list[CaptureIssue]:
    from chipswap.readiness.capture.graph import pick_frame, rel

    issues = []
    names = getattr(report, "str_to_filename", {}) or {}
    for f in getattr(report, "failures", []):
        ftype = str(f.failure_type)
        data = f.data or {}
        frames = [
            (
                str(names.get(fr.get("filename"), fr.get("filename"))),
                int(fr.get("line", 0)),
                fr.get("name", ""),
                fr.get("loc") or "",
            )
            for fr in data.get("user_stack", []) or []
        ]
        fr = pick_frame(frames)
        loc = f"{rel(fr[0])}:{fr[1]}" if fr else None
        code = fr[3] if fr else ""
        if ftype == "DATA_DEPENDENT_ERROR":
            kind, msg = (
                "data_dependent",
                f"value-dependent expression {data.get('expr')} cannot be decided at trace time",
            )
        elif ftype == "GUARD_ADDED":
            kind, msg = "guard", f"shape guard added: {data.get('expr')}"
        elif ftype == "MISSING_FAKE_KERNEL":
            kind, msg = "missing_fake_kernel", f"custom op {data.get('op')} has no fake (meta) kernel"
        elif ftype == "MISMATCHED_FAKE_KERNEL":
            kind, msg = (
                "mismatched_fake_kernel",
                f"custom op {data.get('op')}: fake kernel mismatch ({data.get('reason')})",
            )
        else:
            kind, msg = "export_error", f"{ftype}: {data}"
        issues.append(
            CaptureIssue(kind=kind, message=msg, location=loc, code=code, op=str(data.get("op", "") or ""))
        )
    return issues


def capture_module(
    module: Any,
    specs: Sequence[InputSpec],
    *,
    device: str = "cpu",
    vocab_size: int | None = None,
    strip: str | None = None,
    run_eager: bool = True,
    options: CaptureOptions | None = None,
    highs: Mapping[str, int] | None = None,
    example: Mapping[str, Any] | None = None,
) -> Inventory:
    """Export ``module`` at the shape sets in ``specs`` and return the op inventory.

    example: the factory's own tensors, used as given wherever a shape set matches their shapes.
    """
    opts = options or CaptureOptions()
    if not specs:
        raise ChipswapError(
            "no input shapes to capture with; pass --shape NAME=BxS:DTYPE or --plan plan.json"
            " (plan files come from chipswap shapes --out plan.json)"
        )
    inputs = [
        make_inputs(s, device=device, vocab_size=vocab_size, highs=highs, example=example) for s in specs
    ]
    from dataclasses import replace as _replace

    from chipswap.readiness.capture.distributions import watch_distribution_validation

    validating: list[CaptureIssue] = []
    with watch_distribution_validation(validating):
        if run_eager and device != "meta":
            check_forward(module, inputs[0])
        inv = _capture(module, specs, inputs, device=device, strip=strip, opts=opts, isolate_rounds=3)
    if validating:
        inv = _replace(inv, issues=tuple(inv.issues) + tuple(validating))
    return _issue_modules_from_ops(inv)


def _capture(
    module: Any,
    specs: Sequence[InputSpec],
    inputs: list[dict[str, Any]],
    *,
    device: str,
    strip: str | None,
    opts: CaptureOptions,
    isolate_rounds: int,
) -> Inventory:
    import torch

    shape_strs = tuple(spec_str(s) for s in specs)
    # Shape sets with the same size-1 dims form a group; a group of 3+ is exported once with symbolic dims
    # (every varying dim is >= 2 inside a group, so no 0/1 specialization); the rest once per shape set.
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(specs):
        key = tuple((n, ax) for n, (dims, _) in sorted(s.items()) for ax, d in enumerate(dims) if d == 1)
        groups.setdefault(key, []).append(i)

    first_error: BaseException | None = None
    ops: list[OpUse] = []
    n_symbolic = n_concrete = 0
    decomp = "run_decompositions (core ATen)"
    try:
        for idx in groups.values():
            eps = None
            dyn = _dynamic_shapes([specs[i] for i in idx]) if opts.symbolic and len(idx) > 2 else None
            if dyn:
                big = max(idx, key=lambda i: sum(math.prod(d) for d, _ in specs[i].values()))
                try:
                    with quiet():
                        eps = [
                            torch.export.export(
                                module,
                                (),
                                inputs[big],
                                dynamic_shapes=_fit_signature(module, dyn),
                                strict=False,
                            )
                        ]
                    n_symbolic += 1
                except Exception:  # noqa: BLE001 - fall back to one export per shape set
                    eps = None
            if eps is None:
                with quiet():
                    eps = [torch.export.export(module, (), inputs[i], strict=False) for i in idx]
                n_concrete += len(idx)
            for ep in eps:
                if opts.decompose and not dyn:
                    try:
                        ops.extend(fast_inventory(ep, strip=strip))
                        decomp = "core-ATen decomposition once per distinct op"
                        continue
                    except Exception:  # noqa: BLE001 - symbolic shapes or an odd op: take the full re-trace
                        pass
                ops.extend(inventory_ops(ep, strip=strip, decompose=opts.decompose))
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - any export failure goes to the draft-export path
        first_error = exc
    if first_error is None:
        parts = []
        if n_symbolic:
            parts.append(f"{n_symbolic} symbolic export(s) covering {len(specs) - n_concrete} shape sets")
        if n_concrete:
            parts.append(f"{n_concrete} shape set(s) exported one by one")
        method = f"torch.export (non-strict) + {decomp}, " + ", ".join(parts)
        if len(specs) > 1:
            ops = _dedupe_ops(ops)
        return Inventory(ops=tuple(ops), issues=(), shapes=shape_strs, exported=True, method=method)

    # a data-dependent failure inside one submodule (MoE routing): report it there and capture the rest;
    # otherwise draft_export collects every failure with its line and still gives a graph
    isolated = _isolate(
        module, specs, inputs, first_error, device=device, strip=strip, opts=opts, rounds=isolate_rounds
    )
    if isolated is not None:
        return isolated
    return _draft(module, inputs[0], first_error, strip=strip, shapes=shape_strs, decompose=opts.decompose)


def _issue_modules_from_ops(inv: Inventory) -> Inventory:
    """Give a capture issue the module path and classes of the ops on its source line (draft-export issues
    carry only a file:line)."""
    if not inv.issues:
        return inv
    by_loc: dict[str, OpUse] = {}
    for op in inv.ops:
        if op.location and op.module_path and op.location not in by_loc:
            by_loc[op.location] = op
    issues = []
    for issue in inv.issues:
        op = by_loc.get(issue.location or "")
        if op is not None and not issue.module_path and not issue.module_types:
            issue = replace(issue, module_path=op.module_path, module_types=op.module_types)
        issues.append(issue)
    return replace(inv, issues=tuple(issues))


def _dedupe_ops(ops: list[OpUse]) -> list[OpUse]:
    """Per-shape exports repeat the graph; keep one copy of each (node, op, location): counts of one graph."""
    seen = set()
    out = []
    for o in ops:
        key = (o.node, o.kind, o.location, o.module_path, o.in_dtypes, o.out_dtypes, o.unbacked)
        if key in seen:
            continue
        seen.add(key)
        out.append(o)
    return out


def _strip(qual: str, strip: str | None) -> str:
    if strip and qual.startswith(strip):
        return qual[len(strip) :]
    return qual


def _record_outputs(module: Any, cls: type, inputs: Mapping[str, Any]) -> dict[int, Any]:
    """Output structure ((shape, dtype) leaves) of every instance of ``cls`` in one eager forward."""
    import torch

    seen: dict[int, Any] = {}

    def hook(mod: Any, _args: Any, out: Any) -> None:
        if id(mod) not in seen:
            seen[id(mod)] = torch.utils._pytree.tree_map(
                lambda t: (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else t, out
            )

    handles = [m.register_forward_hook(hook) for m in module.modules() if type(m) is cls]
    try:
        with torch.no_grad():
            module(**inputs)
    except Exception:  # noqa: BLE001 - then the stub falls back to "same shape as the first input"
        pass
    finally:
        for h in handles:
            h.remove()
    return seen


def _stub(template: Any) -> Any:
    """A forward that returns zeros shaped like the recorded output (or like its first tensor input)."""
    import torch

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
        first = next((a for a in tensors if a.is_floating_point()), tensors[0])
        if template is None:
            return torch.zeros_like(first)
        return torch.utils._pytree.tree_map(
            lambda leaf: (
                first.new_zeros(leaf[0], dtype=leaf[1])
                if isinstance(leaf, tuple) and len(leaf) == 2 and isinstance(leaf[1], torch.dtype)
                else leaf
            ),
            template,
            is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], torch.dtype),
        )

    return forward


def _isolate(
    module: Any,
    specs: Sequence[InputSpec],
    inputs: list[dict[str, Any]],
    error: BaseException,
    *,
    device: str,
    strip: str | None,
    opts: CaptureOptions,
    rounds: int,
) -> Inventory | None:
    """A data-dependent failure inside one module: report it there, stub that module class, capture the
    rest."""
    if rounds <= 0 or not is_data_dependent(error):
        return None
    found = failing_module(error, module)
    if found is None:
        return None
    qual, bad = found
    cls = type(bad)
    loc, code = _exc_location(error)
    instances = [(n, m) for n, m in module.named_modules() if type(m) is cls]
    issue = CaptureIssue(
        kind="data_dependent",
        message=f"{cls.__name__} has a size or branch that depends on tensor values "
        f"({type(error).__name__}: {_one_line(error, 160)})",
        location=loc,
        code=code,
        module_path=_strip(qual, strip),
        module_types=(cls.__name__,),
        op=cls.__name__,
    )
    with stubbed(module, (cls.__name__,), inputs[0], device=device):
        rest = _capture(
            module, specs, inputs, device=device, strip=strip, opts=opts, isolate_rounds=rounds - 1
        )
    names = ", ".join(_strip(n, strip) for n, _ in instances[:3]) + (" ..." if len(instances) > 3 else "")
    note = (
        f"{cls.__name__} ({len(instances)} instance(s): {names}) is left out of the op inventory: "
        "its code is "
        "data-dependent; it was replaced by a same-shaped placeholder to capture the rest of the model"
    )
    return replace(
        rest,
        issues=(issue, *rest.issues),
        exported=False,
        method=f"{rest.method}; {cls.__name__} stubbed",
        notes=(note, *rest.notes),
        stubbed=(cls.__name__, *rest.stubbed),
    )


@contextlib.contextmanager
def stubbed(
    module: Any, class_names: Sequence[str], inputs: Mapping[str, Any], *, device: str
) -> Iterator[None]:
    """Every instance of the named module classes answers with a same-shaped placeholder (its outputs recorded
    by one eager forward at `inputs`, off the meta device) until the block ends: how the main capture steps
    over a data-dependent module, and how the growth probe prepares the model the same way."""
    import types

    saved: dict[int, Any] = {}
    patched = []
    for name in class_names:
        instances = [m for m in module.modules() if type(m).__name__ == name]
        if not instances:
            continue
        cls = type(instances[0])
        recorded = _record_outputs(module, cls, inputs) if device != "meta" else {}
        for m in instances:
            saved[id(m)] = m.__dict__.get("forward")
            m.forward = types.MethodType(_stub(recorded.get(id(m))), m)
            patched.append(m)
    try:
        yield
    finally:
        for m in patched:
            old = saved[id(m)]
            if old is None:
                m.__dict__.pop("forward", None)
            else:
                m.forward = old


def _draft(
    module: Any,
    inputs: dict[str, Any],
    error: BaseException | None,
    *,
    strip,
    shapes,
    decompose,
) -> Inventory:
    import torch

    issues: list[CaptureIssue] = []
    try:
        with quiet():
            ep = torch.export.draft_export(module, (), inputs)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001
        err = exc if error is None else error
        loc, code = _exc_location(err)
        found = failing_module(err, module)
        issues.append(
            CaptureIssue(
                kind="data_dependent" if is_data_dependent(err) else "export_error",
                message=f"{type(err).__name__}: {_one_line(err)}",
                location=loc,
                code=code,
                module_path=_strip(found[0], strip) if found else "",
                module_types=(type(found[1]).__name__,) if found else (),
            )
        )
        return Inventory(ops=(), issues=tuple(issues), shapes=shapes, exported=False, method="export failed")
    report = getattr(ep, "_report", None)
    issues.extend(_issues_from_report(report, strip))
    if not issues and error is not None:
        loc, code = _exc_location(error)
        issues.append(
            CaptureIssue(
                kind="export_error",
                message=f"{type(error).__name__}: {_one_line(error)}",
                location=loc,
                code=code,
            )
        )
    ops = inventory_ops(ep, strip=strip, decompose=decompose)
    method = "torch.export failed; torch.export.draft_export graph + report (core ATen)"
    return Inventory(ops=tuple(ops), issues=tuple(issues), shapes=shapes, exported=False, method=method)


def inventory_ops(ep: Any, *, strip: str | None = None, decompose: bool = True) -> list[OpUse]:
    from chipswap.readiness.capture.graph import graph_ops

    if decompose:
        try:
            with quiet():
                ep = ep.run_decompositions()
        except Exception:  # noqa: BLE001 - keep the undecomposed graph rather than lose the inventory
            pass
    return graph_ops(ep.graph_module, strip=strip)


def capture_exported(ep: Any, *, shapes: tuple[str, ...] = ()) -> Inventory:
    """Inventory of a saved ExportedProgram; dims left symbolic without --shape are dynamic-dim issues."""
    from torch.fx.experimental.symbolic_shapes import free_symbols

    issues = []
    if not shapes:
        for node in ep.graph.nodes:
            if node.op != "placeholder" or node.name not in set(ep.graph_signature.user_inputs):
                continue
            val = node.meta.get("val")
            if val is not None and hasattr(val, "shape") and free_symbols(val):
                dims = [str(d) for d in val.shape]
                issues.append(
                    CaptureIssue(
                        kind="dynamic_dim",
                        message=f"input {node.name} has dynamic dims [{', '.join(dims)}]; "
                        "Neuron needs static shapes",
                        op=node.name,
                    )
                )
    ops = inventory_ops(ep)
    method = "saved ExportedProgram (.pt2)"
    return Inventory(ops=tuple(ops), issues=tuple(issues), shapes=shapes, exported=True, method=method)
