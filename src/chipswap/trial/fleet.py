"""The fleet the verdict sizes, as deployable documents: Kubernetes objects (EKS with the Neuron device
plugin) and the three SageMaker requests (model, endpoint configuration, endpoint).

Pure core: TrialSpec in, plain dicts out (the shell dumps them as YAML / JSON; values from the workload only
ever land in string fields, never in a command). No I/O; may not call AWS (chipswap.trial.sagemaker does).
"""

from __future__ import annotations

import json
import re
from typing import Any

from chipswap.trial.launch import (
    HEALTH_PATH,
    LIVENESS_PATH,
    QUEUE_METRIC,
    TGI_IMAGE,
    VLLM_IMAGE_REPO,
    dtype_flag,
    neuron_config,
    server_kind,
)
from chipswap.trial.spec import TrialSpec

NEURONCORE = "aws.amazon.com/neuroncore"  # Neuron device plugin: one NeuronCore
NEURON_DEVICE = "aws.amazon.com/neuron"  # Neuron device plugin: a whole device (all its cores)
K8S_VERSION = "1.33.0"  # schemas the tests validate against (kubernetes-validate bundles them)
CHIPSWAP_IMAGE = (
    "REPLACE-WITH-YOUR-REGISTRY/chipswap-neuron:trial"  # build: Neuron DLC + pip install chipswap
)
SAGEMAKER_TGI_IMAGE = "REPLACE-WITH-huggingface-pytorch-tgi-inference-neuronx-IMAGE-URI"


def k8s_name(*parts: str) -> str:
    """A DNS-1123 label (lowercase letters, digits, '-', at most 63) from model and instance names."""
    s = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    s = re.sub(r"-{2,}", "-", s)[:63].strip("-")
    return s or "chipswap-trial"


def metric_name(kind: str) -> str:
    """The custom-metrics name the Prometheus adapter exposes (':' is not allowed there)."""
    return QUEUE_METRIC[kind].replace(":", "_")


def _port(kind: str) -> int:
    return 80 if kind == "nxdi-tgi" else 8000


def _container(spec: TrialSpec) -> dict[str, Any]:
    n = spec.neuron
    kind = server_kind(spec)
    port = _port(kind)
    env: list[dict[str, str]] = [{"name": "MODEL_ID", "value": spec.model_id}]
    if kind == "nxdi-vllm":
        image = f"{VLLM_IMAGE_REPO}:REPLACE-WITH-TAG-FOR-YOUR-SDK"
        command = ["vllm", "serve", "$(MODEL_ID)"]
        args = [
            "--tensor-parallel-size", str(n.tp), "--max-num-seqs", str(n.max_batch),
            "--max-model-len", str(n.max_length), "--dtype", dtype_flag(n.dtype),
            "--additional-config", json.dumps(neuron_config(spec)), "--host", "0.0.0.0", "--port", str(port),
        ]  # fmt: skip
    elif kind == "nxdi-tgi":
        image = TGI_IMAGE
        command = []
        args = ["--model-id", "$(MODEL_ID)"]
        env += [
            {"name": "HF_NUM_CORES", "value": str(n.tp)},
            {"name": "HF_AUTO_CAST_TYPE", "value": n.dtype},
            {"name": "MAX_BATCH_SIZE", "value": str(n.max_batch)},
            {"name": "MAX_INPUT_TOKENS", "value": str(min(spec.max_prompt, n.max_length - 1))},
            {"name": "MAX_TOTAL_TOKENS", "value": str(n.max_length)},
        ]
    else:
        image = CHIPSWAP_IMAGE
        seq = ",".join(str(s) for s in spec.sequence_buckets) or str(n.max_length)
        batches = ",".join(str(b) for b in (n.batch_sizes or (1, n.max_batch)))
        env[0] = {"name": "MODEL", "value": spec.model_spec}
        command = ["sh", "-c"]
        args = [
            f'chipswap compile "$MODEL" --seq-len {seq} --batch-sizes {batches} --backend neuron '
            f"--out /tmp/compiled.json && exec chipswap serve /tmp/compiled.json --host 0.0.0.0 --port {port}"
        ]
    probe = {"httpGet": {"path": HEALTH_PATH[kind], "port": port}, "periodSeconds": 10, "timeoutSeconds": 5}
    c: dict[str, Any] = {
        "name": "server",
        "image": image,
        "args": args,
        "env": env,
        "ports": [{"name": "http", "containerPort": port}],
        "resources": {"requests": {NEURONCORE: n.tp}, "limits": {NEURONCORE: n.tp}},
        "startupProbe": {**probe, "failureThreshold": 360},  # up to an hour of compiling before ready
        "readinessProbe": {**probe, "failureThreshold": 3},
        "livenessProbe": {
            "httpGet": {"path": LIVENESS_PATH[kind], "port": port},
            "periodSeconds": 20,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
    }
    if command:
        c["command"] = command
    return c


def k8s_manifests(spec: TrialSpec) -> dict[str, dict[str, Any]]:
    """file name -> one Kubernetes object: Deployment, Service, HorizontalPodAutoscaler, and the Prometheus
    adapter rule that turns the server's queue-depth metric into the autoscaler's custom metric."""
    n = spec.neuron
    kind = server_kind(spec)
    name = k8s_name("chipswap", spec.model_name, n.instance)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "chipswap-trial"}
    annotations = {
        "chipswap/workload-title": spec.title,
        "chipswap/verdict": spec.verdict,
        "chipswap/fleet": f"{n.count} x {n.instance} ({n.replicas} replica(s) of TP {n.tp} each)",
    }
    pods = n.count * n.replicas
    port = _port(kind)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "replicas": pods,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(port),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": {
                    "nodeSelector": {"node.kubernetes.io/instance-type": n.instance},
                    "terminationGracePeriodSeconds": 60,
                    "containers": [_container(spec)],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": pods,
            "maxReplicas": max(n.count_high * n.replicas, pods),
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric_name(kind)},
                        "target": {"type": "AverageValue", "averageValue": str(max(n.max_batch, 1))},
                    },
                }
            ],
        },
    }
    series = QUEUE_METRIC[kind]
    rule = (
        "rules:\n"
        f'- seriesQuery: \'{series}{{namespace!="",pod!=""}}\'\n'
        "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
        f'  name: {{matches: "^{re.escape(series)}$", as: "{metric_name(kind)}"}}\n'
        "  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'\n"
    )
    adapter = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-adapter-rules"[:63].strip("-"), "labels": labels},
        "data": {"config.yaml": rule},
    }
    return {
        "deployment.yaml": deployment,
        "service.yaml": service,
        "hpa.yaml": hpa,
        "prometheus-adapter-rules.yaml": adapter,
    }


