"""Training throughput with layout and scale: how a dense transformer trains on N nodes of one instance type.

What it is for: `chipswap project --train-tokens`, the plan's training workloads and the training calibration
(training_fit.py) all call `step_time` / `search` here, so a projection and its held-out error band come
from one definition. It models, per device and per optimizer step:
  - compute: linear-layer FLOPs at the dtype's peak x a fitted efficiency (fp8 runs only the linear layers in
    fp8; causal attention stays bf16), x 4/3 with full activation recompute;
  - elementwise HBM traffic (norms, activations; a fixed count of passes, an assumption);
  - tensor / context parallel collectives (all-reduce or reduce-scatter + all-gather of the activations every
    layer) over NVLink/NVSwitch or NeuronLink inside a node, EFA across nodes, x a fitted exposed share;
  - data-parallel gradient collectives (DDP all-reduce, ZeRO-1 reduce-scatter + all-gather, FSDP all-gathers
    every micro-batch) over the slowest link the group crosses, overlapped with the backward pass up to a
    stated share;
  - pipeline bubbles (pp - 1) / (micro-batches x virtual stages);
  - memory per device (weights, gradients, optimizer states, activations, logits) that rejects layouts
    which do not fit.
`search` enumerates TP x PP x CP x sharding x recompute x micro-batch, rejects what does not fit (saying why)
and keeps the fastest.

Pure: no I/O, no torch, no clock; it may not read files, prices or the catalog (callers pass a System).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.projection.work import GiB, ModelWork

SHARDINGS = ("ddp", "zero1", "fsdp")
RECOMPUTE = ("none", "full")
MICRO_BATCHES = (1, 2, 4)
MAX_PP = 16
VIRTUAL = (2, 4, 8)
# assumptions (stated in docs/projection.md): bytes of optimizer state per parameter with mixed precision
# Adam (bf16 weights 2 + fp32 gradients 4 + fp32 master 4 + two fp32 moments 8 = 18; ZeRO-1 shards the last 12
# plus the gradient reduce buffer), elementwise passes over the stored activations, the share of a
# micro-batch's compute (its backward) a data-parallel collective can hide behind, and memory kept free
# for the runtime and fragmentation.
STATE_BYTES = {"weights": 2.0, "grads": 4.0, "optimizer": 12.0}
FP8_WEIGHT_COPY = 1.0  # fp8 runs keep an fp8 copy (and transpose) of every linear weight
ELEMENTWISE_PASSES = 3.0
DP_OVERLAP = 2.0 / 3.0  # the backward pass's share of a micro-batch's compute
MEMORY_RESERVE = 0.10
MEMORY_RESERVE_BYTES = 1.0 * GiB


@dataclass(frozen=True)
class System:
    """One instance type as the training model sees it.

    devices_per_node: GPUs or NeuronCores per instance. peak_flops: dtype -> dense FLOP/s per device.
    hbm_bytes_s / memory_bytes: per device. intra_bytes_s: per device, one direction, collectives inside a
    node (NVLink/NVSwitch, NeuronLink, or PCIe). inter_bytes_s: per device, its share of the node's
    network (EFA). group: "nvidia" or "neuron" (which fitted efficiencies apply). dtypes: training dtypes
    it supports."""

    name: str
    family: str
    group: str
    devices_per_node: int
    peak_flops: tuple[tuple[str, float], ...]
    hbm_bytes_s: float
    memory_bytes: float
    intra_bytes_s: float
    inter_bytes_s: float
    dtypes: tuple[str, ...] = ("bf16",)
    device_unit: str = "GPU"

    def peak(self, dtype: str) -> float:
        p = dict(self.peak_flops).get(dtype)
        if p is None:
            raise ChipswapError(
                f"{self.family}: no published {dtype} peak; use one of {', '.join(self.dtypes)}"
            )
        return p


@dataclass(frozen=True)
class Coef:
    """Fitted training coefficients: e16_<group> / e8_<group> = share of the bf16 / fp8 peak the linear
    layers reach; x_tp = share of tensor/context-parallel collective time not hidden behind compute."""

    values: tuple[tuple[str, float], ...]

    def get(self, name: str) -> float:
        v = dict(self.values).get(name)
        if v is None:
            raise ChipswapError(
                f"training coefficient {name} is not calibrated; re-run the training calibration"
            )
        return v

    def has(self, name: str) -> bool:
        return name in dict(self.values)


@dataclass(frozen=True)
class Layout:
    """A parallel layout: tensor x pipeline x context x data parallel degrees (tp*pp*cp*dp = devices),
    sharding of the training state over the data-parallel group, activation recompute, micro-batch and
    virtual pipeline stages, and the global batch in sequences."""

    tp: int
    pp: int
    dp: int
    cp: int = 1
    sharding: str = "zero1"
    recompute: str = "none"
    micro_batch: int = 1
    vp: int = 1
    global_batch: int = 512

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per step (gradient accumulation)."""
        return max(1, self.global_batch // (self.dp * self.micro_batch))

    def label(self) -> str:
        parts = [f"TP{self.tp}"]
        if self.pp > 1:
            parts.append(f"PP{self.pp}" + (f"(v{self.vp})" if self.vp > 1 else ""))
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        parts.append(f"{'FSDP' if self.sharding == 'fsdp' else 'DP'}{self.dp}")
        if self.sharding == "zero1":
            parts[-1] += " ZeRO-1"
        tail = f"micro-batch {self.micro_batch}, global batch {self.global_batch}"
        if self.recompute == "full":
            tail += ", full recompute"
        return " x ".join(parts) + f" ({tail})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "pp": self.pp,
            "cp": self.cp,
            "dp": self.dp,
            "sharding": self.sharding,
            "recompute": self.recompute,
            "micro_batch": self.micro_batch,
            "virtual_stages": self.vp,
            "global_batch": self.global_batch,
            "label": self.label(),
        }


