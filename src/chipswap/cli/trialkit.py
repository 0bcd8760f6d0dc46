"""What `chipswap trial` and `chipswap plan` share: the TrialSpec from a plan's result (the model, the
traffic, the pinned layout), the workload copied into the kit, and the trial's cost quoted in a "measure
first" verdict.

Thin shell: reads the workload's files from disk; the kit itself is rendered by the pure chipswap.trial core.
May not: import cli/plan or cli/trial (both import this module), write anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError


def _stack(wl: Any, given: str | None) -> str:
    return given or wl.targets.stack


def _model(wl: Any, base: Path) -> tuple[str, str, str | None, str | None]:
    """(name, what chipswap compile takes, the preset's source URL, task)."""
    m = wl.model
    if m is None:
        raise ChipswapError(
            "the workload has no [model]; a trial needs the model to launch (add [model] preset)"
        )
    if m.preset:
        from chipswap.models import load_preset

        return m.preset, m.preset, str(load_preset(m.preset).get("source", "")), m.task
    if m.config:
        path = Path(m.config)
        path = path if path.is_absolute() else base / path
        return path.parent.name or path.stem, str(path.resolve()), None, m.task
    factory = str(m.factory)
    return factory.rsplit(":", 1)[-1], factory, None, m.task


def _traffic(
    wl: Any, result: Any, base: Path
) -> tuple[str, str | None, str | None, tuple[int | None, int | None]]:
    """(source, trace path for the bench, traffic.csv text, steady lengths)."""
    from chipswap.trial.benchscript import traffic_csv

    tr = wl.traffic
    steady = (getattr(tr, "prompt_tokens", None), getattr(tr, "output_tokens", None))
    if tr.trace == "bundled":
        return "bundled", None, None, steady
    if tr.trace is not None and tr.columns is None:
        p = Path(tr.trace)
        return "file", str((p if p.is_absolute() else base / p).resolve()), None, steady
    t = result.traffic
    prompts = [int(x) for x in getattr(t, "prompt_tokens", ())]
    outs = [int(x) for x in getattr(t, "output_tokens", ())] or None
    if not prompts and steady[0] is not None:
        prompts, outs = [int(steady[0])], [int(steady[1] or 1)]
    if not prompts:
        raise ChipswapError("the plan read no request lengths to replay; give traffic.trace or prompt_tokens")
    return (
        ("steady" if tr.steady_rps is not None else "file-lengths"),
        None,
        traffic_csv(prompts, outs),
        steady,
    )


KIT_WORKLOAD = "workload"  # the kit's copy of the workload and the files it names
MAX_COPY_BYTES = 64 * 1024 * 1024  # a trace larger than this stays where it is


def _inside(base: Path, rel: str | None) -> str | None:
    """`rel` when it names a text file under the workload's folder (no absolute path, no ".."), else None."""
    if not rel:
        return None
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts:
        return None
    full = base / p
    try:
        if not full.is_file() or full.stat().st_size > MAX_COPY_BYTES:
            return None
        full.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return p.as_posix()


def workload_copy(wl: Any, path: Path) -> tuple[dict[str, tuple[str, bool]], str | None]:
    """The workload file and the files it names by a relative path (the model config, the trace), copied
    into the kit under workload/ so the kit's README refers only to files inside the kit; and the trace's
    path inside the kit (None when the trace was not copied)."""
    base = path.parent
    files = {f"{KIT_WORKLOAD}/{path.name}": (path.read_text(encoding="utf-8"), False)}
    model = getattr(wl, "model", None)
    trace = getattr(getattr(wl, "traffic", None), "trace", None)
    copied_trace = None
    for rel in (getattr(model, "config", None), None if trace == "bundled" else trace):
        inside = _inside(base, rel)
        if inside is not None:
            files[f"{KIT_WORKLOAD}/{inside}"] = ((base / inside).read_text(encoding="utf-8"), False)
            if rel == trace:
                copied_trace = f"{KIT_WORKLOAD}/{inside}"
    return files, copied_trace


def _pin_layout(
    result: Any, wl: Any, catalog: Any, stack: str, model_spec: str, task: str | None,
    tp: int | None, batch: int | None, candidate: str | None = None,
) -> Any:  # fmt: skip
    """The plan's result with the layout to measure of the trial's candidate pinned (--tp / --batch): only
    for a candidate with no projected figure (outside what the calibration covers); the pinned layout is
    checked by the projection's own rules (heads, memory)."""
    from dataclasses import replace

    from chipswap.projection import api
    from chipswap.trial.spec import pick_candidate

    cand = pick_candidate(result, candidate)
    fleet = cand.fleet
    if getattr(fleet, "to_measure", None) is None:
        raise ChipswapError(
            f"--tp / --batch pin the layout of a candidate with no projected figure; the plan sized "
            f"{cand.instance} from its projection: drop them (compare layouts with `chipswap project MODEL "
            f"-i {cand.instance} --tp N --batch B`)"
        )
    t = result.traffic
    prompt = [int(x) for x in getattr(t, "prompt_tokens", ())] or [int(wl.traffic.prompt_tokens or 1)]
    out = [int(x) for x in getattr(t, "output_tokens", ())] or [int(wl.traffic.output_tokens or 1)]
    sh = result.shapes
    p = api.project_serving(
        api.model_work(model_spec, task=task), cand.instance, prompt_tokens=prompt, output_tokens=out,
        buckets=list(sh.sequence_buckets) if sh is not None and sh.sequence_buckets else None,
        catalog=catalog, stack=stack, tp=tp, batch=batch,
    )  # fmt: skip
    layout = p.to_measure or p.config
    if layout is None:
        raise ChipswapError(f"--tp {tp} / --batch {batch} on {cand.instance}: {p.reason}")
    layout = replace(layout, why=f"the layout to measure, as pinned (--tp {tp} / --batch {batch})")
    pinned = replace(cand, fleet=replace(fleet, to_measure=layout))
    return replace(result, candidates=tuple(pinned if c is cand else c for c in result.candidates))


def trial_spec(
    result: Any,
    wl: Any,
    path: Path,
    *,
    catalog: Any,
    stack: str | None = None,
    endpoint: str | None = None,
    workload: Path | None = None,
    example: str | None = None,
    candidate: str | None = None,
    tp: int | None = None,
    batch: int | None = None,
) -> tuple[Any, str | None]:
    """(TrialSpec, traffic.csv text) for a plan's result: what `chipswap trial` renders, and what
    `chipswap plan` costs when its verdict is "measure first"."""
    from chipswap.trial.spec import build_spec

    base = path.parent
    model_name, model_spec, source, task = _model(wl, base)
    if tp is not None or batch is not None:
        result = _pin_layout(result, wl, catalog, _stack(wl, stack), model_spec, task, tp, batch, candidate)
    tsource, trace, csv_text, steady = _traffic(wl, result, base)
    spec = build_spec(
        result,
        catalog=catalog,
        stack=_stack(wl, stack),
        model_name=model_name,
        model_spec=model_spec,
        model_source=source,
        task=task,
        traffic_source=tsource,
        trace=trace,
        steady_lengths=steady,
        mode=wl.traffic.mode,
        pricing_term=wl.pricing.term,
        region=wl.targets.region or wl.fleet.region,
        gpu_term=wl.fleet.term,
        gpu_endpoint=endpoint,
        gpu_stack=wl.fleet.gpu_stack,
        workload_label=str(path) if workload is not None else f"example {example}",
        workload_arg=str(workload.resolve()) if workload is not None else None,
        example=None if workload is not None else example,
        candidate=candidate,
    )
    return spec, csv_text


def measure_quote(result: Any, wl: Any, path: Path, catalog: Any, workload_arg: str) -> Any:
    """The plan's result with its "measure first" verdict completed: what the trial of the named candidate
    costs (trial/costing: instance-hours, on-demand or Capacity Block) and the exact next command.
    `workload_arg`: the workload as shell words (a quoted path, or "--example NAME"). Unchanged when the
    verdict is not "measure first"."""
    from dataclasses import replace

    from chipswap.trial.costing import trial_cost

    m = getattr(result.verdict, "measure", None)
    if m is None or wl.traffic is None:
        return result
    try:
        spec, _csv = trial_spec(result, wl, path, catalog=catalog, workload=path, candidate=m.target)
    except ChipswapError as exc:
        words = f"not costed: {exc}"
    else:
        words = trial_cost(spec).line(spec.neuron.instance, spec.neuron.term)
    cmd = f"chipswap trial {workload_arg} --candidate {m.target}"
    return replace(result, verdict=replace(result.verdict, measure=replace(m, trial=words, next=cmd)))
