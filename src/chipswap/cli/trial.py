"""`chipswap trial [WORKLOAD]`: the folder that takes a projection to a measurement on one rented instance.

Thin shell: runs the plan (no AWS calls), gathers the few facts the kit needs from disk (catalog, the preset's
source, the capacity snapshot, the workload's lengths), hands them to the pure chipswap.trial core and writes
the folder atomically. Bad input or nothing to trial: one line, exit 2, nothing written.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import typer

from chipswap.errors import ChipswapError

HELP = (
    "Write a trial kit for the plan's best Neuron candidate that meets the SLO (and for the GPU baseline "
    "when "
    "the workload names its endpoint, [fleet] endpoint or --gpu-endpoint): launch script for the serving "
    "stack (vLLM Neuron / optimum-neuron TGI for LLMs, chipswap compile + serve for encoders) with the "
    "planned TP, batch, length and buckets; a bench script (warm-up, the busiest-window rate, a sweep to "
    "saturation) writing chipswap bench files; cost and duration; prerequisites; Kubernetes manifests and a "
    "SageMaker alternative for the fleet; a README ending in `chipswap plan WORKLOAD --bench results/*.json`."
)


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
MAX_COPY_BYTES = 64 * 1024 * 1024  # a trace larger than this stays where it is (the README names it)


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


def _prerequisites(catalog: Any, instance: str, region: str) -> list[str]:
    """Quota and offering from `chipswap capacity`'s shipped snapshot (never a live AWS call here)."""
    from chipswap.economics.aws.capacity import gather_capacity
    from chipswap.economics.capacity import quota_class

    found = gather_capacity(
        catalog, instance, [region], 1, access=None, today=date.today().isoformat(), extras=False
    )
    row = found.rows[0]
    qc = quota_class(instance)
    lines = [f"Instance: 1 x {instance} in {region}: {row.offered_note}."]
    if qc is not None:
        lines.append(
            f"Quota: {qc.on_demand_name} ({qc.on_demand_code}) must allow {row.vcpus_per_instance} vCPUs "
            f"more than you use; not read here (chipswap capacity's shipped snapshot, as of {row.as_of}, not "
            f"checked). Check live: `chipswap capacity {instance} --count 1 --region {region}`."
        )
    return lines


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


