"""Readiness check orchestrator: model spec + shapes -> capture -> Neuron rules -> ReadinessReport.

    report = run_check("distilbert-base", ["input_ids=1x128:int64", "attention_mask=1x128:int64"])
    report.exit_code        # 0 ready, 1 blockers
    report.to_analyze_json()  # torch_neuronx.analyze keys + findings

Rules live in data/neuron_rules/sdk-<version>.toml (+ ops.toml); the engine is chipswap.core.rules (pure).
"""

from __future__ import annotations

import json
import re
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

from chipswap.core.rules import TARGETS, Assessment, Finding, Inventory, RuleSet, evaluate, ruleset_from_dicts
from chipswap.errors import ChipswapError, closest
from chipswap.planfile import PLAN_SCHEMA as PLAN_SCHEMA

_SHAPE = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(\d+(?:\s*[x×]\s*\d+)*)\s*(?::\s*([A-Za-z0-9_]+))?\s*$"
)
_DTYPES = {
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
}
_DTYPE_ALIASES = {
    "long": "int64",
    "int": "int32",
    "float": "float32",
    "half": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp16": "float16",
    "double": "float64",
    "i64": "int64",
    "i32": "int32",
}
# weightless (meta) capture above this many parameters: no weight memory, no eager run
META_PARAMS = 300_000_000

InputSpec = dict[str, tuple[tuple[int, ...], str]]


# ---------------------------------------------------------------------------------------------- rules on disk


def sdk_versions() -> list[str]:
    d = resources.files("chipswap.data") / "neuron_rules"
    return sorted(p.name[4:-5] for p in d.iterdir() if p.name.startswith("sdk-") and p.name.endswith(".toml"))


def load_ruleset(sdk: str = "2.32") -> RuleSet:
    d = resources.files("chipswap.data") / "neuron_rules"
    f = d / f"sdk-{sdk}.toml"
    if not f.is_file():
        hint = closest(sdk, sdk_versions())
        raise ChipswapError(
            f"no Neuron rules for SDK {sdk!r}"
            + (f"; did you mean {', '.join(hint)}?" if hint else "")
            + f"; shipped: {', '.join(sdk_versions())}"
        )
    rules = tomllib.loads(f.read_text())
    ops = tomllib.loads((d / rules.get("op_tables", "ops.toml")).read_text())
    return ruleset_from_dicts(rules, ops)


# ---------------------------------------------------------------------------------------------- shapes


def parse_shape(text: str) -> tuple[str, tuple[int, ...], str]:
    """'input_ids=1x128:int64' -> ('input_ids', (1, 128), 'int64'). dtype defaults to int64."""
    m = _SHAPE.match(text or "")
    if not m:
        raise ChipswapError(
            f"cannot parse --shape {text!r}; use NAME=DIMxDIM[:DTYPE], e.g. input_ids=1x128:int64"
        )
    name, dims_s, dt = m.group(1), m.group(2), (m.group(3) or "int64").lower()
    dims = tuple(int(x) for x in re.split(r"\s*[x×]\s*", dims_s))
    if any(d < 1 for d in dims):
        raise ChipswapError(f"every dimension must be >= 1 in --shape {text!r}; e.g. input_ids=1x128:int64")
    dt = _DTYPE_ALIASES.get(dt, dt)
    if dt not in _DTYPES:
        hint = closest(dt, _DTYPES)
        raise ChipswapError(
            f"unknown dtype {dt!r} in --shape {text!r}"
            + (f"; did you mean {', '.join(hint)}?" if hint else f"; one of {', '.join(sorted(_DTYPES))}")
        )
    return name, dims, dt


def specs_from_flags(flags: Sequence[str]) -> list[InputSpec]:
    """Repeated --shape flags -> shape sets; the k-th flag for a name goes to the k-th set."""
    sets: list[InputSpec] = []
    seen: dict[str, int] = {}
    for text in flags:
        name, dims, dt = parse_shape(text)
        k = seen.get(name, 0)
        seen[name] = k + 1
        while len(sets) <= k:
            sets.append({})
        sets[k][name] = (dims, dt)
    if sets and any(set(s) != set(sets[0]) for s in sets):
        raise ChipswapError(
            "each repeated --shape set must name the same inputs; got "
            + " | ".join(",".join(s) for s in sets)
            + "; repeat every input once per shape set"
        )
    return sets


