"""The trial's launch and stop scripts for each serving stack, and the table of the stacks' documented keys.

Pure core: TrialSpec in, bash text out. Every value that comes from the workload goes through shlex.quote
(or is an int we formatted); JSON settings are built with json.dumps and then quoted. No I/O; may not run
anything. Stacks: `nxdi-vllm` (vLLM with the Neuron plugin on NxD Inference), `nxdi-tgi` (optimum-neuron TGI),
and chipswap's own compile + serve for encoders.
"""

from __future__ import annotations

import json
import shlex

from chipswap.trial.spec import Target, TrialSpec

q = shlex.quote

# (stack, setting, key the kit writes, where the stack documents it). Sources were read on 2026-12-01 (the
# shipped reference table ../shared/reference/neuron/shape_bucketing_knobs.csv cites the doc commits).
DOCUMENTED_KEYS: tuple[tuple[str, str, str, str], ...] = (
    (
        "nxdi-vllm",
        "tensor parallelism",
        "--tensor-parallel-size",
        "vLLM serve CLI; NxDI vLLM user guide v1 (SDK 2.28)",
    ),
    (
        "nxdi-vllm",
        "batch (decode slots)",
        "--max-num-seqs",
        "vLLM serve CLI; NxDI vLLM user guide v1 (SDK 2.28)",
    ),
    ("nxdi-vllm", "maximum length", "--max-model-len", "vLLM serve CLI; NxDI vLLM user guide v1 (SDK 2.28)"),
    (
        "nxdi-vllm",
        "NxDI settings",
        "--additional-config '{\"override_neuron_config\": {...}}'",
        "shape_bucketing_knobs.csv (vllm@60c43be0 neuron.inc.md; aws-neuron-sdk@81ce03ae "
        "vllm-user-guide-v1.rst)",
    ),
    (
        "nxdi-vllm",
        "bucketing on",
        "override_neuron_config.enable_bucketing",
        "shape_bucketing_knobs.csv (aws-neuron-sdk@81ce03ae nxd-inference feature-guide.rst)",
    ),
    (
        "nxdi-vllm",
        "prompt (prefill) buckets",
        "override_neuron_config.context_encoding_buckets",
        "shape_bucketing_knobs.csv (aws-neuron-sdk@81ce03ae nxd-inference feature-guide.rst)",
    ),
    (
        "nxdi-vllm",
        "decode buckets",
        "override_neuron_config.token_generation_buckets",
        "shape_bucketing_knobs.csv (aws-neuron-sdk@81ce03ae nxd-inference feature-guide.rst)",
    ),
    (
        "nxdi-vllm",
        "compiled artifacts",
        "NEURON_COMPILED_ARTIFACTS",
        "compile_cache_facts.csv (vllm@60c43be0 neuron.inc.md)",
    ),
    (
        "nxdi-vllm",
        "health endpoint",
        "GET /health",
        "vLLM OpenAI server (docs.vllm.ai, metrics and serve pages)",
    ),
    (
        "nxdi-vllm",
        "queue depth metric",
        "vllm:num_requests_waiting",
        "docs.vllm.ai Production Metrics; vllm docs/design/metrics.md (read 2026-12-01)",
    ),
    (
        "nxdi-tgi",
        "tensor parallelism",
        "HF_NUM_CORES",
        "optimum-neuron text-generation-inference/tgi_env.py @b5d747b7",
    ),
    (
        "nxdi-tgi",
        "dtype",
        "HF_AUTO_CAST_TYPE",
        "optimum-neuron text-generation-inference/tgi_env.py @b5d747b7",
    ),
    ("nxdi-tgi", "batch", "--max-batch-size / MAX_BATCH_SIZE", "optimum-neuron tgi_env.py @b5d747b7"),
    (
        "nxdi-tgi",
        "longest prompt",
        "--max-input-tokens / MAX_INPUT_TOKENS",
        "optimum-neuron tgi_env.py @b5d747b7",
    ),
    (
        "nxdi-tgi",
        "maximum length",
        "--max-total-tokens / MAX_TOTAL_TOKENS",
        "optimum-neuron tgi_env.py @b5d747b7",
    ),
    (
        "nxdi-tgi",
        "prompt / decode buckets",
        "(no key: the export compiles batch_size x sequence_length; NxDI's own buckets apply)",
        "optimum-neuron tgi_env.py @b5d747b7 (env_config_peering has no bucket key)",
    ),
    (
        "nxdi-tgi",
        "image",
        "ghcr.io/huggingface/text-generation-inference:3.3.5-neuron",
        "huggingface.co/docs/text-generation-inference/backends/neuron (read 2026-12-01)",
    ),
    (
        "nxdi-tgi",
        "health endpoint",
        "GET /health",
        "TGI router API (huggingface.co/docs/text-generation-inference)",
    ),
    (
        "nxdi-tgi",
        "queue depth metric",
        "tgi_queue_size",
        "TGI metrics (huggingface.co/docs/text-generation-inference)",
    ),
    ("encoder", "buckets", "chipswap compile --seq-len / --batch-sizes", "docs/compile.md"),
    ("encoder", "backend", "chipswap compile --backend neuron (torch_neuronx.trace)", "docs/compile.md"),
    ("encoder", "health endpoint", "GET /readyz, /healthz", "docs/serve.md"),
    ("encoder", "queue depth metric", "chipswap_queue_depth", "docs/serve.md (chipswap.serve.metrics)"),
    (
        "all Neuron",
        "NeuronCores of one process",
        "NEURON_RT_VISIBLE_CORES",
        "Neuron runtime configuration (nrt-configurable-parameters.rst)",
    ),
    (
        "all Neuron",
        "compile cache",
        "/var/tmp/neuron-compile-cache (NEURON_COMPILE_CACHE_URL)",
        "compile_cache_facts.csv (aws-neuron-sdk@81ce03ae neuron-caching.rst)",
    ),
)

