"""Training graphs: the backward pass and the optimizer step as core-ATen ops, for `chipswap check --training`.

Trainium runs fine-tunes, and some ops appear only when gradients flow: the scatter-add that is the gradient of an
embedding or an index, the scatter of a sort/topk backward, dropout's random masks, loss backward. This module
traces one training step of the model in train mode:

    loss = model(**inputs) (its own loss when given labels, else the mean of its first float output)
    grads = torch.autograd.grad(loss, params)
    AdamW update of every parameter (written out of place: the ops a fused optimizer step runs)

with ``make_fx`` and the core-ATen decomposition table, and returns the backward and optimizer nodes as OpUse
records with ``phase`` set. Each backward node carries the module path of the forward module whose autograd node
produced it (stamped by module hooks during the forward), and the source line of that module's forward op it is
the gradient of, when one matches. The forward half is not taken from here: the forward export (``capture_module``,
in train mode) stays the authority for forward ops and data-dependent failures.

torch is imported inside the functions. May not read files or print.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from chipswap.core.rules import OpUse

PHASE_KEY = "chipswap_phase"
_MODULE_KEY = "chipswap_module"


def loss_module(module: Any) -> Any:
    """Wrap a tuple-returning module so it returns one scalar loss (its own loss output when it has one)."""
    import torch

    class Loss(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, **kwargs: Any) -> Any:
            out = self.inner(**kwargs)
            leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
            floats = [t for t in leaves if t.is_floating_point()]
            if not floats:
                raise TypeError("the model returns no floating-point output to take a loss of")
            first = floats[0]
            return first if first.dim() == 0 else first.float().mean()

    return Loss(module)


@contextlib.contextmanager
def _module_stamps(root: Any) -> Iterator[None]:
    """During the forward: the current module stack goes into fx node meta, and every autograd node a module's
    forward creates is stamped with that stack (read back when the backward runs)."""
    import torch
    import torch.fx.traceback as fxt

    names = {id(m): n for n, m in root.named_modules()}
    stack: list[Any] = []

    def meta() -> dict[str, tuple[str, type]]:
        return {f"L{i}": (names.get(id(m), ""), type(m)) for i, m in enumerate(stack)}

    def pre(mod: Any, _args: Any) -> None:
        stack.append(mod)
        fxt.current_meta["nn_module_stack"] = meta()

    def post(mod: Any, _args: Any, out: Any) -> None:
        here = meta()
        todo = [
            t.grad_fn
            for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.grad_fn is not None
        ]
        seen: set[int] = set()
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen or _MODULE_KEY in node.metadata:
                continue
            seen.add(id(node))
            node.metadata[_MODULE_KEY] = here
            todo.extend(f for f, _ in node.next_functions)
        if stack and stack[-1] is mod:
            stack.pop()
        if stack:
            fxt.current_meta["nn_module_stack"] = meta()
        else:
            fxt.current_meta.pop("nn_module_stack", None)

    handles = [m.register_forward_pre_hook(pre) for m in root.modules()]
    handles += [m.register_forward_hook(post) for m in root.modules()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _backward_hooks(loss: Any) -> None:
    """Before each autograd node runs: mark the fx nodes it creates as backward, with its forward module stack."""
    import torch.fx.traceback as fxt

    todo = [loss.grad_fn]
    seen: set[int] = set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))

        def prehook(_grads: Any, node: Any = node) -> None:
            fxt.current_meta[PHASE_KEY] = "backward"
            fxt.current_meta["nn_module_stack"] = node.metadata.get(_MODULE_KEY, {})

        node.register_prehook(prehook)
        todo.extend(f for f, _ in node.next_functions)


def _adamw(params: list[Any], grads: list[Any]) -> list[Any]:
    """One AdamW step, out of place (the arithmetic torch.optim.AdamW runs per parameter)."""
    import torch

    lr, b1, b2, eps, wd = 1e-4, 0.9, 0.999, 1e-8, 0.01
    out = []
    for p, g in zip(params, grads, strict=True):
        if g is None:
            continue
        m = torch.zeros_like(p)
        v = torch.zeros_like(p)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1)
        v_hat = v / (1 - b2)
        out.append(p - lr * (m_hat / (v_hat.sqrt() + eps) + wd * p))
    return out


def training_ops(module: Any, inputs: Mapping[str, Any], *, strip: str | None = None) -> list[OpUse]:
    """All ops of one training step of ``module`` on ``inputs``, each with its phase (forward in train mode,
    backward, optimizer)."""
    import torch
    import torch.fx.traceback as fxt
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functional_call

    from chipswap.capture import quiet
    from chipswap.capture.graph import graph_ops

    lossy = loss_module(module).train()
    params = {k: v for k, v in lossy.named_parameters() if v.requires_grad}
    buffers = dict(lossy.named_buffers())
    if not params:
        return []

    def step(flat_params: dict[str, Any], kwargs: dict[str, Any]) -> Any:
        with _module_stamps(lossy):
            loss = functional_call(lossy, {**flat_params, **buffers}, (), kwargs)
        _backward_hooks(loss)
        names = list(flat_params)
        grads = torch.autograd.grad(loss, [flat_params[n] for n in names], allow_unused=True)
        fxt.current_meta[PHASE_KEY] = "optimizer"
        fxt.current_meta.pop("nn_module_stack", None)
        updated = _adamw([flat_params[n] for n in names], list(grads))
        fxt.current_meta.pop(PHASE_KEY, None)
        return loss, updated

    table = dict(core_aten_decompositions().items())
    with quiet(), fxt.preserve_node_meta():
        gm = make_fx(step, decomposition_table=table, tracing_mode="real", record_stack_traces=True)(
            params, dict(inputs)
        )
    for node in gm.graph.nodes:
        if node.op == "call_function" and PHASE_KEY not in node.meta:
            node.meta[PHASE_KEY] = "forward"
    ops = graph_ops(gm, strip=_loss_strip(strip))
    forward = [o for o in ops if o.phase == "forward"]
    return forward + _locate_backward([o for o in ops if o.phase != "forward"], forward)


def _loss_strip(strip: str | None) -> str:
    return "inner." + (strip or "")


def _locate_backward(late: list[OpUse], forward: list[OpUse]) -> list[OpUse]:
    """A backward op takes the source line of the forward op it is the gradient of: the op in the same module
    whose name starts the backward op's original name (embedding -> embedding_dense_backward), else the last
    located op of that module."""
    by_module: dict[str, list[OpUse]] = {}
    for op in forward:
        if op.location:
            by_module.setdefault(op.module_path, []).append(op)
    out = []
    for op in late:
        if op.phase != "backward" or op.location:
            out.append(op)
            continue
        cands = by_module.get(op.module_path, [])
        grad_of = (op.original or op.kind).split("::", 1)[-1]
        match = next(
            (c for c in cands if grad_of.startswith(c.name.lstrip("_")) or grad_of.startswith(c.name)), None
        )
        match = match or (cands[-1] if cands else None)
        if match is not None:
            op = replace(op, location=match.location, code=match.code, stack=match.stack)
        out.append(op)
    return out
