"""The published serving runs the physical model is fitted on, normalised: every usable row of
../shared/reference/neuron-benchmarks-modern/ (llm_serving.csv: optimum-neuron TGI / vLLM on inf2 and trn2;
trn2_vs_h100_qwen_small_2026.csv: vLLM on NxD Inference on trn2 at LNC 1/2 and vLLM on H100, prompts
3.7K-59.5K), with the reason each skipped row was skipped.

What it is for: chipswap.projection.fitting.physfit (the fit and its held-out / extrapolation tests) and
bench/bench_extrapolation.py. Reads only those two CSV files; writes nothing.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from chipswap.datafile import read_text
from chipswap.errors import ChipswapError

DEFAULT_REFERENCE = Path("../shared/reference")
MODERN = "neuron-benchmarks-modern/llm_serving.csv"
QWEN_SMALL = "neuron-benchmarks-modern/trn2_vs_h100_qwen_small_2026.csv"
METRICS = ("out_tok_s", "requests_per_s", "ttft_s", "tpot_s")
# the published model names -> shipped presets (same layer sizes)
MODELS = {
    "meta-llama-3.1-8b-instruct": "llama-3.1-8b",
    "llama-3.1-8b-instruct": "llama-3.1-8b",
    "deepseek-r1-distill-llama-70b (llama-3.3-70b architecture)": "llama-3.3-70b",
    "qwen3-32b": "qwen3-32b",
    "qwen/qwen3-0.6b": "qwen3-0.6b",
    "qwen/qwen3-1.7b": "qwen3-1.7b",
    "qwen/qwen2-1.5b": "qwen2-1.5b",
    "qwen/qwen2.5-7b": "qwen2.5-7b",
}
# published accelerator -> (chip family, catalog chip, instance the row is scored on)
CHIPS = {
    "Inferentia2": ("Inferentia2", "Inferentia2", "inf2.48xlarge"),
    "Trainium2": ("Trainium2", "Trainium2", "trn2.48xlarge"),
    "H100": ("H100", "H100", "p5.48xlarge"),
}


@dataclass(frozen=True)
class Run:
    """One published serving run. scenario: "sync" (one request at a time), "throughput" (guidellm at its
    configured users: capacity, slot occupancy fitted per stack) or "closed" (vllm bench serve with
    `batch` concurrent users and waves x batch requests, request rate inf). lnc: logical core size on
    Trainium2 (2 elsewhere, unused). output: realized mean output tokens (published tok/s / requests/s)."""

    row_id: str
    source: str
    family: str
    chip: str
    stack: str
    model: str
    tp: int
    lnc: int
    batch: int
    replicas: int
    prompt: int
    output: float
    scenario: str
    waves: float
    sampling: str
    observed: tuple[tuple[str, float], ...]
    where: str = ""

    def value(self, metric: str) -> float | None:
        return dict(self.observed).get(metric)


@dataclass(frozen=True)
class Skip:
    row_id: str
    reason: str


def _num(s: str) -> float | None:
    s = (s or "").strip()
    try:
        return float(s) if s else None
    except ValueError:
        return None


def _read(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise ChipswapError(
            f"published serving table not found: {path}; run from the repository root or pass --reference DIR"
        )
    return list(csv.DictReader(read_text(path, "benchmark table", max_bytes=8 * 1024 * 1024).splitlines()))


def _modern(ref: Path, runs: list[Run], skipped: list[Skip]) -> None:
    for i, r in enumerate(_read(ref / MODERN)):
        rid = f"llm_serving.csv:{i + 2}"
        scen = r["scenario"]
        if "asynchronous" in scen:
            skipped.append(
                Skip(rid, "Poisson-load run: measures the offered rate and queueing, not capacity")
            )
            continue
        model = MODELS.get(r["model"].strip().lower())
        fam = CHIPS.get(r["accelerator"].strip())
        if model is None or fam is None:
            skipped.append(Skip(rid, f"model {r['model']!r} / chip {r['accelerator']!r} not mapped"))
            continue
        rps = float(r["requests_per_s"])
        tok = float(r["output_tok_s_total"])
        notes = r["notes"]
        sync = "synchronous" in scen
        obs = [("requests_per_s", rps), ("out_tok_s", tok), ("tpot_s", float(r["tpot_ms_mean"]) / 1e3)]
        if sync:
            obs.append(("ttft_s", float(r["ttft_ms_mean"]) / 1e3))
        runs.append(
            Run(
                row_id=rid, source=r["source_id"], family=fam[0], chip=fam[1],
                stack="nxdi-tgi" if "TGI" in r["framework"] else "nxdi-vllm", model=model, tp=int(r["tp"]),
                lnc=2, batch=int(r["batch_size"]),
                replicas=3 if ("3 replicas" in r["framework"] or "DP=3" in notes) else 1,
                prompt=int(r["input_len"]), output=tok / rps, scenario="sync" if sync else "throughput",
                waves=1.0, sampling="cpu" if "CPU sampling" in notes else "device", observed=tuple(obs),
                where=f"{r['source_url_or_repo_path'][:80]} @ {r['source_commit_or_version'][:10]}",
            )
        )  # fmt: skip


def _qwen_small(ref: Path, runs: list[Run], skipped: list[Skip]) -> None:
    for i, r in enumerate(_read(ref / QWEN_SMALL)):
        rid = f"trn2_vs_h100_qwen_small_2026.csv:{i + 2}"
        if "status" in r["notes"] and "status DONE" not in r["notes"]:
            skipped.append(Skip(rid, "compile / load failure: no figures"))
            continue
        model = MODELS.get(r["model"].strip().lower())
        fam = CHIPS.get(r["accelerator"].strip())
        rps, tok = _num(r["requests_per_s"]), _num(r["output_tok_s_total"])
        if model is None or fam is None or not rps or not tok:
            skipped.append(
                Skip(rid, f"model {r['model']!r} / chip {r['accelerator']!r} not mapped, or no figures")
            )
            continue
        gpu = r["side"] == "gpu"
        batch = int(_num(r["batch_size"]) or _num(r["concurrency"]) or 1)
        duration = _num(r["e2e_latency_ms_mean"])  # the run's whole duration (n prompts / requests/s)
        waves = 1.0 if gpu else (duration / 1e3 * rps / batch if duration else 4.0)
        obs = [("requests_per_s", rps), ("out_tok_s", tok)]
        if (t := _num(r["ttft_ms_mean"])) is not None:
            obs.append(("ttft_s", t / 1e3))
        if (itl := _num(r["itl_ms_mean"]) or _num(r["tpot_ms_mean"])) is not None:
            obs.append(("tpot_s", itl / 1e3))
        runs.append(
            Run(
                row_id=rid, source="qwen-small-h100" if gpu else "qwen-small-trn2", family=fam[0],
                chip=fam[1],
                stack="vllm" if gpu else "nxdi-vllm", model=model, tp=int(r["tp"]),
                lnc=int(_num(r["lnc"]) or 2), batch=batch, replicas=1, prompt=int(r["input_len"]),
                output=tok / rps, scenario="closed", waves=max(1.0, round(waves)), sampling="device",
                observed=tuple(obs),
                where=f"{r['source_url_or_repo_path'][:80]} @ {r['source_commit_or_version'][:10]}",
            )
        )  # fmt: skip


def read_runs(reference: str | Path | None = None) -> tuple[list[Run], list[Skip]]:
    """Every usable run of the two modern tables, and the skipped rows with their reason."""
    ref = Path(reference or DEFAULT_REFERENCE)
    runs: list[Run] = []
    skipped: list[Skip] = []
    _modern(ref, runs, skipped)
    _qwen_small(ref, runs, skipped)
    return runs, skipped
