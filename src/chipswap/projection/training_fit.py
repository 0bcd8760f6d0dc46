"""Training calibration: fit the layout-aware training model (training_model.py) on published training
throughput, measure it leave-one-source-out, and write data/training/calibration.toml.

Rows: ../shared/reference/gpu-benchmarks/training.csv (NVIDIA NeMo / Megatron-Bridge), the Trn1 training
tables of ../shared/reference/neuron-benchmarks, and data/training/published_rows.toml (papers found outside,
each with source and date). Every row keeps its published layout where one is printed (TP / PP / CP / DP /
FSDP, micro-batch, global batch); the rest of the layout (recompute, sharding where unstated, or all of it) is
chosen by the same search a projection runs. Bands: for each held-out source, the coefficients are re-fitted
on the other sources and the source's rows predicted; the band of a vendor group is the 80th percentile of
those held-out |ln(predicted / published)|. Reads those files only; writes the calibration file only when
asked.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from chipswap.datafile import read_toml
from chipswap.economics.catalog import Catalog
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.projection.calibration import _GPU_TRAIN_MODELS, DEFAULT_REFERENCE, _toml_value
from chipswap.projection.platforms import shipped_dir
from chipswap.projection.reference_tables import _int, _Models, _num, _read_csv
from chipswap.projection.training import calibration_path, system_of
from chipswap.projection.training_model import SHARDINGS, Coef, Layout, System, layouts, memory, step_time
from chipswap.projection.work import ModelWork, work_from_config

PARAMS = ("e16_nvidia", "e8_nvidia", "e16_neuron", "x_tp")
START = (0.5, 0.35, 0.4, 0.5)
LOWER = (0.05, 0.05, 0.05, 0.0)
UPPER = (1.0, 1.0, 1.0, 1.0)
BAND_QUANTILE = 0.8
VIRTUAL_OPEN = (1, 2, 4, 8)  # interleaved stages, where a source prints none
# calibration rows run on these instances' chips; their network is the published system's, not the instance's
HOST = {
    "H100": "p5.48xlarge",
    "A100-80GB": "p4de.24xlarge",
    "B200": "p6-b200.48xlarge",
    "Trainium": "trn1.32xlarge",
}
FAMILY = {"H100": "H100", "A100-80GB": "A100", "B200": "B200", "Trainium": "Trainium"}
DGX_NETWORK_GBPS = 3200  # DGX H100 / B200: 8 x 400 Gb/s InfiniBand
TRN1N_NETWORK_GBPS = 1600  # multi-node rows say trn1.32xlarge/trn1n.32xlarge; trn1n has 1,600 Gb/s EFA
# families with no published training rows: coefficients transferred from their vendor group, band widened
TRANSFER = {"H200": "nvidia", "A10G": "nvidia", "L4": "nvidia", "L40S": "nvidia"}
TRANSFER_WIDEN = 1.5
MIN_FAMILY_ROWS = 5  # a family with this many held-out rows gets at least the band covering them
TARGETS = {"nvidia": 0.20, "neuron": 0.25, "coverage": 0.80}
NEURON_SOURCE = (
    "aws-neuron/aws-neuron-sdk about-neuron/benchmarks/trn1 training tables (Neuron SDK 2.32 docs)"
)


@dataclass(frozen=True)
class TrainRow:
    """One published training figure: tokens/s per device of `work` on `nodes` nodes, with the layout
    fields the source prints (`fixed`) and the candidate layouts chipswap may choose among."""

    row_id: str
    source: str
    source_title: str
    date: str
    stack: str
    family: str
    system: System
    model: str
    work: ModelWork = field(repr=False)
    dtype: str
    seq_len: int
    global_batch: int
    nodes: int
    observed: float
    fixed: dict[str, Any]
    note: str = ""

    @property
    def group(self) -> str:
        return self.system.group


# --- reading the rows ----------------------------------------------------------------------------


def _system(chip: str, catalog: Catalog, network: float) -> System:
    inst = catalog.instance(HOST[chip])
    return system_of(inst, catalog.chip(chip), network_gbps=network, family=FAMILY[chip])


_GPU_MODELS = _GPU_TRAIN_MODELS  # the NVIDIA table's model names (shared with calibration.py)


def _gpu_rows(ref: Path, models: _Models, catalog: Catalog, out: list[TrainRow], skipped: list[str]) -> None:
    for line, r in _read_csv(ref / "gpu-benchmarks" / "training.csv"):
        rid = f"training.csv:{line}"
        chip = {"H100": "H100", "B200": "B200"}.get(r["gpu"])
        model = _GPU_MODELS.get(r["model"])
        prec = r["precision"].upper()
        why = (
            f"{r['gpu']}: no AWS instance in the catalog"
            if chip is None
            else f"{r['model']}: MoE or architecture not published"
            if model is None
            else "LoRA: frozen weights change the work per token"
            if r["task"] == "LoRA"
            else f"{prec}: block-scaled / 4-bit formats are not projected"
            if prec not in ("FP8", "FP8-CS", "BF16")
            else ""
        )
        per_gpu = _num(r["tokens_per_s_per_gpu"])
        if why or per_gpu is None:
            skipped.append(f"{rid}: {why or 'no tokens/s'}")
            continue
        assert chip is not None and model is not None
        gpus = int(r["gpu_count"])
        tp, pp, cp = (_int(r[k]) or 1 for k in ("tp", "pp", "cp"))
        fsdp = _int(r["fsdp"]) or 0
        fixed = {
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "dp": gpus // (tp * pp * cp),
            "vp": _int(r["vp"]) or 1,
            "micro_batch": _int(r["micro_batch_size"]) or 1,
            "sharding": "fsdp" if fsdp else "zero1",
        }
        version = r["container_version"]
        source = "nemo-24.07" if r["source_id"].startswith("nemo-24.07") else "megatron-bridge"
        out.append(
            TrainRow(
                rid,
                source,
                f"{r['source_url_or_repo_path']} @ {r['source_commit_or_version']}",
                r["as_of"],
                f"{r['framework']} {version}",
                FAMILY[chip],
                _system(chip, catalog, DGX_NETWORK_GBPS),
                model,
                models.works[model],
                "fp8" if prec.startswith("FP8") else "bf16",
                int(r["seq_len"]),
                int(r["global_batch_size"]),
                max(1, gpus // 8),
                per_gpu,
                fixed,
                f"{r['task']}, {gpus} GPUs, TP{tp} PP{pp} CP{cp}{' FSDP' if fsdp else ''}, {r['precision']}",
            )
        )


_DEFAULT_LEN = {"gpt3-175b": 2048, "llama-2-7b": 4096, "llama-2-13b": 4096}


def _topology(text: str, devices: int) -> dict[str, Any]:
    deg = {k.lower(): int(v) for k, v in re.findall(r"(TP|PP|DP)=(\d+)", text)}
    tp, pp = deg.get("tp", 1), deg.get("pp", 1)
    return {"tp": tp, "pp": pp, "cp": 1, "dp": max(1, devices // (tp * pp)), "vp": 1, "sharding": "zero1"}


def _neuron_rows(
    ref: Path, models: _Models, catalog: Catalog, out: list[TrainRow], skipped: list[str]
) -> None:
    cores = catalog.instance("trn1.32xlarge").neuron_cores
    for fname in (
        "trn1_training_data_decoder.csv",
        "trn1_training_data_encoder.csv",
        "trn1_trn1_trn1n_nlp_data.csv",
    ):
        for line, r in _read_csv(ref / "neuron-benchmarks" / fname):
            rid = f"{fname}:{line}"
            name = r["Model"]
            model = models.find(name)
            if model is None or "BF16" not in r["Training Data-Type"]:
                skipped.append(f"{rid}: {name}: {'architecture not published' if model is None else 'fp32'}")
                continue
            seq = _int(r.get("Sequence Length", "")) or (
                512 if "Ph2" in name else 128 if "Ph1" in name else None
            )
            seq = seq or _DEFAULT_LEN.get(model)
            nodes, per_s = _int(r["Nodes"]), _num(r["Performance [seq/sec]"])
            if seq is None or nodes is None or per_s is None:
                skipped.append(f"{rid}: sequence length, nodes or throughput not published")
                continue
            work = models.works[model]
            if model == "bert-large":
                work = models.encoder_work(model, "mlm")
            tut = r.get("Neuron Tutorial/Example", "")
            source = (
                "neuron-nemo-megatron"
                if "nemo" in tut.lower()
                else "neuron-nxd"
                if "distributed" in tut.lower()
                else "neuron-hf-bert"
            )
            fixed = _topology(r["Topology"], nodes * cores)
            fixed["micro_batch"] = _int(r["Microbatch"]) or 1
            out.append(
                TrainRow(
                    rid,
                    source,
                    f"{NEURON_SOURCE}: {fname}",
                    f"Neuron {r['Neuron Version']}",
                    tut.split("<")[0].strip(" `:_") or source,
                    "Trainium",
                    _system("Trainium", catalog, TRN1N_NETWORK_GBPS if nodes > 1 else 800),
                    model,
                    work,
                    "bf16",
                    seq,
                    _int(r["Globalbatch"]) or 1024,
                    nodes,
                    per_s * seq / (nodes * cores),
                    fixed,
                    f"{nodes} nodes, {r['Topology']}",
                )
            )


def _published_rows(catalog: Catalog, out: list[TrainRow], skipped: list[str]) -> None:
    path = Path(str(calibration_path())).with_name("published_rows.toml")
    data = read_toml(path, "published training rows")
    works = {k: work_from_config(v["config"], name=k, task="causal-lm") for k, v in data["models"].items()}
    bench = _Models(shipped_dir())
    sources = data["sources"]
    for r in data["rows"]:
        src = sources[r["source"]]
        key = r["model"]
        work = works.get(key) or bench.works[key]
        seq = int(r["seq_len"])
        if "tokens_per_s_per_gpu" in r:
            obs = float(r["tokens_per_s_per_gpu"])
        elif "gpu_hours" in r:
            obs = float(r["tokens"]) / float(r["gpu_hours"]) / 3600.0
        else:
            from chipswap.projection.training_model import flops_per_token

            lin, att = flops_per_token(work, seq)
            obs = float(r["tflops_per_gpu"]) * 1e12 / (3.0 * (lin + att))
        gpus = int(r["gpus"])
        fixed: dict[str, Any] = {}
        if "tp" in r:
            tp, pp, cp = int(r["tp"]), int(r["pp"]), int(r.get("cp", 1))
            fixed = {"tp": tp, "pp": pp, "cp": cp, "dp": gpus // (tp * pp * cp), "micro_batch": 1}
        chip = str(src["chip"])
        out.append(
            TrainRow(
                r["id"],
                r["source"],
                src["title"],
                src["date"],
                src["stack"],
                FAMILY[chip],
                _system(chip, catalog, float(src["network_gbps"])),
                key,
                work,
                r["dtype"],
                seq,
                int(r["global_batch"]),
                max(1, gpus // 8),
                obs,
                fixed,
                r.get("note", ""),
            )
        )


def load_rows(reference: str | Path | None = None) -> tuple[list[TrainRow], list[str]]:
    """Every usable published training row and why the others were left out."""
    ref = Path(reference) if reference else DEFAULT_REFERENCE
    if not (ref / "gpu-benchmarks").is_dir():
        raise ChipswapError(
            f"reference tables not found: {ref}; run from the repository root or pass a folder"
        )
    catalog = load_catalog()
    models = _Models(shipped_dir())
    rows: list[TrainRow] = []
    skipped: list[str] = []
    _gpu_rows(ref, models, catalog, rows, skipped)
    _neuron_rows(ref, models, catalog, rows, skipped)
    _published_rows(catalog, rows, skipped)
    return rows, skipped


# --- layouts of the rows -------------------------------------------------------------------------


def candidates(row: TrainRow) -> list[Layout]:
    """The layouts a row may have run: its published degrees with recompute (and sharding or micro-batch where
    not published) open; every layout of the search when the source prints none."""
    if not row.fixed:
        return layouts(
            row.work, row.system, nodes=row.nodes, seq_len=row.seq_len, global_batch=row.global_batch
        )
    f = row.fixed
    shardings = [f["sharding"]] if "sharding" in f else list(SHARDINGS)
    out = []
    for sh in shardings:
        for rc in ("none", "full"):
            for vp in [f["vp"]] if "vp" in f else VIRTUAL_OPEN:
                out.append(
                    Layout(f["tp"], f["pp"], f["dp"], f["cp"], sh, rc, f["micro_batch"], vp, row.global_batch)
                )
    return out


def choose(row: TrainRow, coef: Coef) -> Layout:
    """The fastest candidate layout that fits (the fastest of all when the memory model rejects every one)."""
    best, best_any = None, None
    for lay in candidates(row):
        t = step_time(row.work, row.system, lay, coef, seq_len=row.seq_len, dtype=row.dtype, nodes=row.nodes)
        v = t.tokens_per_s_per_device
        if best_any is None or v > best_any[0]:
            best_any = (v, lay)
        if memory(row.work, row.system, lay, row.seq_len, row.dtype).fits and (best is None or v > best[0]):
            best = (v, lay)
    chosen = best or best_any
    assert chosen is not None
    return chosen[1]


def predict(row: TrainRow, coef: Coef, layout: Layout) -> float:
    t = step_time(row.work, row.system, layout, coef, seq_len=row.seq_len, dtype=row.dtype, nodes=row.nodes)
    return t.tokens_per_s_per_device


# --- fitting -------------------------------------------------------------------------------------


def _coef(theta: Any) -> Coef:
    return Coef(tuple((k, float(v)) for k, v in zip(PARAMS, theta, strict=True)))


def fit(rows: list[TrainRow], rounds: int = 2) -> tuple[Coef, list[Layout]]:
    """Least squares on ln(predicted / published), each source weighted equally; layouts re-chosen each
    round."""
    from scipy.optimize import least_squares

    by_source: dict[str, int] = {}
    for r in rows:
        by_source[r.source] = by_source.get(r.source, 0) + 1
    w = np.array([1.0 / math.sqrt(by_source[r.source]) for r in rows])
    used = {p for r in rows for p in (f"e16_{r.group}", "x_tp")} | {
        f"e8_{r.group}" for r in rows if r.dtype == "fp8"
    }
    theta = np.array(START)
    coef = _coef(theta)
    lays = [choose(r, coef) for r in rows]
    free = [i for i, p in enumerate(PARAMS) if p in used]
    for _ in range(rounds):

        def sub(x: Any, lays: list[Layout] = lays, base: Any = theta.copy()) -> Any:
            th = base.copy()
            th[free] = x
            c = _coef(th)
            return w * np.array(
                [math.log(predict(r, c, lay) / r.observed) for r, lay in zip(rows, lays, strict=True)]
            )

        sol = least_squares(sub, theta[free], bounds=(np.array(LOWER)[free], np.array(UPPER)[free]))
        theta[free] = sol.x
        coef = _coef(theta)
        lays = [choose(r, coef) for r in rows]
    return coef, lays


@dataclass
class HeldOutResult:
    """Per row: the held-out prediction (its source left out of the fit) and the layout chipswap chose."""

    rows: list[TrainRow]
    predicted: list[float]
    layouts: list[Layout]

    def log_errors(self) -> np.ndarray:
        return np.array([math.log(p / r.observed) for r, p in zip(self.rows, self.predicted, strict=True)])

    def rel_errors(self) -> np.ndarray:
        return np.exp(self.log_errors()) - 1.0


def leave_one_source_out(rows: list[TrainRow]) -> HeldOutResult:
    preds: list[float] = [0.0] * len(rows)
    lays: list[Layout | None] = [None] * len(rows)
    for src in sorted({r.source for r in rows}):
        train = [r for r in rows if r.source != src]
        coef, _ = fit(train)
        for i, r in enumerate(rows):
            if r.source == src:
                lay = choose(r, coef)
                preds[i], lays[i] = predict(r, coef, lay), lay
    return HeldOutResult(rows, preds, [x for x in lays if x is not None])


def band_of(log_err: np.ndarray, q: float = BAND_QUANTILE) -> float:
    """Relative half-width covering a share q of |ln error|: exp(quantile) - 1 (nearest rank, upward)."""
    a = np.sort(np.abs(log_err))
    k = min(len(a) - 1, max(0, math.ceil(q * len(a)) - 1))
    return float(math.exp(a[k]) - 1.0)


def summarize(rows: list[TrainRow], held: HeldOutResult) -> dict[str, Any]:
    """Bands per vendor group, median held-out error per family and per source, band coverage."""
    le, rel = held.log_errors(), held.rel_errors()
    groups: dict[str, float] = {}
    for g in sorted({r.group for r in rows}):
        idx = [i for i, r in enumerate(rows) if r.group == g]
        groups[g] = band_of(le[idx])
    out: dict[str, Any] = {"groups": {}, "families": {}, "sources": {}}
    for g, band in groups.items():
        idx = [i for i, r in enumerate(rows) if r.group == g]
        cov = float(np.mean(np.abs(le[idx]) <= math.log1p(band) + 1e-12))
        out["groups"][g] = {
            "band": round(band, 4),
            "coverage": round(cov, 4),
            "rows": len(idx),
            "median_abs_error": round(float(np.median(np.abs(rel[idx]))), 4),
        }
    for key, name in (("families", "family"), ("sources", "source")):
        for val in sorted({getattr(r, name) for r in rows}):
            idx = [i for i, r in enumerate(rows) if getattr(r, name) == val]
            band = groups[rows[idx[0]].group]
            if key == "families" and len(idx) >= MIN_FAMILY_ROWS:
                band = max(band, band_of(le[idx]))  # a family with enough rows is covered on its own too
            out[key][val] = {
                "band": round(band, 4),
                "rows": len(idx),
                "median_abs_error": round(float(np.median(np.abs(rel[idx]))), 4),
                "median_error": round(float(np.median(rel[idx])), 4),
                "coverage": round(float(np.mean(np.abs(le[idx]) <= math.log1p(band) + 1e-12)), 4),
            }
    return out


def calibrate(reference: str | Path | None = None) -> dict[str, Any]:
    """Fit on every row, measure leave-one-source-out, and return the calibration file's content."""
    rows, skipped = load_rows(reference)
    coef, lays = fit(rows)
    held = leave_one_source_out(rows)
    summ = summarize(rows, held)
    fams: dict[str, Any] = {}
    basis = (
        "leave-one-source-out: 80th percentile of |ln(predicted/published)| over the {g} group's "
        "held-out rows"
    )
    for fam, s in summ["families"].items():
        g = next(r.group for r in rows if r.family == fam)
        own = s["band"] > summ["groups"][g]["band"]
        fams[fam] = {
            "band": s["band"],
            "basis": basis.format(g=g) + (f", widened to cover {fam}'s own {s['rows']} rows" if own else ""),
            "sources": sorted({f"{r.source_title} ({r.date})" for r in rows if r.family == fam}),
            "held_out_median_abs_error": s["median_abs_error"],
        }
    for fam, g in TRANSFER.items():
        fams[fam] = {
            "band": round(summ["groups"][g]["band"] * TRANSFER_WIDEN, 4),
            "basis": basis.format(g=g) + f", x {TRANSFER_WIDEN} (transferred family)",
            "transferred": (
                f"no published {fam} training rows: coefficients of the NVIDIA fit (A100, H100, B200) "
                "applied to "
                f"{fam}'s spec sheet; band widened x{TRANSFER_WIDEN} (assumption)"
            ),
            "sources": [],
        }
    return {
        "schema": 1,
        "coefficients": {k: round(v, 4) for k, v in coef.values},
        "families": fams,
        "held_out": summ,
        "rows": [
            {
                "id": r.row_id,
                "source": r.source,
                "family": r.family,
                "model": r.model,
                "dtype": r.dtype,
                "published": round(r.observed, 1),
                "held_out_predicted": round(p, 1),
                "layout": lay.label(),
            }
            for r, p, lay in zip(rows, held.predicted, held.layouts, strict=True)
        ],
        "skipped": skipped,
        "fit_layouts": {r.row_id: lay.label() for r, lay in zip(rows, lays, strict=True)},
    }


