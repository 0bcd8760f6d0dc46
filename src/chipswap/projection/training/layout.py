"""Training layouts the user pins, and the conventional layout a framework starts from.

What it is for: `chipswap project --train-layout tp=8,pp=1,...`, the workload's `job.layout` table and the
training calibration (rows pinned to their published layout) all go through `parse_layout` / `LayoutPin`
and `pinned_layouts`; `conventional` is the layout a team's stack would start from (PyTorch FSDP with full
recompute where memory needs it, TP then PP only when it does not fit; Megatron / Neuron stacks with the
distributed optimizer), so the CLI can print it beside chipswap's fastest feasible layout.

Pure: no I/O, no clock; it may not read files, prices or the catalog (callers pass a System).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.projection.training.model import (
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


MAX_PIN_LINES = 8  # a pin with more problems prints this many lines and a count of the rest
MAX_VALUE_CHARS = 24  # a longer value or key is shortened in its error line
MAX_INT_DIGITS = 8  # a whole number longer than this is out of range (never converted: no huge ints)


class LayoutError(ChipswapError):
    """Several problems with one layout: `lines` holds one line per bad key or value (at most
    MAX_PIN_LINES, then a count of the rest)."""

    def __init__(self, lines: list[str]) -> None:
        kept = list(dict.fromkeys(lines))  # one line per distinct problem
        if len(kept) > MAX_PIN_LINES:
            more = len(kept) - (MAX_PIN_LINES - 1)
            kept = kept[: MAX_PIN_LINES - 1] + [f"... and {more:,} more problems with the same layout"]
        super().__init__("; ".join(kept))
        self.lines = kept


@dataclass(frozen=True)
class LayoutPin:
    """A layout as far as the user pins it (None = chipswap chooses). `where` names the input in errors
    (--train-layout, or the workload's job.layout); `problems` holds the lines of keys that could not be
    read, reported with the checks that need the model (check_pin) so every bad key is one line at once."""

    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    dp: int | None = None
    sharding: str | None = None
    recompute: str | None = None
    micro_batch: int | None = None
    vp: int | None = None
    where: str = field(default="--train-layout", compare=False)
    problems: tuple[str, ...] = field(default=(), compare=False)

    def given(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in KEYS if getattr(self, k) is not None}

    @property
    def complete(self) -> bool:
        return all(getattr(self, k) is not None for k in ("tp", "pp", "cp", "sharding", "recompute"))

    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.given().items()) or "(none)"


def _short(text: object) -> str:
    """A key or value as an error line quotes it: long ones cut, with their length."""
    s = str(text)
    return s if len(s) <= MAX_VALUE_CHARS else f"{s[: MAX_VALUE_CHARS - 4]}... ({len(s):,} characters)"


def _whole(raw: Any, top: int) -> int | None:
    """`raw` as a whole number 1..top, or None (booleans, fractions, signs and over-long digit strings
    are never converted)."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if 1 <= raw <= top else None
    v = str(raw).strip()
    if not (v.isascii() and v.isdigit()) or len(v) > MAX_INT_DIGITS:
        return None
    n = int(v)
    return n if 1 <= n <= top else None


def pin_from_mapping(
    items: dict[str, Any], *, where: str = "--train-layout", defer: bool = False
) -> LayoutPin:
    """A LayoutPin from key -> value (strings from the CLI or values of a workload table); every bad key or
    value is one line of the LayoutError (defer: kept in the pin's `problems` for check_pin instead)."""
    lines: list[str] = []
    out: dict[str, Any] = {}
    for key, raw in items.items():
        k = str(key).strip().lower().replace("-", "_")
        v = str(raw).strip().lower()
        if k not in KEYS:
            lines.append(f"{where}: unknown key {_short(key)!r}; use {', '.join(KEYS)}")
        elif k in INT_KEYS:
            n = _whole(raw, INT_KEYS[k])
            if n is None:
                lines.append(f"{where} {k}={_short(raw)}: expected a whole number 1..{INT_KEYS[k]}")
            else:
                out[k] = n
        elif k == "sharding":
            if v not in SHARDING_NAMES:
                bad = f"{where} sharding={_short(raw)}"
                lines.append(f"{bad}: unknown sharding; use fsdp, hsdp, zero1 or none")
            else:
                out[k] = SHARDING_NAMES[v]
        elif v not in RECOMPUTE:
            bad = f"{where} recompute={_short(raw)}"
            lines.append(f"{bad}: unknown recompute mode; use none, selective or full")
        else:
            out[k] = v
    if lines and not defer:
        raise LayoutError(lines)
    return LayoutPin(**out, where=where, problems=tuple(dict.fromkeys(lines)))


def parse_layout(text: str, *, defer: bool = False) -> LayoutPin:
    """`tp=8,pp=1,cp=1,dp=8,sharding=fsdp,recompute=full,micro_batch=2` (every key optional). A key given
    twice is one line however often it repeats. defer: return the pin with its problems (check_pin, run by
    project_training before any search, reports them with the model's own checks)."""
    items: dict[str, str] = {}
    lines: list[str] = []
    twice: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, eq, value = part.partition("=")
        k = key.strip()
        if not eq or not k or not value.strip():
            lines.append(f"--train-layout: {_short(part)!r} is not key=value; write e.g. tp=8,recompute=full")
        elif k in items:
            twice[k] = twice.get(k, 1) + 1
        else:
            items[k] = value.strip()
    lines += [f"--train-layout: {_short(k)} given {n:,} times; give each key once" for k, n in twice.items()]
    pin = pin_from_mapping(items, defer=True)
    lines += pin.problems
    if not items and not lines:
        raise LayoutError(["--train-layout is empty; give key=value pairs, e.g. tp=8,pp=1,recompute=full"])
    if lines and not defer:
        raise LayoutError(lines)
    return replace(pin, problems=tuple(dict.fromkeys(lines)))


def check_pin(
    work: ModelWork, system: System, pin: LayoutPin, *, nodes: int, seq_len: int, global_batch: int
) -> None:
    """Every problem of a pin at once, before any search: the keys that could not be read, then what the
    model, the devices and the batch rule out (heads, layers, devices, the batch split, virtual stages).
    A LayoutError with one line per problem; nothing when the pin can run."""
    d = work.dims
    w = pin.where
    devices = nodes * system.devices_per_node
    lines = list(pin.problems)
    if pin.tp and d.heads % pin.tp:
        lines.append(f"{w} tp={pin.tp}: does not divide the model's {d.heads} attention heads")
    if pin.tp and pin.tp > devices:
        lines.append(f"{w} tp={pin.tp}: more than the run's {devices} {system.device_unit}s")
    if pin.pp and pin.pp > d.layers:
        lines.append(f"{w} pp={pin.pp}: more stages than the model's {d.layers} layers")
    if pin.cp and pin.cp > 1 and seq_len % pin.cp:
        lines.append(f"{w} cp={pin.cp}: does not divide the sequence length {seq_len}")
    if pin.vp and pin.vp > 1:
        if pin.pp == 1:
            lines.append(f"{w} vp={pin.vp}: virtual stages need pipeline stages; give pp > 1 or vp=1")
        elif pin.pp and pin.pp * pin.vp > d.layers:
            lines.append(
                f"{w} vp={pin.vp}: pp x vp = {pin.pp * pin.vp} chunks is more than the model's {d.layers} "
                "layers"
            )
    fixed_block = (pin.tp or 1) * (pin.pp or 1) * (pin.cp or 1) * (pin.dp or 1)
    if devices % fixed_block or (pin.tp and pin.pp and pin.cp and pin.dp and fixed_block != devices):
        lines.append(
            f"{w}: tp x pp x cp x dp = {fixed_block} does not fit {devices} {system.device_unit}s "
            f"({nodes} x {system.devices_per_node}); make the product {devices}"
        )
    if pin.sharding == "hsdp" and nodes == 1:
        lines.append(f"{w} sharding=hsdp: replicates across nodes, and this run has one; use fsdp")
    if pin.dp and global_batch % pin.dp:
        lines.append(
            f"{w} dp={pin.dp}: does not divide the global batch of {global_batch} sequences; give a dp "
            "that divides it or change the global batch"
        )
    elif pin.micro_batch and global_batch % (pin.micro_batch * (pin.dp or 1)):
        lines.append(
            f"{w} micro_batch={pin.micro_batch}: {pin.dp or 1} replica(s) x {pin.micro_batch} does not "
            f"divide the global batch {global_batch}"
        )
    if lines:
        raise LayoutError(lines)


def pinned_layouts(
    work: ModelWork, system: System, pin: LayoutPin, *, nodes: int, seq_len: int, global_batch: int
) -> list[Layout]:
    """Every layout matching the pin on `nodes` nodes (unpinned keys open as in the search). A pinned value
    outside the search's range (TP across nodes, an uneven PP) is taken as given; an impossible one is a
    LayoutError with one line per problem (check_pin)."""
    check_pin(work, system, pin, nodes=nodes, seq_len=seq_len, global_batch=global_batch)
    d = work.dims
    devices = nodes * system.devices_per_node
    deg = degrees(work, system, nodes=nodes, seq_len=seq_len)
    tps = [pin.tp] if pin.tp else deg["tp"]
    pps = [pin.pp] if pin.pp else deg["pp"]
    cps = [pin.cp] if pin.cp else deg["cp"]
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
                            vps = virtual_stages(d.layers, pp)
                            if pin.vp:
                                vps = [pin.vp] if pp > 1 or pin.vp == 1 else []
                            for vp in vps:
                                out.append(Layout(tp, pp, dp, cp, sh, rc, mb, vp, global_batch))
    if not out:
        raise LayoutError(
            [
                f"{pin.where} {pin.label()}: no layout with these degrees splits the global batch of "
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
