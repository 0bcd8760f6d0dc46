"""Platform models: a chip family's spec sheet plus fitted coefficients -> seconds for a model's work.

What it is for: one calibrated roofline used both by the calibration (chipswap.projection.fitting, which fits
the
coefficients on published rows) and by the projection (chipswap.projection.predict, which predicts the user's
model). Because both call the same functions, a held-out error measured by the calibration is the error of
the predictions users see.

The time model of one replica (a tensor-parallel group of `tp` devices: NeuronCores or GPUs):

  prefill(B, S) = fixed + layers x prefill_layer + collectives(B*S tokens)
                  + matmul FLOPs / (tp x peak x compute_eff) + attention FLOPs / (tp x peak x attention_eff)
                  + weight bytes / (tp x HBM bandwidth x weight_bw_eff)
  decode(B, C)  = layers x decode_layer + collectives(B tokens)
                  + weight bytes / (tp x bandwidth x weight_bw_eff) + B x C x KV bytes per device per token /
                  (bandwidth x kv_bw_eff) + FLOPs / (tp x peak x compute_eff)
  encoder(B, S) = encoder_fixed + layers x encoder_layer + FLOPs / (peak x encoder_compute_eff)
                  + weight bytes / (bandwidth x encoder_weight_bw_eff) + output bytes / host link
  collectives(tokens) = layers x 2 all-reduces x 2 (tp-1)/tp x tokens x hidden x 2 bytes / (link x link_eff)

Every term is a work quantity from chipswap.projection.work divided by a spec-sheet rate (from the catalog's
chip)
times a fitted efficiency, or a fitted fixed time; no term borrows another vendor's figures. The terms are
polynomials in batch and length, so `LlmPoly` / `EncoderPoly` precompute them once per configuration and a
call is a handful of multiplications (the fleet simulator calls them millions of times).

Pure: no I/O, no torch, no clock. May not read the catalog or the platform files
(chipswap.projection.platforms does).
"""

from __future__ import annotations

from dataclasses import dataclass

from chipswap.errors import ChipswapError
from chipswap.projection.work import (
    ModelWork,
    attended_keys,
    dtype_bytes,
    expected_experts_touched,
    prefill_keys,
)

ACTIVATION_BYTES = 2.0  # bf16/fp16 activations travel through the tensor-parallel all-reduces
ALLREDUCES_PER_LAYER = 2  # after attention and after the MLP (Megatron-style tensor parallelism)

# coefficient names, per phase, with their meaning (the platform files and docs print these)
COEFFICIENTS: dict[str, dict[str, str]] = {
    "llm": {
        "fixed_s": "seconds added to every prefill call (launch, host round trip)",
        "prefill_layer_s": "seconds per transformer layer per prefill call",
        "decode_layer_s": "seconds per transformer layer per decode step (kernel launches, synchronisation)",
        "compute_eff_16": "share of the 16-bit peak FLOP/s reached by the matmuls (bf16/fp16 compute)",
        "compute_eff_8": "share of the 8-bit peak FLOP/s reached by the matmuls (fp8 compute)",
        "compute_eff_4": "share of the 4-bit peak FLOP/s reached by the matmuls (fp4 compute)",
        "attention_eff": "share of the peak FLOP/s reached by the attention score/value products",
        "weight_bw_eff": "share of the HBM bandwidth reached streaming the weights",
        "kv_bw_eff": "share of the HBM bandwidth reached reading the KV cache in decode",
        "link_eff": "share of the chip-to-chip link bandwidth reached by tensor-parallel all-reduces",
    },
    "encoder": {
        "encoder_fixed_s": "seconds added to every encoder call",
        "encoder_layer_s": "seconds per transformer layer per encoder call",
        "encoder_compute_eff": "share of the 16-bit peak FLOP/s reached by an encoder forward",
        "encoder_weight_bw_eff": "share of the HBM bandwidth reached streaming the weights",
        "host_gb_s": "GB/s at which the outputs come back to the host",
    },
}
# the value a coefficient takes when its group did not fit it (it then drops out of the time model)
NEUTRAL: dict[str, float] = {
    "fixed_s": 0.0,
    "prefill_layer_s": 0.0,
    "decode_layer_s": 0.0,
    "encoder_fixed_s": 0.0,
    "encoder_layer_s": 0.0,
}
PHASES = tuple(COEFFICIENTS)


