"""Load the platform models: families.toml + each family's fitted <family>.toml + the catalog's chip specs.

This is the projection's only I/O edge for platform data. Spec-sheet numbers come from the catalog
(chipswap.economics.catalog_io), never from the platform files, so a chip's peak or bandwidth is written in
one place.
Reads shipped data only (or a folder given by `chipswap calibrate --out` for checking); never writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from chipswap.datafile import inside, read_toml, strict_int, strict_number
from chipswap.economics.catalog import Catalog, Chip, Instance
from chipswap.errors import ChipswapError, closest
from chipswap.projection.platform import PHASES, Coefficients, DeviceSpec, PlatformModel
from chipswap.projection.work import GiB

FAMILIES_FILE = "families.toml"


def shipped_dir() -> Path:
    return Path(str(resources.files("chipswap.data") / "platforms"))


@dataclass(frozen=True)
class FamilySpec:
    """One [families.X] entry of families.toml (see the comments at the top of that file)."""

    name: str
    vendor: str
    device_unit: str
    chips: tuple[str, ...]
    devices_per_chip: int
    group: str
    weight_dtypes: tuple[tuple[str, str], ...]
    padded: bool
    reserve_gib: float
    reserve_fraction: float
    max_batch: int
    note: str = ""


@dataclass(frozen=True)
class GroupSpec:
    """One [groups.X] entry: the families fitted together and the free coefficients per phase."""

    name: str
    vendor: str
    why: str
    free: tuple[tuple[str, tuple[str, ...]], ...]  # (phase, coefficient names)

    def free_for(self, phase: str) -> tuple[str, ...]:
        return dict(self.free).get(phase, ())


def _str_list(value: Any, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ChipswapError(f"{field} must be a list of strings, got {value!r}; fix families.toml")
    return tuple(value)


@lru_cache(maxsize=4)
def load_families(folder: str | None = None) -> tuple[dict[str, FamilySpec], dict[str, GroupSpec]]:
    root = Path(folder) if folder else shipped_dir()
    data = read_toml(root / FAMILIES_FILE, "platform families file")
    groups: dict[str, GroupSpec] = {}
    for name, g in (data.get("groups") or {}).items():
        free = tuple((p, _str_list(g[p], f"groups.{name}.{p}")) for p in PHASES if p in g)
        groups[name] = GroupSpec(name, str(g.get("vendor", "")), str(g.get("why", "")), free)
    families: dict[str, FamilySpec] = {}
    for name, f in (data.get("families") or {}).items():
        where = f"families.{name}"
        pairs = f.get("weight_dtypes", [])
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise ChipswapError(f"{where}.weight_dtypes must be [weight, matmul] pairs; fix families.toml")
        group = str(f.get("group", ""))
        if group and group not in groups:
            raise ChipswapError(f"{where}.group {group!r} is not a [groups] entry; fix families.toml")
        families[name] = FamilySpec(
            name=name,
            vendor=str(f["vendor"]),
            device_unit=str(f["device_unit"]),
            chips=_str_list(f["chips"], f"{where}.chips"),
            devices_per_chip=strict_int(
                f.get("devices_per_chip", 1), f"{where}.devices_per_chip", lo=1, hi=64
            ),
            group=group,
            weight_dtypes=tuple((str(a).lower(), str(b).lower()) for a, b in pairs),
            padded=bool(f.get("padded", False)),
            reserve_gib=strict_number(f.get("reserve_gib", 1.0), f"{where}.reserve_gib", lo=0, hi=64),
            reserve_fraction=strict_number(
                f.get("reserve_fraction", 0.05), f"{where}.reserve_fraction", lo=0, hi=0.5
            ),
            max_batch=strict_int(f.get("max_batch", 64), f"{where}.max_batch", lo=1, hi=4096),
            note=str(f.get("note", "")),
        )
    return families, groups


def family_of_chip(chip: str, folder: str | None = None) -> FamilySpec | None:
    families, _ = load_families(folder)
    for fam in families.values():
        if chip.lower() in (c.lower() for c in fam.chips):
            return fam
    return None


def device_spec(chip: Chip, devices_per_chip: int) -> DeviceSpec:
    """Per-device numbers from a catalog chip: a NeuronCore gets 1/devices_per_chip of its chip."""
    n = float(devices_per_chip)
    return DeviceSpec(
        chip=chip.name,
        peak_flops=tuple((dt, float(tf) * 1e12 / n) for dt, tf in chip.tflops_dense),
        hbm_bytes_s=float(chip.memory_bandwidth_gb_s) * 1e9 / n,
        memory_bytes=float(chip.memory_gib) * GiB / n,
        link_bytes_s=float(chip.interconnect_gb_s or 0) * 1e9 or 32e9,
        devices_per_chip=devices_per_chip,
    )


def _coefficients(data: dict[str, Any], phase: str, group: str, where: str) -> Coefficients | None:
    sec = data.get(phase)
    if not isinstance(sec, dict):
        return None
    values = sec.get("coefficients") or {}
    if not isinstance(values, dict):
        raise ChipswapError(f"{where}: [{phase}.coefficients] must be a table; re-run chipswap calibrate")
    vals = tuple((str(k), strict_number(v, f"{where} {phase}.{k}", lo=0)) for k, v in values.items())
    return Coefficients(
        phase=phase,
        values=vals,
        group=group,
        rows=_str_list(sec.get("rows", []), f"{where} {phase}.rows"),
        stacks=_str_list(sec.get("stacks", []), f"{where} {phase}.stacks"),
        fit_error=strict_number(sec.get("fit_error", 0.0), f"{where} {phase}.fit_error", lo=0),
    )


def read_family_file(family: str, folder: str | None = None) -> dict[str, Any] | None:
    """The parsed <family>.toml, or None when calibration never wrote one."""
    root = Path(folder) if folder else shipped_dir()
    path = inside(root, f"{family.lower()}.toml", "platform file")
    if not path.is_file():
        return None
    return read_toml(path, "platform coefficients file")


# (family, id(catalog), folder) -> (catalog, model): the catalog is kept so its id cannot be reused
_CACHE: dict[tuple[str, int, str | None], tuple[Catalog, PlatformModel]] = {}


def _platform(family: str, folder: str | None, catalog: Catalog) -> PlatformModel:
    key = (family, id(catalog), folder)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit[1]
    model = _build_platform(family, folder, catalog)
    if len(_CACHE) > 256:
        _CACHE.clear()
    _CACHE[key] = (catalog, model)
    return model


def _build_platform(family: str, folder: str | None, catalog: Catalog) -> PlatformModel:
    families, _ = load_families(folder)
    spec = families[family]
    devices = tuple(device_spec(catalog.chip(c), spec.devices_per_chip) for c in spec.chips)
    data = read_family_file(family, folder) or {}
    where = f"{family.lower()}.toml"
    coefs = tuple(c for p in PHASES if (c := _coefficients(data, p, spec.group, where)) is not None)
    bands: list[tuple[str, float]] = []
    basis: list[tuple[str, str]] = []
    for p in PHASES:
        sec = data.get(p) or {}
        for metric, v in (sec.get("bands") or {}).items():
            bands.append((f"{p}:{metric}", strict_number(v, f"{where} {p}.bands.{metric}", lo=0)))
        if sec.get("band_basis"):
            basis.append((p, str(sec["band_basis"])))
    return PlatformModel(
        family=family,
        vendor=spec.vendor,
        device_unit=spec.device_unit,
        group=spec.group,
        devices=devices,
        weight_dtypes=spec.weight_dtypes,
        reserve_bytes=spec.reserve_gib * GiB,
        reserve_fraction=spec.reserve_fraction,
        max_batch=spec.max_batch,
        padded=spec.padded,
        coefficients=coefs,
        bands=tuple(bands),
        band_basis=tuple(basis),
        calibrated_batch=int(data.get("calibrated_batch", 0) or 0),
        notes=spec.note or str(data.get("note", "")),
    )


def platform_for(family: str, catalog: Catalog, folder: str | None = None) -> PlatformModel:
    families, _ = load_families(folder)
    if family not in families:
        near = closest(family, list(families))
        raise ChipswapError(
            f"unknown chip family: {family!r}; "
            + (f"did you mean {', '.join(near)}? " if near else "")
            + f"known: {', '.join(families)}"
        )
    return _platform(family, folder, catalog)


def platform_for_instance(instance: Instance, catalog: Catalog, folder: str | None = None) -> PlatformModel:
    """The platform model of an instance's accelerator; a chip no family lists is a one-line error."""
    fam = family_of_chip(instance.accelerator, folder)
    if fam is None:
        raise ChipswapError(
            f"no platform model for {instance.name}: its chip {instance.accelerator!r} has no entry in "
            "chipswap's platform families (no specs or calibration); give a measured figure for this instance"
        )
    return platform_for(fam.name, catalog, folder)


