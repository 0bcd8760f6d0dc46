"""The published serving runs the physical model is fitted on, normalised: every usable row of
../shared/reference/neuron-benchmarks-modern/ (llm_serving.csv: optimum-neuron TGI / vLLM on inf2 and trn2;
trn2_vs_h100_qwen_small_2026.csv: vLLM on NxD Inference on trn2 at LNC 1/2 and vLLM on H100, prompts
3.7K-59.5K) and of the Neuron SDK's decoder tables (../shared/reference/neuron-benchmarks/
{inf2,trn1}_{latency,throughput}_data_decoder.csv: Transformers NeuronX on SDK 2.18, inf2 and trn1, prompts
128-8,192, a static batch) and the MoE rows (moe_trn2_vs_h100_2026.csv: MiMo-V2-Flash and MiniMax-M2.5 on
trn2 TP64 and H100 TP8) and TensorRT-LLM's tables (../shared/reference/gpu-benchmarks/llm_inference.csv: 0.9's
static batch at peak throughput and batch-1 first-token latency on H100, H200, L40S and A100; 0.15's and
1.0's in-flight batching at peak throughput on H100, H200, L40S, A100 and B200), with the reason each
skipped row was skipped.

What it is for: chipswap.projection.fitting.physfit (the fit and its held-out / extrapolation tests) and
bench/bench_extrapolation.py. Reads only those CSV files and the shipped benchmark_models.toml (the GPU
tables' model names); writes nothing.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from chipswap.datafile import read_text
from chipswap.errors import ChipswapError
from chipswap.projection.serving.physics import moe_stack

DEFAULT_REFERENCE = Path("../shared/reference")
MODERN = "neuron-benchmarks-modern/llm_serving.csv"
QWEN_SMALL = "neuron-benchmarks-modern/trn2_vs_h100_qwen_small_2026.csv"
MOE = "neuron-benchmarks-modern/moe_trn2_vs_h100_2026.csv"
MOE_SOURCE = "moe-trn2-vs-h100"
SDK_TABLES = tuple(
    f"neuron-benchmarks/{chip}_{kind}_data_decoder.csv"
    for chip in ("inf2", "trn1")
    for kind in ("latency", "throughput")
)
SDK_SOURCE = "neuron-sdk-2.18-tables"
SDK_STACK = "tnx-2.18"  # Transformers NeuronX (chipswap.projection.stacks)
GPU_TABLES = "gpu-benchmarks/llm_inference.csv"
# TensorRT-LLM's tables: published source id -> (source, stack, scenario). 0.9's static-batch and
# first-token tables are one page and version (one source); each stack version gets its own terms
# (physfit.STACK_TERMS)
TRTLLM = {
    "trtllm-v0.9.0-static": ("trtllm-0.9-tables", "trtllm-0.9", "static"),
    "trtllm-v0.9.0-latency": ("trtllm-0.9-tables", "trtllm-0.9", "static"),
    "trtllm-v0.15.0-ifb": ("trtllm-0.15-ifb", "trtllm-0.15", "saturated"),
    "trtllm-v1.0-perf-overview": ("trtllm-1.0-ifb", "trtllm-1.0", "saturated"),
}
# the chips of the GPU tables the physical model has a family for (physfit.VENDOR)
GPU_FAMILY = {
    "H100": "H100", "H200": "H200", "L40S": "L40S", "A100": "A100", "A100-80GB": "A100", "B200": "B200",
}  # fmt: skip
# in-flight batching at peak throughput (every request queued at t=0): trtllm-bench sizes the live batch
# by the KV cache at the dataset's prompt + output (physfit._kv_slots), up to this many sequences
# (assumption: the published rows state no batch; their largest KV-bound batch is below it)
IFB_MAX_BATCH = 4096
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
    # the Neuron SDK 2.18 decoder tables
    "llama-3-8b": "llama-3-8b",
    "llama-3-70b": "llama-3-70b",
    "llama-2-7b": "llama-2-7b",
    "llama-2-13b": "llama-2-13b",
    "llama-2-70b": "llama-2-70b",
    "codellama-13b-hf": "codellama-13b",
    "mistral-7b-instruct-v0.2": "mistral-7b-v0.2",
    # the MoE serving rows
    "xiaomimimo/mimo-v2-flash": "mimo-v2-flash",
    "minimaxai/minimax-m2.5": "minimax-m2.5",
}
# published accelerator -> (chip family, catalog chip, instance the row is scored on)
CHIPS = {
    "Inferentia2": ("Inferentia2", "Inferentia2", "inf2.48xlarge"),
    "Trainium2": ("Trainium2", "Trainium2", "trn2.48xlarge"),
    "H100": ("H100", "H100", "p5.48xlarge"),
    "Inf2.48xlarge": ("Inferentia2", "Inferentia2", "inf2.48xlarge"),
    "trn1.32xlarge": ("Trainium", "Trainium", "trn1.32xlarge"),
}


@dataclass(frozen=True)
class Run:
    """One published serving run. scenario: "sync" (one request at a time), "throughput" (guidellm at its
    configured users: capacity, slot occupancy fitted per stack), "closed" (vllm bench serve with
    `batch` concurrent users and waves x batch requests, request rate inf) or "static" (the SDK tables: one
    compiled batch of `batch` sequences prefilled together, then decoded together to the end) or
    "saturated" (a GPU server's peak throughput with every request queued: as many sequences live as the KV
    cache holds, up to `batch`). lnc:
    logical core size on Trainium2 (2 elsewhere, unused). output: realized mean output tokens (published
    tok/s / requests/s). weight_dtype: the stored weights (the SDK's Llama-3-8B rows: int8, bf16 matmuls)."""

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
    weight_dtype: str = "bf16"
    compute_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    concurrency: int = 0  # users of a closed run when fewer than the compiled batch (0: = batch)

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


def _sdk_tables(ref: Path, runs: list[Run], skipped: list[Skip]) -> None:
    """The SDK's decoder tables: a static batch (TTFT: the batch's prefill; TPOT: a step of the compiled
    batch; output tok/s over the whole run). The throughput table repeats some latency rows (batch 1):
    each distinct run once."""
    seen: set[tuple[str, ...]] = set()
    for name in SDK_TABLES:
        for i, r in enumerate(_read(ref / name)):
            rid = f"{name.rsplit('/', 1)[1]}:{i + 2}"
            model = MODELS.get(r["Model"].strip().lower())
            fam = CHIPS.get(r["Inst. Type"].strip())
            cols = ("Output Token Throughput (tokens/sec)", "TTFT Latency P50 (ms)", "TPOT Latency P50 (ms)")
            tok, ttft, tpot = (_num(r[k]) for k in cols)
            if model is None or fam is None or not tok or not ttft or not tpot:
                skipped.append(Skip(rid, f"model {r['Model']!r} / instance {r['Inst. Type']!r} not mapped"))
                continue
            key = (model, fam[0], r["Batch Size"], r["Input Length"], r["Output Length"], r["TP Degree"])
            if key in seen:
                skipped.append(Skip(rid, "the same run as a latency-table row"))
                continue
            seen.add(key)
            wdt = "int8" if r["Weight Storage Data Type"].strip().lower() == "int8" else "bf16"
            obs = (("out_tok_s", tok), ("ttft_s", ttft / 1e3), ("tpot_s", tpot / 1e3))
            runs.append(
                Run(
                    row_id=rid, source=SDK_SOURCE, family=fam[0], chip=fam[1], stack=SDK_STACK, model=model,
                    tp=int(r["TP Degree"]), lnc=2, batch=int(r["Batch Size"]), replicas=1,
                    prompt=int(r["Input Length"]), output=float(r["Output Length"]), scenario="static",
                    waves=1.0, sampling="device", observed=obs, weight_dtype=wdt,
                    where=f"aws-neuron-sdk {name} (Neuron {r['Neuron Version']})",
                )
            )  # fmt: skip


def _moe(ref: Path, runs: list[Run], skipped: list[Skip]) -> None:
    """The MoE rows (SOURCES.md caveats): trn2 at TP64 / EP64 with a compiled batch of max-num-seqs and
    fewer users; H100 eager vLLM at TP8 in dynamic fp8 or bf16. The H100 MiniMax bf16 rows are tier B: their
    TTFT (and the TPOT derived from it) is the whole request, so only their throughput is read."""
    for i, r in enumerate(_read(ref / MOE)):
        rid = f"moe_trn2_vs_h100_2026.csv:{i + 2}"
        model = MODELS.get(r["model"].strip().lower())
        fam = CHIPS.get(r["accelerator"].strip())
        rps, tok = _num(r["requests_per_s"]), _num(r["output_tok_s_total"])
        if model is None or fam is None or not rps or not tok:
            skipped.append(Skip(rid, f"model {r['model']!r} / chip {r['accelerator']!r} not mapped"))
            continue
        gpu = r["side"] == "gpu"
        fp8 = r["precision"].strip().startswith("fp8")
        users = int(_num(r["concurrency"]) or 1)
        obs = [("requests_per_s", rps), ("out_tok_s", tok)]
        if r["tier"].strip() == "A":
            obs += [("ttft_s", float(r["ttft_ms_mean"]) / 1e3), ("tpot_s", float(r["tpot_ms_mean"]) / 1e3)]
        stack = "vllm" if gpu else "nxdi-vllm"
        dt = "fp8" if fp8 else "bf16"
        runs.append(
            Run(
                row_id=rid, source=MOE_SOURCE, family=fam[0], chip=fam[1], stack=moe_stack(stack, dt),
                model=model, tp=int(r["tp"]), lnc=int(_num(r["lnc"]) or 2),
                batch=users if gpu else int(_num(r["batch_size"]) or users), replicas=1,
                prompt=int(r["input_len"]), output=tok / rps, scenario="closed", waves=1.0, sampling="device",
                observed=tuple(obs), weight_dtype=dt, compute_dtype=dt, concurrency=0 if gpu else users,
                where=f"{r['source_url_or_repo_path'][:80]} @ {r['source_commit_or_version'][:10]}",
            )
        )  # fmt: skip


def _gpu_tables(ref: Path, runs: list[Run], skipped: list[Skip]) -> None:
    """TensorRT-LLM's tables: 0.9's static batch at its peak-throughput size (output tok/s of the TP group;
    gptSessionBenchmark: the batch prefilled together, then decoded together) and batch-1 first-token
    latency (output length 1); 0.15's and 1.0's in-flight batching at peak throughput (trtllm-bench, every
    request queued at t=0: "saturated"). The TGI SageMaker rows publish no prompt length."""
    from chipswap.projection.platforms import shipped_dir
    from chipswap.projection.reference_tables import GPU_PRECISION, _gpu_chip, _Models

    names = _Models(shipped_dir())
    for i, r in enumerate(_read(ref / GPU_TABLES)):
        rid = f"llm_inference.csv:{i + 2}"
        sid = r["source_id"]
        if sid not in TRTLLM:
            skipped.append(Skip(rid, f"{sid}: the prompt length is not published"))
            continue
        chip, _ = _gpu_chip(r["accelerator"].strip(), r["accelerator_variant"])
        model = names.find(r["model"])
        if model is None or chip not in GPU_FAMILY or r["precision"] not in GPU_PRECISION:
            why = (
                "no dense entry in benchmark_models.toml (MoE: no TensorRT-LLM MoE terms)"
                if model is None
                else "no AWS instance or precision not modelled"
            )
            skipped.append(Skip(rid, f"{r['model']} on {r['accelerator']} {r['precision']}: {why}"))
            continue
        latency = "latency" in sid
        fig = _num(r["ttft_ms_mean"] if latency else r["output_tok_s_total"])
        if not fig:
            skipped.append(Skip(rid, "no figure published"))
            continue
        obs = (("ttft_s", fig / 1e3),) if latency else (("out_tok_s", fig),)
        wdt, cdt, kvdt = GPU_PRECISION[r["precision"]]
        source, stack, scenario = TRTLLM[sid]
        static = scenario == "static"
        runs.append(
            Run(
                row_id=rid, source=source, family=GPU_FAMILY[chip], chip=chip, stack=stack, model=model,
                tp=int(r["tp"]) * int(r["pp"] or 1), lnc=2,
                batch=int(r["batch_size"]) if static else IFB_MAX_BATCH, replicas=1,
                prompt=int(r["input_len"]), output=float(r["output_len"]),
                scenario=scenario, waves=1.0, sampling="device", observed=obs,
                weight_dtype=wdt, compute_dtype=cdt, kv_dtype=kvdt,
                where=f"{r['source_url_or_repo_path'][:80]} ({r['source_commit_or_version']})",
            )
        )  # fmt: skip


def read_runs(reference: str | Path | None = None) -> tuple[list[Run], list[Skip]]:
    """Every usable run of the modern tables, the SDK decoder tables, the MoE rows and TensorRT-LLM's
    tables, and the skipped rows with their reason."""
    ref = Path(reference or DEFAULT_REFERENCE)
    runs: list[Run] = []
    skipped: list[Skip] = []
    _modern(ref, runs, skipped)
    _qwen_small(ref, runs, skipped)
    _sdk_tables(ref, runs, skipped)
    _moe(ref, runs, skipped)
    _gpu_tables(ref, runs, skipped)
    return runs, skipped