def precision_class(compute_dtype: str) -> str:
    """'16', '8', '4' or '32': the bucket of compute efficiencies a matmul dtype falls in."""
    d = compute_dtype.lower()
    if d in ("bf16", "fp16"):
        return "16"
    if d in ("fp8", "int8"):
        return "8"
    if d in ("fp4", "int4"):
        return "4"
    if d in ("fp32", "tf32"):
        return "32"
    raise ChipswapError(f"unknown compute dtype: {compute_dtype!r}; use bf16, fp16, fp8, fp4 or fp32")


@dataclass(frozen=True)
class DeviceSpec:
    """One device of a chip family (a NeuronCore or a GPU), from the catalog's chip entry.

    peak_flops: (dtype, dense FLOP/s per device); a dtype not listed has no published peak.
    hbm_bytes_s: HBM bandwidth per device. memory_bytes: HBM per device. link_bytes_s: the chip's
    chip-to-chip interconnect (NeuronLink / NVLink / PCIe), bytes/s. devices_per_chip: NeuronCores per
    chip (1 for a GPU)."""

    chip: str
    peak_flops: tuple[tuple[str, float], ...]
    hbm_bytes_s: float
    memory_bytes: float
    link_bytes_s: float
    devices_per_chip: int = 1

    def peak(self, dtype: str) -> float | None:
        return dict(self.peak_flops).get(dtype.lower())

    def need_peak(self, dtype: str, who: str = "") -> float:
        """The peak FLOP/s of `dtype`, or a one-line error when the chip publishes none."""
        peak = self.peak(dtype)
        if peak is None:
            raise ChipswapError(
                f"{who or self.chip}: no published {dtype} peak for {self.chip}; pick a dtype the chip "
                "supports"
            )
        return peak


@dataclass(frozen=True)
class Coefficients:
    """Fitted coefficients of one phase ("llm", "encoder") for one fit group.

    values: (name, value) for every coefficient the group fitted; a name absent here is not calibrated
    (efficiencies) or neutral (fixed times, see NEUTRAL). The provenance fields say what they came from."""

    phase: str
    values: tuple[tuple[str, float], ...]
    group: str = ""
    rows: tuple[str, ...] = ()  # ids of the published rows fitted on (file:line or source:row)
    stacks: tuple[str, ...] = ()  # software stack / version of those rows
    fit_error: float = 0.0  # median absolute relative error on the rows fitted on (in-sample)

    def get(self, name: str) -> float | None:
        found = dict(self.values).get(name)
        if found is None:
            return NEUTRAL.get(name)
        return found

    def need(self, name: str, family: str) -> float:
        v = self.get(name)
        if v is None:
            raise ChipswapError(
                f"{family}: coefficient {name} ({COEFFICIENTS[self.phase].get(name, name)}) is not "
                "calibrated: "
                "no published rows of that kind for this platform; give a measured figure for this instance"
            )
        return v


@dataclass(frozen=True)
class LlmPoly:
    """Seconds of one replica's calls as polynomials (coefficients precomputed for one configuration):

    prefill(b, l) = p0 + p_bl*b*l + p_bll*b*l*l + p_b*b ; decode(b, c) = d0 + d_b*b + d_bc*b*c
    + d_expert x expected_experts_touched(experts, top_k, b) (MoE: streaming the routed experts the batch's
    tokens touch; d0 then holds every other weight; 0 for a dense model). Sliding-window layers
    (work.AttentionKind) carry their own attention terms, `windows` = ((window, prefill coefficient, decode
    coefficient), ...): + b*l*prefill_keys(l, window)*coefficient, + b*attended_keys(c, window)*coefficient
    (empty for a model without a window: the polynomial above, unchanged)."""

    p0: float
    p_b: float
    p_bl: float
    p_bll: float
    d0: float
    d_b: float
    d_bc: float
    d_expert: float = 0.0
    experts: int = 0
    top_k: int = 0
    windows: tuple[tuple[int, float, float], ...] = ()

    def prefill_s(self, batch: int, length: int) -> float:
        attn = length * self.p_bll
        for w, coef, _ in self.windows:
            attn += prefill_keys(length, w) * coef
        return self.p0 + batch * (self.p_b + length * (self.p_bl + attn))

    def decode_step_s(self, batch: int, context: int) -> float:
        attn = context * self.d_bc
        for w, _, coef in self.windows:
            attn += attended_keys(context, w) * coef
        step = self.d0 + batch * (self.d_b + attn)
        if self.d_expert:
            step += self.d_expert * expected_experts_touched(self.experts, self.top_k, batch)
        return step


