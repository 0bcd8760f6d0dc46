"""Training throughput with layout and scale: how a dense transformer trains on N nodes of one instance type.

What it is for: `chipswap project --train-tokens`, the plan's training workloads and the training calibration
(training/fit.py) all call `step_time` / `search` here, so a projection and its held-out error band come
from one definition. It models, per device and per optimizer step:
  - compute: linear-layer FLOPs at the bf16 peak x a fitted efficiency (per family where the rows differ, x
    a published stack's own factor where it reached another share of the same chip), fp8 as a measured
    speed-up of the linear layers per training stack (causal attention stays bf16), x 4/3 with full activation
    recompute (selective: the attention core, or every other matmul on the PyTorch stack);
  - elementwise HBM traffic (norms, activations; a fixed count of passes, an assumption);
  - tensor / context parallel collectives (all-reduce or reduce-scatter + all-gather of the activations every
    layer) over NVLink/NVSwitch or NeuronLink inside a node, EFA across nodes, x the stack's exposed share
    (fitted for Megatron-style overlap, all of it for PyTorch DTensor TP);
  - data-parallel gradient collectives (DDP all-reduce, ZeRO-1 reduce-scatter + all-gather, FSDP all-gathers
    every micro-batch) over the slowest link the group crosses, overlapped with the backward pass up to a
    stated share;
  - pipeline bubbles (pp - 1) / (micro-batches x virtual stages), and the busiest stage of an uneven split
    (ceil(layers / pp) layers);
  - peak memory per device (weights, gradients, optimizer states sharded over DP x CP, activations by
    recompute mode as the stack means it and CP shard, fp8 weight copies, FSDP gather / reduce buffers (the
    whole stage with pipeline stages), logits at the stack's loss, allocator fragmentation and runtime) that
    rejects layouts which do not fit; checked against published peaks (training.fit.peak_check).
`search` enumerates TP x PP x CP x sharding x recompute x micro-batch, rejects what does not fit (saying why)
and keeps the fastest; when no layout can split the global batch it says so (not "does not fit").

Pure: no I/O, no torch, no clock; it may not read files, prices or the catalog (callers pass a System).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.projection.work import GiB, ModelWork

SHARDINGS = ("ddp", "zero1", "fsdp", "hsdp")  # hsdp: FSDP inside a node, replicated across nodes
RECOMPUTE = ("none", "selective", "full")
MICRO_BATCHES = (1, 2, 4, 8, 16)
MAX_PP = 16
MAX_CP = 16
CP_MIN_TOKENS = 4096  # context parallelism is tried while each shard keeps at least this many tokens
VIRTUAL = (2, 4, 8)
# Activation recompute (assumptions, stated in docs/projection.md): bytes kept per token and layer as
# (x hidden, x K/V width, x intermediate), and how many forward passes of the linear layers / attention
# core run.
# selective = the attention core (and its softmax / dropout) recomputed, matmul outputs kept (Megatron
# "selective"); full = only each layer's input kept, the whole forward run twice. selective-op is "selective"
# on the PyTorch stack, torchtitan's op-level SAC: it keeps the output of every other matmul and of attention
# (layer input 2h, q 2h, v 2 kv, attention out 2h, up 2i, down 2h) and recomputes the rest (the other matmuls:
# k, out, gate, ~40 % of the linear forward; the elementwise ops). act_i scales the MLP's 4-6 x intermediate,
# act_i_bytes the intermediate itself.
RECOMPUTE_RULES = {
    "none": {"act_h": 16.0, "act_i": 1.0, "linear_fwd": 1.0, "attention_fwd": 1.0},
    "selective": {"act_h": 10.0, "act_i": 0.67, "linear_fwd": 1.0, "attention_fwd": 2.0},
    "selective-op": {"act_h": 8.0, "act_kv": 2.0, "act_i_bytes": 2.0, "linear_fwd": 1.4,
                     "attention_fwd": 1.0},
    "full": {"act_h": 2.0, "act_i": 0.0, "linear_fwd": 2.0, "attention_fwd": 2.0},
}  # fmt: skip
# Training stacks: which exposed share of tensor/context-parallel collectives applies, which measured fp8
# speed-up of the linear layers, and which efficiency factor on the family's (None: a reference stack, 1).
# megatron: NeMo / Megatron-Core / Megatron-Bridge and Meta's Llama 3 4D stack (TP communication overlapped
# with GEMMs, distributed optimizer); pytorch: PyTorch FSDP / DTensor (torchtitan, Accelerate): TP collectives
# run between the matmuls, exposed in full (assumption); neuron: NxD (neuronx-distributed), what a Trainium
# projection assumes (no fp8 training). Stacks only published rows ran (calibration only, never a user's
# --train-stack): composer: LLM Foundry / Composer (PyTorch FSDP with MPT's fused cross-entropy); and,
# each with a fitted efficiency of its own (it reached another share of the chip's peak than the reference):
# meta-2023: Meta's LLaMA / Llama 2 code on A100 (xformers attention, model + sequence parallel); neuron-nemo:
# neuronx-nemo-megatron; neuron-hf: Hugging Face Trainer + torch-neuronx, data parallel only.
# Memory per stack: "selective" names the RECOMPUTE_RULES entry its selective checkpointing is; loss_bytes:
# bytes per logit (token x vocab / TP) at the loss: PyTorch's unfused cross-entropy holds the bf16 logits 2 +
# an fp32 copy 4 + the fp32 log-softmax kept for the backward 4 = 10; a fused cross-entropy (Megatron's
# vocab-parallel one, MPT's) one fp32 copy, 4. tp_replicated_h: bytes x hidden a token a layer holds whole
# under TP: DTensor's sequence parallel all-gathers the inputs of the attention and MLP column-parallel
# matmuls (2h each) and autograd keeps the gathered copies (Megatron keeps the sequence shard, 0).
STACK_RULES = {
    "megatron": {"group": "nvidia", "tp_exposed": "x_tp", "fp8": "s8_megatron", "efficiency": None},
    "pytorch": {"group": "nvidia", "tp_exposed": None, "fp8": "s8_pytorch", "efficiency": None,
                "selective": "selective-op", "loss_bytes": 10.0, "tp_replicated_h": 4.0},
    "composer": {"group": "nvidia", "tp_exposed": None, "fp8": "s8_composer", "efficiency": None,
                 "selective": "selective-op", "loss_bytes": 4.0, "tp_replicated_h": 4.0},
    "meta-2023": {"group": "nvidia", "tp_exposed": "x_tp", "fp8": "s8_megatron", "efficiency": "f_meta2023"},
    "neuron": {"group": "neuron", "tp_exposed": "x_tp", "fp8": "s8_neuron", "efficiency": None},
    "neuron-nemo": {"group": "neuron", "tp_exposed": "x_tp", "fp8": None, "efficiency": "f_neuron_nemo"},
    "neuron-hf": {"group": "neuron", "tp_exposed": "x_tp", "fp8": None, "efficiency": "f_neuron_hf"},
}  # fmt: skip
LOSS_BYTES = 4.0  # a stack without its own loss_bytes
TRAIN_STACKS = ("pytorch", "megatron")
FP8_UNMEASURED = 1.0  # fp8 speed-up when no stack has fp8 rows at all (none assumed)
FP8_FITTED = ("s8_megatron", "s8_composer")  # the stacks whose fp8 rows fit a speed-up of their own
# fp8 recipes: how the linear layers are scaled. tensorwise (one scale per tensor: Transformer Engine's
# delayed / current scaling, torchao's tensorwise Float8) is what every fitted fp8 row ran; rowwise (a scale
# per row, torchao) and mxfp8 (32-element blocks, Blackwell only) multiply the tensorwise speed-up by the
# calibration's measured recipe ratio (calibration.toml [fp8_recipes], from published pairs at one layout) or,
# with none, by 1 with the band widened (projection.training.project).
FP8_RECIPES = ("tensorwise", "rowwise", "mxfp8")
FP8_BLOCK_FAMILIES = ("B200",)  # block-scaled (MX) fp8 needs Blackwell tensor cores
# assumptions (stated in docs/projection.md): bytes of optimizer state per parameter with mixed precision
# Adam (bf16 weights 2 + fp32 gradients 4 + fp32 master 4 + two fp32 moments 8 = 18; ZeRO-1 shards the last
# 12, FSDP all of it), elementwise passes over the stored activations, the share of a micro-batch's compute
# (its backward) a data-parallel collective can hide behind, and memory the allocator and runtime hold.
STATE_BYTES = {"weights": 2.0, "grads": 4.0, "optimizer": 12.0}
FP8_WEIGHT_COPY = 1.0  # fp8 runs keep an fp8 copy (and transpose) of every linear weight
ELEMENTWISE_PASSES = 3.0
DP_OVERLAP = 2.0 / 3.0  # the backward pass's share of a micro-batch's compute
FRAGMENTATION = 0.10  # the caching allocator reserves ~10 % over what is allocated at the peak (assumption)
RUNTIME_BYTES = 1.0 * GiB  # CUDA / Neuron runtime, NCCL / collective buffers (assumption)


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
        parts.append(f"{ {'fsdp': 'FSDP', 'hsdp': 'HSDP'}.get(self.sharding, 'DP') }{self.dp}")
        if self.sharding == "zero1":
            parts[-1] += " ZeRO-1"
        tail = f"micro-batch {self.micro_batch}, global batch {self.global_batch}"
        if self.recompute != "none":
            tail += f", {self.recompute} recompute"
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
    """Bytes per device of one layout (the busiest device: first pipeline stage, last for the logits).
    total: what is allocated at the peak; peak: what the allocator holds (total x (1 + FRAGMENTATION) + the
    runtime), the figure a framework's "peak memory" prints; usable: the allocation that still fits."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    logits: float
    usable: float
    buffers: float = 0.0  # FSDP gather / reduce-scatter buffers, CP ring K/V chunks
    capacity: float = 0.0  # the device's memory

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.logits + self.buffers

    @property
    def peak(self) -> float:
        return self.total * (1.0 + FRAGMENTATION) + RUNTIME_BYTES

    @property
    def fits(self) -> bool:
        return self.total <= self.usable

    def as_dict(self) -> dict[str, float]:
        parts = ("weights", "grads", "optimizer", "activations", "logits", "buffers", "total", "peak",
                 "usable", "capacity")  # fmt: skip
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