HEALTH_PATH = {"nxdi-vllm": "/health", "nxdi-tgi": "/health", "encoder": "/readyz"}
LIVENESS_PATH = {"nxdi-vllm": "/health", "nxdi-tgi": "/health", "encoder": "/healthz"}
QUEUE_METRIC = {
    "nxdi-vllm": "vllm:num_requests_waiting",
    "nxdi-tgi": "tgi_queue_size",
    "encoder": "chipswap_queue_depth",
}
TGI_IMAGE = "ghcr.io/huggingface/text-generation-inference:3.3.5-neuron"
VLLM_IMAGE_REPO = "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx"
COMPILE_CACHE = "/var/tmp/neuron-compile-cache"


def server_kind(spec: TrialSpec) -> str:
    """The key of HEALTH_PATH / QUEUE_METRIC for this trial: the stack for LLMs, 'encoder' otherwise."""
    return spec.stack if spec.mode == "llm" else "encoder"


def dtype_flag(dtype: str) -> str:
    return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, "bfloat16")


def neuron_config(spec: TrialSpec) -> dict[str, object]:
    """The NxDI settings vLLM passes through (override_neuron_config): the planned buckets."""
    cfg: dict[str, object] = {"enable_bucketing": True}
    if spec.sequence_buckets:
        cfg["context_encoding_buckets"] = list(spec.sequence_buckets)
    if spec.decode_buckets:
        cfg["token_generation_buckets"] = list(spec.decode_buckets)
    return {"override_neuron_config": cfg}


def server_command(spec: TrialSpec) -> list[str]:
    """The server's command line for one replica (PORT and cores come from the environment)."""
    n = spec.neuron
    if spec.stack == "nxdi-tgi":
        return [
            "text-generation-launcher",
            "--model-id",
            "$MODEL_ID",
            "--max-batch-size",
            str(n.max_batch),
            "--max-input-tokens",
            str(min(spec.max_prompt, n.max_length - 1)),
            "--max-total-tokens",
            str(n.max_length),
        ]
    return [
        "vllm",
        "serve",
        "$MODEL_ID",
        "--tensor-parallel-size",
        str(n.tp),
        "--max-num-seqs",
        str(n.max_batch),
        "--max-model-len",
        str(n.max_length),
        "--dtype",
        dtype_flag(n.dtype),
        "--additional-config",
        json.dumps(neuron_config(spec)),
    ]


_HEADER = """#!/usr/bin/env bash
# shellcheck disable=SC2016  # workload text is single-quoted on purpose: it stays text
# chipswap trial kit: {what}
# Generated by `chipswap trial` (see README.md). Runs only on a Neuron host ({instance}) with the Neuron SDK:
# chipswap's tests check this script with shellcheck and run the encoder path here, never the Neuron launch.
set -euo pipefail
cd "$(dirname "$0")"
"""

