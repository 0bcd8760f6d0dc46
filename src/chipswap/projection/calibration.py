"""Calibration: read the published benchmark tables, fit every platform group, validate on held-out rows,
and write the shipped coefficient files (src/chipswap/data/platforms/<family>.toml).

`chipswap calibrate` and `make calibrate` call `calibrate()`; tests/test_calibration*.py call it too and fail
if the shipped files differ from a fresh fit or the held-out errors miss the targets. Reads only
../shared/reference/{neuron,gpu}-benchmarks (or a folder given) and the shipped benchmark_models.toml /
families.toml / catalog; writes only the platform files (atomically), and only when asked to.

Which published rows are used, and why the others are not, is decided here, row by row, with the reason
recorded (`Skipped`); see docs/projection.md for the list.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chipswap.economics.catalog import Catalog
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.projection.fitting import (
    BenchRow,
    FitRules,
    HeldOut,
    Problem,
    architecture_key,
    band_of,
    fit_group,
    held_out,
    in_sample,
    median_error,
    round_sig,
)
from chipswap.projection.platform import DeviceSpec
from chipswap.projection.platforms import FamilySpec, GroupSpec, device_spec, load_families, shipped_dir
from chipswap.projection.reference_tables import (
    GPU_PRECISION,
    Skipped,
    _chip_for,
    _gpu_chip,
    _int,
    _Models,
    _neuron_source,
    _num,
    _read_csv,
)
from chipswap.projection.work import ModelWork

DEFAULT_REFERENCE = Path("../shared/reference")
BAND_QUANTILE = 0.8

# the targets of issue 9 on the held-out Neuron decoder rows (median absolute relative error)
TARGETS = {"out_tok_s": 0.15, "tpot_s": 0.15, "ttft_s": 0.35}


@dataclass
class Reference:
    """Every usable published row, the works of their models, the device of each chip, what was skipped."""

    rows: list[BenchRow]
    works: dict[str, ModelWork]
    devices: dict[str, DeviceSpec]
    skipped: list[Skipped]
    sources: dict[str, str]
    families: dict[str, FamilySpec]
    groups: dict[str, GroupSpec]

    def problem(self, keep: Callable[[BenchRow], bool] | None = None) -> Problem:
        rows = tuple(r for r in self.rows if keep is None or keep(r))
        return Problem(rows, self.works, self.devices, FitRules())

    def group_of(self, row: BenchRow) -> str:
        return self.families[row.family].group


# --- the published tables -----------------------------------------------------------------------


def _neuron_decoder(
    ref: Path, models: _Models, catalog: Catalog, out: list[BenchRow], skipped: list[Skipped]
) -> None:
    seen: dict[tuple, str] = {}
    for fname in (
        "inf2_throughput_data_decoder.csv",
        "inf2_latency_data_decoder.csv",
        "trn1_throughput_data_decoder.csv",
        "trn1_latency_data_decoder.csv",
    ):
        path = ref / "neuron-benchmarks" / fname
        for line, r in _read_csv(path):
            rid = f"{fname}:{line}"
            model = models.find(r["Model"])
            if model is None:
                skipped.append(Skipped(rid, f"model {r['Model']!r} has no entry in benchmark_models.toml"))
                continue
            key = tuple(
                r[k]
                for k in (
                    "Model",
                    "Inst. Type",
                    "Batch Size",
                    "Sequence Length",
                    "Input Length",
                    "Output Length",
                    "Neuron Version",
                    "TP Degree",
                )
            )
            if key in seen:
                skipped.append(
                    Skipped(rid, f"duplicate of {seen[key]} (same row in the throughput and latency tables)")
                )
                continue
            seen[key] = rid
            instance, chip = _chip_for(r["Inst. Type"], catalog)
            wdt = r["Weight Storage Data Type"].lower()
            observed = [
                ("out_tok_s", _num(r["Output Token Throughput (tokens/sec)"])),
                ("ttft_s", (_num(r["TTFT Latency P50 (ms)"]) or 0) / 1e3 or None),
                ("tpot_s", (_num(r["TPOT Latency P50 (ms)"]) or 0) / 1e3 or None),
            ]
            out.append(
                BenchRow(
                    row_id=rid,
                    source=_neuron_source(fname),
                    stack=f"{r['Framework']}, Neuron {r['Neuron Version']}",
                    family="",
                    chip=chip,
                    instance=instance,
                    model=model,
                    phase="llm",
                    scenario="static",
                    weight_dtype="int8" if wdt == "int8" else "bf16",
                    compute_dtype="bf16",
                    kv_dtype="bf16",
                    tp=int(r["TP Degree"]),
                    replicas=1,
                    batch=int(r["Batch Size"]),
                    input_len=int(r["Input Length"]),
                    output_len=int(r["Output Length"]),
                    observed=tuple((m, v) for m, v in observed if v),
                    notes=f"sequence length {r['Sequence Length']}; {r['Application Type']}",
                )
            )


def _gpu_inference(ref: Path, models: _Models, out: list[BenchRow], skipped: list[Skipped]) -> None:
    fname = "llm_inference.csv"
    for line, r in _read_csv(ref / "gpu-benchmarks" / fname):
        rid = f"{fname}:{line}"
        if r["source_id"].startswith("hf-tgi"):
            skipped.append(Skipped(rid, "TGI SageMaker rows: prompt length not published"))
            continue
        chip, chip_note = _gpu_chip(r["accelerator"], r["accelerator_variant"])
        if chip is None:
            skipped.append(Skipped(rid, chip_note))
            continue
        model = models.find(r["model"])
        if model is None:
            skipped.append(
                Skipped(
                    rid,
                    f"{r['model']}: not a dense transformer in benchmark_models.toml "
                    "(MoE rows are not modelled)",
                )
            )
            continue
        if r["precision"] not in GPU_PRECISION:
            skipped.append(Skipped(rid, f"precision {r['precision']!r} not modelled"))
            continue
        wdt, cdt, kvdt = GPU_PRECISION[r["precision"]]
        sid = r["source_id"]
        scenario = "latency" if "latency" in sid else ("static" if "static" in sid else "ifb")
        if scenario == "latency":
            ttft = _num(r["ttft_ms_mean"])
            observed: tuple[tuple[str, float], ...] = (("ttft_s", ttft / 1e3),) if ttft else ()
        else:
            thr = _num(r["output_tok_s_total"])
            observed = (("out_tok_s", thr),) if thr else ()
        if not observed:
            skipped.append(Skipped(rid, "no figure published"))
            continue
        notes = "; ".join(x for x in (r["scenario"], chip_note, r.get("derived_columns", "")) if x)
        out.append(
            BenchRow(
                row_id=rid,
                source=f"{r['source_url_or_repo_path']} ({r['source_commit_or_version']})",
                stack=f"{r['framework'].split(' (')[0]} {r['framework_version']}",
                family="",
                chip=chip,
                instance=r.get("instance_type", ""),
                model=model,
                phase="llm",
                scenario=scenario,
                weight_dtype=wdt,
                compute_dtype=cdt,
                kv_dtype=kvdt,
                tp=int(r["tp"]) * int(r["pp"] or 1),
                replicas=1,
                batch=_int(r["batch_size"]) or 0,
                input_len=int(r["input_len"]),
                output_len=int(r["output_len"]),
                observed=observed,
                notes=notes,
            )
        )


_GPU_TRAIN_MODELS = {
    "LLAMA3_8B": "llama-3-8b",
    "LLAMA3-8B": "llama-3-8b",
    "LLAMA3_70B": "llama-3-70b",
    "LLAMA3-70B": "llama-3-70b",
    "LLAMA3.1_405B": "llama-3.1-405b",
    "LLAMA2-7B": "llama-2-7b",
    "LLAMA2-13B": "llama-2-13b",
    "LLAMA2-70B": "llama-2-70b",
    "GPT3-175B": "gpt3-175b",
}


def load_reference(reference: str | Path | None = None, *, platforms: str | Path | None = None) -> Reference:
    """Every usable published row of ../shared/reference (or `reference`), with works and devices."""
    ref = Path(reference) if reference else DEFAULT_REFERENCE
    for sub in ("neuron-benchmarks", "gpu-benchmarks"):
        if not (ref / sub).is_dir():
            raise ChipswapError(
                f"reference tables not found: {ref / sub}; run from the repository root "
                "(../shared/reference) "
                "or pass --reference DIR"
            )
    folder = Path(platforms) if platforms else shipped_dir()
    catalog = load_catalog()
    families, groups = load_families(str(folder) if platforms else None)
    models = _Models(shipped_dir())
    rows: list[BenchRow] = []
    skipped: list[Skipped] = []
    _neuron_decoder(ref, models, catalog, rows, skipped)
    from chipswap.projection.calibration_encoders import neuron_encoder

    neuron_encoder(ref, models, catalog, rows, skipped)
    _gpu_inference(ref, models, rows, skipped)
    chip_family = {c.lower(): f for f in families.values() for c in f.chips}
    devices: dict[str, DeviceSpec] = {}
    placed: list[BenchRow] = []
    from dataclasses import replace

    for r in rows:
        fam = chip_family.get(r.chip.lower())
        if fam is None or not fam.group:
            skipped.append(Skipped(r.row_id, f"chip {r.chip} has no calibrated family"))
            continue
        if r.chip not in devices:
            devices[r.chip] = device_spec(catalog.chip(r.chip), fam.devices_per_chip)
        placed.append(replace(r, family=fam.name))
    return Reference(placed, models.works, devices, skipped, models.sources, families, groups)


# --- fitting and validation of every group ------------------------------------------------------


@dataclass
class Validation:
    """Held-out predictions of one group and phase, per way of holding out."""

    group: str
    phase: str
    splits: dict[str, list[HeldOut]] = field(default_factory=dict)  # split name -> held-out predictions
    # split name -> (row id, why) of rows that cannot be predicted with their fold held out
    unpredictable: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    fitted: list[HeldOut] = field(default_factory=list)  # in-sample predictions of the shipped fit

    def median(self, split: str, metric: str, *, baseline: bool = False) -> float | None:
        return median_error(self.splits.get(split, []), metric, baseline=baseline)


SPLIT_DOC = {
    "model": "leave-one-model-out: each published model's rows predicted by coefficients fitted without them",
    "architecture": "leave-one-architecture-out: models with identical layer sizes "
    "(Llama-2-13B / CodeLlama-13B, "
    "Llama-2-70B / Llama-3-70B, Llama-3-8B / Llama-3.1-8B) are held out together",
    "platform": "leave-one-platform-out: Inferentia2 rows predicted from Trainium rows only and vice versa",
    "gpu": "leave-one-GPU-out: each GPU's rows predicted from the other GPUs' rows only",
}


def validate_group(reference: Reference, group: str, phase: str) -> Validation:
    spec = reference.groups[group]
    free = spec.free_for(phase)
    problem = reference.problem(lambda r: reference.group_of(r) == group and r.phase == phase)
    val = Validation(group, phase)
    if not problem.rows or not free:
        return val
    arch = architecture_key(reference.works)
    splits: dict[str, Callable[[BenchRow], str]] = {
        "model": lambda r: r.model.split(":")[0],
        "architecture": arch,
    }
    if spec.vendor == "AWS" and len({r.family for r in problem.rows}) > 1:
        splits["platform"] = lambda r: r.family
    if spec.vendor == "NVIDIA":
        splits["gpu"] = lambda r: r.family
    for name, key in splits.items():
        lost: list[tuple[str, str]] = []
        val.splits[name] = held_out(problem, phase, free, key, group=group, unpredictable=lost)
        val.unpredictable[name] = lost
    return val


@dataclass
class Calibration:
    reference: Reference
    coefficients: dict[tuple[str, str], Any]  # (group, phase) -> Coefficients
    validations: dict[tuple[str, str], Validation]

    def families_text(self) -> dict[str, str]:
        """<family>.toml text for every family (what `calibrate --write` stores)."""
        return {f: family_file_text(self, f) for f in self.reference.families}


def calibrate(
    reference: str | Path | None = None, *, validate: bool = True, progress: Any = None
) -> Calibration:
    """Fit every group and phase on the published rows; with `validate`, also every held-out split."""
    ref = load_reference(reference)
    coefs: dict[tuple[str, str], Any] = {}
    vals: dict[tuple[str, str], Validation] = {}
    jobs = [(g, p) for g, spec in ref.groups.items() for p, _ in spec.free]
    for g, p in jobs:
        if progress:
            progress(f"fit {g} {p}")
        problem = ref.problem(lambda r, g=g, p=p: ref.group_of(r) == g and r.phase == p)
        if not problem.rows:
            continue
        coef = fit_group(problem, p, ref.groups[g].free_for(p), g)
        coefs[(g, p)] = coef
        if validate:
            if progress:
                progress(f"validate {g} {p}")
            v = validate_group(ref, g, p)
            v.fitted = in_sample(problem, coef)
            vals[(g, p)] = v
    return Calibration(ref, coefs, vals)


def _band_splits(cal: Calibration, family: str, group: str, phase: str) -> list[tuple[str, list[HeldOut]]]:
    """Which held-out predictions a family's band comes from: its group's rows held out by architecture;
    a family with no rows of this phase (e.g. L4) also gets the leave-one-GPU/platform-out errors, and its
    band is the wider of the two (a chip nobody published is at least as uncertain as one held out)."""
    val = cal.validations.get((group, phase))
    if val is None:
        return []
    chosen = [("architecture", val.splits.get("architecture", []))]
    if not any(h.row.family == family for h in chosen[0][1]):
        chosen += [(s, val.splits[s]) for s in ("gpu", "platform") if val.splits.get(s)]
    return [(s, items) for s, items in chosen if items]


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f'"{k}" = {_toml_value(x)}' for k, x in v.items()) + " }"
    raise TypeError(type(v))


def family_file_text(cal: Calibration, family: str) -> str:
    """The generated <family>.toml: coefficients of its group with provenance, and its error bands."""
    ref = cal.reference
    spec = ref.families[family]
    lines = [
        f"# {family}: fitted coefficients. GENERATED by `chipswap calibrate` (make calibrate) from",
        "# ../shared/reference/{neuron,gpu}-benchmarks; do not edit by hand - re-run the calibration.",
        "# Spec-sheet numbers come from the catalog's chip entries; see families.toml and",
        "# docs/projection.md.",
        "schema = 1",
        f"family = {_toml_value(family)}",
        f"group = {_toml_value(spec.group)}",
    ]
    if not spec.group:
        lines.append(f"note = {_toml_value(spec.note or 'not calibrated: no published rows')}")
        return "\n".join(lines) + "\n"
    group_rows = [r for r in ref.rows if ref.group_of(r) == spec.group and r.phase == "llm" and r.batch]
    if group_rows:
        lines.append(f"calibrated_batch = {max(r.batch for r in group_rows)}")
    for (g, phase), coef in sorted(cal.coefficients.items()):
        if g != spec.group:
            continue
        own = sum(1 for r in ref.rows if r.family == family and r.phase == phase)
        lines += [
            "",
            f"[{phase}]",
            f"rows_of_this_family = {own}",
            f"fit_error = {coef.fit_error!r}  # median |predicted/published - 1| on the rows fitted on",
            f"stacks = {_toml_value(list(coef.stacks))}",
            f"rows = {_toml_value(list(coef.rows))}",
        ]
        splits = _band_splits(cal, family, g, phase)
        if splits:
            n = max(len({id(h.row) for h in items}) for _, items in splits)
            names = " and ".join(SPLIT_DOC[s].split(":")[0] for s, _ in splits)
            basis = (
                f"{names}, {int(BAND_QUANTILE * 100)}th percentile of |ln(predicted/published)| over "
                f"{n} held-out rows" + (" (the wider of the two)" if len(splits) > 1 else "")
            )
            lines.append(f"band_basis = {_toml_value(basis)}")
        lines.append(f"[{phase}.coefficients]")
        lines += [f"{k} = {v!r}" for k, v in coef.values]
        if splits:
            metrics = sorted({h.metric for _, items in splits for h in items})
            lines.append(f"[{phase}.bands]  # relative half-width of the error band per metric")
            for metric in metrics:
                found = [b for _, items in splits if (b := band_of(items, metric, BAND_QUANTILE)) is not None]
                if found:
                    lines.append(f"{metric} = {max(found)!r}")
            split, items = splits[-1]
            lines.append(
                f"[{phase}.held_out_median_error]  # median |predicted/published - 1|, {split} split"
            )
            for metric in metrics:
                m = median_error(items, metric)
                if m is not None:
                    lines.append(f"{metric} = {round_sig(m, 3)!r}")
    return "\n".join(lines) + "\n"


def write_families(cal: Calibration, folder: str | Path | None = None) -> list[Path]:
    """Write every <family>.toml atomically into `folder` (default: the shipped data folder)."""
    from chipswap.atomic import atomic_write_text

    root = Path(folder) if folder else shipped_dir()
    written = []
    for family, text in cal.families_text().items():
        path = root / f"{family.lower()}.toml"
        atomic_write_text(path, text)
        written.append(path)
    return written


def _same(a: Any, b: Any, rel: float) -> bool:
    """Structural equality with floats equal to `rel` (a re-fit on another machine may flip a last digit)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y, rel) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        if (
            isinstance(a, bool)
            or isinstance(b, bool)
            or not isinstance(a, (int, float))
            or not isinstance(b, (int, float))
        ):
            return False
        return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-12)
    return bool(a == b)


def differences(cal: Calibration, folder: str | Path | None = None, *, rel: float = 2e-3) -> list[str]:
    """Families whose shipped file differs from a fresh calibration (empty = the shipped files match).
    Numbers are compared to `rel` (shipped values carry 3-4 significant digits); everything else exactly."""
    import tomllib

    root = Path(folder) if folder else shipped_dir()
    out = []
    for family, text in cal.families_text().items():
        path = root / f"{family.lower()}.toml"
        if not path.is_file():
            out.append(family)
            continue
        try:
            old = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            out.append(family)
            continue
        if not _same(old, tomllib.loads(text), rel):
            out.append(family)
    return out


def summary_rows(cal: Calibration) -> Iterable[tuple[str, str, str, str, float | None, float | None, int]]:
    """(group, phase, split, metric, median held-out error, median baseline error, rows) for the tables."""
    for (g, p), val in sorted(cal.validations.items()):
        for split, items in val.splits.items():
            for metric in sorted({h.metric for h in items}):
                sel = [h for h in items if h.metric == metric]
                yield g, p, split, metric, median_error(sel), median_error(sel, baseline=True), len(sel)