def sagemaker_requests(spec: TrialSpec) -> dict[str, Any]:
    """The bodies of CreateModel, CreateEndpointConfig and CreateEndpoint (the role ARN is filled in when
    the requests are sent). One container per instance: SageMaker's InitialInstanceCount is the plan's
    instance count, and the container serves one replica of TP NeuronCores."""
    n = spec.neuron
    kind = server_kind(spec)
    name = k8s_name("chipswap", spec.model_name, n.instance)
    if kind == "encoder":
        image, env = CHIPSWAP_IMAGE, {"MODEL": spec.model_spec}
    else:
        image = SAGEMAKER_TGI_IMAGE
        env = {
            "HF_MODEL_ID": spec.model_id,
            "HF_NUM_CORES": str(n.tp),
            "HF_AUTO_CAST_TYPE": n.dtype,
            "MAX_BATCH_SIZE": str(n.max_batch),
            "MAX_INPUT_TOKENS": str(min(spec.max_prompt, n.max_length - 1)),
            "MAX_TOTAL_TOKENS": str(n.max_length),
        }
    startup = 3600 if spec.mode == "llm" else 1200  # seconds SageMaker waits for the first health check
    return {
        "model": {
            "ModelName": name,
            "PrimaryContainer": {"Image": image, "Environment": env},
            "Tags": [{"Key": "chipswap-trial", "Value": spec.model_name[:256]}],
        },
        "endpoint_config": {
            "EndpointConfigName": f"{name}-config"[:63],
            "ProductionVariants": [
                {
                    "VariantName": "neuron",
                    "ModelName": name,
                    "InitialInstanceCount": n.count,
                    "InstanceType": f"ml.{n.instance}",
                    "ContainerStartupHealthCheckTimeoutInSeconds": startup,
                }
            ],
        },
        "endpoint": {"EndpointName": name, "EndpointConfigName": f"{name}-config"[:63]},
        "max_instances": n.count_high,
        "note": (
            f"one container per instance serves one replica of TP {n.tp} NeuronCores; the plan runs "
            f"{n.replicas} replicas per instance: use SageMaker inference components for that density, or "
            f"raise InitialInstanceCount to {n.count * n.replicas}"
            if n.replicas > 1
            else f"one container per instance serves the plan's single replica of TP {n.tp} NeuronCores"
        ),
    }
