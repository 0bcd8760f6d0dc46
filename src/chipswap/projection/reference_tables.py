"""Reading the published benchmark tables: CSV rows (size-bounded), positive finite numbers, the benchmark
model names of benchmark_models.toml, the Neuron tables' source line, and why a row was skipped.

Shared by calibration.py, calibration_encoders.py, training/fit.py and fitting/rows.py; reads only the files
it is given (no fitting, no writing); may not import calibration.py (which imports it).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from chipswap.datafile import read_text, read_toml
from chipswap.economics.catalog import Catalog
from chipswap.projection.work import ModelWork, work_from_config

NEURON_COMMIT = "aws-neuron/aws-neuron-sdk@81ce03ae (Neuron SDK 2.32 docs, 2026-08-21)"
MAX_TABLE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Skipped:
    """A published row left out of the fit, with the reason."""

    row_id: str
    reason: str


def _read_csv(path: Path) -> list[tuple[int, dict[str, str]]]:
    text = read_text(path, "benchmark table", max_bytes=MAX_TABLE_BYTES)
    reader = csv.DictReader(text.splitlines())
    return [
        (i + 2, {(k or "").strip(): (v or "").strip() for k, v in row.items()})
        for i, row in enumerate(reader)
    ]


def _num(value: str) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def _int(value: str) -> int | None:
    v = _num(value)
    return int(v) if v is not None and v == int(v) else None


class _Models:
    """Benchmark model names (as the tables spell them) -> ModelWork, from benchmark_models.toml."""

    def __init__(self, folder: Path) -> None:
        data = read_toml(folder / "benchmark_models.toml", "benchmark models file")
        self.alias: dict[str, str] = {}
        self.works: dict[str, ModelWork] = {}
        self.sources: dict[str, str] = {}
        for key, entry in (data.get("models") or {}).items():
            task = (
                "causal-lm"
                if entry["config"].get("model_type") in ("llama", "mistral", "gptj", "falcon", "gpt2")
                else None
            )
            self.works[key] = work_from_config(entry["config"], name=key, task=task)
            self.sources[key] = str(entry.get("source", ""))
            for a in entry.get("aliases", []):
                self.alias[a.lower()] = key

    def find(self, name: str) -> str | None:
        return self.alias.get(name.strip().lower())

    def encoder_work(self, key: str, head: str) -> ModelWork:
        """The work of an encoder row: the tables run AutoModel (no head) or AutoModelForMaskedLM."""
        from dataclasses import replace

        from chipswap.projection.work import work_from_dims

        base = self.works[key]
        return work_from_dims(replace(base.dims, head=head))


def _neuron_source(fname: str) -> str:
    platform, table = fname.split("_", 1)
    return f"{NEURON_COMMIT} about-neuron/benchmarks/{platform}/{table}"


def _chip_for(instance_type: str, catalog: Catalog) -> tuple[str, str]:
    inst = catalog.instance(instance_type.strip().lower())
    return inst.name, inst.accelerator


def _gpu_chip(accel: str, variant: str) -> tuple[str | None, str]:
    """(catalog chip, note) of a published NVIDIA accelerator and variant; (None, why) where no AWS
    instance carries it."""
    v = variant.lower()
    if accel == "A100":
        if "pcie" in v:
            return None, "A100 PCIe: no AWS instance carries it"
        if "40gb" in v:
            return "A100", ""
        return "A100-80GB", "" if "80gb" in v else "variant not stated: A100-SXM4-80GB assumed"
    if accel in ("H100", "H200", "L40S", "B200", "A10G"):
        return accel, ""
    return None, f"{accel}: no AWS instance family in the catalog"


GPU_PRECISION = {  # published precision -> (weights, matmuls, KV cache)
    "FP8": ("fp8", "fp8", "fp8"),
    "FP16": ("fp16", "fp16", "bf16"),
    "Mixed": ("fp16", "fp16", "bf16"),
    "FP4": ("fp4", "fp4", "fp8"),
}