_WAIT = """
wait_ready() {{  # PORT PATH: poll until the server answers 200, or give up after READY_TIMEOUT_S
  local port="$1" path="$2" waited=0
  until curl -fsS -o /dev/null "http://127.0.0.1:${{port}}${{path}}"; do
    if (( waited >= READY_TIMEOUT_S )); then
      echo "launch: no answer on port ${{port}}${{path}} after ${{READY_TIMEOUT_S}} s; see logs/" >&2
      exit 1
    fi
    sleep 5
    waited=$(( waited + 5 ))
  done
}}

balancer() {{  # one nginx in front of the replicas (ports PORT+1..PORT+REPLICAS), SSE streamed unbuffered
  if ! command -v nginx >/dev/null; then
    echo "launch: REPLICAS=${{REPLICAS}} needs nginx (apt-get install nginx)" >&2
    exit 2
  fi
  {{
    echo "worker_processes 1; pid $PWD/run/nginx.pid; error_log $PWD/logs/nginx-error.log;"
    echo "events {{ worker_connections 4096; }}"
    echo "http {{ access_log off; upstream replicas {{ least_conn;"
    for (( i = 1; i <= REPLICAS; i++ )); do echo "  server 127.0.0.1:$(( PORT + i ));"; done
    echo "  keepalive 64; }}"
    echo "  server {{ listen 127.0.0.1:${{PORT}}; location / {{ proxy_pass http://replicas;"
    echo "    proxy_http_version 1.1; proxy_set_header Connection \\"\\"; proxy_buffering off;"
    echo "    proxy_read_timeout 3600s; }} }} }}"
  }} >run/balancer.conf
  nginx -p "$PWD" -c "$PWD/run/balancer.conf"
}}
"""


def _replica_loop(start_fn: str, health: str) -> str:
    return f"""
mkdir -p logs run
if (( REPLICAS * TP > CORES )); then
  echo "launch: ${{REPLICAS}} replicas x TP ${{TP}} needs more than the ${{CORES}} NeuronCores here" >&2
  exit 2
fi
if (( REPLICAS == 1 )); then
  {start_fn} 0 "$PORT"
  wait_ready "$PORT" {q(health)}
else
  for (( i = 0; i < REPLICAS; i++ )); do {start_fn} "$i" $(( PORT + i + 1 )); done
  for (( i = 0; i < REPLICAS; i++ )); do wait_ready $(( PORT + i + 1 )) {q(health)}; done
  balancer
fi
echo "launch: ready on http://127.0.0.1:${{PORT}} (${{REPLICAS}} replica(s)); stop with ./stop.sh"
"""


def _common_vars(n: Target, compile_s: int) -> str:
    return (
        f'PORT="${{PORT:-8000}}"\n'
        f'REPLICAS="${{REPLICAS:-{n.replicas}}}"  # per instance, as planned\n'
        f"TP={n.tp}  # NeuronCores per replica\n"
        f"CORES={n.neuron_cores or n.tp * n.replicas}  # NeuronCores on one {n.instance}\n"
        f'READY_TIMEOUT_S="${{READY_TIMEOUT_S:-{max(600, compile_s * 3)}}}"  # 3 x the expected compile '
        "time\n"
    )


def launch_script(spec: TrialSpec, compile_s: int) -> str:
    """launch.sh: start the planned replicas on one instance and wait until they answer."""
    if spec.mode == "encoder":
        return _encoder_launch(spec, compile_s)
    n = spec.neuron
    body = _tgi_start(spec) if spec.stack == "nxdi-tgi" else _vllm_start(spec)
    what = (
        "launch vLLM with the Neuron plugin (NxD Inference)"
        if spec.stack == "nxdi-vllm"
        else "launch optimum-neuron TGI (the TGI Neuron image, one container per replica)"
    )
    return (
        _HEADER.format(what=what, instance=n.instance)
        + "# Weights: the preset's Hugging Face id; set MODEL_ID to your fine-tuned weights (id or local "
        "path).\n"
        + f"DEFAULT_MODEL_ID={q(spec.model_id)}\n"
        + 'MODEL_ID="${MODEL_ID:-$DEFAULT_MODEL_ID}"\n'
        + _common_vars(n, compile_s)
        + f'NEURON_CACHE="${{NEURON_CACHE:-{COMPILE_CACHE}}}"  # the Neuron compile cache (reused on '
        "restarts)\n" + body + _WAIT.format() + _replica_loop("start_replica", HEALTH_PATH[server_kind(spec)])
    )


def _vllm_start(spec: TrialSpec) -> str:
    argv = " ".join('"$MODEL_ID"' if a == "$MODEL_ID" else q(a) for a in server_command(spec))
    return f"""export NEURON_COMPILE_CACHE_URL="$NEURON_CACHE"
export NEURON_COMPILED_ARTIFACTS="${{NEURON_COMPILED_ARTIFACTS:-$PWD/neuron-compiled-artifacts}}"

start_replica() {{  # INDEX PORT: one vLLM server on NeuronCores INDEX*TP .. INDEX*TP+TP-1
  local first=$(( $1 * TP ))
  NEURON_RT_VISIBLE_CORES="${{first}}-$(( first + TP - 1 ))" nohup \\
    {argv} \\
    --host 127.0.0.1 --port "$2" </dev/null >"logs/replica-$1.log" 2>&1 &
  echo $! >"run/replica-$1.pid"
}}
"""


