"""Before a `chipswap bench` figure may stand for the workload: is it the workload's model, on a machine that
can be the instance it names?

Input: the validated results (with their identity block), the workload's resolved model and the catalog
entry of the instance the file names. Output: the MeasuredServing to use, or one ChipswapError line naming
the mismatch. With ``accept`` (``plan --accept-bench-mismatch``) a mismatch is used anyway and the figure's
source says so ("measured; mismatch accepted: ..."), which every summary, table and report prints.

May not: run the bench, read files (setup reads them), or change how figures rank (plan.figures).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from chipswap.bench.evidence import Declared, judge, length_note, trust, workload_lengths
from chipswap.bench.identity import host_mismatch, model_mismatch
from chipswap.compile.identity import config_digest
from chipswap.errors import ChipswapError

OVERRIDE_FLAG = "--accept-bench-mismatch"
# what the server's dtype words mean as chipswap dtypes (projection.work.DTYPE_BYTES)
DTYPE_WORDS = {
    "float32": "fp32", "fp32": "fp32", "float": "fp32", "bfloat16": "bf16", "bf16": "bf16",
    "float16": "fp16", "fp16": "fp16", "half": "fp16", "fp8": "fp8", "float8": "fp8", "int8": "int8",
    "int4": "int4", "fp4": "fp4",
}  # fmt: skip
FLOOR_DTYPE = "int4"  # no dtype stated: refused only under the floor of the smallest weights (4-bit) ...
DEMANDING_DTYPE = "fp32"  # ... and "measured" only over the floor of the largest (issue 42)


def _workload_model(ref: Any, task: str | None, ident: Any) -> tuple[str | None, int | None, str | None]:
    """(name, parameter count, config digest) of the workload's model; the count (a model build) only when
    it decides: the bench has one and the config digests do not already agree."""
    if ref is None:
        return None, None, None
    digest = config_digest(ref.config) if getattr(ref, "config", None) else None
    params = None
    if ident.parameters is not None and not (ident.config_sha256 and ident.config_sha256 == digest):
        from chipswap.models import parameter_count

        try:
            params = parameter_count(ref, task=task)
        except Exception:  # noqa: BLE001 - a model that cannot be built here is compared by name instead
            params = None
    return ref.name, params, digest


def _declared(model: Any, task: str | None, instance: Any, chip: Any, dtype: str | None) -> Declared | None:
    """The workload's model on the declared instance in the numbers the physics floors need."""
    if model is None or not getattr(model, "config", None):
        return None
    from chipswap.projection.api import model_work

    try:
        work = model_work(model, task=task)
    except Exception:  # noqa: BLE001 - a model the closed form cannot size gets no floor
        return None
    wdtype = DTYPE_WORDS.get((dtype or "").lower().removeprefix("torch."), FLOOR_DTYPE)
    cfg = model.config
    flops = max((float(tf) for _, tf in chip.tflops_dense), default=0.0) * 1e12 if chip is not None else 0.0
    bw = float(chip.memory_bandwidth_gb_s) * 1e9 if chip is not None else 0.0
    vocab = cfg.get("vocab_size")
    pos = cfg.get("max_position_embeddings")
    return Declared(
        model=model.name,
        instance=instance.name,
        weight_bytes=work.streamed_weight_bytes(wdtype),
        weight_dtype=wdtype if dtype else f"{wdtype} (no dtype stated: the smallest weights)",
        demanding_weight_bytes=None if dtype else work.streamed_weight_bytes(DEMANDING_DTYPE),
        demanding_dtype=DEMANDING_DTYPE,
        parameters=float(work.matmul_params + work.head_params),
        devices=int(instance.accelerator_count),
        device_name=str(instance.accelerator),
        hbm_bytes_s=bw or None,
        peak_flops=flops or None,
        max_positions=pos if isinstance(pos, int) and pos > 0 else None,
        vocab_size=vocab if isinstance(vocab, int) and vocab > 0 else None,
    )


def checked_measured(
    results: Any,
    measured: Any,
    *,
    model: Any,
    task: str | None,
    instance: Any,
    prompt_tokens: float | None = None,
    accept: bool,
    chip: Any = None,
) -> Any:
    """The measured figures of one bench file once its identity matches the workload (see module doc).
    ``chip``: the catalog chip of the instance (the physics floors); ``prompt_tokens`` is not read here any
    more (the length note comes after the traffic stage: ``with_length_notes``)."""
    ident = results.identity
    name, params, digest = _workload_model(model, task, ident)
    by_model = model_mismatch(ident, name, params, digest)
    decided_by = (
        "digest"
        if ident.config_sha256 and digest and ident.config_sha256 == digest
        else "parameters"
        if ident.parameters and params
        else "name"
    )
    found: dict[str, str | None] = {"another model": by_model if decided_by != "name" else None}
    declared = _declared(model, task, instance, chip, ident.dtype)
    verdict = None
    if declared is not None and name is not None:
        verdict = judge(
            results.evidence, declared, name_problem=by_model if decided_by == "name" else None,
            decided_by=decided_by,
        )  # fmt: skip
        if verdict.problems:
            found["another model"] = "; ".join(p for p in (found["another model"], *verdict.problems) if p)
    elif decided_by == "name":
        found["another model"] = by_model
    found["another machine"] = host_mismatch(
        ident, instance.name, instance.kind, instance.accelerator, int(instance.accelerator_count)
    )
    problems = [p for p in found.values() if p]
    notes = [measured.note]
    if ident.model_name:
        notes.append(f"model {ident.model_name}" + (f" ({ident.dtype})" if ident.dtype else ""))
    if verdict is not None:
        notes.append(verdict.label + (f" ({', '.join(verdict.notes)})" if verdict.notes else ""))
    if ident.software:
        notes.append(f"server {ident.software}")
    notes.append(f"host {ident.host_text()}")
    if problems and not accept:
        raise ChipswapError(
            f"bench results {results.source} do not measure this workload: {'; '.join(problems)}; rerun "
            f"chipswap bench on the workload's model and instance, or pass {OVERRIDE_FLAG} to use it anyway"
        )
    source = "measured"
    if verdict is not None:  # the report's label says what the identity rests on
        checked = ident.beside_server and found["another machine"] is None and bool(
            ident.gpus or ident.neuron_devices or ident.ec2_instance_type
        )
        rests_on = trust(verdict, imported=results.imported_from is not None, host_checked=checked)
        source = f"measured; {rests_on}" if rests_on else source
    if problems:
        kinds = ", ".join(k for k, p in found.items() if p)
        source = f"measured; mismatch accepted: {kinds}"
        notes.insert(0, f"accepted with {OVERRIDE_FLAG}: {'; '.join(problems)}")
    return replace(measured, source=source, note="; ".join(n for n in notes if n))


def with_length_notes(measured: dict[str, Any], prompts: Any, outputs: Any) -> dict[str, Any]:
    """The measured figures with a note on each whose benched prompt or output lengths are off the
    workload's (a trace's every request, or the stated lengths): the gap, and which way it leans."""
    want_p, want_o = workload_lengths(prompts), workload_lengths(outputs)
    out = {}
    for name, m in measured.items():
        note = length_note(m.evidence, want_p, want_o) if getattr(m, "evidence", None) is not None else None
        out[name] = replace(m, note="; ".join(n for n in (m.note, note) if n)) if note else m
    return out