@dataclass(frozen=True)
class EncoderPoly:
    """encoder(b, l) = e0 + e_b*b + e_bl*b*l + e_bll*b*l*l, precomputed for one configuration."""

    e0: float
    e_b: float
    e_bl: float
    e_bll: float

    def encoder_s(self, batch: int, length: int) -> float:
        return self.e0 + batch * (self.e_b + length * (self.e_bl + length * self.e_bll))


def _collective_s_per_token(work: ModelWork, tp: int, device: DeviceSpec, link_eff: float) -> float:
    if tp <= 1:
        return 0.0
    d = work.dims
    volume = ALLREDUCES_PER_LAYER * 2.0 * (tp - 1) / tp * d.hidden * ACTIVATION_BYTES * d.layers
    return volume / (device.link_bytes_s * link_eff)


def llm_poly(
    work: ModelWork,
    device: DeviceSpec,
    coef: Coefficients,
    *,
    tp: int,
    weight_dtype: str,
    compute_dtype: str,
    kv_dtype: str = "bf16",
    family: str = "",
) -> LlmPoly:
    """The prefill / decode polynomials of `work` on a replica of `tp` devices (see the module docstring); a
    MoE decode step reads the experts its batch touches (LlmPoly.decode_step_s)."""
    if tp < 1:
        raise ChipswapError(f"tensor-parallel degree must be >= 1, got {tp}")
    peak = device.need_peak(compute_dtype, family)
    cls = precision_class(compute_dtype)
    ce = coef.need(f"compute_eff_{cls}", family or device.chip)
    ae = coef.need("attention_eff", family or device.chip)
    we = coef.need("weight_bw_eff", family or device.chip)
    ke = coef.need("kv_bw_eff", family or device.chip)
    le = coef.need("link_eff", family or device.chip) if tp > 1 else 1.0
    d = work.dims
    weights_s = work.streamed_weight_bytes(weight_dtype) / (tp * device.hbm_bytes_s * we)
    expert_s, routed_s = _expert_stream_s(work, weight_dtype, tp * device.hbm_bytes_s * we)
    per_token_comm = _collective_s_per_token(work, tp, device, le)
    mm_flops_per_token = 2.0 * work.matmul_params
    head_flops_per_row = 2.0 * work.head_params
    # attention runs per head: a device of the group computes ceil(heads / tp) of them (heads that do not
    # divide evenly are padded, as the Neuron stacks do), so attention time is per device, not per group;
    # one term per attention kind (full / sliding window: work.attention_terms, work.kv_terms)
    compute_rate = tp * peak * ce
    attention_rate = peak * ae
    kv_terms = work.kv_terms(kv_dtype, tp, read=True)
    terms = [
        (w, flops / attention_rate, flops / attention_rate + kv / (device.hbm_bytes_s * ke))
        for (w, flops), (_, kv) in zip(work.attention_terms(tp), kv_terms, strict=True)
    ]
    p_bll, d_bc, windows = window_split(terms)
    return LlmPoly(
        p0=coef.need("fixed_s", "") + d.layers * coef.need("prefill_layer_s", "") + weights_s,
        p_b=head_flops_per_row / compute_rate,
        p_bl=per_token_comm + mm_flops_per_token / compute_rate,
        p_bll=p_bll,
        d0=d.layers * coef.need("decode_layer_s", "") + weights_s - routed_s,
        d_b=per_token_comm + (mm_flops_per_token + head_flops_per_row) / compute_rate,
        d_bc=d_bc,
        d_expert=expert_s,
        experts=d.experts,
        top_k=d.experts_per_token,
        windows=windows,
    )


def window_split(
    terms: list[tuple[int, float, float]],
) -> tuple[float, float, tuple[tuple[int, float, float], ...]]:
    """(prefill L^2 coefficient, decode B x C coefficient, window terms) of LlmPoly from (window, prefill
    coefficient, decode coefficient) per attention kind: full-attention kinds add into the polynomial's own
    coefficients (a model without a window: exactly its one kind's), window kinds keep their own."""
    full = [(p, c) for w, p, c in terms if not w]
    p_bll = full[0][0] if len(full) == 1 else sum(p for p, _ in full)
    d_bc = full[0][1] if len(full) == 1 else sum(c for _, c in full)
    return p_bll, d_bc, tuple((w, p, c) for w, p, c in terms if w)


