"""MoE weight reads for the physical model: views of the one definition in chipswap.projection.work.

What it is for: the physical model (serving.physics) counts a MoE decode step's weight read and a prefill's
routed-expert FLOPs with these; the expert count itself (E x (1 - (1 - k/E)^B), MoE layers only, shared
experts always read) is work.expected_experts_touched / work.decode_weight_params, which the table-fit time
model (projection.platform) uses too. Pure: no I/O; imports only the work model.
"""

from __future__ import annotations

from chipswap.projection.work import ModelWork, decode_weight_params, expected_experts_touched


def touched_expert_share(experts: int, top_k: int, batch: int) -> float:
    """Expected share of a MoE layer's routed experts that a decode step of `batch` tokens touches."""
    if experts <= 0:
        return 1.0
    return expected_experts_touched(experts, top_k, max(1, batch)) / experts


def expert_weights(work: ModelWork) -> float:
    """Routed expert matmul weights of all MoE layers (0 for a dense model)."""
    return float(work.dims.experts * work.expert_params) if work.is_moe else 0.0


def streamed_params_at(work: ModelWork, batch: int) -> float:
    """Matmul weights (+ head) one decode step of `batch` rows reads: on a MoE model only the experts the
    batch touches."""
    return decode_weight_params(work, max(1, batch))
