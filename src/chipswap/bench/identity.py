"""What a `chipswap bench` measured, and where: the ``identity`` block of chipswap.bench/2, and the checks
`chipswap plan` runs before a measured figure may stand in for a workload's model on an instance.

The block (every field may be null when the bench could not tell)::

  identity.model   {name, parameters, config_sha256, dtype, source}     from the server's /v1/models (and
                                                                         TGI's /info, vLLM's /version)
  identity.shapes  {compiled: [[batch, seq], ...], max_length, prompt_tokens: {p50, p99, max},
                    output_tokens: {p50, p99, max}}                      what was served and sent
  identity.server  {software, stack, backend, device, headers: {server, ...}, models_listed: [...]}
  identity.host    {declared_instance, beside_server, cpu_model, cpus, gpus: [...], neuron_devices,
                    ec2_instance_type}                                   detected only when the server is on
                                                                         this machine (loopback URL)

Pure: no I/O (chipswap.bench.host detects the machine; the clients probe the server; the config digest and
the backend devices are chipswap.compile.identity). May not: read files,
open sockets, import torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chipswap.datafile import strict_int
from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

MAX_TEXT = 200
MAX_LIST = 64
# A measured figure may stand for the workload's model when the parameter counts agree within this share
# (a task head or a tied embedding moves the count by a few percent, another model by far more).
PARAMETER_TOLERANCE = 0.10
# instance kinds of the catalog -> the device a server on it must use for the instance's figure
KIND_DEVICE = {"gpu": "gpu", "inferentia": "neuron", "trainium": "neuron"}
KIND_WORDS = {"gpu": "an NVIDIA GPU", "inferentia": "a Neuron device", "trainium": "a Neuron device"}
# the first word of a server's self-reported device, lower case -> the device family it names
DEVICE_FAMILY = {
    "cpu": "cpu",
    "gpu": "gpu",
    "cuda": "gpu",
    "nvidia": "gpu",
    "neuron": "neuron",
    "neuroncore": "neuron",
    "inferentia": "neuron",
    "trainium": "neuron",
}
_SUFFIXES = ("instruct", "chat", "hf", "it", "base")  # name parts that do not change the weights' shape


def normalize_name(name: str) -> str:
    """A model name for comparison: the last path part (no "org/"), lower case, letters and digits only."""
    last = name.strip().rstrip("/").split("/")[-1].lower()
    return re.sub(r"[^a-z0-9]", "", last)


def names_match(a: str, b: str) -> bool:
    """ "llama-3-8b" matches "meta-llama/Meta-Llama-3-8B-Instruct"; "bert-base" does not match
    "tiny-distilbert"."""
    x, y = normalize_name(a), normalize_name(b)
    if not x or not y:
        return False
    if x == y:
        return True
    short, long_ = sorted((x, y), key=len)
    if len(short) >= 6 and short in long_:  # "llama" alone is no model: "llama" in "llama370b" does not count
        return True
    for suffix in _SUFFIXES:  # "bert-base" vs "bert": the same weights named two ways
        x2, y2 = x.removesuffix(suffix), y.removesuffix(suffix)
        if x2 and y2 and (x2 == y2):
            return True
    return False


def stack_guess(owned_by: str | None, software: str | None, device: str | None) -> str | None:
    """The serving-stack id (docs: /work stacks table) a server's own words point to, or None."""
    words = " ".join(w for w in (owned_by, software) if w).lower()
    neuron = device == "neuron"
    if "chipswap" in words:
        return None  # chipswap serve is not one of the LLM stacks
    if "vllm" in words:
        return "nxdi-vllm" if neuron else "vllm"
    if "text-generation-inference" in words or "tgi" in words:
        return "nxdi-tgi" if neuron else "tgi"
    if "tensorrt" in words or "trtllm" in words or "trt-llm" in words:
        return "trtllm"
    return None