def _expert_stream_s(work: ModelWork, weight_dtype: str, bytes_s: float) -> tuple[float, float]:
    """(seconds to stream one routed expert of every MoE layer, seconds to stream all of them) at `bytes_s`:
    a decode step reads the experts its batch touches (work.expected_experts_touched), a prefill all."""
    if not work.is_moe:
        return 0.0, 0.0
    one = work.expert_params * dtype_bytes(weight_dtype) / bytes_s
    return one, one * work.dims.experts


def encoder_output_bytes(work: ModelWork, out_dtype_bytes: float = 4.0) -> tuple[float, float]:
    """(bytes per sequence, bytes per token) an encoder call returns to the host: per-token hidden states
    (no head) or vocabulary logits (masked LM), or one row of class scores per sequence."""
    d = work.dims
    if d.head in ("mlm", "lm"):
        return 0.0, d.vocab * out_dtype_bytes
    if d.head == "classifier":
        return d.num_labels * out_dtype_bytes, 0.0
    return d.hidden * out_dtype_bytes, d.hidden * out_dtype_bytes  # last hidden state + pooled row


def encoder_poly(
    work: ModelWork,
    device: DeviceSpec,
    coef: Coefficients,
    *,
    tp: int = 1,
    weight_dtype: str = "bf16",
    compute_dtype: str = "bf16",
    family: str = "",
) -> EncoderPoly:
    """The encoder-forward polynomial of `work` on `tp` devices (tp > 1 only for encoders too big for one)."""
    peak = device.need_peak(compute_dtype, family)
    who = family or device.chip
    ce = coef.need("encoder_compute_eff", who)
    # optional terms: a group that did not fit them (e.g. Inferentia, whose weights sit in on-chip cache)
    # has no weight-streaming or output-transfer term
    we = coef.get("encoder_weight_bw_eff")
    host_gb_s = coef.get("host_gb_s")
    host = host_gb_s * 1e9 if host_gb_s else float("inf")
    d = work.dims
    rate = tp * peak * ce
    per_seq_out, per_token_out = encoder_output_bytes(work)
    mm = 2.0 * work.matmul_params
    head_rows_per_token = 1.0 if d.head in ("mlm", "lm") else 0.0
    head_rows_per_seq = 1.0 if d.head == "classifier" else 0.0
    return EncoderPoly(
        e0=coef.need("encoder_fixed_s", who)
        + d.layers * coef.need("encoder_layer_s", who)
        + (work.streamed_weight_bytes(weight_dtype) / (tp * device.hbm_bytes_s * we) if we else 0.0),
        e_b=(d.patch_flops + 2.0 * work.head_params * head_rows_per_seq) / rate + per_seq_out / host,
        e_bl=(mm + 2.0 * work.head_params * head_rows_per_token) / rate + per_token_out / host,
        e_bll=4.0 * d.heads * d.head_dim * d.layers / rate,
    )


# --- the uncalibrated spec-sheet roofline (the baseline every validation table compares against) ---------


def roofline_llm_poly(
    work: ModelWork,
    device: DeviceSpec,
    *,
    tp: int,
    weight_dtype: str,
    compute_dtype: str,
    kv_dtype: str = "bf16",
) -> tuple[LlmPoly, LlmPoly]:
    """Spec-sheet roofline with no fitted numbers: (compute-time polynomial, memory-time polynomial); a call
    takes the larger of the two. Peak FLOP/s and peak bandwidth, no overheads, no collectives."""
    peak = device.peak(compute_dtype) or 0.0
    if peak <= 0:
        raise ChipswapError(f"no published {compute_dtype} peak for {device.chip}")
    rate = tp * peak
    p_bll, d_bc, windows = window_split([(w, a / rate, a / rate) for w, a in work.attention_terms()])
    compute = LlmPoly(
        p0=0.0,
        p_b=2.0 * work.head_params / rate,
        p_bl=2.0 * work.matmul_params / rate,
        p_bll=p_bll,
        d0=0.0,
        d_b=2.0 * (work.matmul_params + work.head_params) / rate,
        d_bc=d_bc,
        windows=windows,
    )
    weights_s = work.streamed_weight_bytes(weight_dtype) / (tp * device.hbm_bytes_s)
    expert_s, routed_s = _expert_stream_s(work, weight_dtype, tp * device.hbm_bytes_s)
    hbm = tp * device.hbm_bytes_s
    _, kv_bc, kv_windows = window_split([(w, 0.0, kv / hbm) for w, kv in work.kv_terms(kv_dtype, read=True)])
    memory = LlmPoly(
        p0=weights_s,
        p_b=0.0,
        p_bl=work.kv_bytes_per_token_total(kv_dtype) / (tp * device.hbm_bytes_s),
        p_bll=0.0,
        d0=weights_s - routed_s,
        d_b=0.0,
        d_bc=kv_bc,
        d_expert=expert_s,
        experts=work.dims.experts,
        top_k=work.dims.experts_per_token,
        windows=kv_windows,
    )
    return compute, memory


