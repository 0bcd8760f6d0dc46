"""Core-ATen op inventory without re-tracing the whole program (the fast path for big weightless configs).

``ExportedProgram.run_decompositions()`` re-traces every node of the graph; for a 70B config (80 identical
decoder layers, ~16k nodes) that re-trace costs more than the export itself. The inventory only needs, for
each node, the core-ATen ops it becomes. So each distinct (op, argument shapes/dtypes, constant arguments) is
decomposed once, with the same core-ATen decomposition table, by tracing that single op on meta tensors; every
node like it reuses the result and keeps its own module path and source line. Used whenever every shape is
static (one export per bucket shape, on the meta device or the CPU); tests check it gives the same op counts
as run_decompositions on small models.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from chipswap.readiness.rules import OpUse

# Where an op use sits in the model (its module, phase and source line): a decomposed op keeps its parent's.
WHERE_FIELDS = ("module_path", "module_types", "phase", "location", "code", "stack")


class NotStatic(Exception):
    """A node has symbolic shapes; use run_decompositions instead."""


def _meta_like(v: Any) -> Any:
    import torch

    if isinstance(v, torch.Tensor):
        if any(not isinstance(s, int) for s in v.shape):
            raise NotStatic
        if any(not isinstance(s, int) for s in v.stride()):
            raise NotStatic
        return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device="meta")
    return v


def _key_part(v: Any) -> Any:
    import torch

    if isinstance(v, torch.fx.Node):
        val = v.meta.get("val")
        if isinstance(val, torch.Tensor):
            return ("T", tuple(val.shape), tuple(val.stride()), str(val.dtype))
        return ("N", repr(val))
    if isinstance(v, (list, tuple)):
        return tuple(_key_part(x) for x in v)
    return ("C", repr(v))


def _materialize(v: Any) -> Any:
    import torch

    if isinstance(v, torch.fx.Node):
        val = v.meta.get("val")
        if isinstance(val, torch.Tensor):
            return _meta_like(val)
        if isinstance(val, (int, float, bool)):
            return val
        raise NotStatic
    if isinstance(v, (list, tuple)):
        return type(v)(_materialize(x) for x in v)
    if isinstance(v, torch.device):
        return torch.device("meta")  # the op is traced on meta tensors whatever device it ran on
    return v


def _decomposed_ops(target: Any, args: tuple, kwargs: dict, table: Any) -> list[OpUse] | None:
    """Core-ATen ops ``target(*args)`` becomes, or None when it is already core (no decomposition applies)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from chipswap.readiness.capture.graph import graph_ops

    margs = _materialize(args)
    mkwargs = {k: _materialize(v) for k, v in kwargs.items()}
    flat, spec = torch.utils._pytree.tree_flatten((margs, mkwargs))
    tensor_pos = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]

    def fn(*tensors):
        leaves = list(flat)
        for i, t in zip(tensor_pos, tensors, strict=True):
            leaves[i] = t
        a, k = torch.utils._pytree.tree_unflatten(leaves, spec)
        return target(*a, **k)

    gm = make_fx(fn, decomposition_table=table, tracing_mode="real")(*[flat[i] for i in tensor_pos])
    return graph_ops(gm)


def _functional(target: Any) -> Any:
    """In-place aten op -> its functional variant (run_decompositions functionalizes the graph)."""
    import torch

    name = target._schema.name.split("::", 1)[-1]
    if not name.endswith("_") or name.startswith("_"):
        return target
    packet = getattr(torch.ops.aten, name[:-1], None)
    return getattr(packet, target._overloadname, target) if packet is not None else target


def fast_inventory(ep: Any, *, strip: str | None = None) -> list[OpUse]:
    """Same op inventory as graph_ops(ep.run_decompositions().graph_module), for static-shape programs."""
    import torch
    from torch._decomp import core_aten_decompositions

    from chipswap.readiness.capture.graph import graph_ops

    table = dict(core_aten_decompositions().items())
    gm = ep.graph_module
    gm.graph.eliminate_dead_code()  # run_decompositions drops unused nodes too
    base = graph_ops(gm, strip=strip)  # one OpUse per call_function node, in graph order
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    if len(nodes) != len(base):  # nested subgraphs (cond/while): not handled here
        raise NotStatic
    cache: dict[Any, list[OpUse] | None] = {}
    out: list[OpUse] = []
    for node, use in zip(nodes, base, strict=True):
        target = node.target
        if not isinstance(target, torch._ops.OpOverload) or use.namespace != "aten" or use.unbacked:
            out.append(use)
            continue
        target = _functional(target)
        is_core = torch.Tag.core in target.tags and target not in table
        if is_core:
            kind = "aten::" + target._schema.name.split("::", 1)[-1]
            out.append(use if kind == use.kind else replace(use, kind=kind, overload=target._overloadname))
            continue
        key = (target, _key_part(node.args), _key_part(tuple(sorted(node.kwargs.items()))))
        if key not in cache:
            cache[key] = _decomposed_ops(target, node.args, dict(node.kwargs), table)
        sub = cache[key]
        if not sub:
            rets = target._schema.returns
            if rets and rets[0].alias_info is None:
                # a non-view op that returns its input unchanged (eval-mode dropout, contiguous on a
                # contiguous tensor): functionalization gives it a copy, as run_decompositions does
                out.append(
                    replace(
                        use, kind="aten::clone", overload="default", node=f"{node.name}.0", original=use.kind
                    )
                )
            continue
        for i, s in enumerate(sub):
            out.append(
                replace(
                    s,
                    **{k: getattr(use, k) for k in WHERE_FIELDS},
                    node=f"{node.name}.{i}",
                    original=use.kind if s.kind != use.kind else None,
                )
            )
    return out
