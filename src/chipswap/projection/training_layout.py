"""Training layouts the user pins, and the conventional layout a framework starts from.

What it is for: `chipswap project --train-layout tp=8,pp=1,...`, the workload's `job.layout` table and the
training calibration (rows pinned to their published layout) all go through `parse_layout` / `LayoutPin`
and `pinned_layouts`; `conventional` is the layout a team's stack would start from (PyTorch FSDP with full
recompute where memory needs it, TP then PP only when it does not fit; Megatron / Neuron stacks with the
distributed optimizer), so the CLI can print it beside chipswap's fastest feasible layout.

Pure: no I/O, no clock; it may not read files, prices or the catalog (callers pass a System).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.projection.training_model import (
    MICRO_BATCHES,
    RECOMPUTE,
    SHARDINGS,
    Coef,
    Layout,
    System,
    degrees,
    memory,
    stack_for,
    step_time,
    virtual_stages,
)
from chipswap.projection.work import ModelWork

SHARDING_NAMES = {"fsdp": "fsdp", "hsdp": "hsdp", "zero1": "zero1", "none": "ddp", "ddp": "ddp"}
INT_KEYS = {"tp": 1024, "pp": 256, "cp": 256, "dp": 1 << 20, "micro_batch": 4096, "vp": 64}
KEYS = ("tp", "pp", "cp", "dp", "sharding", "recompute", "micro_batch", "vp")
# the ladder a conventional setup climbs until the model fits (recompute modes, sharding); None: the stack
# starts from a published recipe (NeMo / Megatron-Bridge, the Neuron tutorials), tuned layouts for which
# chipswap's fastest feasible layout stands in
CONVENTION: dict[str, dict[str, Any] | None] = {
    "pytorch": {"sharding": ("fsdp", "hsdp"), "recompute": ("none", "full")},
    "megatron": None,
    "composer": {"sharding": ("fsdp", "hsdp"), "recompute": ("none", "full")},
    "meta-2023": None,
    "neuron": None,
    "neuron-nemo": None,
    "neuron-hf": None,
}
MAX_CONVENTIONAL_MICRO_BATCH = 16


class LayoutError(ChipswapError):
    """Several problems with one layout: `lines` holds one line per bad key or value."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = list(lines)


@dataclass(frozen=True)
class LayoutPin:
    """A layout as far as the user pins it (None = chipswap chooses)."""

    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    dp: int | None = None
    sharding: str | None = None
    recompute: str | None = None
    micro_batch: int | None = None
    vp: int | None = None

    def given(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @property
    def complete(self) -> bool:
        return all(getattr(self, k) is not None for k in ("tp", "pp", "cp", "sharding", "recompute"))

    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.given().items()) or "(none)"


def _bad(key: str, value: str, what: str) -> str:
    return f"--train-layout {key}={value}: {what}"


def pin_from_mapping(items: dict[str, Any], *, where: str = "--train-layout") -> LayoutPin:
    """A LayoutPin from key -> value (strings from the CLI or values of a workload table); every bad key or
    value is one line of the LayoutError."""
    lines: list[str] = []
    out: dict[str, Any] = {}
    for key, raw in items.items():
        k = str(key).strip().lower().replace("-", "_")
        v = str(raw).strip().lower()
        if k not in KEYS:
            lines.append(f"{where}: unknown key {key!r}; use {', '.join(KEYS)}")
        elif k in INT_KEYS:
            if isinstance(raw, bool) or not (v.isascii() and v.isdigit()) or not 1 <= int(v) <= INT_KEYS[k]:
                lines.append(f"{where} {k}={raw}: expected a whole number 1..{INT_KEYS[k]}")
            else:
                out[k] = int(v)
        elif k == "sharding":
            if v not in SHARDING_NAMES:
                lines.append(f"{where} sharding={raw}: unknown sharding; use fsdp, hsdp, zero1 or none")
            else:
                out[k] = SHARDING_NAMES[v]
        elif v not in RECOMPUTE:
            lines.append(f"{where} recompute={raw}: unknown recompute mode; use none, selective or full")
        else:
            out[k] = v
    if lines:
        raise LayoutError(lines)
    return LayoutPin(**out)


def parse_layout(text: str) -> LayoutPin:
    """`tp=8,pp=1,cp=1,dp=8,sharding=fsdp,recompute=full,micro_batch=2` (every key optional)."""
    items: dict[str, str] = {}
    lines: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq or not key.strip() or not value.strip():
            lines.append(f"--train-layout: {part!r} is not key=value; write e.g. tp=8,recompute=full")
        elif key.strip() in items:
            lines.append(f"--train-layout: {key.strip()} given twice; give each key once")
        else:
            items[key.strip()] = value.strip()
    try:
        pin = pin_from_mapping(items)
    except LayoutError as exc:
        lines += exc.lines
    if lines:
        raise LayoutError(lines)
    if not items:
        raise LayoutError(["--train-layout is empty; give key=value pairs, e.g. tp=8,pp=1,recompute=full"])
    return pin


