"""Calibration rows of the Neuron encoder tables (inf2 / trn1 encoders, inf1 data-parallel encoders), split
out
of chipswap.projection.calibration, which calls `neuron_encoder` from `load_reference`.

Reads only the ../shared/reference/neuron-benchmarks encoder tables (through
chipswap.projection.calibration's readers);
writes nothing.
"""

from __future__ import annotations

from pathlib import Path

from chipswap.economics.catalog import Catalog
from chipswap.projection.fitting import BenchRow
from chipswap.projection.reference_tables import (
    NEURON_COMMIT,
    Skipped,
    _chip_for,
    _int,
    _Models,
    _neuron_source,
    _num,
    _read_csv,
)


def _encoder_row(
    rid: str,
    source: str,
    r: dict[str, str],
    chip: str,
    instance: str,
    model: str,
    copies: int,
    batch: int,
    length: int,
    observed: tuple[tuple[str, float], ...],
    notes: str,
) -> BenchRow:
    """A Neuron encoder row: an FP32 model whose matmuls auto-cast to bf16 (so weights stream as bf16), one
    copy per NeuronCore."""
    return BenchRow(
        row_id=rid,
        source=source,
        stack=f"{r['Framework']}, Neuron {r['Neuron Version']}",
        family="",
        chip=chip,
        instance=instance,
        model=model,
        phase="encoder",
        scenario="data-parallel",
        weight_dtype="bf16",
        compute_dtype="bf16",
        kv_dtype="bf16",
        tp=1,
        replicas=copies,
        batch=batch,
        input_len=length,
        output_len=0,
        observed=observed,
        notes=notes,
    )


def neuron_encoder(
    ref: Path, models: _Models, catalog: Catalog, out: list[BenchRow], skipped: list[Skipped]
) -> None:
    for fname in (
        "inf2_throughput_data_encoder.csv",
        "inf2_latency_data_encoder.csv",
        "trn1_throughput_data_encoder.csv",
        "trn1_latency_data_encoder.csv",
    ):
        for line, r in _read_csv(ref / "neuron-benchmarks" / fname):
            rid = f"{fname}:{line}"
            model = models.find(r["Model"])
            if model is None:
                skipped.append(Skipped(rid, f"model {r['Model']!r} has no entry in benchmark_models.toml"))
                continue
            instance, chip = _chip_for(r["Inst. Type"], catalog)
            thr = _num(r.get("Throughput (inference/second)") or r.get("Throughput (inference/sec)", ""))
            lat = _num(r["Latency P50 (ms)"])
            batch = int(r["Batch Size"])
            if thr is None or lat is None:
                skipped.append(Skipped(rid, "throughput or latency missing"))
                continue
            # one model copy per NeuronCore of one chip: throughput x latency / batch is 2 in every row
            copies = max(1, round(thr * lat / 1e3 / batch))
            head = "mlm" if "MaskedLM" in r["Task"] else "none"
            key = f"{model}:{head}"
            if key not in models.works:
                models.works[key] = models.encoder_work(model, head)
            out.append(
                _encoder_row(
                    rid,
                    _neuron_source(fname),
                    r,
                    chip,
                    instance,
                    key,
                    copies,
                    batch,
                    int(r["Sequence Length"]),
                    (("enc_per_s", thr), ("enc_latency_s", lat / 1e3)),
                    f"{r['Task']}; FP32 model, {r['Compilation Autocast Data Type']} auto-cast; {copies} "
                    "copies",
                )
            )
    # Inferentia (NeuronCore-v1): throughput only; several workers share a core, so latency is not one call
    fname = "inf1_throughput_data_encoder.csv"
    for line, r in _read_csv(ref / "neuron-benchmarks" / fname):
        rid = f"{fname}:{line}"
        model = models.find(r["Model"])
        cores = _int(r.get("Num Cores", ""))
        thr = _num(r["Avg Throughput (/sec)"])
        if model is None:
            skipped.append(Skipped(rid, f"model {r['Model']!r} has no entry in benchmark_models.toml"))
            continue
        if (
            not r["Framework"].startswith("PyTorch")
            or cores is None
            or thr is None
            or r["Run Mode"] != "Data Parallel"
        ):
            skipped.append(Skipped(rid, "not a PyTorch data-parallel row with its core count"))
            continue
        instance, chip = _chip_for(r["Inst. Type"], catalog)
        key = f"{model}:none"
        if key not in models.works:
            models.works[key] = models.encoder_work(model, "none")
        out.append(
            _encoder_row(
                rid,
                f"{NEURON_COMMIT} about-neuron/benchmarks/inf1/throughput_data_encoder.csv",
                r,
                chip,
                instance,
                key,
                cores,
                int(r["Batch Size"]),
                int(r["Seq. Length"]),
                (("enc_per_s", thr),),
                f"{r['N Models']} models x {r['Workers per Model']} workers on {cores} cores (latency not "
                "used)",
            )
        )