@dataclass(frozen=True)
class BenchIdentity:
    """The identity block of a bench file, validated."""

    model_name: str | None = None
    model_root: str | None = None  # vLLM's "root": the checkpoint the served name stands for
    parameters: int | None = None
    config_sha256: str | None = None
    dtype: str | None = None
    compiled_shapes: tuple[tuple[int, int], ...] = ()
    max_length: int | None = None
    prompt_max: int | None = None
    prompt_p99: float | None = None
    software: str | None = None
    stack: str | None = None
    backend: str | None = None
    device: str | None = None  # what the server says it computes on: cpu, gpu, neuron
    declared_instance: str | None = None
    beside_server: bool = False
    cpu_model: str | None = None
    cpus: int | None = None
    gpus: tuple[str, ...] = ()
    neuron_devices: int | None = None
    ec2_instance_type: str | None = None

    def host_text(self) -> str:
        """What was detected beside the server, in words ("CPU Xeon x 2, no GPU, no Neuron device")."""
        if not self.beside_server:
            return "not detected (the server is not on the bench's machine)"
        parts = [f"CPU {self.cpu_model or '?'} x {self.cpus or '?'}"]
        parts.append(f"GPU {', '.join(self.gpus)}" if self.gpus else "no GPU")
        n = self.neuron_devices or 0
        parts.append(f"{n} Neuron device{'s' if n != 1 else ''}" if n else "no Neuron device")
        if self.ec2_instance_type:
            parts.append(f"EC2 {self.ec2_instance_type}")
        return ", ".join(parts)


