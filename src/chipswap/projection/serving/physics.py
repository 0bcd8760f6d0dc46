"""The one serving time model: prefill and decode seconds of one replica from the work the model does, the
chip's spec sheet and a handful of fitted physical parameters per chip family; the serving stack's
scheduling as data. Every chip family and stack goes through `phys_poly` (the Transformers NeuronX-era SDK
fit and the NVIDIA table fit are the same form with their own parameters, chipswap.projection.platform).

What it is for: the layout search (chipswap.projection.layouts) builds each layout's service times here; the
fleet simulator gets them through the same LlmPoly (chipswap.projection.projected.ProjectedServiceTimes);
the fit (chipswap.projection.fitting.physfit) calibrates PARAMS on published rows across shapes through the
same functions, so a held-out error is the error users see.

One replica of `tp` devices (logical NeuronCores or GPUs), L prompt tokens, B sequences, context C:

  prefill(1, L) = prefill_fixed_s + collective latency + weights / (tp x HBM x bw_eff)
                  + L x [linear FLOPs / (tp x peak x mm_eff(T)) + KV write / (HBM x kv_bw_eff)
                         + all-reduce volume / its rate]
                  + L^2 x causal attention FLOPs per device / (peak x attn_eff(L))
  decode(B, C)  = step_fixed_s + collective latency + weights read by B rows / (tp x HBM x bw_eff)
                  + B x [step_row_s + linear FLOPs / (tp x peak x mm_eff) + all-reduce volume / rate]
                  + B x C x [KV bytes read per device / (HBM x kv_bw_eff)
                             + attention FLOPs / (peak x attn_eff)]
  KV bytes read = the cache x (1 + gqa_expand x (query heads per KV head - 1)): a grouped-query cache read
                  once (0) or expanded to every query head (1)
  collective latency = layers x 2 all-reduces x steps x collective_s (0 at TP1); steps = 2 inside one chip
                  (the cores of a chip share one fabric: reduce-scatter + all-gather in one step each,
                  whatever the group) + 2 log2(chips) across the chips the group spans
  all-reduce volume = hidden x 2 bytes x layers x 2 per token at link x link_eff, whatever the group
                  size (the collective engines reduce in the fabric)
  sliding-window layers: their attention FLOPs and KV read see min(C, W) keys in decode and
                  L x (2W - W^2/L) / 2 query-key pairs in prefill past the window (work.attended_keys /
                  prefill_keys; attn_eff at the keys a query attends: the tile term stays per query)
  attn_eff(L) = attn_eff x L / (L + attn_tile_tokens): short prompts underfill the attention kernels
  mm_eff(T) = mm_eff x T / (T padded to the MoE block): MoE expert matmuls see L x k / E tokens each
  MoE decode bytes: the experts a batch of B touches, E x (1 - (1 - k/E)^B) per MoE layer (+ shared)
  LNC=1 on Trainium2: every efficiency x lnc1_eff (a logical core is one physical core, not two)
  MoE kernels: + MoE layers x moe_dispatch_s per decode step and per prefill call (a stack's term: the
                  MoE stack terms of chipswap.projection.fitting.physfit.STACK_TERMS)

The stack's scheduling terms (Schedule): compiled static batch (a Neuron step costs the compiled batch's
step whatever is live) or continuous batching; prefills pause decode; the share of slots a saturated
server keeps busy. requests/s = replicas x occupancy x B / (out x step(B) + occupancy x B x prefill).

Pure: no I/O, no clock, no torch. May not read files (the fitting room and chipswap.projection.api do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from chipswap.errors import ChipswapError
from chipswap.projection.platform import (
    ACTIVATION_BYTES,
    ALLREDUCES_PER_LAYER,
    DeviceSpec,
    LlmPoly,
    window_split,
)
from chipswap.projection.serving.moe import expert_weights as _expert_weights
from chipswap.projection.serving.moe import streamed_params_at, touched_expert_share  # noqa: F401
from chipswap.projection.work import ModelWork, dtype_bytes
from chipswap.simulation.servicetime import LoadMix

# the free parameters of one chip family (name -> (meaning, lower bound, upper bound))
PARAMS: dict[str, tuple[str, float, float]] = {
    "mm_eff": ("share of the 16-bit peak FLOP/s the linear layers reach", 0.01, 1.0),
    "attn_eff": ("share of the peak FLOP/s the causal attention products reach", 0.005, 1.0),
    "bw_eff": ("share of the HBM bandwidth reached streaming the weights", 0.02, 1.0),
    "kv_bw_eff": ("share of the HBM bandwidth reached reading and writing the KV cache", 0.02, 1.0),
    "attn_tile_tokens": (
        "prompt length at which the attention kernels reach half their efficiency "
        "(efficiency x L / (L + this))",
        1.0,
        65536.0,
    ),
    "gqa_expand": (
        "share of the query-head expansion of a grouped-query KV cache the decode attention "
        "reads (0: the KV heads only; 1: K/V repeated for every query head)",
        1e-4,
        1.0,
    ),
    "link_eff": ("share of the chip interconnect reached by the all-reduce volume", 0.01, 1.0),
    "collective_s": ("seconds per all-reduce step (latency; 2 in a chip + 2 log2(chips))", 1e-8, 1e-3),
    "prefill_fixed_s": ("seconds per prefill call (launch, host round trip, scheduling)", 1e-5, 1.0),
    "step_fixed_s": ("seconds per decode step (host round trip, scheduling)", 1e-6, 0.1),
    "step_row_s": ("seconds per sequence per decode step (sampling, per-row host work)", 1e-8, 1e-2),
    "lnc1_eff": ("efficiency factor of a Trainium2 logical core at LNC=1 against LNC=2", 0.1, 1.0),
    "host_sample_s_per_logit": (
        "seconds per logit per row when the stack samples on the host CPU",
        1e-12,
        1e-7,
    ),
    "moe_dispatch_s": (
        "seconds per MoE layer per decode step and per prefill call (routing, expert dispatch and "
        "combine across the expert-parallel group): a term of a stack's MoE kernels",
        1e-7,
        0.1,
    ),
}
# parameters that only some families use (Trainium2 only has an LNC setting)
OPTIONAL = {"lnc1_eff": 1.0, "host_sample_s_per_logit": 0.0, "gqa_expand": 0.0, "moe_dispatch_s": 0.0}
# a family fitted on TP 1 runs only (a held-out fold of the GPU runs) predicts TP > 1 with these
# (assumption: NVLink-class collectives at half the link rate, 10 us per all-reduce step)
OPTIONAL_COLLECTIVES = {"collective_s": 1e-5, "link_eff": 0.5}
MOE_BLOCK_DEFAULT = 1  # tokens an expert's matmul is padded to (1 = no padding)


@dataclass(frozen=True)
class Physics:
    """The fitted parameters of one chip family under the stacks it was fitted on (PARAMS)."""

    family: str
    values: tuple[tuple[str, float], ...]

    @cached_property
    def _by_name(self) -> dict[str, float]:
        return dict(self.values)

    def get(self, name: str) -> float:
        v = self._by_name.get(name)
        if v is None:
            if name in OPTIONAL:
                return OPTIONAL[name]
            if name in OPTIONAL_COLLECTIVES:
                return OPTIONAL_COLLECTIVES[name]
            raise ChipswapError(
                f"{self.family}: physical parameter {name} is not calibrated; re-run calibrate"
            )
        return v


def moe_stack(stack: str, compute_dtype: str = "bf16") -> str:
    """The stack-terms key of MoE serving on `stack` (chipswap.projection.fitting.physfit.STACK_TERMS): MoE
    runs its own kernels (expert dispatch, expert parallelism), vLLM's dynamic fp8 its own."""
    return f"{stack}-moe" + ("-fp8" if compute_dtype in ("fp8", "int8") else "")


