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

from chipswap.cli.trialkit import KIT_WORKLOAD, trial_spec, workload_copy
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
    from chipswap.plan import open_workers, run_plan
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
    pool = open_workers()  # before the progress timer's thread: the workers fork only in a one-thread process
    bar = StageProgress("chipswap trial", quiet=quiet or as_json, quiet_start_s=0.0)
    bar.say("planning (the trial measures the plan's candidate)")
    try:
        with pool:
            result = run_plan(
                wl, path, catalog=catalog, progress=bar.say, capacity_check=_capacity_check(catalog, no_aws),
                pool=pool,
            )  # fmt: skip
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