def load_plan(path: str | Path) -> tuple[list[int], list[int]]:
    """(batch_buckets, sequence_buckets) from a chipswap.shapeplan/1 JSON file (other keys ignored)."""
    from chipswap.planfile import load_plan as read_plan

    plan = read_plan(path, default_batch=(1,))
    return list(plan.batch_buckets), list(plan.sequence_buckets)


def default_specs(ref: Any, batches: Sequence[int], seqs: Sequence[int]) -> list[InputSpec]:
    from chipswap import models

    names = models.input_names(ref)
    out: list[InputSpec] = []
    for b in batches:
        if names == ["pixel_values"]:
            c = int(ref.config.get("num_channels", 3))
            s = int(ref.config.get("image_size", 224))
            out.append({"pixel_values": ((b, c, s, s), "float32")})
            continue
        for s in seqs:
            out.append({n: ((b, s), "int64") for n in names})
    return out


def _estimate_params(cfg: Mapping[str, Any]) -> int:
    h = int(cfg.get("hidden_size") or 0)
    n_layers = int(cfg.get("num_hidden_layers") or 0)
    inter = int(cfg.get("intermediate_size") or 4 * h)
    vocab = int(cfg.get("vocab_size") or 0)
    return vocab * h + n_layers * (4 * h * h + 3 * h * inter)


# ---------------------------------------------------------------------------------------------- report