@dataclass(frozen=True)
class Memory:
    """Bytes per device of one layout (the busiest device: first pipeline stage, last for the logits)."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    logits: float
    usable: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.logits

    @property
    def fits(self) -> bool:
        return self.total <= self.usable

    def as_dict(self) -> dict[str, float]:
        parts = ("weights", "grads", "optimizer", "activations", "logits", "total", "usable")
        return {f"{k}_gib": getattr(self, k) / GiB for k in parts}


@dataclass(frozen=True)
class StepTime:
    """Seconds of one optimizer step on every device, by cause, and the resulting throughput."""

    compute_s: float
    bubble_s: float
    memory_s: float
    tp_comm_s: float  # exposed tensor/context-parallel collective time
    dp_comm_s: float  # exposed data-parallel collective time
    dp_comm_total_s: float  # before overlap
    tokens_per_step: float
    devices: int

    @property
    def step_s(self) -> float:
        return self.compute_s + self.bubble_s + self.memory_s + self.tp_comm_s + self.dp_comm_s

    @property
    def tokens_per_s_per_device(self) -> float:
        return self.tokens_per_step / self.step_s / self.devices

    def shares(self) -> dict[str, float]:
        s = self.step_s
        return {
            "compute": self.compute_s / s,
            "pipeline_bubble": self.bubble_s / s,
            "elementwise_memory": self.memory_s / s,
            "tp_cp_collectives": self.tp_comm_s / s,
            "dp_collectives": self.dp_comm_s / s,
        }


# --- memory --------------------------------------------------------------------------------------


def _act_bytes_per_token_layer(work: ModelWork) -> float:
    """bf16 activations a layer keeps for its backward, per token (flash attention: no score matrix):
    norms, QKV and attention outputs ~16 h, the MLP's up/gate/activation outputs 4-6 x intermediate."""
    d = work.dims
    return 16.0 * d.hidden + (6.0 if d.gated_mlp else 4.0) * d.intermediate


def memory(work: ModelWork, system: System, layout: Layout, seq_len: int, dtype: str) -> Memory:
    p_dev = work.params / (layout.tp * layout.pp)
    dp = layout.dp
    w, g, o = STATE_BYTES["weights"], STATE_BYTES["grads"], STATE_BYTES["optimizer"]
    if dtype == "fp8":
        w += FP8_WEIGHT_COPY
    if layout.sharding == "ddp":
        weights, grads, opt = w * p_dev, g * p_dev, o * p_dev
    elif layout.sharding == "zero1":
        weights, grads, opt = w * p_dev, g * p_dev / dp + 2.0 * p_dev / layout.pp, o * p_dev / dp
    else:  # fsdp: everything sharded, plus two gathered layers in flight
        per_layer = p_dev * layout.pp / max(1, work.dims.layers)
        weights = w * p_dev / dp + 2.0 * 2.0 * per_layer
        grads, opt = g * p_dev / dp + 2.0 * per_layer, o * p_dev / dp
    tok = (
        seq_len / layout.cp * layout.micro_batch
    )  # tokens of one micro-batch on this device's sequence shard
    layers_here = work.dims.layers / layout.pp
    in_flight = min(layout.pp, layout.micro_batches) if layout.pp > 1 else 1
    per_layer = _act_bytes_per_token_layer(work) * tok / layout.tp
    if layout.recompute == "full":
        acts = layers_here * in_flight * 2.0 * work.dims.hidden * tok / layout.tp + per_layer
    else:
        acts = layers_here * in_flight * per_layer
    logits = 4.0 * tok * work.dims.vocab / layout.tp if work.dims.head in ("lm", "mlm") else 0.0
    usable = system.memory_bytes * (1.0 - MEMORY_RESERVE) - MEMORY_RESERVE_BYTES
    return Memory(weights, grads, opt, acts, logits, usable)


