"""Stage 0 of the plan: resolve what the workload names (catalog instances, the model, the thresholds).

Input: a validated Workload and its path. Output: PlanSetup, which every later stage reads. The catalog and
the
model resolver are reached through one function each (`load_catalog`, `resolve_model`); nothing else here does
I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from decimal import Decimal
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.plan.workload import Workload
from chipswap.verdict.rules import Thresholds

_TARGET_OF_FAMILY = {"inf1": "inf1", "inf2": "inf2", "trn1": "trn1", "trn1n": "trn1", "trn2": "trn2"}


def rules_target(family: str) -> str | None:
    """The readiness-rules target of an instance family (trn1n runs the trn1 rules)."""
    return _TARGET_OF_FAMILY.get(family)


@dataclass(frozen=True)
class PlanSetup:
    """Everything the stages share: the workload, where it lives, thresholds, catalog entries and the model.

    fleet: the catalog Instance of today's GPU fleet; candidates: the Neuron Instances to consider;
    model: a chipswap.models.ModelRef, or None when the workload names no model."""

    workload: Workload
    path: Path
    base_dir: Path
    thresholds: Thresholds
    catalog: Any
    fleet: Any
    candidates: tuple[Any, ...]
    region: str
    model: Any = None
    measured: dict[str, Any] = field(default_factory=dict)  # instance -> chipswap.bench MeasuredServing

    @property
    def kind(self) -> str:
        return self.workload.kind


def thresholds(wl: Workload, close_margin_pct: Decimal | None = None) -> Thresholds:
    """The workload's [verdict] settings (same names as Thresholds' fields), with --close-margin on top."""
    given = {f.name: getattr(wl.verdict, f.name) for f in fields(Thresholds)}
    if close_margin_pct is not None:
        given["close_margin_pct"] = close_margin_pct
    return Thresholds(**given)


def load_catalog() -> Any:
    from chipswap.economics.catalog_io import load_catalog as load

    return load()


def model_spec(wl: Workload, base_dir: Path) -> tuple[str, str] | None:
    """(key, spec) of the workload's model; a config path is taken relative to the workload file."""
    m = wl.model
    if m is None:
        return None
    if m.preset:
        return "model.preset", m.preset
    if m.config:
        p = Path(m.config)
        return "model.config", str(p if p.is_absolute() else base_dir / p)
    assert m.factory is not None
    return "model.factory", m.factory


def resolve_model(wl: Workload, wpath: Path, base_dir: Path) -> Any:
    spec = model_spec(wl, base_dir)
    if spec is None:
        return None
    key, value = spec
    from chipswap.models import resolve_model as resolve

    kind = {"model.preset": "preset", "model.config": "config", "model.factory": "factory"}[key]
    try:
        return resolve(value, task=wl.model.task if wl.model else None, kind=kind)
    except ChipswapError as exc:
        raise ChipswapError(f"{wpath}: {key}: {exc}") from None


def read_measured(
    paths: list[Path],
    wpath: Path,
    names: list[str],
    check: Callable[[Any, Any], Any] | None = None,
) -> dict[str, Any]:
    """Measured serving figures from `chipswap bench` result files, by instance (one line per bad file).
    ``check(results, measured)``: the identity check (plan.bench_check) that returns the figures to use."""
    if not paths:
        return {}
    from chipswap.bench.results import measured_serving, read_bench_results

    out: dict[str, Any] = {}
    for p in paths:
        res = read_bench_results(p)
        m = measured_serving(res)
        if m.instance not in names:
            raise ChipswapError(
                f"{wpath}: bench_results: {p} measured {m.instance!r}, which is neither the fleet nor a "
                "candidate "
                f"({', '.join(names)}); add it to targets.candidates or drop the file"
            )
        if m.instance in out:
            raise ChipswapError(
                f"{wpath}: bench_results: two files measure {m.instance}; keep one per instance"
            )
        out[m.instance] = check(res, m) if check is not None else m
    return out


def setup(
    wl: Workload,
    workload_path: str | Path = "<workload>",
    close_margin_pct: Decimal | None = None,
    bench: tuple[Path, ...] = (),
    catalog: Any = None,
    accept_bench_mismatch: bool = False,
) -> PlanSetup:
    """Check the fleet and candidates against the catalog (errors name the key) and resolve the model."""
    wpath = Path(workload_path)
    base_dir = wpath.parent if wpath.name != "<workload>" else Path.cwd()
    catalog = catalog if catalog is not None else load_catalog()
    try:
        fleet = catalog.instance(wl.fleet.instance)
    except ChipswapError as exc:
        raise ChipswapError(f"{wpath}: fleet.instance: {exc}") from None
    cands = []
    for name in wl.targets.candidates:
        try:
            inst = catalog.instance(name)
        except ChipswapError as exc:
            raise ChipswapError(f"{wpath}: targets.candidates: {exc}") from None
        if inst.kind not in ("inferentia", "trainium"):
            raise ChipswapError(
                f"{wpath}: targets.candidates: {name} is a {inst.kind} instance; expected a Neuron instance "
                "(inf1/inf2/trn1/trn2)"
            )
        cands.append(inst)
    files = [Path(b) if Path(b).is_absolute() else base_dir / b for b in wl.bench_results] + list(bench)
    model = resolve_model(wl, wpath, base_dir)
    measured = read_measured(
        files,
        wpath,
        [wl.fleet.instance, *wl.targets.candidates],
        _bench_check(wl, model, catalog, accept_bench_mismatch),
    )
    return PlanSetup(
        workload=wl,
        path=wpath,
        base_dir=base_dir,
        thresholds=thresholds(wl, close_margin_pct),
        catalog=catalog,
        fleet=fleet,
        candidates=tuple(cands),
        region=wl.targets.region or wl.fleet.region,
        model=model,
        measured=measured,
    )


def _bench_check(wl: Workload, model: Any, catalog: Any, accept: bool) -> Callable[[Any, Any], Any]:
    from chipswap.plan.bench_check import checked_measured

    def check(res: Any, m: Any) -> Any:
        inst = catalog.instance(m.instance)
        return checked_measured(
            res,
            m,
            model=model,
            task=wl.model.task if wl.model else None,
            instance=inst,
            accept=accept,
            chip=catalog.chip(inst.accelerator),
        )

    return check


def max_positions(ref: Any) -> int | None:
    """The model's max_position_embeddings, when its config states it (a multimodal config's text_config)."""
    from chipswap.models.spec import TEXT_CONFIG_KEYS

    cfg = getattr(ref, "config", None) or {}
    text = next((cfg[k] for k in TEXT_CONFIG_KEYS if isinstance(cfg.get(k), dict)), None)
    if text is not None and "max_position_embeddings" not in cfg:
        cfg = text
    try:
        v = int(cfg.get("max_position_embeddings") or 0)
    except (TypeError, ValueError, AttributeError):
        return None
    return v or None