def _text(v: Any, where: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > MAX_TEXT:
        raise ChipswapError(
            f"{where} must be a short string, got {one_line(repr(v), 60)}; rerun chipswap bench"
        )
    return one_line(v, MAX_TEXT)


def _int(v: Any, where: str, hi: int) -> int | None:
    return None if v is None else strict_int(v, where, lo=0, hi=hi)


def _num(v: Any, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 10_000_000:
        raise ChipswapError(f"{where} must be a number, got {one_line(repr(v), 60)}; rerun chipswap bench")
    return float(v)


def _block(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    v = doc.get(key)
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise ChipswapError(f"{where}.{key} must be an object; rerun chipswap bench")
    return v


def parse_identity(data: Any, source: str) -> BenchIdentity:
    """Validate a file's ``identity`` block; one error line naming the file and field."""
    where = f"bench results {source}: identity"
    if not isinstance(data, Mapping):
        raise ChipswapError(f"{where} must be an object; rerun chipswap bench")
    m = _block(data, "model", where)
    sh = _block(data, "shapes", where)
    sv = _block(data, "server", where)
    h = _block(data, "host", where)
    shapes = sh.get("compiled") or []
    if not isinstance(shapes, list) or len(shapes) > 10_000:
        raise ChipswapError(f"{where}.shapes.compiled must be a list of [batch, seq] pairs")
    compiled = []
    for i, s in enumerate(shapes):
        if not isinstance(s, list) or len(s) != 2:
            raise ChipswapError(f"{where}.shapes.compiled[{i}] must be [batch, seq]")
        compiled.append(
            (
                strict_int(s[0], f"{where}.shapes.compiled[{i}]", lo=1, hi=1_000_000),
                strict_int(s[1], f"{where}.shapes.compiled[{i}]", lo=1, hi=10_000_000),
            )
        )
    prompt = _block(sh, "prompt_tokens", f"{where}.shapes")
    gpus = h.get("gpus") or []
    if not isinstance(gpus, list) or len(gpus) > MAX_LIST:
        raise ChipswapError(f"{where}.host.gpus must be a list of GPU names")
    beside = h.get("beside_server", False)
    if not isinstance(beside, bool):
        raise ChipswapError(f"{where}.host.beside_server must be true or false")
    digest = _text(m.get("config_sha256"), f"{where}.model.config_sha256")
    if digest is not None and not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ChipswapError(f"{where}.model.config_sha256 must be 64 hex digits")
    return BenchIdentity(
        model_name=_text(m.get("name"), f"{where}.model.name"),
        model_root=_text(m.get("root"), f"{where}.model.root"),
        parameters=_int(m.get("parameters"), f"{where}.model.parameters", 10**14),
        config_sha256=digest,
        dtype=_text(m.get("dtype"), f"{where}.model.dtype"),
        compiled_shapes=tuple(compiled),
        max_length=_int(sh.get("max_length"), f"{where}.shapes.max_length", 10_000_000),
        prompt_max=_int(prompt.get("max"), f"{where}.shapes.prompt_tokens.max", 10_000_000),
        prompt_p99=_num(prompt.get("p99"), f"{where}.shapes.prompt_tokens.p99"),
        software=_text(sv.get("software"), f"{where}.server.software"),
        stack=_text(sv.get("stack"), f"{where}.server.stack"),
        backend=_text(sv.get("backend"), f"{where}.server.backend"),
        device=_text(sv.get("device"), f"{where}.server.device"),
        declared_instance=_text(h.get("declared_instance"), f"{where}.host.declared_instance"),
        beside_server=beside,
        cpu_model=_text(h.get("cpu_model"), f"{where}.host.cpu_model"),
        cpus=_int(h.get("cpus"), f"{where}.host.cpus", 100_000),
        gpus=tuple(_text(g, f"{where}.host.gpus") or "" for g in gpus),
        neuron_devices=_int(h.get("neuron_devices"), f"{where}.host.neuron_devices", 10_000),
        ec2_instance_type=_text(h.get("ec2_instance_type"), f"{where}.host.ec2_instance_type"),
    )


def _millions(n: int) -> str:
    return f"{n / 1e6:,.1f}M" if n >= 1e5 else f"{n:,}"


def model_mismatch(
    ident: BenchIdentity, name: str | None, parameters: int | None, digest: str | None = None
) -> str | None:
    """Why the benched model is not the workload's (None: it is, as far as both sides tell).

    The same config digest is the same model; otherwise parameter counts decide when both are known (within
    PARAMETER_TOLERANCE), else the names. A bench that names no model cannot stand for one."""
    if name is None:
        return None  # the workload names no model: nothing to compare with
    if ident.config_sha256 and digest and ident.config_sha256 == digest:
        return None
    shown = f"{ident.model_name}" + (
        f" ({_millions(ident.parameters)} parameters)" if ident.parameters else ""
    )
    want = f"{name}" + (f" ({_millions(parameters)} parameters)" if parameters else "")
    if ident.model_name is None and ident.parameters is None:
        return f"the bench does not say which model it measured; the workload's model is {want}"
    if ident.parameters and parameters:
        if abs(ident.parameters - parameters) > PARAMETER_TOLERANCE * parameters:
            return f"the bench measured {shown}, but the workload's model is {want}"
        return None
    names = [n for n in (ident.model_name, ident.model_root) if n]
    if names and not any(names_match(n, name) for n in names):
        return f"the bench measured {shown}, but the workload's model is {want}"
    return None


def device_family(device: str | None) -> str | None:
    """The device family (cpu, gpu or neuron) a server's own word for its device names; None: unknown."""
    m = re.match(r"[a-z]+", (device or "").strip().lower())
    return DEVICE_FAMILY.get(m.group(0)) if m else None


def host_mismatch(
    ident: BenchIdentity, instance: str, kind: str, accelerator: str, accelerator_count: int
) -> str | None:
    """Why the machine the bench saw cannot be the declared instance (None: it can, or nothing was seen).

    kind / accelerator: the catalog's instance kind ("gpu", "inferentia", "trainium") and chip name."""
    need = KIND_DEVICE.get(kind)
    have = device_family(ident.device)
    if have == "cpu" and need is not None:
        return (
            f"the server runs the model on the CPU (backend {ident.backend or '?'}), so its figure is not "
            f"{instance}'s ({accelerator})"
        )
    if have is not None and need is not None and have != need:
        return (
            f"the server reports device {ident.device!r} (backend {ident.backend or '?'}), but {instance} "
            f"runs on {accelerator}, {KIND_WORDS[kind]}, so its figure is not {instance}'s"
        )
    if not ident.beside_server:
        return None
    if ident.ec2_instance_type and ident.ec2_instance_type != instance:
        return f"the bench ran on an EC2 {ident.ec2_instance_type}, labelled {instance}"
    seen = ident.host_text()
    if need == "neuron" and not ident.neuron_devices:
        return f"{instance} has {accelerator} Neuron devices, but the server's machine has none ({seen})"
    if need == "gpu":
        if not ident.gpus:
            return f"{instance} has an NVIDIA {accelerator}, but the server's machine has no GPU ({seen})"
        if not any(accelerator.lower() in g.lower() for g in ident.gpus):
            has = ", ".join(ident.gpus)
            return f"{instance} has an NVIDIA {accelerator}, but the server's machine has {has}"
    if need == "neuron" and ident.neuron_devices and ident.neuron_devices < max(1, accelerator_count):
        return (
            f"{instance} has {accelerator_count} {accelerator} devices, but the server's machine has "
            f"{ident.neuron_devices}"
        )
    return None


def shape_note(ident: BenchIdentity, prompt_p99: float | None) -> str | None:
    """A note when the bench sent shorter prompts than the workload's (its figure is then optimistic)."""
    sent = ident.prompt_max
    if sent is None or prompt_p99 is None or sent >= prompt_p99:
        return None
    return (
        f"the bench sent prompts of at most {sent:,} tokens; the workload's p99 prompt is"
        f" {prompt_p99:,.0f}, so "
        "the measured figure may be optimistic"
    )


def _pcts(values: Any) -> dict[str, float | int | None]:
    vals = sorted(int(v) for v in values)
    if not vals:
        return {"p50": None, "p99": None, "max": None}

    def at(q: float) -> int:
        return vals[min(len(vals) - 1, int(q * (len(vals) - 1) + 0.5))]

    return {"p50": at(0.5), "p99": at(0.99), "max": vals[-1]}


def build_identity(
    *,
    info: Mapping[str, Any] | None,
    headers: Mapping[str, str],
    declared_instance: str | None,
    host: Mapping[str, Any] | None,
    prompt_tokens: Any = (),
    output_tokens: Any = (),
    max_length: int | None = None,
) -> dict[str, Any]:
    """The identity block of a results file from the probe's answer (``info``: /v1/models and friends), the
    answer's headers, the declared instance and the detected host (None: the server is elsewhere)."""
    info = dict(info or {})

    def text(k: str, n: int = MAX_TEXT) -> str | None:
        v = info.get(k)
        return one_line(v, n) if isinstance(v, str) and v else None

    def count(k: str) -> int | None:
        v = info.get(k)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

    shapes = info.get("shapes")
    compiled = [
        [int(s[0]), int(s[1])]
        for s in (shapes if isinstance(shapes, list) else [])[:10_000]
        if isinstance(s, list) and len(s) == 2 and all(isinstance(x, int) and x > 0 for x in s)
    ]
    software = text("software") or (headers.get("server") if headers else None)
    device = text("device", 20)
    digest = text("config_sha256", 64)
    return {
        "model": {
            "name": text("id"),
            "root": text("root"),
            "parameters": count("parameters"),
            "config_sha256": digest if digest and re.fullmatch(r"[0-9a-f]{64}", digest) else None,
            "dtype": text("dtype", 40),
            "source": "GET /v1/models" + (" and the server's /version or /info" if text("owned_by") else ""),
        },
        "shapes": {
            "compiled": compiled,
            "max_length": count("max_length") or count("max_model_len") or max_length,
            "prompt_tokens": _pcts(prompt_tokens),
            "output_tokens": _pcts(output_tokens),
        },
        "server": {
            "software": software,
            "stack": stack_guess(text("owned_by"), software, device),
            "backend": text("backend", 40),
            "device": device,
            "headers": dict(list((headers or {}).items())[:8]),
            "models_listed": [one_line(str(m), 120) for m in (info.get("listed_models") or [])[:20]],
        },
        "host": {
            "declared_instance": declared_instance,
            "beside_server": host is not None,
            **(dict(host) if host is not None else {}),
        },
    }
