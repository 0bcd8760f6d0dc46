"""The trial kit's README: what is measured and why, what it costs, each step to the follow-up plan.

Pure core: TrialSpec + cost + prerequisites in, Markdown out. Workload text (title, names, paths) goes through
textsafe.md_text (HTML escaped, Markdown neutralised, one line) and shell commands through shlex.quote.
No I/O.
"""

from __future__ import annotations

import shlex

from chipswap.textsafe import md_text
from chipswap.trial.benchscript import (
    REPLAY_S,
    SWEEP_S,
    fmt_rate,
    fmt_rate_text,
    per_instance_rate,
    sweep_rates,
)
from chipswap.trial.costing import TrialCost
from chipswap.trial.fleet import NEURONCORE, metric_name
from chipswap.trial.launch import (
    COMPILE_CACHE,
    DOCUMENTED_KEYS,
    HEALTH_PATH,
    QUEUE_METRIC,
    TGI_IMAGE,
    VLLM_IMAGE_REPO,
    server_kind,
)
from chipswap.trial.spec import TrialSpec

STACK_WORDS = {
    "nxdi-vllm": "vLLM with the Neuron plugin on NxD Inference (`nxdi-vllm`)",
    "nxdi-tgi": "optimum-neuron TGI on NxD Inference (`nxdi-tgi`)",
}


def plan_command(spec: TrialSpec) -> str:
    if spec.workload_arg is not None:
        return f"chipswap plan {shlex.quote(spec.workload_arg)} --bench results/*.json"
    return f"chipswap plan --example {shlex.quote(spec.example or 'llama-serving')} --bench results/*.json"


def _image(spec: TrialSpec) -> str:
    if spec.mode == "encoder":
        return (
            "the Neuron PyTorch inference DLC or the Neuron multi-framework DLAMI (torch-neuronx, "
            "neuronx-cc), "
            "with `pip install chipswap`"
        )
    if spec.stack == "nxdi-tgi":
        return f"`{TGI_IMAGE}` (Docker on the Neuron DLAMI)"
    return (
        f"the vLLM Neuron DLC `{VLLM_IMAGE_REPO}` (tag for an SDK that supports "
        f"{spec.neuron.instance.split('.')[0]}; "
        "the 2.33 images are Trn2/Trn3 only) or the Neuron DLAMI's NxD Inference venv with the vllm-neuron "
        "plugin"
    )


def capacity_block_steps(spec: TrialSpec, cost: TrialCost) -> list[str]:
    """For an instance sold as EC2 Capacity Blocks: how to find and buy an offering (AWS CLI; the purchase
    first with --dry-run), then launch into it. Empty for other instances."""
    n = spec.neuron
    if not cost.capacity_block:
        return []
    days = cost.block_days or 1
    inst, region = md_text(n.instance), md_text(n.region)
    return [
        f"- A Capacity Block for 1 x {inst} in {region} ({days} day{'s' if days != 1 else ''}, the shortest "
        "block covering the trial; booked ahead, paid up front, at the price of the day). Find an offering "
        "(the `--dry-run` form checks your permissions first), buy it (first with `--dry-run`: the purchase "
        "is charged up front, at once), then launch into it:",
        "",
        "  ```bash",
        f"  aws ec2 describe-capacity-block-offerings --region {region} --instance-type {inst} \\",
        f"      --instance-count 1 --capacity-duration-hours {days * 24} --dry-run",
        f"  aws ec2 describe-capacity-block-offerings --region {region} --instance-type {inst} \\",
        f"      --instance-count 1 --capacity-duration-hours {days * 24} \\",
        "      --query 'CapacityBlockOfferings[].[CapacityBlockOfferingId,StartDate,UpfrontFee]'",
        f"  aws ec2 purchase-capacity-block --region {region} --capacity-block-offering-id cbr-OFFERING \\",
        "      --instance-platform Linux/UNIX --dry-run",
        f"  aws ec2 purchase-capacity-block --region {region} --capacity-block-offering-id cbr-OFFERING \\",
        "      --instance-platform Linux/UNIX",
        f"  aws ec2 run-instances --region {region} --instance-type {inst} --count 1 --image-id AMI \\",
        "      --instance-market-options MarketType=capacity-block \\",
        "      --capacity-reservation-specification CapacityReservationTarget={CapacityReservationId=cr-ID}",
        "  ```",
        "",
        f"  `chipswap capacity {inst} --region {region} --block-days {days}` shows the same offerings with "
        "the catalog's dated rate beside them.",
    ]