def base_stack(stack: str) -> str:
    """The dense stack a MoE stack-terms key runs on ("vllm-moe-fp8" -> "vllm"): a MoE model's terms apply
    on top of its stack's own."""
    return stack.removesuffix("-fp8").removesuffix("-moe")


STACK_ABSOLUTE = frozenset({"moe_dispatch_s"})  # stack terms that are values, not multipliers


def with_stack(p: Physics, terms: dict[str, float] | None) -> Physics:
    """A family's parameters under a stack's fitted terms (chipswap.projection.fitting.physfit.STACK_TERMS:
    multipliers on the family's efficiencies, capped at their bound; STACK_ABSOLUTE: values)."""
    if not terms:
        return p
    vals = {k: min(v * terms.get(k, 1.0), PARAMS[k][2]) for k, v in p.values}
    vals.update({k: v for k, v in terms.items() if k in STACK_ABSOLUTE})
    return Physics(p.family, tuple(vals.items()))


@dataclass(frozen=True)
class Schedule:
    """A serving stack's scheduling terms, as data. static_batch: decode steps cost the compiled batch's
    step whatever is live (Neuron); prefill_pauses_decode: a prefill stops every running sequence;
    occupancy: the share of batch slots a saturated server keeps busy; moe_block: tokens each expert's
    matmul is padded to in prefill (assumption where stated)."""

    stack: str
    static_batch: bool
    prefill_pauses_decode: bool = True
    occupancy: float = 1.0
    moe_block: int = MOE_BLOCK_DEFAULT
    host_sampling: bool = False
    note: str = ""
    # seconds each decode step grows per live sequence (issue 40: the stack's per-sequence host work, fitted
    # held out on the shared rate sweeps, chipswap.projection.stack_load); the simulator charges the same
    live_step_s: float = 0.0


