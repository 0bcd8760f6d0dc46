"""Stack-aware serving time model: a chip family's hardware terms plus the fitted terms of one serving stack,
and the envelope of published rows those terms were fitted on (which sets how wide a projection's band is).

What it is for: the projection (chipswap.projection.predict) builds the service-time polynomials of a layout
through `stack_poly`, ranks layouts by the slow edge of `band_for`, and reports `Envelope.distance` reasons;
chipswap.projection.stackfit fits the terms on published runs and measures the bands leave-one-source-out
through the
same functions, so a held-out error is the error users see.

The time model of one replica of `tp` devices under a stack with fitted terms (chipswap.projection.platform
gives
the
hardware part, with the chip family's efficiencies and its SDK-table fixed times set to zero):

  decode step(B, C) = hardware step (weights / (tp x HBM x eff) + B x C x KV bytes / (HBM x eff)
                      + collectives(B) + FLOPs / (tp x peak x eff))
                      + step_fixed_s[stack] + layers x (step_layer_s + step_layer_tp_s x (sqrt(tp) - 1))
                      + B x (step_row_s + cpu_sample_s_per_logit x vocab if sampling is on the host)
  prefill(B, L)     = hardware prefill + prefill_fixed_s[stack] + layers x prefill_layer_s
  requests/s        = replicas / (prefill(1, padded prompt) + output x step(B, C) / (slot_occupancy x B))

Neuron stacks run a compiled batch: a decode step costs the compiled batch's step whatever the number of live
sequences (so a lone request's TPOT is step(B_compiled, C)); slot_occupancy is the share of the compiled
slots a
saturated server keeps busy (prefills pause decode), fitted per stack from the published throughput runs.
The TP form sqrt(tp) - 1 was chosen over log2(tp) and tp - 1 by leave-one-source-out error (14 % vs 22-25 %
median on requests/s or TPOT); that choice is the one thing the held-out tables did not hold out.

Pure: no I/O, no clock. May not read files (chipswap.projection.stackfit and chipswap.projection.api do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from chipswap.errors import ChipswapError
from chipswap.projection.platform import Coefficients, DeviceSpec, LlmPoly, llm_poly
from chipswap.projection.work import ModelWork

# the SDK-table terms of the chip family's fit that belong to Transformers NeuronX, not to the hardware
SDK_STACK_TERMS = ("fixed_s", "prefill_layer_s", "decode_layer_s")
TERMS = {
    "step_fixed_s": "seconds per decode step (scheduler, host round trip, on-device sampling)",
    "step_layer_s": "seconds per layer per decode step (kernel launches, collective latency)",
    "step_layer_tp_s": "seconds per layer per decode step per (sqrt(TP) - 1): collective latency, grows "
    "with TP",
    "step_row_s": "seconds per compiled batch row per decode step",
    "cpu_sample_s_per_logit": "seconds per logit per row when sampling runs on the host CPU",
    "prefill_fixed_s": "seconds per prefill call",
    "prefill_layer_s": "seconds per layer per prefill call",
    "slot_occupancy": "share of the compiled batch slots a saturated server keeps busy",
}
SAMPLING = ("device", "cpu")
# numeric envelope dimensions: (name, unit)
DIMENSIONS = (("tp", "TP"), ("batch", "batch"), ("prompt", "prompt tokens"), ("params", "B parameters"))


@dataclass(frozen=True)
class Envelope:
    """The published rows a stack's terms were fitted on: numeric ranges and the categories seen."""

    ranges: tuple[tuple[str, float, float], ...] = ()  # (dimension, low, high)
    chips: tuple[str, ...] = ()
    sampling: tuple[str, ...] = ()

    def distance(
        self, *, tp: int, batch: int, prompt: int, params: float, chip: str, sampling: str
    ) -> tuple[float, tuple[str, ...]]:
        """(distance outside the envelope, why): log2 steps beyond each numeric range plus one unit per
        category (chip, sampling) the rows never had. 0 = inside the data."""
        values = {"tp": tp, "batch": batch, "prompt": prompt, "params": params / 1e9}
        units = dict(DIMENSIONS)
        total = 0.0
        why: list[str] = []
        for name, lo, hi in self.ranges:
            v = float(values[name])
            if v > hi * 1.0001:
                d = math.log2(v / hi)
            elif v < lo / 1.0001:
                d = math.log2(lo / v)
            else:
                continue
            total += d
            why.append(f"{units[name]} {v:,.4g} outside the fitted {lo:,.4g}-{hi:,.4g}")
        if self.chips and chip.lower() not in (c.lower() for c in self.chips):
            total += 1.0
            why.append(f"chip {chip} has no rows of this stack (fitted on {', '.join(self.chips)})")
        if self.sampling and sampling not in self.sampling:
            total += 1.0
            why.append(f"{sampling} sampling has no rows of this stack")
        return total, tuple(why)


