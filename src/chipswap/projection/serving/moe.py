"""MoE weight reads: the share of routed experts a decode step of B tokens touches, and the weights it reads.

What it is for: the physical model (chipswap.projection.serving.physics) and the table-fit time model
(chipswap.projection.platform) count a MoE decode step's weight read with these, so a step of one token reads
about the active parameters and a large batch every expert. Pure: no I/O; imports only the work model.
"""

from __future__ import annotations

from chipswap.projection.work import ModelWork


def touched_expert_share(experts: int, top_k: int, batch: int) -> float:
    """Expected share of a MoE layer's routed experts that a decode step of `batch` tokens touches, routing
    uniform and independent: 1 - (1 - k/E)^B."""
    if experts <= 0:
        return 1.0
    return 1.0 - (1.0 - top_k / experts) ** max(1, batch)


def expert_weights(work: ModelWork) -> float:
    """Routed expert matmul weights of all layers (0 for a dense model)."""
    d = work.dims
    if not d.experts:
        return 0.0
    one = (3 if d.gated_mlp else 2) * d.hidden * d.expert_intermediate
    return float(d.layers * d.experts * one)


def streamed_params_at(work: ModelWork, batch: int) -> float:
    """Matmul weights (+ head) one decode step of `batch` rows reads: on a MoE model only the experts the
    batch touches."""
    total = float((work.streamed_params or work.matmul_params) + work.head_params)
    if not work.is_moe:
        return total
    d = work.dims
    return total - expert_weights(work) * (1.0 - touched_expert_share(d.experts, d.experts_per_token, batch))