def moe_tile_factor(work: ModelWork, tokens: int, block: int) -> float:
    """Slow-down of the routed expert matmuls of a prefill of `tokens` tokens when each expert's tokens are
    padded to `block` rows (1.0 for a dense model or no padding)."""
    d = work.dims
    if not d.experts or block <= 1:
        return 1.0
    per_expert = max(1e-9, tokens * d.experts_per_token / d.experts)
    return math.ceil(per_expert / block) * block / per_expert


def chips_spanned(tp: int, device: DeviceSpec) -> int:
    """Chips a tensor-parallel group of `tp` devices occupies (a GPU is its own chip)."""
    return max(1, math.ceil(tp / max(1, device.devices_per_chip)))


def collective_steps(tp: int, device: DeviceSpec) -> float:
    """Latency steps of one all-reduce: 2 inside a chip (its cores share one fabric, so a reduce-scatter and
    an all-gather take one step each whatever the group), + 2 log2(chips) across chips (recursive halving
    / doubling over the links). Trainium2's TP <= 4 at LNC=2 is one chip. Kept for the topology, not for
    leave-one-model-out error (docs/projection.md: Trainium2 equal to 2 log2(TP), Inferentia2 worse)."""
    if tp <= 1:
        return 0.0
    return 2.0 + 2.0 * math.log2(chips_spanned(tp, device))


def collective_latency_s(work: ModelWork, tp: int, p: Physics, device: DeviceSpec) -> float:
    if tp <= 1:
        return 0.0
    return work.dims.layers * ALLREDUCES_PER_LAYER * collective_steps(tp, device) * p.get("collective_s")


def collective_volume_s(work: ModelWork, tp: int, device: DeviceSpec, p: Physics) -> float:
    """Seconds per token of the all-reduce volume: each device sends its activations once and receives
    the sum once at link x link_eff, whatever the group size (Neuron's collective engines reduce in the
    fabric). Chosen over a ring's 2 (tp - 1) / tp x the payload and over on-chip traffic at HBM rate by
    leave-one-model-out error (sum of the Neuron medians 127 % against 130 % and 133 %); the candidates
    came from diagnosing the TP 4 test's miss, the choice among them from leave-one-model-out only."""
    if tp <= 1:
        return 0.0
    d = work.dims
    payload = ALLREDUCES_PER_LAYER * d.hidden * ACTIVATION_BYTES * d.layers
    return payload / (device.link_bytes_s * p.get("link_eff"))