# --- time ----------------------------------------------------------------------------------------


def flops_per_token(work: ModelWork, seq_len: int) -> tuple[float, float]:
    """(linear, attention) forward FLOPs per trained token; causal attention averages seq_len / 2 keys."""
    d = work.dims
    linear = 2.0 * (work.matmul_params + work.head_params)
    keys = seq_len / 2.0 if d.kind == "decoder" else float(seq_len)
    attention = 4.0 * keys * d.heads * d.head_dim * d.layers
    return linear, attention


def _ring(n: int) -> float:
    return (n - 1) / n if n > 1 else 0.0


def step_time(
    work: ModelWork, system: System, layout: Layout, coef: Coef, *, seq_len: int, dtype: str, nodes: int
) -> StepTime:
    """Seconds of one optimizer step of `layout` on `nodes` nodes of `system` (see the module docstring)."""
    g = system.group
    e16 = coef.get(f"e16_{g}")
    lin, att = flops_per_token(work, seq_len)
    mult = 4.0 if layout.recompute == "full" else 3.0
    if dtype == "fp8":
        t_lin = lin / (system.peak("fp8") * coef.get(f"e8_{g}"))
    else:
        t_lin = lin / (system.peak(dtype) * e16)
    t_att = att / (system.peak("bf16") * e16)
    tokens = float(layout.global_batch) * seq_len
    per_replica = tokens / layout.dp
    split = layout.tp * layout.pp * layout.cp
    compute = per_replica * mult * (t_lin + t_att) / split
    bubble = compute * (layout.pp - 1) / (layout.micro_batches * layout.vp) if layout.pp > 1 else 0.0
    act = _act_bytes_per_token_layer(work) * work.dims.layers
    mem = per_replica * ELEMENTWISE_PASSES * act / split / system.hbm_bytes_s
    dpn = system.devices_per_node
    # tensor parallel: 4 collectives of the hidden state per layer and token (2 forward, 2 backward; 2 more
    # forward with full recompute); context parallel: K and V passed round the ring forward and backward
    h = float(work.dims.hidden)
    tp_bw = system.intra_bytes_s if layout.tp <= dpn else system.inter_bytes_s
    n_coll = 6.0 if layout.recompute == "full" else 4.0
    tok_here = per_replica / layout.cp
    layers_here = work.dims.layers / layout.pp
    tp_s = tok_here * layers_here * n_coll * 2.0 * _ring(layout.tp) * h * 2.0 / tp_bw
    cp_bw = system.intra_bytes_s if layout.tp * layout.cp <= dpn else system.inter_bytes_s
    kv = 2.0 * work.dims.kv_heads * work.dims.head_dim * 2.0
    cp_s = tok_here * layers_here * 3.0 * _ring(layout.cp) * kv / (layout.tp * cp_bw)
    tp_comm = coef.get("x_tp") * (tp_s + cp_s)
    # data parallel: the group crosses nodes when the model-parallel block fills a node or more and nodes > 1
    p_dev = work.params / (layout.tp * layout.pp)
    spans = nodes > 1 and layout.dp > max(1, dpn // (layout.tp * layout.cp * min(layout.pp, dpn)))
    dp_bw = system.inter_bytes_s if spans else system.intra_bytes_s
    r = _ring(layout.dp)
    if layout.sharding == "ddp":
        vol = 2.0 * r * p_dev * 2.0
    elif layout.sharding == "zero1":
        vol = r * p_dev * (2.0 + 2.0)
    else:
        vol = r * p_dev * 2.0 * (2.0 * layout.micro_batches + 1.0)
    dp_total = vol / dp_bw
    # gradients are reduced once a step, so only the last micro-batch's backward can hide them (FSDP's gathers
    # overlap every micro-batch's own compute)
    hide = DP_OVERLAP * compute / (1 if layout.sharding == "fsdp" else layout.micro_batches)
    dp_exposed = max(0.0, dp_total - hide)
    return StepTime(compute, bubble, mem, tp_comm, dp_exposed, dp_total, tokens, layout.devices)


# --- search --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    memory: Memory
    time: StepTime | None
    reason: str = ""


@dataclass(frozen=True)
class SearchResult:
    best: Candidate | None
    feasible: int
    rejected: tuple[tuple[str, str], ...] = field(default=())
    considered: int = 0
    closest: Candidate | None = None  # the layout needing the least memory (what to quote when none fits)


def _divisors(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _virtual(layers: int, pp: int) -> list[int]:
    """Virtual (interleaved) pipeline stages per device: 1, or 2 / 4 / 8 where the layers split evenly."""
    if pp == 1:
        return [1]
    return [1] + [v for v in VIRTUAL if layers % (pp * v) == 0]


def layouts(work: ModelWork, system: System, *, nodes: int, seq_len: int, global_batch: int) -> list[Layout]:
    """Every layout chipswap tries on `nodes` nodes: TP inside a node (dividing the heads), PP up to 16 stages
    dividing the layers, CP 2 for sequences >= 8192, each sharding / recompute / micro-batch / virtual stages;
    only layouts whose data-parallel replicas split the global batch into whole micro-batches."""
    d = work.dims
    devices = nodes * system.devices_per_node
    out = []
    tps = [t for t in _divisors(system.devices_per_node, system.devices_per_node) if d.heads % t == 0]
    pps = [p for p in _divisors(d.layers, MAX_PP) if devices % p == 0]
    cps = (1, 2) if seq_len >= 8192 and d.kind == "decoder" else (1,)
    for tp in tps:
        for pp in pps:
            for cp in cps:
                if devices % (tp * pp * cp):
                    continue
                dp = devices // (tp * pp * cp)
                for mb in MICRO_BATCHES:
                    if global_batch % (dp * mb):
                        continue  # the global batch is the user's: it must split into whole micro-batches
                    gb = global_batch
                    for sh in SHARDINGS:
                        if sh != "ddp" and dp == 1:
                            continue
                        for rc in RECOMPUTE:
                            for vp in _virtual(d.layers, pp):
                                out.append(Layout(tp, pp, dp, cp, sh, rc, mb, vp, gb))
    return out


def search(
    work: ModelWork,
    system: System,
    coef: Coef,
    *,
    nodes: int,
    seq_len: int,
    dtype: str,
    global_batch: int,
    fixed: Layout | None = None,
) -> SearchResult:
    """The fastest layout that fits in memory (or `fixed` alone), with why the others were not chosen."""
    cands = (
        [fixed]
        if fixed is not None
        else layouts(work, system, nodes=nodes, seq_len=seq_len, global_batch=global_batch)
    )
    best: Candidate | None = None
    closest: Candidate | None = None
    rejected: list[tuple[str, str]] = []
    feasible = 0
    for lay in cands:
        mem = memory(work, system, lay, seq_len, dtype)
        if closest is None or mem.total < closest.memory.total:
            closest = Candidate(lay, mem, None)
        if not mem.fits and fixed is None:
            rejected.append(
                (
                    lay.label(),
                    f"does not fit: {mem.total / GiB:,.1f} GiB per {system.device_unit} > "
                    f"{mem.usable / GiB:,.1f} GiB usable",
                )
            )
            continue
        feasible += 1
        t = step_time(work, system, lay, coef, seq_len=seq_len, dtype=dtype, nodes=nodes)
        c = Candidate(lay, mem, t)
        if best is None or t.tokens_per_s_per_device > best.time.tokens_per_s_per_device:  # type: ignore[union-attr]
            if best is not None:
                rejected.append((best.layout.label(), _slower(best, c)))
            best = c
        else:
            rejected.append((lay.label(), _slower(c, best)))
    return SearchResult(best, feasible, tuple(rejected), len(cands), closest)


def _slower(c: Candidate, best: Candidate) -> str:
    assert c.time is not None and best.time is not None
    ratio = c.time.tokens_per_s_per_device / best.time.tokens_per_s_per_device
    shares = c.time.shares()
    worst = max((k for k in shares if k != "compute"), key=lambda k: shares[k])
    what = worst.replace("_", " ")
    return f"{(1 - ratio) * 100:.0f}% slower (its largest overhead: {what} {shares[worst]:.0%})"


def with_batch(layout: Layout, global_batch: int) -> Layout:
    return replace(layout, global_batch=global_batch)