def render(data: dict[str, Any]) -> str:
    """The calibration file's text (GENERATED header; tables of scalars, inline tables below)."""
    lines = [
        "# Training calibration. GENERATED by projection.training_fit (bench/training_bands.py --write)",
        "# from the published rows of ../shared/reference and data/training/published_rows.toml;",
        "# do not edit by hand.",
        f"schema = {data['schema']}",
        "",
        "[coefficients]",
    ]
    lines += [f"{k} = {_toml_value(v)}" for k, v in data["coefficients"].items()]
    for fam, d in data["families"].items():
        lines += ["", f'[families."{fam}"]'] + [f"{k} = {_toml_value(v)}" for k, v in d.items()]
    for sect in ("groups", "families", "sources"):
        lines += ["", f"[held_out.{sect}]"]
        lines += [f'"{k}" = {_toml_value(v)}' for k, v in data["held_out"][sect].items()]
    lines += [""]
    for r in data["rows"]:
        lines += ["[[rows]]"] + [f"{k} = {_toml_value(v)}" for k, v in r.items()]
    lines += ["", "[skipped]", f"rows = {_toml_value(data['skipped'])}"]
    return "\n".join(lines) + "\n"


def write(data: dict[str, Any], path: str | Path | None = None) -> Path:
    from chipswap.atomic import atomic_write_text

    target = Path(path or calibration_path())
    atomic_write_text(target, render(data))
    return target


def with_global_batch(lay: Layout, gb: int) -> Layout:
    return replace(lay, global_batch=gb)