def _trial(
    workload: Path | None = typer.Argument(None, help="Workload TOML (default: the bundled Llama example)."),
    example: str | None = typer.Option(None, "--example", help="A bundled example instead of a file."),
    out: Path = typer.Option(Path("chipswap-trial"), "--out", help="Folder to write the kit into."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out folder."),
    stack: str | None = typer.Option(
        None, "--stack", help="Neuron serving stack: nxdi-vllm (default) or nxdi-tgi (LLMs only)."
    ),
    gpu_endpoint: str | None = typer.Option(
        None, "--gpu-endpoint", metavar="URL", help="Today's GPU endpoint to bench as the baseline."
    ),
    catalog_file: Path | None = typer.Option(
        None, "--catalog", metavar="FILE", help="Price with this catalog (default: the defaults file's)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print trial.json instead of the summary."),
    tp: int | None = typer.Option(
        None, "--tp", help="Pin the TP degree of a candidate with no projected figure (the layout measured)."
    ),
    batch: int | None = typer.Option(
        None, "--batch", help="Pin the batch of a candidate with no projected figure (the layout measured)."
    ),
    candidate: str | None = typer.Option(
        None,
        "--candidate",
        metavar="INSTANCE",
        help="Trial this Neuron candidate (default: the one a 'measure first' verdict names, else the plan's "
        "pick).",
    ),
    no_aws: bool = typer.Option(
        False, "--no-aws", help="Do not ask AWS about capacity and quotas: use the shipped snapshot."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No stage progress on stderr."),
) -> None:
    """Write the trial kit for the plan's best Neuron candidate (see HELP)."""
    from chipswap.cli.config import settings, workload_defaults
    from chipswap.cli.plan import DEFAULT_EXAMPLE, _capacity_check, example_path
    from chipswap.cli.stages import StageProgress
    from chipswap.economics.catalog_io import load_catalog
    from chipswap.plan import run_plan
    from chipswap.plan.workload_file import load_workload
    from chipswap.textsafe import one_line
    from chipswap.trial.kit import render_kit
    from chipswap.trial.spec import check_stack
    from chipswap.trial.write import check_out, write_kit

    if workload is not None and example is not None:
        raise ChipswapError("give a workload file or --example, not both; drop one of them")
    if workload is not None and workload.is_dir():
        raise ChipswapError(f"workload {workload} is a directory; pass a workload .toml file")
    check_out(out, force)
    if stack is not None:
        check_stack(stack)
    for flag, value, hi in (("--tp", tp, 256), ("--batch", batch, 4096)):
        if value is not None and not 1 <= value <= hi:
            raise ChipswapError(f"{flag} must be 1..{hi}, got {value}; give a positive layout size")
    name = example or DEFAULT_EXAMPLE
    path = workload if workload is not None else example_path(name)
    found = settings({"catalog": catalog_file, "catalog:flag": "--catalog"})
    catalog = load_catalog(found["catalog"].value)
    wl = load_workload(path, catalog, defaults=workload_defaults(found))
    endpoint = gpu_endpoint if gpu_endpoint is not None else getattr(wl.fleet, "endpoint", None)
    if endpoint is not None:
        from chipswap.bench.job import check_url

        endpoint = check_url(endpoint)
    if wl.kind != "serving":
        from chipswap.trial.spec import NothingToTrial

        raise NothingToTrial(
            f"nothing to trial: chipswap trial measures a serving workload and {path} is kind = {wl.kind!r}; "
            "benchmark training runs with your own job"
        )
    if wl.traffic is None:
        raise ChipswapError(f"{path}: a serving workload needs [traffic] for the trial's load")
    bar = StageProgress("chipswap trial", quiet=quiet or as_json, quiet_start_s=0.0)
    bar.say("planning (the trial measures the plan's candidate)")
    try:
        result = run_plan(
            wl, path, catalog=catalog, progress=bar.say, capacity_check=_capacity_check(catalog, no_aws)
        )
        bar.say("writing the kit")
        spec, csv_text = trial_spec(
            result,
            wl,
            path,
            catalog=catalog,
            stack=stack,
            endpoint=endpoint,
            workload=workload,
            example=name,
            candidate=candidate,
            tp=tp,
            batch=batch,
        )
        copied: dict[str, tuple[str, bool]] = {}
        if workload is not None:
            from dataclasses import replace

            copied, trace = workload_copy(wl, path)
            spec = replace(spec, workload_arg=f"{KIT_WORKLOAD}/{path.name}")
            if trace is not None and spec.traffic.trace is not None:
                spec = replace(spec, traffic=replace(spec.traffic, trace=trace))
        files = render_kit(spec, _prerequisites(catalog, spec.neuron.instance, spec.neuron.region), csv_text)
        files.update(copied)
        write_kit(out, files, force=force)
    finally:
        bar.close()
    if as_json:
        typer.echo(files["trial.json"][0], nl=False)
        return
    summary = json.loads(files["trial.json"][0])
    typer.echo(one_line(f"chipswap trial: {spec.title} -> {out}/", 2000))
    typer.echo(one_line(f"Plan verdict: {spec.verdict} — {spec.verdict_why}", 2000))
    n = spec.neuron
    typer.echo(
        one_line(
            f"Measures: {n.instance} ({spec.why_this_candidate}), TP {n.tp} x {n.replicas} replica(s), batch "
            f"{n.max_batch}, stack {spec.stack if spec.mode == 'llm' else 'chipswap compile + serve'}"
            + (f"; GPU baseline {spec.gpu.instance} at {spec.gpu.endpoint}" if spec.gpu else ""),
            2000,
        )
    )
    typer.echo(one_line(summary["cost"]["line"], 2000))
    for rel in sorted(files):
        typer.echo(f"  {out}/{rel}")
    typer.echo(
        one_line(
            f"Next: cd {out} && ./launch.sh && ./bench.sh neuron && ./stop.sh; then {summary['follow_up']}",
            2000,
        )
    )


def register(app: typer.Typer) -> None:
    app.command("trial", help=HELP)(_trial)
