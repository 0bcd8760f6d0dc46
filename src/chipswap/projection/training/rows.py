"""The published training rows the training calibration fits on (projection.training.fit) and the bench
measures: one TrainRow per published figure, with the layout as far as its source prints it.

Also the published peak-memory rows (data/training/published_memory.csv: torchtitan's benchmark tables, memory
only) the memory check compares with (`load_peaks`).

Rows: ../shared/reference/gpu-benchmarks/training.csv (NVIDIA NeMo / Megatron-Bridge),
../shared/reference/gpu-benchmarks/training_llm_foundry.csv (LLM Foundry / Composer, FSDP, with the published
layout and activation checkpointing), the Trn1 training tables of ../shared/reference/neuron-benchmarks, and
data/training/published_rows.toml (papers found outside, each with source and date). Reads those files and
the catalog only; writes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chipswap.datafile import read_toml
from chipswap.economics.catalog import Catalog
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.projection.calibration import _GPU_TRAIN_MODELS, DEFAULT_REFERENCE
from chipswap.projection.platforms import shipped_dir
from chipswap.projection.reference_tables import _int, _Models, _num, _read_csv
from chipswap.projection.training.model import Layout, System
from chipswap.projection.training.project import calibration_path, system_of
from chipswap.projection.work import ModelWork, work_from_config

# calibration rows run on these instances' chips; their network is the published system's, not the instance's
HOST = {
    "H100": "p5.48xlarge",
    "A100-80GB": "p4de.24xlarge",
    "A100": "p4d.24xlarge",
    "B200": "p6-b200.48xlarge",
    "Trainium": "trn1.32xlarge",
}
FAMILY = {"H100": "H100", "A100-80GB": "A100", "A100": "A100", "B200": "B200", "Trainium": "Trainium"}
DGX_NETWORK_GBPS = 3200  # DGX H100 / B200: 8 x 400 Gb/s InfiniBand
TRN1N_NETWORK_GBPS = 1600  # multi-node rows say trn1.32xlarge/trn1n.32xlarge; trn1n has 1,600 Gb/s EFA
FOUNDRY_NETWORK_GBPS = {"H100": 3200, "A100-80GB": 1600, "A100": 1600}  # A100: "1600 Gbps node-node (RoCE)"
FOUNDRY_CHIP = {"H100 80GB": "H100", "A100 80GB": "A100-80GB", "A100 40GB": "A100"}
# the source's training stack (training.model.STACK_RULES)
SOURCE_STACK = {
    "nemo-24.07": "megatron",
    "megatron-bridge": "megatron",
    "llama1-paper": "meta-2023",
    "llama2-paper": "meta-2023",
    "llama3-paper": "megatron",
    "llm-foundry": "composer",
}
NEURON_PAGES = {
    "trn1_training_data_decoder.csv": "neuron-trn1-decoder",
    "trn1_training_data_encoder.csv": "neuron-trn1-encoder",
    "trn1_trn1_trn1n_nlp_data.csv": "neuron-trn1-nlp",
}
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
    stack_key: str = ""  # the training.model.STACK_RULES key, where the source does not set it for every row

    @property
    def group(self) -> str:
        return self.system.group

    @property
    def train_stack(self) -> str:
        """The training.model.STACK_RULES key of the row's stack."""
        return self.stack_key or SOURCE_STACK.get(self.source, "megatron")


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
            # the stack from the tutorial the row links; the source is the published table (one page of
            # the Neuron docs, its own SDK versions): a stack seen on another page is known when one is held
            # out
            low = tut.lower()
            stack = "neuron-nemo" if "nemo" in low else "neuron" if "distributed" in low else "neuron-hf"
            source = NEURON_PAGES[fname]
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
                    stack,
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
            obs = float(r["tokens"]) / float(r["gpu_hours"]) / 3600.0 / float(src.get("effective_time", 1.0))
        else:
            from chipswap.projection.training.model import flops_per_token

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


def _foundry_rows(ref: Path, catalog: Catalog, out: list[TrainRow], skipped: list[str]) -> None:
    """LLM Foundry's benchmark tables: FSDP FULL_SHARD over every GPU, the published micro-batch, global
    batch and activation checkpointing (yes = full recompute), so each row is pinned whole."""
    path = ref / "gpu-benchmarks" / "training_llm_foundry.csv"
    if not path.is_file():
        return
    data = read_toml(
        Path(str(calibration_path())).with_name("published_rows.toml"), "published training rows"
    )
    models = data["models"]
    for line, r in _read_csv(path):
        rid = f"training_llm_foundry.csv:{line}"
        key = r["model"].lower()
        chip = FOUNDRY_CHIP.get(r["hardware"])
        per_gpu = _num(r["metric_value"])
        if key not in models or chip is None or per_gpu is None:
            skipped.append(f"{rid}: {r['model']} on {r['hardware']}: model, chip or throughput not known")
            continue
        work = work_from_config(models[key]["config"], name=key, task="causal-lm")
        gpus = int(r["accel_count"])
        ckpt = r["activation_ckpt"].strip().lower()
        fixed = {
            "tp": 1,
            "pp": 1,
            "cp": 1,
            "dp": gpus,
            "vp": 1,
            "micro_batch": int(r["micro_batch"]),
            "sharding": "fsdp",
            "recompute": "full" if ckpt == "yes" else "none",
        }
        out.append(
            TrainRow(
                r["row_id"],
                "llm-foundry",
                f"{r['source']} @ {r['commit']}",
                r["as_of"],
                r["framework"],
                FAMILY[chip],
                _system(chip, catalog, FOUNDRY_NETWORK_GBPS[chip]),
                key,
                work,
                "fp8" if r["precision"] == "fp8" else "bf16",
                int(r["seq_len"]),
                int(r["global_batch"]),
                int(r["nodes"]),
                per_gpu,
                fixed,
                f"{gpus} GPUs, {r['parallelism']}, activation checkpointing {ckpt}, {r['precision']}",
            )
        )