def pinned_layouts(
    work: ModelWork, system: System, pin: LayoutPin, *, nodes: int, seq_len: int, global_batch: int
) -> list[Layout]:
    """Every layout matching the pin on `nodes` nodes (unpinned keys open as in the search). A pinned value
    outside the search's range (TP across nodes, an uneven PP) is taken as given; an impossible one is a
    LayoutError with one line per problem."""
    d = work.dims
    devices = nodes * system.devices_per_node
    deg = degrees(work, system, nodes=nodes, seq_len=seq_len)
    tps = [pin.tp] if pin.tp else deg["tp"]
    pps = [pin.pp] if pin.pp else deg["pp"]
    cps = [pin.cp] if pin.cp else deg["cp"]
    lines = []
    if pin.tp and d.heads % pin.tp:
        lines.append(f"--train-layout tp={pin.tp}: does not divide the model's {d.heads} attention heads")
    if pin.pp and pin.pp > d.layers:
        lines.append(f"--train-layout pp={pin.pp}: more stages than the model's {d.layers} layers")
    if pin.cp and pin.cp > 1 and seq_len % pin.cp:
        lines.append(f"--train-layout cp={pin.cp}: does not divide the sequence length {seq_len}")
    fixed_block = (pin.tp or 1) * (pin.pp or 1) * (pin.cp or 1) * (pin.dp or 1)
    if devices % fixed_block or (pin.tp and pin.pp and pin.cp and pin.dp and fixed_block != devices):
        lines.append(
            f"--train-layout: tp x pp x cp x dp = {fixed_block} does not fit {devices} {system.device_unit}s "
            f"({nodes} x {system.devices_per_node}); make the product {devices}"
        )
    if pin.sharding == "hsdp" and nodes == 1:
        lines.append("--train-layout sharding=hsdp: replicates across nodes, and this run has one; use fsdp")
    if pin.micro_batch and global_batch % pin.micro_batch:
        lines.append(
            f"--train-layout micro_batch={pin.micro_batch}: does not divide the global batch {global_batch}"
        )
    if lines:
        raise LayoutError(lines)
    out = []
    for tp in tps:
        for pp in pps:
            for cp in cps:
                if devices % (tp * pp * cp):
                    continue
                dp = devices // (tp * pp * cp)
                if pin.dp and dp != pin.dp:
                    continue
                for mb in [pin.micro_batch] if pin.micro_batch else MICRO_BATCHES:
                    if global_batch % (dp * mb):
                        continue
                    for sh in [pin.sharding] if pin.sharding else SHARDINGS:
                        if sh != "ddp" and dp * cp == 1 and not pin.sharding:
                            continue
                        for rc in [pin.recompute] if pin.recompute else RECOMPUTE:
                            for vp in [pin.vp] if pin.vp else virtual_stages(d.layers, pp):
                                out.append(Layout(tp, pp, dp, cp, sh, rc, mb, vp, global_batch))
    if not out:
        raise LayoutError(
            [
                f"--train-layout {pin.label()}: no layout with these degrees splits the global batch of "
                f"{global_batch} over {devices} {system.device_unit}s into whole micro-batches; change the "
                "global batch, dp or micro_batch"
            ]
        )
    return out


def conventional(
    work: ModelWork,
    system: System,
    coef: Coef,
    *,
    nodes: int,
    seq_len: int,
    global_batch: int,
    dtype: str,
    stack: str,
) -> Layout | None:
    """The layout the stack's users start from: FSDP over every device and the smallest model-parallel block
    that fits (none; then TP inside a node, CP for long sequences, PP last), with the knobs such users turn
    at their fastest: activation recompute (none, or full where memory needs it), the micro-batch (up to
    16, splitting the replica's batch) and, across nodes, full or hybrid sharding (HSDP). None for a recipe
    stack (CONVENTION), or when no conventional layout splits the global batch or fits."""
    conv = CONVENTION[stack_for(system, stack)]
    if conv is None:
        return None
    devices = nodes * system.devices_per_node
    deg = degrees(work, system, nodes=nodes, seq_len=seq_len)
    blocks = sorted(
        ((t, p, c) for t in deg["tp"] for p in deg["pp"] for c in deg["cp"] if devices % (t * p * c) == 0),
        key=lambda b: (b[0] * b[1] * b[2], b[1], b[2] if seq_len < 32768 else -b[2]),
    )
    for tp, pp, cp in blocks:
        dp = devices // (tp * pp * cp)
        if global_batch % dp:
            continue
        per_replica = global_batch // dp
        shardings = [sh for sh in conv["sharding"] if sh != "hsdp" or nodes > 1] if dp * cp > 1 else ["ddp"]
        best: tuple[float, Layout] | None = None
        for rc, sharding in ((rc, sh) for rc in conv["recompute"] for sh in shardings):
            for mb in range(min(per_replica, MAX_CONVENTIONAL_MICRO_BATCH), 0, -1):
                if per_replica % mb:
                    continue
                lay = Layout(tp, pp, dp, cp, sharding, rc, mb, 1, global_batch)
                if not memory(work, system, lay, seq_len, dtype, stack).fits:
                    continue
                t = step_time(work, system, lay, coef, seq_len=seq_len, dtype=dtype, nodes=nodes, stack=stack)
                if best is None or t.tokens_per_s_per_device > best[0]:
                    best = (t.tokens_per_s_per_device, lay)
        if best is not None:
            return best[1]
    return None