@dataclass
class ReadinessReport:
    model: str
    model_kind: str
    task: str | None
    sdk: str
    target: str
    ruleset: RuleSet
    inventory: Inventory
    assessment: Assessment
    weightless: bool
    wall_s: float
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.assessment.findings

    @property
    def compiler_label(self) -> str:
        """Compiler and framework of the target: Inf1 uses neuron-cc / torch-neuron, the rest neuronx-cc."""
        if self.target == "inf1":
            return "neuron-cc, torch-neuron (Inf1; version not pinned by these rules)"
        return f"neuronx-cc {self.ruleset.neuronx_cc}, torch-neuronx {self.ruleset.torch_neuronx}"

    @property
    def blockers(self) -> tuple[Finding, ...]:
        return self.assessment.blockers

    @property
    def support_percentage(self) -> Decimal:
        return self.assessment.support_percentage

    @property
    def exit_code(self) -> int:
        return 1 if self.blockers else 0

    @property
    def verdict(self) -> str:
        if self.blockers:
            return "blocked"
        if any(f.severity in ("slow", "warn") for f in self.findings):
            return "ready with warnings"
        return "ready"

    def findings_json(self) -> list[dict[str, Any]]:
        return [
            {
                "rule": f.rule,
                "severity": f.severity,
                "title": f.title,
                "op": f.op,
                "dtype": f.dtype,
                "module_path": f.module_path,
                "location": f.location,
                "code": f.code,
                "count": f.count,
                "other_locations": list(f.locations),
                "message": f.message,
                "fix": f.fix,
                "evidence": f.evidence,
                "source": f.source,
                "as_of": f.as_of,
            }
            for f in self.findings
        ]

    def to_analyze_json(self) -> dict[str, Any]:
        """Same keys as torch_neuronx.analyze, plus the versions assumed and chipswap's findings."""
        a = self.assessment
        unsupported = [
            {
                "kind": op.kind,
                "failureAt": st.failure_at or "Lowering to HLO",
                "call": op.stack or (op.location or ""),
                "opGraph": op.signature,
                "reason": st.basis,
                "module_path": op.module_path,
                "location": op.location,
            }
            for op, st in a.statuses
            if st.status == "unsupported"
        ]
        return {
            "torch_neuronx_version": f"{self.ruleset.torch_neuronx} (assumed; not installed)",
            "neuronx_cc_version": f"{self.ruleset.neuronx_cc} (assumed; not installed)",
            "support_percentage": f"{a.support_percentage}%",
            "supported_operators": a.counts("supported"),
            "unsupported_operators": unsupported,
            "unknown_operators": a.counts("unknown"),
            "excluded_operators": a.counts("excluded"),
            "versions": dict(self.versions),
            "model": self.model,
            "model_kind": self.model_kind,
            "task": self.task,
            "sdk": self.sdk,
            "target": self.target,
            "shapes": list(self.inventory.shapes),
            "capture": self.inventory.method,
            "weightless": self.weightless,
            "exit_code": self.exit_code,
            "verdict": self.verdict,
            "findings": self.findings_json(),
            "capture_issues": [
                {"kind": i.kind, "message": i.message, "location": i.location, "code": i.code}
                for i in self.inventory.issues
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_analyze_json(), indent=2, sort_keys=False) + "\n"

    def to_markdown(self) -> str:
        a = self.assessment
        n = {s: sum(a.counts(s).values()) for s in ("supported", "unsupported", "unknown")}
        lines = [
            f"# Neuron readiness: {self.model}",
            "",
            f"- Verdict: **{self.verdict}** (exit {self.exit_code})",
            f"- Target: {self.target}, Neuron SDK {self.sdk} ({self.compiler_label}; "
            f"assumed, rules as of {self.ruleset.as_of})",
            f"- Shapes: {'; '.join(self.inventory.shapes) or '-'}",
            f"- Capture: {self.inventory.method}"
            + (" on the meta device (no weights)" if self.weightless else ""),
            f"- Ops: {n['supported']} supported, {n['unsupported']} unsupported, {n['unknown']} unknown "
            f"(support {a.support_percentage}%; unknown counts as not supported)",
            "",
        ]
        if self.findings:
            lines += [
                "| severity | rule | op | dtype | module | file:line | count | fix |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for f in self.findings:
                cells = [
                    f.severity,
                    f.rule,
                    f.op,
                    f.dtype,
                    f.module_path or "-",
                    f.location or "-",
                    str(f.count),
                    f.fix,
                ]
                lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
            lines.append("")
            lines.append("## Evidence")
            lines.append("")
            for rid in dict.fromkeys(f.rule for f in self.findings):
                f = next(x for x in self.findings if x.rule == rid)
                lines.append(f"- **{rid}** ({f.title}): {f.evidence} Source: {f.source} (as of {f.as_of})")
            lines.append("")
        else:
            lines += ["No findings.", ""]
        unknown = a.counts("unknown")
        if unknown:
            lines.append("Unknown ops: " + ", ".join(f"{k} x{v}" for k, v in unknown.items()))
            lines.append("")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- run


def _coerce_specs(ref: Any, shapes: Any) -> list[InputSpec] | None:
    if shapes is None:
        return None
    if isinstance(shapes, Path) or (isinstance(shapes, str) and "=" not in shapes):
        # a plan file, read by content whatever its name (plan.txt, plan, plan128.json)
        b, s = load_plan(shapes)
        return default_specs(ref, b, s)
    if isinstance(shapes, Mapping):
        if "sequence_buckets" in shapes or "batch_buckets" in shapes:
            b = sorted(set(shapes.get("batch_buckets") or [1]))
            s = sorted(set(shapes.get("sequence_buckets") or [128]))
            return default_specs(ref, b, s)
        return [dict(shapes)]  # one InputSpec
    shapes = list(shapes)
    if not shapes:
        return None
    if all(isinstance(x, str) for x in shapes):
        return specs_from_flags(shapes)
    return [dict(x) for x in shapes]


def _validate_specs(ref: Any, specs: list[InputSpec], names: list[str]) -> None:
    for spec in specs:
        unknown = [n for n in spec if names and n not in names]
        if unknown:
            raise ChipswapError(
                f"unknown input name(s) {', '.join(unknown)} for {ref.name}; "
                f"its inputs are {', '.join(names)}"
            )
        max_pos = ref.config.get("max_position_embeddings")
        for n, (dims, _dt) in spec.items():
            if n in ("input_ids", "attention_mask", "token_type_ids") and max_pos and len(dims) >= 2:
                if dims[1] > int(max_pos):
                    raise ChipswapError(
                        f"sequence length {dims[1]} in {n} exceeds {ref.name}'s "
                        f"max_position_embeddings {max_pos}; "
                        "use a shorter sequence bucket"
                    )


def run_check(
    spec_or_ref: Any,
    shapes: Any = None,
    *,
    sdk: str = "2.32",
    target: str = "inf2",
    task: str | None = None,
    plan: str | Path | None = None,
    weightless: bool | None = None,
) -> ReadinessReport:
    """Check one model against the Neuron rules for ``sdk`` and ``target``.

    shapes: None (batch 1 x seq 128, or the factory's example inputs), a list of --shape strings, a list of
    {name: (dims, dtype)} dicts, or a plan dict / plan file path with sequence_buckets and batch_buckets.
    """
    t0 = time.perf_counter()
    from chipswap import models
    from chipswap.capture import capture_exported, capture_module

    if target not in TARGETS:
        hint = closest(target, TARGETS)
        raise ChipswapError(
            f"unknown target {target!r}"
            + (f"; did you mean {', '.join(hint)}?" if hint else "")
            + f"; one of {', '.join(TARGETS)}"
        )
    ruleset = load_ruleset(sdk)
    ref = (
        spec_or_ref
        if isinstance(spec_or_ref, models.ModelRef)
        else models.resolve_model(str(spec_or_ref), task=task)
    )
    task = task or ref.task
    specs = _coerce_specs(ref, plan) if plan is not None else None
    if specs is None:
        specs = _coerce_specs(ref, shapes)

    import torch
    import transformers

    versions = {
        "neuron_sdk": ruleset.sdk,
        "neuronx_cc": ruleset.neuronx_cc,
        "torch_neuronx": ruleset.torch_neuronx,
        "rules_as_of": ruleset.as_of,
        "rules_source": ruleset.source,
        "torch (capture)": torch.__version__,
        "transformers (capture)": transformers.__version__,
    }
    meta = False
    if ref.kind == "exported":
        ep = models.load_exported(ref)
        shape_strs = tuple(
            ",".join(f"{k}={'x'.join(map(str, d))}:{dt}" for k, (d, dt) in s.items()) for s in (specs or [])
        )
        inventory = capture_exported(ep, shapes=shape_strs)
    elif ref.kind == "factory":
        module, example = models.call_factory(ref)
        if specs is None:
            if not example:
                raise ChipswapError(
                    f"factory {ref.source} gives no example inputs; "
                    "pass --shape NAME=DIMS:DTYPE for each input"
                )
            specs = [{k: (tuple(v.shape), str(v.dtype).replace("torch.", "")) for k, v in example.items()}]
        names = models.input_names(ref)
        _validate_specs(ref, specs, names)
        inventory = capture_module(module, specs, strip=None, vocab_size=None)
    else:
        if specs is None:
            seq = min(128, int(ref.config.get("max_position_embeddings") or 128))
            specs = default_specs(ref, [1], [seq])
        names = models.input_names(ref, task=task)
        _validate_specs(ref, specs, names)
        meta = weightless if weightless is not None else _estimate_params(ref.config) > META_PARAMS
        module = models.build_model(ref, meta=meta, task=task)
        inventory = capture_module(
            module,
            specs,
            device="meta" if meta else "cpu",
            vocab_size=ref.config.get("vocab_size"),
            strip=models.WRAPPED_ATTR + ".",
            run_eager=not meta,
        )
    assessment = evaluate(inventory, ruleset, target)
    return ReadinessReport(
        model=ref.name,
        model_kind=ref.kind,
        task=task,
        sdk=ruleset.sdk,
        target=target,
        ruleset=ruleset,
        inventory=inventory,
        assessment=assessment,
        weightless=meta,
        wall_s=time.perf_counter() - t0,
        versions=versions,
    )