def roofline_encoder_s(
    work: ModelWork, device: DeviceSpec, batch: int, length: int, *, weight_dtype: str
) -> float:
    peak = device.peak("bf16") or 0.0
    return max(
        work.encoder_flops(batch, length) / peak,
        work.streamed_weight_bytes(weight_dtype) / device.hbm_bytes_s,
    )


@dataclass(frozen=True)
class PlatformModel:
    """A chip family as the projection sees it: its device, the dtypes it can serve, the memory rules, the
    fitted coefficients per phase (None = not calibrated) and the held-out error bands.

    family: e.g. "Inferentia2", "H100". vendor: "AWS" / "NVIDIA". device_unit: "NeuronCore" / "GPU".
    devices: one DeviceSpec per chip name of the family (e.g. "A100" and "A100-80GB").
    weight_dtypes: (weight dtype, compute dtype) pairs it can serve; e.g. ("int8", "bf16") is weight-only
    int8. reserve_bytes / reserve_fraction: per-device memory kept for the runtime (assumption).
    max_batch: the largest batch the search tries. calibrated_batch: the largest batch among the rows fitted.
    padded: requests are padded to compiled shapes (Neuron). bands: (phase:metric, relative half-width)."""

    family: str
    vendor: str
    device_unit: str
    group: str
    devices: tuple[DeviceSpec, ...]
    weight_dtypes: tuple[tuple[str, str], ...]
    reserve_bytes: float
    reserve_fraction: float
    max_batch: int
    padded: bool
    coefficients: tuple[Coefficients, ...] = ()
    bands: tuple[tuple[str, float], ...] = ()
    band_basis: tuple[tuple[str, str], ...] = ()  # (phase:metric, how the band was measured)
    calibrated_batch: int = 0
    notes: str = ""

    def device(self, chip: str) -> DeviceSpec:
        for d in self.devices:
            if d.chip.lower() == chip.lower():
                return d
        raise ChipswapError(
            f"chip {chip!r} is not part of the {self.family} platform; "
            f"known: {', '.join(x.chip for x in self.devices)}"
        )

    def phase(self, phase: str) -> Coefficients:
        for c in self.coefficients:
            if c.phase == phase:
                return c
        what = {"llm": "LLM serving", "encoder": "encoder serving"}.get(phase, phase)
        raise ChipswapError(
            f"no {what} calibration for {self.family}: no published {what} rows for this chip family were "
            "found to fit on; give a measured figure for this instance (workload `measured` source or a "
            "bench JSON) instead"
        )

    def has_phase(self, phase: str) -> bool:
        return any(c.phase == phase for c in self.coefficients)

    def band(self, phase: str, metric: str) -> float:
        return dict(self.bands).get(f"{phase}:{metric}", 0.0)

    def compute_dtype_for(self, weight_dtype: str) -> str:
        for w, c in self.weight_dtypes:
            if w == weight_dtype.lower():
                return c
        raise ChipswapError(
            f"dtype {weight_dtype!r} is not supported for serving on {self.family}; "
            f"use one of {', '.join(w for w, _ in self.weight_dtypes)}"
        )


def weight_bytes_per_device(work: ModelWork, dtype: str, tp: int) -> float:
    """Weights held by one device of a tp group (everything split evenly; a replicated norm is noise)."""
    return work.params * dtype_bytes(dtype) / tp
