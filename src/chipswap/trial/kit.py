"""The whole trial folder as text: relative path -> (content, executable).

Pure core: assembles the launch / bench / stop scripts, the README, the deployment documents and a
machine-readable trial.json from one TrialSpec. No I/O (chipswap.trial.write puts the folder on disk).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from decimal import Decimal
from typing import Any

import yaml

from chipswap.trial.benchscript import bench_script
from chipswap.trial.costing import gpu_bench_hours, trial_cost
from chipswap.trial.fleet import k8s_manifests, sagemaker_requests
from chipswap.trial.launch import STOP_SCRIPT, launch_script
from chipswap.trial.readme import plan_command, render_readme
from chipswap.trial.spec import TrialSpec

SCHEMA = "chipswap.trial/1"


class _PlainDumper(yaml.SafeDumper):
    """Safe YAML without anchors/aliases: every manifest reads on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


Files = dict[str, tuple[str, bool]]


def _plain(obj: Any) -> Any:
    if isinstance(obj, Decimal):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def render_kit(spec: TrialSpec, prereq: list[str], traffic_csv: str | None = None) -> Files:
    cost = trial_cost(spec)
    compile_s = int(cost.compile_minutes * 60)
    files: Files = {
        "README.md": (render_readme(spec, cost, prereq), False),
        "launch.sh": (launch_script(spec, compile_s), True),
        "bench.sh": (bench_script(spec), True),
        "stop.sh": (STOP_SCRIPT, True),
    }
    if traffic_csv is not None:
        files["traffic.csv"] = (traffic_csv, False)
    for name, doc in k8s_manifests(spec).items():
        files[f"deploy/k8s/{name}"] = (
            yaml.dump(doc, Dumper=_PlainDumper, sort_keys=False, width=1000),
            False,
        )
    files["deploy/sagemaker.json"] = (json.dumps(sagemaker_requests(spec), indent=2) + "\n", False)
    summary = {
        "schema": SCHEMA,
        "spec": _plain(asdict(spec)),
        "cost": {
            "line": cost.line(spec.neuron.instance, spec.neuron.term),
            "hours": round(cost.hours, 3),
            "usd": None if cost.usd is None else str(cost.usd),
            "parts": [_plain(asdict(p)) for p in cost.parts],
            "capacity_block": cost.capacity_block,
            "gpu_bench_hours": gpu_bench_hours(spec),
        },
        "follow_up": plan_command(spec),
    }
    files["trial.json"] = (json.dumps(summary, indent=2) + "\n", False)
    return files