PHYSICS_FILE = "physics.toml"


@lru_cache(maxsize=4)
def load_physics(folder: str | None = None) -> dict[str, Any]:
    """The physical serving model's fitted data (physics.toml, written by `chipswap calibrate`):
    {"families": name -> Physics ("_neuron" / "_nvidia": the vendor's shared values), "occupancy": stack ->
    share, "coverage": vendor -> Coverage, "vllm_gap": the GPU table fit's median error on the published H100
    vLLM runs, "stacks": stack key -> its fitted terms (the SDK-table stack, MoE kernels)}. {} when never
    written."""
    from chipswap.projection.serving.coverage import Coverage
    from chipswap.projection.serving.physics import PARAMS, Physics

    root = Path(folder) if folder else shipped_dir()
    path = inside(root, PHYSICS_FILE, "physics file")
    if not path.is_file():
        return {}
    data = read_toml(path, "physics file")
    fams = {}
    for name, vals in (data.get("families") or {}).items():
        fams[name] = Physics(
            name,
            tuple((k, strict_number(v, f"{PHYSICS_FILE} families.{name}.{k}", lo=0)) for k, v in vals.items()
                  if k in PARAMS),
        )  # fmt: skip
    occ = {
        k: strict_number(v, f"{PHYSICS_FILE} occupancy.{k}", lo=0, hi=1)
        for k, v in (data.get("occupancy") or {}).items()
    }
    reach = tuple(
        (k, strict_number(v, f"{PHYSICS_FILE} reach.{k}", lo=0)) for k, v in (data.get("reach") or {}).items()
    )
    env = data.get("envelope") or {}
    coverage = {}
    for vendor, bands in (data.get("bands") or {}).items():
        rng = env.get(vendor) or {}
        families = _str_list(rng.get("families", []), f"{PHYSICS_FILE} envelope.{vendor}.families")
        ranges = tuple(
            (d, strict_number(rng[d][0], f"{PHYSICS_FILE} envelope.{vendor}.{d}", lo=0),
             strict_number(rng[d][1], f"{PHYSICS_FILE} envelope.{vendor}.{d}", lo=0))
            for d in ("prompt", "tp", "params") if d in rng
        )  # fmt: skip

        def table(
            per_kind: dict[str, Any], where: str
        ) -> tuple[tuple[str, tuple[tuple[str, float], ...]], ...]:
            return tuple(
                (kind, tuple((m, strict_number(v, f"{where}.{kind}.{m}", lo=0)) for m, v in per.items()))
                for kind, per in per_kind.items()
                if kind not in fams
            )

        where = f"{PHYSICS_FILE} bands.{vendor}"
        coverage[vendor] = Coverage(
            vendor=vendor,
            bands=table(bands, where),
            family_bands=tuple((f, table(bands[f], f"{where}.{f}")) for f in families if f in bands),
            ranges=ranges,
            reach=reach,
            families=tuple(f for f in families if fams.get(f) is not None),
            max_batch=int(rng.get("batch", [0, 0])[1]),
            base_kinds=tuple(_str_list(data.get("band_kinds", ["lomo"]), f"{PHYSICS_FILE} band_kinds")),
        )
    gap = strict_number(
        (data.get("gpu") or {}).get("vllm_gap", 0.15), f"{PHYSICS_FILE} gpu.vllm_gap", lo=0, hi=1
    )
    stacks = {
        st: {
            k: strict_number(v, f"{PHYSICS_FILE} stacks.{st}.{k}", lo=0)
            for k, v in terms.items()
            if k in PARAMS
        }
        for st, terms in (data.get("stacks") or {}).items()
        if isinstance(terms, dict)
    }
    return {"families": fams, "occupancy": occ, "coverage": coverage, "vllm_gap": gap, "stacks": stacks}