def phys_poly(
    work: ModelWork,
    device: DeviceSpec,
    p: Physics,
    *,
    tp: int,
    weight_dtype: str = "bf16",
    compute_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    lnc: int = 2,
    batch: int = 1,
    prompt: int = 0,
    schedule: Schedule | None = None,
    fp8_eff: float = 1.0,
) -> LlmPoly:
    """Prefill / decode polynomials of `work` on one replica of `tp` devices (see the module docstring).
    batch: the compiled (or largest) batch, for the MoE weights a step reads; prompt: the prompt length
    the MoE tile factor is taken at (0 = no tile penalty)."""
    if tp < 1:
        raise ChipswapError(f"tensor-parallel degree must be >= 1, got {tp}")
    peak = device.need_peak(compute_dtype, p.family)
    scale = p.get("lnc1_eff") if lnc == 1 else 1.0
    mm = p.get("mm_eff") * scale * (fp8_eff if compute_dtype in ("fp8", "int8") else 1.0)
    attn = p.get("attn_eff") * scale
    d = work.dims
    hbm = device.hbm_bytes_s * p.get("bw_eff") * scale
    kv_hbm = device.hbm_bytes_s * p.get("kv_bw_eff") * scale
    wb = dtype_bytes(weight_dtype)
    lat = collective_latency_s(work, tp, p, device)
    if d.experts:  # the MoE kernels' fixed cost per MoE layer, per step and per prefill call
        lat += (d.moe_layers or d.layers) * p.get("moe_dispatch_s")
    comm = collective_volume_s(work, tp, device, p)
    block = schedule.moe_block if schedule is not None else MOE_BLOCK_DEFAULT
    expert_flops = 2.0 * _expert_weights(work) * (d.experts_per_token / d.experts if d.experts else 0.0)
    dense_flops = 2.0 * work.matmul_params - expert_flops
    tile = moe_tile_factor(work, prompt, block) if prompt else 1.0
    rate = tp * peak * mm
    heads_dev = math.ceil(d.heads / tp)
    # per attention kind (full / sliding window, work.attention_terms and work.kv_terms): QK^T and AV per
    # query-key pair on one device, and the KV read per key (a grouped-query cache read once or expanded)
    terms = []
    attn_per_qk = 0.0
    for (w, qk), kind in zip(work.attention_terms(tp), d.attention_kinds(), strict=True):
        kv_kind = 2.0 * kind.layers * math.ceil(kind.kv_heads / tp) * kind.head_dim * dtype_bytes(kv_dtype)
        group = heads_dev / max(1, math.ceil(kind.kv_heads / tp))  # query heads per KV head on one device
        kv_read = kv_kind * (1.0 + p.get("gqa_expand") * (group - 1.0))
        # causal prefill: each query attends to half the prompt on average (x prefill_keys past a window)
        terms.append((w, 0.5 * qk / (peak * attn), kv_read / kv_hbm + qk / (peak * attn)))
        attn_per_qk += qk
    p_bll, d_bc, windows = window_split(terms)
    kv_dev = work.kv_bytes_per_token(kv_dtype, tp)  # written by a prefill (layers with a cache of their own)
    prefill_weights = ((work.streamed_params or work.matmul_params) + work.head_params) * wb
    return LlmPoly(
        p0=p.get("prefill_fixed_s") + lat + prefill_weights / (tp * hbm),
        p_b=2.0 * work.head_params / rate,
        p_bl=(dense_flops + expert_flops * tile) / rate
        + kv_dev / kv_hbm
        + comm
        + 0.5 * attn_per_qk * p.get("attn_tile_tokens") / (peak * attn),
        p_bll=p_bll,
        d0=p.get("step_fixed_s") + lat + streamed_params_at(work, batch) * wb / (tp * hbm),
        d_b=p.get("step_row_s")
        + (
            p.get("host_sample_s_per_logit") * d.vocab
            if schedule is not None and schedule.host_sampling
            else 0.0
        )
        + (2.0 * (work.matmul_params + work.head_params)) / rate
        + comm,
        d_bc=d_bc,
        windows=windows,
    )