def recompute_rule(recompute: str, stack: str = "megatron") -> dict[str, float]:
    """The RECOMPUTE_RULES entry a recompute mode means on a stack (STACK_RULES "selective")."""
    if recompute == "selective":
        recompute = str(STACK_RULES[stack].get("selective", "selective"))
    return RECOMPUTE_RULES[recompute]


def _act_bytes_per_token_layer(work: ModelWork, recompute: str = "none", stack: str = "megatron") -> float:
    """bf16 activations a layer keeps for its backward, per token (flash attention: no score matrix): with no
    recompute, norms, QKV and attention outputs ~16 h and the MLP's up/gate/activation outputs 4-6 x
    intermediate; less by recompute mode (RECOMPUTE_RULES, as the stack means it)."""
    d = work.dims
    r = recompute_rule(recompute, stack)
    return (
        r["act_h"] * d.hidden
        + r.get("act_kv", 0.0) * d.kv_heads * d.head_dim
        + r.get("act_i", 0.0) * (6.0 if d.gated_mlp else 4.0) * d.intermediate
        + r.get("act_i_bytes", 0.0) * d.intermediate
    )


def stage_layers(layers: int, pp: int) -> int:
    """Layers on the busiest pipeline stage: stacks split unevenly (Megatron's uneven first / last stages,
    torchtitan's manual split), so pp need not divide the layer count."""
    return -(-layers // pp)


def state_shards(layout: Layout, devices_per_node: int = 1 << 30) -> int:
    """Devices the sharded training state is spread over: the data-parallel group and the context-parallel
    ranks (Megatron's distributed optimizer and FSDP both shard over DP x CP); HSDP only over the part of
    that group inside one node (it replicates across nodes)."""
    group = layout.dp * layout.cp
    if layout.sharding == "hsdp":
        return max(1, min(group, devices_per_node // layout.tp))
    return group


def memory(
    work: ModelWork, system: System, layout: Layout, seq_len: int, dtype: str, stack: str | None = None
) -> Memory:
    """Peak bytes per device of `layout` on `stack` (STACK_RULES; default as step_time's): see Memory."""
    d = work.dims
    stk = stack_for(system, stack)
    layers_here = stage_layers(d.layers, layout.pp)
    p_dev = work.params / layout.tp * (layers_here / max(1, d.layers) if layout.pp > 1 else 1.0)
    shards = state_shards(layout, system.devices_per_node)
    w, g, o = STATE_BYTES["weights"], STATE_BYTES["grads"], STATE_BYTES["optimizer"]
    if dtype == "fp8":
        w += FP8_WEIGHT_COPY
    per_layer_p = p_dev / max(1, layers_here)
    buffers = 0.0
    if layout.sharding == "ddp":
        weights, grads, opt = w * p_dev, g * p_dev, o * p_dev
    elif layout.sharding == "zero1":
        # Megatron's distributed optimizer: bf16 weights and the fp32 gradient buffer whole, the fp32 master
        # and Adam moments sharded (6 + 12 / shards bytes a parameter)
        weights, grads, opt = w * p_dev, g * p_dev, o * p_dev / shards
    else:  # fsdp / hsdp: everything sharded; two layers gathered in bf16 (the one running and the prefetch)
        # and their gradients reduce-scattered in fp32. With pipeline stages FSDP keeps the stage gathered
        # between micro-batches (no re-shard after forward) and accumulates its gradients unsharded (bf16)
        # until the last micro-batch (torchtitan / FSDP2 with pipelining): 2 + 2 bytes a parameter of the
        # stage
        weights, grads, opt = w * p_dev / shards, g * p_dev / shards, o * p_dev / shards
        if layout.pp > 1:
            buffers += (2.0 + 2.0) * p_dev
        else:
            buffers += 2.0 * 2.0 * per_layer_p + 2.0 * 4.0 * per_layer_p
    tok = (
        seq_len / layout.cp * layout.micro_batch
    )  # tokens of one micro-batch on this device's sequence shard
    in_flight = min(layout.pp, layout.micro_batches) if layout.pp > 1 else 1
    kept = _act_bytes_per_token_layer(work, layout.recompute, stk) * tok / layout.tp
    working = _act_bytes_per_token_layer(work, "none") * tok / layout.tp  # the layer being recomputed
    rep = float(STACK_RULES[stk].get("tp_replicated_h", 0.0)) * d.hidden * tok * (1.0 - 1.0 / layout.tp)
    if layout.recompute == "none":
        acts = layers_here * in_flight * (kept + rep)
    else:  # the layers' checkpoints, and one layer's whole activations while it is recomputed
        acts = layers_here * in_flight * kept + working + rep
    if layout.cp > 1:  # ring attention: this shard's K/V plus the chunk arriving (send / receive)
        buffers += 2.0 * 2.0 * d.kv_heads * d.head_dim * 2.0 * tok / layout.tp
    loss_bytes = float(STACK_RULES[stk].get("loss_bytes", LOSS_BYTES))
    logits = loss_bytes * tok * d.vocab / layout.tp if d.head in ("lm", "mlm") else 0.0
    usable = (system.memory_bytes - RUNTIME_BYTES) / (1.0 + FRAGMENTATION)
    return Memory(weights, grads, opt, acts, logits, usable, buffers, system.memory_bytes)


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


def efficiency(system: System, coef: Coef, stack: str | None = None) -> float:
    """Share of the bf16 peak the linear layers reach: the vendor group's, x the family's own factor where
    its rows differ (k_<family>, e.g. A100; families without one take the group's, H100-class), x the stack's
    own factor where it has one (STACK_RULES "efficiency"; a stack whose factor is not calibrated takes the
    reference stack's, 1)."""
    e = coef.get(f"e16_{system.group}")
    k = f"k_{system.family}"
    e = e * coef.get(k) if coef.has(k) else e
    f = STACK_RULES[stack]["efficiency"] if stack else None
    return e * coef.get(f) if f and coef.has(f) else e


def stack_for(system: System, stack: str | None) -> str:
    """The STACK_RULES key a step runs on: the given stack where it belongs to the system's vendor group, else
    the group's default (pytorch on NVIDIA, NxD on Neuron)."""
    if stack is not None and STACK_RULES[stack]["group"] == system.group:
        return stack
    return "neuron" if system.group == "neuron" else "pytorch"


def fp8_speedups(coef: Coef) -> list[float]:
    """The fp8 speed-ups of the linear layers fitted per stack (FP8_FITTED present in `coef`)."""
    return [coef.get(k) for k in FP8_FITTED if coef.has(k)]


def fp8_speedup(stack: str, coef: Coef) -> float:
    """Speed-up of the linear layers in fp8 over bf16 for a stack: its own fitted s8_<stack>; a stack with
    no fp8 rows of its own gets the cross-stack speed-up (the geometric mean of the fitted stacks'; their
    spread is its band, fp8_spread), never the 1.0 floor while any stack has fp8 rows."""
    name = STACK_RULES[stack]["fp8"]
    if name is None:
        raise ChipswapError(f"the {stack} stack does not train in fp8; use bf16")
    if coef.has(name):
        return coef.get(name)
    got = fp8_speedups(coef)
    if not got:
        return FP8_UNMEASURED
    prod = 1.0
    for v in got:
        prod *= v
    return float(prod ** (1.0 / len(got)))


def fp8_spread(stack: str, coef: Coef) -> tuple[float, ...]:
    """The fitted stacks' speed-ups a stack without its own spans (its band covers each); () when the stack
    has its own."""
    name = STACK_RULES[stack]["fp8"]
    if name is None or coef.has(name):
        return ()
    return tuple(fp8_speedups(coef))


def with_fp8(coef: Coef, stack: str, speedup: float) -> Coef:
    """`coef` with the stack's fp8 speed-up set (a recipe's, or one end of the cross-stack spread)."""
    name = STACK_RULES[stack]["fp8"]
    if name is None:
        return coef
    return Coef(tuple((k, v) for k, v in coef.values if k != name) + ((name, float(speedup)),))


def tp_exposed(stack: str, coef: Coef) -> float:
    name = STACK_RULES[stack]["tp_exposed"]
    return 1.0 if name is None else coef.get(name)


def step_time(
    work: ModelWork,
    system: System,
    layout: Layout,
    coef: Coef,
    *,
    seq_len: int,
    dtype: str,
    nodes: int,
    stack: str | None = None,
) -> StepTime:
    """Seconds of one optimizer step of `layout` on `nodes` nodes of `system` (see the module docstring).
    stack: a key of STACK_RULES (default: neuron on Trainium, pytorch elsewhere)."""
    stk = stack_for(system, stack)
    e16 = efficiency(system, coef, stk)
    lin, att = flops_per_token(work, seq_len)
    rule = recompute_rule(layout.recompute, stk)
    t_lin = lin / (system.peak("bf16") * e16)
    if dtype == "fp8":
        t_lin /= fp8_speedup(stk, coef)
    t_att = att / (system.peak("bf16") * e16)
    tokens = float(layout.global_batch) * seq_len
    per_replica = tokens / layout.dp
    d = work.dims
    layers_here = stage_layers(d.layers, layout.pp)
    imbalance = layers_here * layout.pp / d.layers if layout.pp > 1 else 1.0
    split = layout.tp * layout.pp * layout.cp
    per_token = (2.0 + rule["linear_fwd"]) * t_lin + (2.0 + rule["attention_fwd"]) * t_att
    compute = per_replica * per_token / split * imbalance
    bubble = compute * (layout.pp - 1) / (layout.micro_batches * layout.vp) if layout.pp > 1 else 0.0
    act = _act_bytes_per_token_layer(work) * d.layers
    mem = per_replica * ELEMENTWISE_PASSES * act / split * imbalance / system.hbm_bytes_s
    dpn = system.devices_per_node
    # tensor parallel: 4 collectives of the hidden state per layer and token (2 forward, 2 backward; 2 more
    # forward when the linear layers are recomputed); context parallel: K and V passed round the ring
    # forward and backward (once more when the attention core is recomputed)
    h = float(d.hidden)
    tp_bw = system.intra_bytes_s if layout.tp <= dpn else system.inter_bytes_s
    n_coll = 4.0 + 2.0 * (rule["linear_fwd"] - 1.0)
    tok_here = per_replica / layout.cp
    tp_s = tok_here * layers_here * n_coll * 2.0 * _ring(layout.tp) * h * 2.0 / tp_bw
    cp_bw = system.intra_bytes_s if layout.tp * layout.cp <= dpn else system.inter_bytes_s
    kv = 2.0 * d.kv_heads * d.head_dim * 2.0
    cp_s = (
        tok_here * layers_here * (2.0 + rule["attention_fwd"]) * _ring(layout.cp) * kv / (layout.tp * cp_bw)
    )
    tp_comm = tp_exposed(stk, coef) * (tp_s + cp_s)
    # data parallel (with CP ranks: the gradients are reduced over DP x CP): the group crosses nodes when the
    # model-parallel block fills a node or more and nodes > 1
    p_dev = work.params / (layout.tp * layout.pp) * imbalance
    spans = nodes > 1 and layout.dp > max(1, dpn // (layout.tp * layout.cp * min(layout.pp, dpn)))
    dp_bw = system.inter_bytes_s if spans else system.intra_bytes_s
    shards = state_shards(layout, dpn)
    r = _ring(shards)
    last = DP_OVERLAP * compute / layout.micro_batches  # the last micro-batch's backward
    if layout.sharding == "ddp":
        dp_total = 2.0 * r * p_dev * 2.0 / dp_bw
        dp_exposed = max(0.0, dp_total - last)
    elif layout.sharding == "zero1":
        dp_total = r * p_dev * (2.0 + 2.0) / dp_bw
        dp_exposed = max(0.0, dp_total - last)
    else:
        # FSDP: gathers every micro-batch (forward and backward) and one reduce-scatter, hidden behind each
        # micro-batch's own compute; HSDP does that inside the node and all-reduces its gradient shard across
        # the replicas once a step
        bw = system.intra_bytes_s if layout.sharding == "hsdp" else dp_bw
        inside = r * p_dev * 2.0 * (2.0 * layout.micro_batches + 1.0) / bw
        replicas = layout.dp * layout.cp // shards
        across = 2.0 * _ring(replicas) * p_dev / shards * 2.0 / system.inter_bytes_s
        dp_total = inside + across
        dp_exposed = max(0.0, inside - DP_OVERLAP * compute) + max(0.0, across - last)
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


def virtual_stages(layers: int, pp: int) -> list[int]:
    """Virtual (interleaved) pipeline stages per device: 1, or 2 / 4 / 8 where the layers split evenly."""
    if pp == 1:
        return [1]
    return [1] + [v for v in VIRTUAL if layers % (pp * v) == 0]


def degrees(work: ModelWork, system: System, *, nodes: int, seq_len: int) -> dict[str, list[int]]:
    """The TP / PP / CP degrees the search tries: TP inside a node dividing the heads; PP up to 16 stages
    (uneven splits allowed, at least one layer a stage); CP powers of two while each shard keeps
    CP_MIN_TOKENS tokens (decoders only)."""
    d = work.dims
    devices = nodes * system.devices_per_node
    tps = [t for t in _divisors(system.devices_per_node, system.devices_per_node) if d.heads % t == 0]
    pps = [p for p in _divisors(devices, min(MAX_PP, d.layers))]
    cps = [1]
    while d.kind == "decoder" and cps[-1] * 2 <= MAX_CP and seq_len // (cps[-1] * 2) >= CP_MIN_TOKENS:
        cps.append(cps[-1] * 2)
    return {"tp": tps, "pp": pps, "cp": cps}


def layouts(work: ModelWork, system: System, *, nodes: int, seq_len: int, global_batch: int) -> list[Layout]:
    """Every layout chipswap tries on `nodes` nodes (`degrees`), each sharding / recompute / micro-batch /
    virtual stages; only layouts whose data-parallel replicas split the global batch into whole
    micro-batches."""
    d = work.dims
    devices = nodes * system.devices_per_node
    deg = degrees(work, system, nodes=nodes, seq_len=seq_len)
    out = []
    for tp in deg["tp"]:
        for pp in deg["pp"]:
            for cp in deg["cp"]:
                if devices % (tp * pp * cp):
                    continue
                dp = devices // (tp * pp * cp)
                for mb in MICRO_BATCHES:
                    if global_batch % (dp * mb):
                        continue  # the global batch is the user's: it must split into whole micro-batches
                    for sh in SHARDINGS:
                        if (sh != "ddp" and dp * cp == 1) or (sh == "hsdp" and nodes == 1):
                            continue
                        for rc in RECOMPUTE:
                            for vp in virtual_stages(d.layers, pp):
                                out.append(Layout(tp, pp, dp, cp, sh, rc, mb, vp, global_batch))
    return out


def batch_split_reason(
    work: ModelWork, system: System, *, nodes: int, seq_len: int, global_batch: int
) -> str:
    """Why no layout splits the global batch: the fewest data-parallel replicas any layout needs."""
    devices = nodes * system.devices_per_node
    deg = degrees(work, system, nodes=nodes, seq_len=seq_len)
    block = max(
        t * p * c for t in deg["tp"] for p in deg["pp"] for c in deg["cp"] if devices % (t * p * c) == 0
    )
    least = devices // block
    return (
        f"a global batch of {global_batch} sequence{'s' if global_batch != 1 else ''} cannot split over "
        f"{devices} {system.device_unit}s: the largest model-parallel block tried (TP x PP x CP) is {block}, "
        f"so at least {least} data-parallel replicas need a sequence each; raise the global batch to a "
        f"multiple of {least} or use fewer nodes"
    )


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
    candidates: list[Layout] | None = None,
    stack: str | None = None,
) -> SearchResult:
    """The fastest layout that fits in memory (among `candidates`, or `fixed` alone, or every layout of
    the search), with why the others were not chosen."""
    cands = (
        [fixed]
        if fixed is not None
        else candidates
        if candidates is not None
        else layouts(work, system, nodes=nodes, seq_len=seq_len, global_batch=global_batch)
    )
    best: Candidate | None = None
    closest: Candidate | None = None
    rejected: list[tuple[str, str]] = []
    feasible = 0
    for lay in cands:
        mem = memory(work, system, lay, seq_len, dtype, stack)
        if closest is None or mem.total < closest.memory.total:
            closest = Candidate(lay, mem, None)
        if not mem.fits and fixed is None:
            rejected.append(
                (
                    lay.label(),
                    f"does not fit: {mem.peak / GiB:,.1f} GiB peak per {system.device_unit} > "
                    f"{mem.capacity / GiB:,.1f} GiB",
                )
            )
            continue
        feasible += 1
        t = step_time(work, system, lay, coef, seq_len=seq_len, dtype=dtype, nodes=nodes, stack=stack)
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