@dataclass(frozen=True)
class StackTerms:
    """The fitted terms of one serving stack (see TERMS), its envelope and its held-out bands.

    bands: (metric, base relative half-width inside the envelope); widen: log-band added per unit of envelope
    distance (fitted on held-out rows outside their fold's envelope); extra_distance: envelope units every
    projection of this stack is charged (a stack with no rows of its own, e.g. vLLM on GPUs)."""

    stack: str
    values: tuple[tuple[str, float], ...] = ()
    envelope: Envelope = field(default_factory=Envelope)
    bands: tuple[tuple[str, float], ...] = ()
    widen: float = 0.0
    extra_distance: float = 0.0
    rows: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    note: str = ""

    def get(self, name: str) -> float:
        return dict(self.values).get(name, 1.0 if name == "slot_occupancy" else 0.0)

    def band(self, metric: str) -> float:
        b = dict(self.bands)
        return b.get(metric, b.get("out_tok_s", 0.0))


def hardware_coefficients(coef: Coefficients) -> Coefficients:
    """The chip family's fitted coefficients with the SDK-table stack terms removed (hardware only)."""
    values = tuple((k, 0.0 if k in SDK_STACK_TERMS else v) for k, v in coef.values)
    return replace(coef, values=values)


def stack_poly(
    work: ModelWork,
    device: DeviceSpec,
    coef: Coefficients,
    terms: StackTerms | None,
    *,
    tp: int,
    weight_dtype: str,
    compute_dtype: str,
    kv_dtype: str = "bf16",
    sampling: str = "device",
    family: str = "",
) -> LlmPoly:
    """The prefill / decode polynomials of `work` on a replica of `tp` devices under a stack. With no terms
    (the SDK-table or GPU calibrations) this is the chip family's own model, unchanged."""
    if terms is None:
        return llm_poly(
            work, device, coef, tp=tp, weight_dtype=weight_dtype, compute_dtype=compute_dtype,
            kv_dtype=kv_dtype, family=family,
        )  # fmt: skip
    if sampling not in SAMPLING:
        raise ChipswapError(f"unknown sampling: {sampling!r}; use device or cpu")
    hw = llm_poly(
        work, device, hardware_coefficients(coef), tp=tp, weight_dtype=weight_dtype,
        compute_dtype=compute_dtype, kv_dtype=kv_dtype, family=family,
    )  # fmt: skip
    layers = work.dims.layers
    g = terms.get
    per_layer = g("step_layer_s") + g("step_layer_tp_s") * (math.sqrt(tp) - 1)
    per_row = g("step_row_s") + (g("cpu_sample_s_per_logit") * work.dims.vocab if sampling == "cpu" else 0.0)
    return replace(
        hw,
        p0=hw.p0 + g("prefill_fixed_s") + layers * g("prefill_layer_s"),
        d0=hw.d0 + g("step_fixed_s") + layers * per_layer,
        d_b=hw.d_b + per_row,
    )


def steady_rps(
    poly: LlmPoly, batch: int, prompt: float, output: float, padded_prompt: int, occupancy: float = 1.0
) -> float:
    """Requests/s of one replica at saturation: each request's batch-1 prefill plus its share of `output`
    decode steps of the (compiled) batch, `occupancy` x batch of whose slots are busy on average."""
    step = poly.decode_step_s(batch, int(prompt + output / 2))
    per_request = poly.prefill_s(1, padded_prompt) + output * step / max(1e-9, occupancy * batch)
    return 1.0 / per_request


def loaded_tpot(poly: LlmPoly, batch: int, context: int, replica_rps: float, padded_prompt: int) -> float:
    """Time per output token seen under load on a stack whose prefills pause decoding: the step divided by
    the share of time the replica is not prefilling."""
    busy = min(0.95, replica_rps * poly.prefill_s(1, padded_prompt))
    return poly.decode_step_s(batch, context) / (1.0 - busy)


def band_for(terms: StackTerms | None, metric: str, base: float, distance: float) -> float:
    """A figure's relative band: the base band (held out, inside the envelope) widened by `widen` per unit
    of envelope distance: exp(ln(1 + base) + widen x distance) - 1."""
    if terms is not None and terms.bands:
        base = terms.band(metric) or base
    widen = terms.widen if terms is not None else 0.0
    return math.exp(math.log1p(base) + widen * distance) - 1.0