def replica_rps(poly: LlmPoly, batch: int, prompt: float, output: float, padded_prompt: int,
                schedule: Schedule, *, context: int | LoadMix | None = None,
                steps: float | None = None) -> float:  # fmt: skip
    """Requests/s of one replica at saturation: occupancy x batch sequences decode `output` tokens each,
    every request's batch-1 prefill in series (pausing decode on a stack whose prefills do). context: the
    context a decode step is charged at (default: the mean live context, prompt + output / 2; the product
    passes chipswap.simulation.servicetime.charged_context, the simulator's rule); steps: decode steps per
    request (default: output; the product passes output - 1, the first token comes from the prefill). A
    length mix passes a chipswap.simulation.servicetime.LoadMix as `context`: the step and the prefill are
    then its averages at the live slots (the simulator's rules over the mix, issue 40). Each step grows by
    schedule.live_step_s per live sequence (occupancy x batch), as the simulator's setup charges it."""
    occ = max(1e-6, schedule.occupancy)
    n = output if steps is None else steps
    if isinstance(context, LoadMix):  # a length mix (servicetime.LoadMix)
        live = max(1, round(occ * batch))
        step = context.mean_of(lambda c: poly.decode_step_s(batch, c), context.contexts(live))
        step += live * schedule.live_step_s
        pre = context.mean_of(lambda n_: poly.prefill_s(1, n_), context.prefills)
        return 1.0 / (pre + n * step / (occ * batch))
    step = poly.decode_step_s(batch, int(prompt + output / 2) if context is None else context)
    step += occ * batch * schedule.live_step_s  # the step's growth with the live batch
    return 1.0 / (poly.prefill_s(1, padded_prompt) + n * step / (occ * batch))


def prefill_share(poly: LlmPoly, replica_rps_: float, padded_prompt: int) -> float:
    """Share of a replica's time spent prefilling at `replica_rps_` requests/s (capped at 0.95)."""
    return min(0.95, replica_rps_ * poly.prefill_s(1, padded_prompt))


def loaded_itl(poly: LlmPoly, batch: int, context: int, replica_rps_: float, padded_prompt: int,
               schedule: Schedule) -> float:  # fmt: skip
    """Mean time between output tokens under load: the step, stretched by the prefills of the other
    batch - 1 sequences that pause it (a lone sequence is never paused by its own prefill)."""
    step = poly.decode_step_s(batch, context)
    if not schedule.prefill_pauses_decode or batch <= 1:
        return step
    others = prefill_share(poly, replica_rps_, padded_prompt) * (batch - 1) / batch
    return step / (1.0 - others)


def loaded_ttft(poly: LlmPoly, replica_rps_: float, padded_prompt: int, batch: int, waves: float) -> float:
    """Mean time to first token of a closed-loop run of `batch` concurrent users sending `waves` x batch
    requests: the first wave arrives at once and queues for its prefills ((B - 1) / 2 ahead on average);
    the later waves meet the steady queue of a deterministic server (M/D/1 wait, x (B - 1) / B: only the
    other users' prefills are ahead of a request)."""
    t = poly.prefill_s(1, padded_prompt)
    rho = prefill_share(poly, replica_rps_, padded_prompt)
    # M/D/1 wait of the later waves, scaled by the share of the other users (a lone user never queues)
    steady = (batch - 1) / max(1, batch) * rho * t / (2.0 * (1.0 - rho))
    first = (batch - 1) / 2.0 * t
    w = max(1.0, waves)
    return t + first / w + steady * (1.0 - 1.0 / w)
