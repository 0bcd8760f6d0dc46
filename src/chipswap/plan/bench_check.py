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

from chipswap.bench.identity import host_mismatch, model_mismatch, shape_note
from chipswap.compile.identity import config_digest
from chipswap.errors import ChipswapError

OVERRIDE_FLAG = "--accept-bench-mismatch"


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


def checked_measured(
    results: Any,
    measured: Any,
    *,
    model: Any,
    task: str | None,
    instance: Any,
    prompt_tokens: float | None,
    accept: bool,
) -> Any:
    """The measured figures of one bench file once its identity matches the workload (see module doc)."""
    ident = results.identity
    name, params, digest = _workload_model(model, task, ident)
    found = {
        "another model": model_mismatch(ident, name, params, digest),
        "another machine": host_mismatch(
            ident, instance.name, instance.kind, instance.accelerator, int(instance.accelerator_count)
        ),
    }
    problems = [p for p in found.values() if p]
    notes = [measured.note]
    if ident.model_name:
        notes.append(f"model {ident.model_name}" + (f" ({ident.dtype})" if ident.dtype else ""))
    if ident.software:
        notes.append(f"server {ident.software}")
    notes.append(f"host {ident.host_text()}")
    shape = shape_note(ident, prompt_tokens)
    if shape:
        notes.append(shape)
    if problems and not accept:
        raise ChipswapError(
            f"bench results {results.source} do not measure this workload: {'; '.join(problems)}; rerun "
            f"chipswap bench on the workload's model and instance, or pass {OVERRIDE_FLAG} to use it anyway"
        )
    source = "measured"
    if problems:
        kinds = ", ".join(k for k, p in found.items() if p)
        source = f"measured; mismatch accepted: {kinds}"
        notes.insert(0, f"accepted with {OVERRIDE_FLAG}: {'; '.join(problems)}")
    return replace(measured, source=source, note="; ".join(n for n in notes if n))
