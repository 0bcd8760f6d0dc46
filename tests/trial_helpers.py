"""Shared pieces of the trial-kit tests: TrialSpecs built by hand (no plan run), a stub `chipswap` for the
bench script's control flow, and the environment that puts this tree's chipswap on PATH for the scripts."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

from chipswap.trial.spec import Target, TrafficPlan, TrialSpec

SRC = Path(__file__).resolve().parents[1] / "src"


def target(**kw) -> Target:
    base = dict(
        instance="inf2.48xlarge",
        side="neuron",
        count=4,
        count_high=6,
        tp=8,
        replicas=3,
        max_batch=32,
        batch_sizes=(),
        dtype="bf16",
        max_length=4096,
        projected_rps=2.5,
        throughput_label="projected ± 20%",
        rate_usd_h=Decimal("12.98127"),
        rate_source="catalog: test (2026-07-20)",
        term="on-demand",
        region="us-east-1",
        neuron_cores=24,
        devices=12,
        vcpus=192,
    )
    base.update(kw)
    return Target(**base)


def llm_spec(**kw) -> TrialSpec:
    base = dict(
        title="Llama trial",
        workload_label="wl.toml",
        workload_arg="wl.toml",
        example=None,
        mode="llm",
        stack="nxdi-vllm",
        model_name="llama-3-8b",
        model_id="meta-llama/Meta-Llama-3-8B",
        model_spec="llama-3-8b",
        task="causal-lm",
        weights_gib=15.0,
        verdict="stay on GPU",
        verdict_why="costs more",
        neuron=target(),
        gpu=None,
        traffic=TrafficPlan(source="steady", trace=None, busiest_rps=10.0, window_s=300.0, prompt_tokens=64),
        sequence_buckets=(512, 1024, 3072),
        decode_buckets=(768, 1536, 4096),
        slo_ms={"p99_ms": 20000.0, "ttft_p99_ms": 2000.0},
        why_this_candidate="the plan's pick",
    )
    base.update(kw)
    return TrialSpec(**base)


def encoder_spec(**kw) -> TrialSpec:
    base = dict(
        mode="encoder",
        model_name="tiny-bert",
        model_id="YOUR-MODEL-ID",
        model_spec="tiny-bert",
        task="sequence-classification",
        weights_gib=0.01,
        verdict="move serving to Inferentia",
        neuron=target(
            instance="inf2.xlarge",
            tp=1,
            replicas=2,
            neuron_cores=2,
            devices=1,
            batch_sizes=(1, 4),
            max_length=128,
            count=5,
            count_high=6,
        ),
        sequence_buckets=(128,),
        decode_buckets=(),
        slo_ms={"p99_ms": 100.0},
    )
    base.update(kw)
    return llm_spec(**base)


def with_gpu(spec: TrialSpec, endpoint: str = "http://gpu.internal:8000") -> TrialSpec:
    gpu = target(
        instance="g6e.12xlarge",
        side="gpu",
        tp=1,
        replicas=4,
        count=5,
        count_high=6,
        neuron_cores=0,
        devices=4,
        endpoint=endpoint,
    )
    return replace(spec, gpu=gpu)


def script_env(bin_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """PATH with (a stub folder, then) this interpreter's bin (chipswap, python3), PYTHONPATH = this tree."""
    env = dict(os.environ)
    path = [str(Path(sys.executable).parent), env.get("PATH", "")]
    if bin_dir is not None:
        path.insert(0, str(bin_dir))
    env["PATH"] = os.pathsep.join(path)
    env["PYTHONPATH"] = str(SRC)
    env["PYTHON"] = sys.executable
    env.update(extra)
    return env


STUB_CHIPSWAP = r"""#!/usr/bin/env bash
# a stand-in for `chipswap bench`: logs its argv, writes a results file whose goodput falls above SAT_RATE;
# STUB_OK successes (0 at the rate STUB_FAIL_AT), STUB_COMPLETE=false (+ STUB_REASON) stops early, exit 1
set -euo pipefail
printf '%s\n' "$*" >>"$STUB_LOG"
out="" rate=""
while (( $# )); do
  case "$1" in --out) out="$2"; shift ;; --rate) rate="$2"; shift ;; esac
  shift
done
frac=$(python3 -c "import sys; print(0.5 if float(sys.argv[1]) > float(sys.argv[2]) else 1.0)" \
  "$rate" "$SAT_RATE")
good=$(python3 -c "import sys; print(float(sys.argv[1]) * float(sys.argv[2]))" "$rate" "$frac")
ok="${STUB_OK:-10}"
if [[ -n "${STUB_FAIL_AT:-}" && "$rate" == "$STUB_FAIL_AT" ]]; then ok=0; fi
printf '{"complete": %s, "stop_reason": "%s", "counts": {"ok": %s, "sent": 10},' \
  "${STUB_COMPLETE:-true}" "${STUB_REASON:-}" "$ok" >"$out"
printf ' "goodput": {"requests_per_s": %s, "fraction_of_sent": %s}, "rates": {}}\n' "$good" "$frac" >>"$out"
if [[ "${STUB_COMPLETE:-true}" != true ]]; then exit 1; fi
"""


def stub_bin(root: Path) -> Path:
    d = root / "stub-bin"
    d.mkdir(exist_ok=True)
    p = d / "chipswap"
    p.write_text(STUB_CHIPSWAP)
    p.chmod(0o755)
    return d