def render_readme(spec: TrialSpec, cost: TrialCost, prereq: list[str]) -> str:
    n = spec.neuron
    kind = server_kind(spec)
    title = md_text(spec.title)
    who = f"{n.count} x {md_text(n.instance)}" if n.figure_known else f"1 x {md_text(n.instance)} on its own"
    cand = (
        f"{who} ({spec.why_this_candidate}): TP {n.tp} x {n.replicas} replica(s) "
        "per "
        f"instance, batch {n.max_batch}, {n.dtype}, longest sequence {n.max_length:,}"
    )
    proj = (
        f"{n.projected_rps:,.4g} requests/s per instance at the SLO ({md_text(n.throughput_label)})"
        if n.projected_rps
        else "no projected throughput"
    )
    if not n.figure_known:
        proj = f"figure {md_text(n.throughput_label)}"
    stack = (
        STACK_WORDS.get(spec.stack, spec.stack) if spec.mode == "llm" else "chipswap compile + chipswap serve"
    )
    lines = [
        f"# chipswap trial: {title}",
        "",
        f"Plan verdict: **{md_text(spec.verdict)}** — {md_text(spec.verdict_why)}",
        "",
        *(x for note in spec.notes for x in (md_text(note), "")),
        f"- Candidate measured: {cand}; projected {proj}.",
        f"- Serving stack: {stack}.",
        f"- Load: the workload's traffic at the busiest window, {fmt_rate_text(spec.traffic.busiest_rps)} "
        + (
            f"requests/s for the fleet, {fmt_rate(per_instance_rate(spec, n))} requests/s offered to each of "
            f"the {n.count} instances (its share of the traffic, not its capacity: the sweep measures that)."
            if n.figure_known
            else "requests/s for the fleet; with no figure, one instance is swept up a ladder from "
            f"{fmt_rate(per_instance_rate(spec, n))} requests/s to that rate until it saturates."
        ),
        f"- **Cost and duration**: {cost.line(md_text(n.instance), n.term)}.",
        "",
        "The Neuron launch is exercised only on Neuron hosts: chipswap's own tests check these scripts with "
        "shellcheck, run the bench step against a real OpenAI-compatible server on loopback, run the encoder "
        "path end to end with `chipswap serve` (ONNX Runtime), validate the Kubernetes manifests against the "
        "Kubernetes schemas and send the SageMaker requests to a moto server.",
        "",
        "## Prerequisites",
        "",
        *(f"- {p}" for p in prereq),
        *capacity_block_steps(spec, cost),
        f"- Image: {_image(spec)}.",
        "- On the host: `chipswap` (for the bench), `curl`, `python3`"
        + (", `nginx` (the replicas' balancer)" if n.replicas > 1 else "")
        + (", `docker`" if spec.stack == "nxdi-tgi" and spec.mode == "llm" else "")
        + ".",
        "",
        "## Steps",
        "",
        "Run every step from this folder: the scripts and `results/` are relative to it"
        + (
            ", and the workload with the files it names is copied into `workload/`"
            if (spec.workload_arg or "").startswith("workload/")
            else ""
        )
        + ". A run that stops early or has no successful request ends the script "
        "with one line and a non-zero exit, and writes no `results/` file.",
        "",
        f"1. `./launch.sh` — {'compiles the buckets and ' if spec.mode == 'encoder' else ''}starts "
        f"{n.replicas} "
        f"replica(s) on NeuronCores 0-{n.tp * n.replicas - 1} and waits for `{HEALTH_PATH[kind]}` on port "
        "8000. "
        f"Expected compile time: {cost.compile_minutes:.0f} min ({md_text(cost.parts[1].label)}). Compile "
        + (
            f"cache: `{COMPILE_CACHE}` (the Neuron cache; vLLM also keeps `neuron-compiled-artifacts/`)"
            if spec.mode == "llm"
            else "cache: chipswap's artifact cache `chipswap-cache/` (torch_neuronx.trace graphs are not in "
            "the Neuron cache)"
        )
        + "; a second launch reuses it. Logs: `logs/`.",
        f"2. `./bench.sh neuron` — warm-up ({16} requests), the traffic replayed open-loop at "
        f"{fmt_rate(per_instance_rate(spec, n))} requests/s for {REPLAY_S[spec.mode]} s, then a sweep at "
        f"{', '.join(fmt_rate(r) for r in sweep_rates(spec, n))} requests/s ({SWEEP_S[spec.mode]} s each) "
        "that "
        "stops at saturation (goodput under 90 % of sent, or errors). Every run is a `chipswap bench` file "
        "in "
        "`results/runs/neuron/`; the run with the highest goodput is copied to `results/neuron.json`.",
    ]
    step = 3
    if spec.gpu is not None:
        g = spec.gpu
        lines.append(
            f"{step}. `./bench.sh gpu` — the same against today's endpoint {md_text(g.endpoint or '')} "
            f"({g.count} x {md_text(g.instance)}: {fmt_rate(per_instance_rate(spec, g))} requests/s per "
            "instance); "
            "writes `results/gpu.json`. Point `GPU_URL` at one instance's server, not the load balancer."
        )
        step += 1
    lines += [
        f"{step}. `./stop.sh` — stops the replicas (and the balancer).",
        f"{step + 1}. `{plan_command(spec)}` — your measurements outrank the projection (one file per "
        "instance type; the per-run files stay in `results/runs/`).",
        "",
        "Every default can be overridden from the environment: `MODEL_ID` (your fine-tuned weights), `PORT`, "
        "`REPLICAS`, `URL`, `RATE`, `REPLAY_S`, `SWEEP_RATES`, `SWEEP_S`, `READY_TIMEOUT_S`.",
        "",
        "## Launch settings and the stack's documented keys",
        "",
        "| stack | setting | key | source |",
        "|---|---|---|---|",
    ]
    wanted = {"encoder", "all Neuron"} if spec.mode == "encoder" else {spec.stack, "all Neuron"}
    lines += [f"| {s} | {what} | `{key}` | {src} |" for s, what, key, src in DOCUMENTED_KEYS if s in wanted]
    lines += [
        "",
        "## The fleet the verdict sizes",
        "",
        *(
            []
            if n.figure_known
            else [
                "No fleet is sized yet: the figure is unknown until this trial measures it. The files below "
                "deploy one instance; `chipswap plan ... --bench results/*.json` sizes the fleet from the "
                "measurement.",
                "",
            ]
        ),
        f"- `deploy/k8s/`: a Deployment of {n.count * n.replicas} pods ({n.count} instances x {n.replicas}), "
        "each "
        f"requesting `{NEURONCORE}: {n.tp}` from the Neuron device plugin, with startup/readiness/liveness "
        f"probes on the server's health endpoint; a Service; a HorizontalPodAutoscaler from "
        f"{n.count * n.replicas} to {max(n.count_high, n.count) * n.replicas} pods (the band's upper count) "
        "on "
        f"`{metric_name(kind)}` (the server's `{QUEUE_METRIC[kind]}` through the Prometheus adapter rule in "
        f"`prometheus-adapter-rules.yaml`), target {n.max_batch} waiting requests per pod (one full batch: "
        "an "
        "assumption to tune). Apply with `kubectl apply -f deploy/k8s/` after installing the Neuron device "
        "plugin (and the Neuron scheduler extension for contiguous cores).",
        f"- `deploy/sagemaker.json`: model, endpoint configuration ({n.count} x ml.{md_text(n.instance)}) "
        "and "
        "endpoint; `python -m chipswap.trial.sagemaker deploy/sagemaker.json --role-arn ARN --dry-run` "
        "prints "
        "the requests, without `--dry-run` it creates them. Replace the image placeholder first.",
        "",
    ]
    return "\n".join(lines)