def _tgi_start(spec: TrialSpec) -> str:
    n = spec.neuron
    per_dev = n.cores_per_device or 2
    devices = max(1, -(-n.tp // per_dev))
    argv = " ".join('"$MODEL_ID"' if a == "$MODEL_ID" else q(a) for a in server_command(spec)[1:])
    return f"""IMAGE="${{IMAGE:-{TGI_IMAGE}}}"
DEVICES_PER_REPLICA={devices}  # Neuron devices ({per_dev} NeuronCores each) per replica
export HF_NUM_CORES={n.tp} HF_AUTO_CAST_TYPE={q(n.dtype)} MAX_BATCH_SIZE={n.max_batch}
export MAX_TOTAL_TOKENS={n.max_length} MAX_INPUT_TOKENS={min(spec.max_prompt, n.max_length - 1)}

start_replica() {{  # INDEX PORT: one TGI container on devices INDEX*DEVICES_PER_REPLICA ..
  local dev=() first=$(( $1 * DEVICES_PER_REPLICA ))
  for (( d = first; d < first + DEVICES_PER_REPLICA; d++ )); do dev+=("--device=/dev/neuron${{d}}"); done
  mkdir -p data
  nohup docker run --rm --name "chipswap-trial-$1" -p "127.0.0.1:$2:80" "${{dev[@]}}" \\
    -v "$PWD/data:/data" -v "$NEURON_CACHE:/var/tmp/neuron-compile-cache" \\
    -e HF_TOKEN -e HF_NUM_CORES -e HF_AUTO_CAST_TYPE \\
    -e MAX_BATCH_SIZE -e MAX_TOTAL_TOKENS -e MAX_INPUT_TOKENS \\
    "$IMAGE" {argv} </dev/null >"logs/replica-$1.log" 2>&1 &
  echo $! >"run/replica-$1.pid"
}}
"""


def _encoder_launch(spec: TrialSpec, compile_s: int) -> str:
    n = spec.neuron
    seq = ",".join(str(s) for s in spec.sequence_buckets) or str(n.max_length)
    batches = ",".join(str(b) for b in (n.batch_sizes or (1, n.max_batch)))
    start = """
start_replica() {  # INDEX PORT
  NEURON_RT_VISIBLE_CORES="$(( $1 * TP ))-$(( $1 * TP + TP - 1 ))" nohup \\
    chipswap serve compiled.json --host 127.0.0.1 --port "$2" </dev/null >"logs/replica-$1.log" 2>&1 &
  echo $! >"run/replica-$1.pid"
}
"""
    return (
        _HEADER.format(
            what="compile the encoder once per bucket and serve it (chipswap compile + serve)",
            instance=n.instance,
        )
        + f"DEFAULT_MODEL={q(spec.model_spec)}  # workload text, quoted: it stays text\n"
        + 'MODEL="${MODEL:-$DEFAULT_MODEL}"  # a chipswap preset, config.json or '
        "package.module:factory\n"
        + 'BACKEND="${BACKEND:-neuron}"  # torch_neuronx.trace on the Neuron host\n'
        + f'SEQ_LEN="${{SEQ_LEN:-{seq}}}"  # the planned sequence buckets\n'
        + f'BATCH_SIZES="${{BATCH_SIZES:-{batches}}}"  # the planned compiled batch sizes\n'
        + 'export CHIPSWAP_CACHE_DIR="${CHIPSWAP_CACHE_DIR:-$PWD/chipswap-cache}"\n'
        + _common_vars(n, compile_s)
        + _WAIT.format()
        + start
        + '\nchipswap compile "$MODEL" --seq-len "$SEQ_LEN" --batch-sizes "$BATCH_SIZES" --backend '
        '"$BACKEND" ' + "--out compiled.json\n" + _replica_loop("start_replica", HEALTH_PATH["encoder"])
    )


STOP_SCRIPT = """#!/usr/bin/env bash
# chipswap trial kit: stop what launch.sh started (the replicas, the balancer). Generated by `chipswap trial`.
set -euo pipefail
cd "$(dirname "$0")"
shopt -s nullglob
for f in run/*.pid; do
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  fi
  rm -f "$f"
done
echo "stop: done"
"""
