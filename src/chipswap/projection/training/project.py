"""Training projections for callers (`chipswap project --train-tokens`, the plan): an instance type from the
catalog becomes a chipswap.projection.training.model.System, the shipped training calibration
(data/training/calibration.toml, written by projection.training.fit) gives the coefficients and the held-out
bands, and the layout search picks the fastest layout that fits.

    t = project_training(model_work("llama-3-8b"), "p5.48xlarge", tokens=1e10, dtype="bf16", nodes=1)
    t.layout, t.tokens_per_s_per_node (Projected +- band), t.hours, t.breakdown, t.rejected

Reads the catalog and the shipped calibration file only; writes nothing. Every bad input is one ChipswapError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from chipswap.datafile import read_toml
from chipswap.economics.catalog import Catalog, Chip, Instance
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.projection.platforms import device_spec, family_of_chip
from chipswap.projection.predict import Projected
from chipswap.projection.training.layout import LayoutPin, conventional, pinned_layouts
from chipswap.projection.training.model import (
    FP8_BLOCK_FAMILIES,
    FP8_RECIPES,
    TRAIN_STACKS,
    Coef,
    Layout,
    SearchResult,
    System,
    batch_split_reason,
    fp8_speedup,
    fp8_spread,
    memory,
    search,
    step_time,
    with_fp8,
)
from chipswap.projection.work import GiB, ModelWork

# fp8 training: Hopper and Blackwell (Transformer Engine), Trainium2 (its fp8 peak is twice bf16, as on
# Hopper; the NxD stack has no fp8 rows: the cross-stack speed-up and its spread)
FP8_FAMILIES = ("H100", "H200", "B200", "Trainium2")
DEFAULT_GLOBAL_BATCH_TOKENS = 2**21  # 2M tokens per step when the user gives no global batch (assumption)
MAX_NODES = 4096


def calibration_path() -> Path:
    from importlib import resources

    return Path(str(resources.files("chipswap.data") / "training" / "calibration.toml"))


@lru_cache(maxsize=4)
def _calibration(path: str) -> dict[str, Any]:
    return read_toml(path, "training calibration file")


def load_calibration(path: str | Path | None = None) -> dict[str, Any]:
    """The shipped training calibration: coefficients, bands per family, held-out errors per source."""
    return _calibration(str(path or calibration_path()))


def coef_of(data: dict[str, Any]) -> Coef:
    vals = data.get("coefficients") or {}
    return Coef(tuple((str(k), float(v)) for k, v in vals.items()))


def system_of(
    instance: Instance, chip: Chip, *, network_gbps: float | None = None, family: str | None = None
) -> System:
    """The training view of an instance: per-device peaks, memory, NVLink/NeuronLink/PCIe and EFA shares."""
    neuron = instance.is_neuron
    per_chip = max(1, instance.neuron_cores // max(1, instance.accelerator_count)) if neuron else 1
    devices = instance.neuron_cores if neuron else instance.accelerator_count
    dev = device_spec(chip, per_chip)  # the serving projection's per-device split of the chip
    net = float(network_gbps if network_gbps is not None else (instance.network_gbps or 100))
    spec = family_of_chip(chip.name) if family is None else None
    fam = family or (spec.name if spec is not None else chip.name)
    dtypes = ("bf16", "fp8") if fam in FP8_FAMILIES else ("bf16",)
    return System(
        name=instance.name,
        family=fam,
        group="neuron" if neuron else "nvidia",
        devices_per_node=devices,
        peak_flops=dev.peak_flops,
        hbm_bytes_s=dev.hbm_bytes_s,
        memory_bytes=dev.memory_bytes,
        intra_bytes_s=dev.link_bytes_s / 2.0 / per_chip,
        inter_bytes_s=net * 1e9 / 8.0 / devices,
        dtypes=dtypes,
        device_unit="NeuronCore" if neuron else "GPU",
    )


@dataclass(frozen=True)
class TrainingPlan:
    """A projected training run: the chosen layout, tokens/s per node +- band, hours, and why."""

    model: str
    instance: str
    family: str
    dtype: str
    seq_len: int
    nodes: int
    tokens: float | None
    layout: Layout
    tokens_per_s_per_node: Projected
    hours: Projected | None
    breakdown: dict[str, float]
    memory_gib: dict[str, float]
    rejected: tuple[tuple[str, str], ...]
    feasible: int
    band_basis: str
    notes: tuple[str, ...] = field(default=())
    stacks: tuple[str, ...] = ()
    stack: str = "pytorch"
    pinned: bool = False  # layout is the user's (--train-layout); else it is the conventional layout
    best: Layout | None = None  # chipswap's fastest feasible layout
    best_tokens_per_s_per_node: float | None = None
    conventional: Layout | None = None
    conventional_tokens_per_s_per_node: float | None = None
    family_band: float = 0.0  # the held-out band before widening to cover best and conventional
    peak_gib: float = 0.0
    fp8_recipe: str | None = None  # the fp8 recipe projected (None in bf16)

    def as_dict(self) -> dict[str, Any]:
        plain = ("model", "instance", "family", "dtype", "seq_len", "nodes", "tokens", "stack", "pinned",
                 "fp8_recipe")  # fmt: skip
        return {
            **{k: getattr(self, k) for k in plain},
            "layout": self.layout.as_dict(),
            "best_layout": self.best.as_dict() if self.best else None,
            "best_tokens_per_s_per_node": self.best_tokens_per_s_per_node,
            "conventional_layout": self.conventional.as_dict() if self.conventional else None,
            "conventional_tokens_per_s_per_node": self.conventional_tokens_per_s_per_node,
            "family_band": self.family_band,
            "tokens_per_s_per_node": self.tokens_per_s_per_node.as_dict(),
            "hours": self.hours.as_dict() if self.hours else None,
            "step_time_shares": self.breakdown,
            "memory_per_device": self.memory_gib,
            "layouts_feasible": self.feasible,
            "layouts_rejected": [{"layout": a, "why": b} for a, b in self.rejected],
            "band_basis": self.band_basis,
            "notes": list(self.notes),
            "calibrated_on": list(self.stacks),
        }


def _slowdown(item: tuple[str, str]) -> tuple[int, int]:
    """Sort key of a rejected layout: slower ones by how much (ties at 0 % last), then what does not fit."""
    why = item[1]
    if why[:1].isdigit():
        pct = int(why.split("%")[0])
        return (0, pct) if pct > 0 else (1, 0)
    return (2, 0)


def _check(tokens: float | None, seq_len: int, nodes: int, global_batch: int | None) -> None:
    if tokens is not None and not (tokens > 0 and math.isfinite(tokens) and tokens <= 1e16):
        raise ChipswapError(f"training tokens must be a positive number up to 1e16, got {tokens!r}")
    if not 16 <= seq_len <= 1 << 20:
        raise ChipswapError(f"sequence length {seq_len} is outside 16..1048576; give the training length")
    if not 1 <= nodes <= MAX_NODES:
        raise ChipswapError(f"nodes must be 1..{MAX_NODES}, got {nodes}; give the instance count of the run")
    if global_batch is not None and not 1 <= global_batch <= 1 << 20:
        raise ChipswapError(
            f"global batch must be 1..1048576 sequences, got {global_batch}; give the sequences per step"
        )


def _refusal(
    work: ModelWork, inst: Instance, system: System, res: SearchResult, nodes: int, **kw: Any
) -> str:
    """The real cause when nothing can be projected: the batch cannot split, or no layout fits."""
    if res.considered == 0:
        return f"{work.name} on {nodes} x {inst.name}: " + batch_split_reason(work, system, nodes=nodes, **kw)
    near = res.closest
    what = (
        f" (the smallest, {near.layout.label()}, needs {near.memory.peak / GiB:,.1f} GiB peak per "
        f"{system.device_unit} of {near.memory.capacity / GiB:,.1f})"
        if near is not None
        else ""
    )
    return (
        f"{work.name} does not fit on {nodes} x {inst.name} in any of {res.considered} layouts{what}; "
        "use more nodes (--nodes) or an instance with more memory"
    )


def _per_node(work: ModelWork, system: System, lay: Layout, coef: Coef, **kw: Any) -> float:
    return step_time(work, system, lay, coef, **kw).tokens_per_s_per_device * system.devices_per_node


def widened_band(band: float, value: float, others: list[float]) -> float:
    """The relative band around `value` that also covers every figure of `others` with its own band."""
    out = band
    for o in others:
        ratio = max(o / value, value / o)
        out = max(out, ratio * (1.0 + band) - 1.0)
    return out


def quadrature(band: float, *log_spreads: float) -> float:
    """A relative band and independent spreads (|ln ratio|) added in quadrature on the log scale: the
    model's error at the layout and the fp8 speed-up's uncertainties do not share a cause."""
    return math.exp(math.hypot(math.log1p(band), *log_spreads)) - 1.0


def project_training(
    work: ModelWork,
    instance: str | Instance,
    *,
    tokens: float | None = None,
    seq_len: int = 4096,
    dtype: str | None = None,
    nodes: int = 1,
    global_batch: int | None = None,
    catalog: Catalog | None = None,
    calibration: dict[str, Any] | None = None,
    layout: LayoutPin | None = None,
    stack: str | None = None,
    fp8_recipe: str | None = None,
) -> TrainingPlan:
    """`work` on `nodes` x `instance`: the pinned layout (`layout`) or, without one, the conventional layout
    of the stack with chipswap's fastest feasible layout beside it; tokens/s per node +- the held-out band of
    its family (widened to cover both when unpinned), and the hours for `tokens` (None: throughput only)."""
    _check(tokens, seq_len, nodes, global_batch)
    cat = catalog or load_catalog()
    inst = cat.instance(instance) if isinstance(instance, str) else instance
    if inst.kind == "inferentia":
        raise ChipswapError(f"{inst.name} is an Inferentia (inference) instance; train on trn1/trn2 or a GPU")
    chip = cat.chip(inst.accelerator)
    system = system_of(inst, chip)
    cal = calibration or load_calibration()
    fam = (cal.get("families") or {}).get(system.family)
    if fam is None:
        raise ChipswapError(
            f"no training calibration for {system.family} ({inst.name}): no published training throughput "
            "for this chip family was found to fit on or transfer from; give a measured figure (hours or "
            "tokens/s) for this instance instead"
        )
    use = (dtype or "bf16").lower()
    if use not in system.dtypes:
        raise ChipswapError(
            f"{use} training is not projected on {system.family}: it trains in {', '.join(system.dtypes)}; "
            f"use --train-dtype {system.dtypes[0]}"
        )
    if stack is not None and stack not in TRAIN_STACKS:
        raise ChipswapError(f"unknown training stack {stack!r}; use {' or '.join(TRAIN_STACKS)}")
    stk = "neuron" if system.group == "neuron" else (stack or "pytorch")
    gb = global_batch or max(1, DEFAULT_GLOBAL_BATCH_TOKENS // seq_len)
    coef = coef_of(cal)
    recipe, speedup, spreads, fp8_note = _fp8_setup(cal, coef, system, stk, use, fp8_recipe)
    if use == "fp8":
        coef = with_fp8(coef, stk, speedup)
    kw: dict[str, Any] = {"seq_len": seq_len, "global_batch": gb}
    tk = {"seq_len": seq_len, "dtype": use, "nodes": nodes, "stack": stk}
    notes: list[str] = []
    conv: Layout | None = None
    pinned = layout is not None and bool(layout.given() or layout.problems)
    # a pin is checked whole (every bad key one line) before any search runs
    cands = pinned_layouts(work, system, layout, nodes=nodes, **kw) if layout is not None and pinned else []
    res = search(work, system, coef, nodes=nodes, dtype=use, stack=stk, **kw)
    if pinned:
        assert layout is not None
        pres = search(work, system, coef, nodes=nodes, dtype=use, stack=stk, candidates=cands, **kw)
        chosen = pres.best or pres.closest
        assert chosen is not None
        if pres.best is None:
            notes.append(
                "chipswap's memory model puts the pinned layout's peak at "
                f"{chosen.memory.peak / GiB:,.1f} GiB "
                f"per {system.device_unit}, over the {chosen.memory.capacity / GiB:,.1f} GiB it has: it may "
                "not fit (projected as pinned)"
            )
        head = chosen.layout
        head_mem = chosen.memory
        rejected = pres.rejected
        feasible = pres.feasible
    else:
        if res.best is None:
            raise ChipswapError(_refusal(work, inst, system, res, nodes, **kw))
        conv = conventional(work, system, coef, nodes=nodes, dtype=use, stack=stk, **kw)
        head = conv or res.best.layout
        if conv is None:
            notes.append(
                f"the {stk} stack starts from published recipes (tuned layouts): chipswap's fastest feasible "
                "layout stands in for it"
            )
        head_mem = memory(work, system, head, seq_len, use, stk)
        rejected = res.rejected
        feasible = res.feasible
    timing = step_time(work, system, head, coef, **tk)
    # the band of this stack and dtype where its rows gave one (training.fit.stack_bands), else the family's
    # (an fp8 speed-up that is not the stack's own: the stack's bf16 band, the speed-up's spread added below)
    bkey = "bf16" if spreads else use
    band = float(fam.get(f"band_{stk}_{bkey}", fam["band"]))
    per_node = timing.tokens_per_s_per_device * system.devices_per_node
    best_lay = res.best.layout if res.best is not None else None
    best_v = _per_node(work, system, best_lay, coef, **tk) if best_lay is not None else None
    conv_lay = None if pinned or conv is None else head
    conv_v = None if conv_lay is None else per_node
    shown = band
    if not pinned and best_v is not None:
        own = fam.get(
            f"band_chosen_{stk}_{bkey}", fam.get(f"band_chosen_{bkey}", fam.get("band_chosen", band))
        )
        shown = max(widened_band(band, per_node, [best_v]), float(own))
        if best_lay != head:
            notes.append(
                f"the headline is the conventional {stk} layout; chipswap's fastest feasible layout projects "
                f"{best_v / per_node:.2f}x it and the band covers both"
            )
    if spreads:  # the fp8 speed-up's own spreads (cross-stack; a recipe with no pair), each independent
        logs = [
            max(abs(math.log(_per_node(work, system, head, with_fp8(coef, stk, a), **tk) / per_node))
                for a in alts)
            for alts in spreads
        ]
        shown = quadrature(shown, *logs)
    basis = str(fam.get(f"basis_{stk}_{bkey}", fam.get("basis", "")))
    fig = Projected(
        per_node, "tokens/s", shown, note=f"{system.devices_per_node} {system.device_unit}s, {use}"
    )
    hours = None
    if tokens is not None:
        hours = Projected(tokens / (per_node * nodes) / 3600.0, "h", shown)
    if use == "fp8":
        notes.append(fp8_note)
    if fam.get("transferred"):
        notes.append(str(fam["transferred"]))
    if global_batch is None:
        notes.append(f"global batch {gb} sequences of {seq_len} tokens (~2M tokens a step; assumption)")
    ordered = sorted(rejected, key=_slowdown)
    return TrainingPlan(
        model=work.name,
        instance=inst.name,
        family=system.family,
        dtype=use,
        seq_len=seq_len,
        nodes=nodes,
        tokens=tokens,
        layout=head,
        tokens_per_s_per_node=fig,
        hours=hours,
        breakdown=timing.shares(),
        memory_gib=head_mem.as_dict(),
        rejected=tuple(ordered),
        feasible=feasible,
        band_basis=basis,
        notes=tuple(notes),
        stacks=tuple(str(s) for s in fam.get("sources", [])),
        stack=stk,
        pinned=pinned,
        best=best_lay,
        best_tokens_per_s_per_node=best_v,
        conventional=conv_lay,
        conventional_tokens_per_s_per_node=conv_v,
        family_band=band,
        peak_gib=head_mem.peak / GiB,
        fp8_recipe=recipe,
    )


def _fp8_setup(
    cal: dict[str, Any], coef: Coef, system: System, stk: str, dtype: str, recipe: str | None
) -> tuple[str | None, float, list[list[float]], str]:
    """(recipe, the fp8 speed-up of the linear layers, the independent spreads its band must cover (each a
    list of other speed-ups), the note). The stack's own fitted speed-up, else the cross-stack one spanning
    the fitted stacks';
    x the recipe's measured ratio to tensorwise (calibration [fp8_recipes]); a recipe with no published pair
    keeps tensorwise's speed-up and its band covers the measured recipe-to-recipe ratios too."""
    if dtype != "fp8":
        if recipe is not None:
            raise ChipswapError(
                f"an fp8 recipe ({recipe}) applies to fp8 training; add --train-dtype fp8 or drop the recipe"
            )
        return None, 1.0, [], ""
    use = (recipe or "tensorwise").strip().lower()
    if use not in FP8_RECIPES:
        raise ChipswapError(f"unknown fp8 recipe {_short(recipe)!r}; use {', '.join(FP8_RECIPES)}")
    if use == "mxfp8" and system.family not in FP8_BLOCK_FAMILIES:
        raise ChipswapError(
            f"mxfp8 (block-scaled fp8) needs Blackwell tensor cores ({', '.join(FP8_BLOCK_FAMILIES)}); "
            f"{system.family} trains fp8 tensorwise or rowwise"
        )
    recipes = cal.get("fp8_recipes") or {}
    measured = {k: float(v) for k, v in recipes.items() if isinstance(v, (int, float))}
    base = fp8_speedup(stk, coef)
    spread = list(fp8_spread(stk, coef))
    factor = measured.get(use, 1.0)
    speedup = base * factor
    spreads = [[x * factor for x in spread]] if spread else []
    where = (
        f"the {stk} stack's own fp8 rows"
        if not spread
        else f"no {stk} fp8 rows of its own: the cross-stack speed-up {base:.2f}x, the band covering the "
        f"fitted stacks' {', '.join(f'{x:.2f}x' for x in spread)}"
    )
    if use == "tensorwise":
        how = "tensorwise scaling, as every fitted fp8 row ran"
    elif use in measured:
        on = recipes.get(use + "_basis", "a published pair")
        how = f"{use}: {factor:.3f}x tensorwise, measured on {on}"
    else:
        others = [v for v in measured.values() if v > 0]
        spreads.append([speedup * v for v in others])
        how = (
            f"{use}: no published {use} pair at one layout, so tensorwise's speed-up (assumption), the band "
            "covering the measured recipe-to-recipe ratios " + ", ".join(f"{v:.3f}x" for v in others)
        )
    note = (
        f"fp8 {how}; linear layers {speedup:.2f}x bf16 ({where}); fitted against the bf16 model at each "
        "row's published layout (no bf16/fp8 pair of an NVIDIA training stack at one layout is published "
        "for a chip chipswap projects); causal attention stays bf16"
    )
    return use, speedup, spreads, note


def _short(text: object, limit: int = 24) -> str:
    t = str(text)
    return t if len(t) <= limit else t[: limit - 3] + "..."