# the published precision labels as fp8 recipes (training.model.FP8_RECIPES); NVFP4 is not projected
RECIPE_OF = {"BF16": "bf16", "FP8": "tensorwise", "FP8-CS": "tensorwise", "MXFP8": "mxfp8", "FP8-MX": "mxfp8"}
PAIR_KEYS = ("gpu", "gpu_count", "model", "task", "seq_len", "global_batch_size", "micro_batch_size",
             "tp", "pp", "cp", "vp", "fsdp")  # fmt: skip


@dataclass(frozen=True)
class RecipePair:
    """Two published runs at one layout (every PAIR_KEYS field equal) in two precisions: throughput of
    `recipe` over `base` (whole step)."""

    base: str
    recipe: str
    ratio: float
    what: str


def recipe_pairs(reference: str | Path | None = None) -> list[RecipePair]:
    """Every pair of NeMo / Megatron-Bridge rows (training.csv) at the same layout in two precisions of
    RECIPE_OF (bf16 and the fp8 recipes), any chip or model: the measured recipe-to-recipe ratios."""
    ref = Path(reference) if reference else DEFAULT_REFERENCE
    groups: dict[tuple[str, ...], dict[str, list[tuple[float, str]]]] = {}
    for _line, r in _read_csv(ref / "gpu-benchmarks" / "training.csv"):
        rec = RECIPE_OF.get(r["precision"].upper())
        v = _num(r["tokens_per_s_per_gpu"])
        if rec is None or v is None or r["task"] == "LoRA":
            continue
        key = tuple(r[k] for k in PAIR_KEYS)
        groups.setdefault(key, {}).setdefault(rec, []).append((v, f"{r['precision']} {r['source_id']}"))
    out = []
    order = ("bf16", "tensorwise", "mxfp8")
    for key, by in groups.items():
        have = [k for k in order if k in by]
        for i, a in enumerate(have):
            for b in have[i + 1 :]:
                va = sum(x for x, _ in by[a]) / len(by[a])
                vb = sum(x for x, _ in by[b]) / len(by[b])
                names_a, names_b = (", ".join(n for _, n in by[x]) for x in (a, b))
                what = (f"{key[2]} on {key[1]} x {key[0]} (TP{key[7]} PP{key[8]} CP{key[9]} VP{key[10]}, "
                        f"seq {key[4]}): {names_b} vs {names_a}")  # fmt: skip
                out.append(RecipePair(a, b, vb / va, what))
    return out


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
    _foundry_rows(ref, catalog, rows, skipped)
    _published_rows(catalog, rows, skipped)
    return rows, skipped


# --- published peak memory (the memory check) -----------------------------------------------------

PEAK_HOST = {"H100": "p5.48xlarge", "H200": "p5e.48xlarge"}  # the chip's catalog instance (memory only)


@dataclass(frozen=True)
class PeakRow:
    """A published peak memory per GPU with the layout that ran (data/training/published_memory.csv)."""

    row_id: str
    source: str
    as_of: str
    model: str
    work: ModelWork = field(repr=False)
    system: System
    layout: Layout
    seq_len: int
    dtype: str
    stack: str
    published_gib: float
    techniques: str
    note: str = ""


def load_peaks(catalog: Catalog | None = None) -> list[PeakRow]:
    """Every published peak-memory row, its layout pinned whole (FSDP over `dp`, the rest as printed)."""
    cat = catalog or load_catalog()
    models = _Models(shipped_dir())
    out = []
    for _line, r in _read_csv(Path(str(calibration_path())).with_name("published_memory.csv")):
        chip = r["chip"]
        inst = cat.instance(PEAK_HOST[chip])
        tp, pp, cp, dp = (int(r[k]) for k in ("tp", "pp", "cp", "dp"))
        mb = int(r["micro_batch"])
        lay = Layout(tp, pp, dp, cp, r["sharding"], r["recompute"], mb, 1, dp * int(r["local_batch"]))
        out.append(
            PeakRow(
                r["row_id"],
                r["source"],
                r["as_of"],
                r["model"],
                models.works[r["model"]],
                system_of(inst, cat.chip(inst.accelerator), family=chip),
                lay,
                int(r["seq_len"]),
                r["dtype"],
                "pytorch",  # torchtitan: PyTorch FSDP2 / DTensor
                float(r["peak_gib"]),
                r["techniques"],
                r["notes"],
            )
        )
    return out
