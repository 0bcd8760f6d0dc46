"""Training graphs: the backward pass and the optimizer step as core-ATen ops (`chipswap check --training`).

Trainium runs fine-tunes, and some ops appear only when gradients flow: the scatter-add that is the gradient
of an embedding or an index, the scatter of a sort/topk backward, dropout's random masks, loss backward. This
module traces one training step of the model in train mode:

    loss = model(**inputs) (its own loss when given labels, else the mean of its first float output)
    grads = torch.autograd.grad(loss, params)
    AdamW update (written out of place: the arithmetic of torch.optim.AdamW), traced once per parameter dtype

with ``make_fx`` and the core-ATen decomposition table, and returns the backward and optimizer nodes as OpUse
records with ``phase`` set. Each backward node carries the module path of the forward module whose autograd
node produced it (stamped by module hooks during the forward), and the source line of that module's forward op
it is the gradient of, when one matches. The forward half is not taken from here: the forward export
(``capture_module``, in train mode) stays the authority for forward ops and data-dependent failures.

torch is imported inside the functions. May not read files or print.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from chipswap.readiness.rules import OpUse

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


def _set_phase(phase: str | None) -> None:
    """fx copies only a few meta keys onto new nodes; "custom" is one of them."""
    import torch.fx.traceback as fxt

    custom = dict(fxt.current_meta.get("custom") or {})
    if phase is None:
        custom.pop(PHASE_KEY, None)
    else:
        custom[PHASE_KEY] = phase
    fxt.current_meta["custom"] = custom


def _backward_hooks(loss: Any) -> None:
    """Before each autograd node runs: mark the fx nodes it creates as backward, with its forward
    module stack."""
    import torch.fx.traceback as fxt

    todo = [loss.grad_fn]
    seen: set[int] = set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))

        def prehook(_grads: Any, node: Any = node) -> None:
            _set_phase("backward")
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
    from torch.func import functional_call
    from torch.fx.experimental.proxy_tensor import make_fx

    from chipswap.readiness.capture import quiet
    from chipswap.readiness.capture.graph import graph_ops

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
        _set_phase("optimizer")
        fxt.current_meta.pop("nn_module_stack", None)
        # the update is the same arithmetic for every parameter of a dtype: trace it once per dtype
        one: dict[Any, int] = {}
        for i, n in enumerate(names):
            if grads[i] is not None:
                one.setdefault(flat_params[n].dtype, i)
        updated = _adamw([flat_params[names[i]] for i in one.values()], [grads[i] for i in one.values()])
        _set_phase(None)
        return loss, updated

    table = dict(core_aten_decompositions().items())
    # model code takes its traceable path (as under torch.export) when it asks whether it is being compiled:
    # no value reads for mask shortcuts, which would fail on the meta device
    compiling = getattr(torch.compiler, "_compile_session_context", contextlib.nullcontext)
    with quiet(), fxt.preserve_node_meta(), compiling():
        # real mode: values are concrete, so a mask check that reads a value is baked in (the forward export
        # already reported every data-dependent construct; this trace is for the backward's ops)
        gm = make_fx(
            step,
            decomposition_table=table,
            tracing_mode="real",
            record_stack_traces=True,
            _error_on_data_dependent_ops=False,
        )(params, dict(inputs))
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta[PHASE_KEY] = (node.meta.get("custom") or {}).get(PHASE_KEY, "forward")
    ops = [_functional_name(o) for o in graph_ops(gm, strip=_loss_strip(strip)) if o.kind not in _BAKED]
    forward = [o for o in ops if o.phase == "forward"]
    return forward + _locate_backward([o for o in ops if o.phase != "forward"], forward)


# value reads that real-mode tracing records where the model reads a tensor value (a mask check): the forward
# export is the authority on data-dependence, so these are not ops of the training step
_BAKED = frozenset({"aten::_local_scalar_dense", "aten::item", "aten::_assert_async", "aten::_assert_scalar"})


def _functional_name(op: OpUse) -> OpUse:
    """make_fx keeps in-place ops (add_, mul_) that torch.export would have functionalized: use the functional
    op's name, which is what the compiler sees after functionalization."""
    import torch

    name = op.name
    if op.namespace != "aten" or not name.endswith("_") or name.startswith("_") or name.endswith("__"):
        return op
    packet = getattr(torch.ops.aten, name[:-1], None)
    if packet is None:
        return op
    overloads = packet.overloads()
    overload = (
        op.overload if op.overload in overloads else ("default" if "default" in overloads else op.overload)
    )
    composite = op.composite
    if overload in overloads:
        composite = bool(
            torch._C._dispatch_has_kernel_for_dispatch_key(
                getattr(packet, overload).name(), "CompositeExplicitAutograd"
            )
        )
    return replace(
        op, kind=f"aten::{name[:-1]}", overload=overload, composite=composite, original=op.original or op.kind
    )


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
