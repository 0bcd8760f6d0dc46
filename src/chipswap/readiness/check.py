"""Readiness check orchestrator: model spec + shapes -> capture -> Neuron rules -> ReadinessReport.

    report = run_check("distilbert-base", ["input_ids=1x128:int64", "attention_mask=1x128:int64"])
    report.exit_code        # 0 ready, 1 blockers
    report.to_analyze_json()  # torch_neuronx.analyze keys + findings

    run_check("llama-3-8b", training=True)      # + backward pass and optimizer step
    run_check("mypkg.models:jax_entry")         # a JAX/Flax entry point returning (fn, args): lowered to HLO

Rules live in data/neuron_rules/sdk-<version>.toml (+ ops.toml for aten ops, hlo.toml for HLO opcodes); the
engine is chipswap.readiness.rules (pure). This module picks the inputs, the capture path (PyTorch
preset/config, factory, .pt2, JAX) and assembles the report; it writes no files and prints nothing (a caller's
`progress` callback hears each stage). Every failure that is not a readiness finding leaves as a one-line
ChipswapError (exit 2), never as exit 1 or a traceback.
"""

from __future__ import annotations

import json
import sys
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError, closest
from chipswap.readiness.inputspec import MAX_DIM as MAX_DIM
from chipswap.readiness.inputspec import InputSpec as InputSpec
from chipswap.readiness.inputspec import default_seq, default_specs, specs_from_flags
from chipswap.readiness.inputspec import load_plan as load_plan
from chipswap.readiness.inputspec import parse_shape as parse_shape
from chipswap.readiness.progress import exporting, reporting
from chipswap.readiness.progress import stage as _stage
from chipswap.readiness.rules import (
    TARGETS,
    Assessment,
    Finding,
    Inventory,
    RuleSet,
    evaluate,
    ruleset_from_dicts,
)
from chipswap.shapes.planfile import PLAN_SCHEMA as PLAN_SCHEMA
from chipswap.textsafe import md_text, one_line

# weightless (meta) capture above this many parameters: no weight memory, no eager run
META_PARAMS = 300_000_000
# ... or when one eager forward would need more than this for attention scores (batch x heads x seq^2 floats)
META_ACTIVATION_BYTES = 2 << 30
# ---------------------------------------------------------------------------------------------- rules on disk


def sdk_versions() -> list[str]:
    d = resources.files("chipswap.data") / "neuron_rules"
    return sorted(p.name[4:-5] for p in d.iterdir() if p.name.startswith("sdk-") and p.name.endswith(".toml"))


@lru_cache(maxsize=8)
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
    hlo = tomllib.loads((d / rules["hlo_tables"]).read_text()) if rules.get("hlo_tables") else None
    return ruleset_from_dicts(rules, ops, hlo)


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
    framework: str = "pytorch"  # "pytorch" or "jax"
    training: bool = False  # backward and optimizer ops checked too
    checked: str = "the full model"  # what was exported (a representative copy of repeated layers, ...)
    notes: tuple[str, ...] = ()  # what the inventory leaves out and why

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
            "framework": self.framework,
            "training": self.training,
            "checked": self.checked,
            "notes": list(self.notes),
            "phases": self.phase_counts(),
            "weightless": self.weightless,
            "exit_code": self.exit_code,
            "verdict": self.verdict,
            "findings": self.findings_json(),
            "capture_issues": [
                {"kind": i.kind, "message": i.message, "location": i.location, "code": i.code}
                for i in self.inventory.issues
            ],
        }

    def phase_counts(self) -> dict[str, int]:
        """Counted op nodes per phase (forward; backward and optimizer with --training)."""
        out: dict[str, int] = {}
        for op, st in self.assessment.statuses:
            if st.status != "excluded":
                out[op.phase] = out.get(op.phase, 0) + 1
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_analyze_json(), indent=2, sort_keys=False) + "\n"

    def to_markdown(self) -> str:
        a = self.assessment
        n = {s: sum(a.counts(s).values()) for s in ("supported", "unsupported", "unknown")}
        lines = [
            f"# Neuron readiness: {md_text(self.model, 120)}",
            "",
            f"- Verdict: **{self.verdict}** (exit {self.exit_code})",
            f"- Target: {self.target}, Neuron SDK {self.sdk} ({self.compiler_label}; "
            f"assumed, rules as of {self.ruleset.as_of})",
            f"- Shapes: {'; '.join(self.inventory.shapes) or '-'}",
            f"- Capture: {md_text(self.inventory.method, 400)}"
            + (" on the meta device (no weights)" if self.weightless else ""),
            f"- Checked: {md_text(self.checked, 300)}"
            + ("; training step (forward, backward, AdamW update)" if self.training else ""),
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
                lines.append("| " + " | ".join(md_text(c, 400) for c in cells) + " |")
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
        for note in self.notes:
            lines.append(f"Note: {md_text(note, 600)}")
            lines.append("")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- run


def _coerce_specs(ref: Any, shapes: Any, task: str | None = None) -> list[InputSpec] | None:
    if shapes is None:
        return None
    if isinstance(shapes, Path) or (isinstance(shapes, str) and "=" not in shapes):
        # a plan file, read by content whatever its name (plan.txt, plan, plan128.json)
        b, s = load_plan(shapes)
        return default_specs(ref, b, s, task=task)
    if isinstance(shapes, Mapping):
        if "sequence_buckets" in shapes or "batch_buckets" in shapes:
            b = sorted(set(shapes.get("batch_buckets") or [1]))
            s = sorted(set(shapes.get("sequence_buckets") or [128]))
            return default_specs(ref, b, s, task=task)
        return [dict(shapes)]  # one InputSpec
    shapes = list(shapes)
    if not shapes:
        return None
    if all(isinstance(x, str) for x in shapes):
        return specs_from_flags(shapes)
    return [dict(x) for x in shapes]


def _validate_specs(ref: Any, specs: list[InputSpec], names: Sequence[str]) -> None:
    from chipswap.models import check_input_kinds

    for spec in specs:
        unknown = [n for n in spec if names and n not in names]
        if unknown:
            raise ChipswapError(
                f"unknown input name(s) {', '.join(unknown)} for {ref.name}; "
                f"its inputs are {', '.join(names)}"
            )
        max_pos = ref.config.get("max_position_embeddings")
        for n, (dims, dt) in spec.items():
            if any(not isinstance(d, int) or isinstance(d, bool) or d < 1 or d > MAX_DIM for d in dims):
                raise ChipswapError(
                    f"input {n} has a dimension outside 1..{MAX_DIM:,}: {dims}; use a smaller shape"
                )
            if ref.kind in ("preset", "hf-config"):
                check_input_kinds(n, dims, dt, ref.name)
            if n in ("input_ids", "attention_mask", "token_type_ids") and max_pos and len(dims) >= 2:
                if dims[1] > int(max_pos):
                    raise ChipswapError(
                        f"sequence length {dims[1]} in {n} exceeds {ref.name}'s "
                        f"max_position_embeddings {max_pos}; "
                        "use a shorter sequence bucket"
                    )


def _with_labels(info: Any, spec: InputSpec) -> InputSpec:
    """A training shape set: the forward's inputs plus labels shaped for the head (tokens or classes)."""
    if not info.labels or "labels" in spec or "labels" not in info.accepted:
        return dict(spec)
    first = next(iter(spec.values()))[0]
    batch = first[0]
    if info.labels == "class":
        return {**spec, "labels": ((batch,), "int64")}
    text = spec.get("decoder_input_ids") or spec.get("input_ids")
    if text is None:
        return dict(spec)
    return {**spec, "labels": (tuple(text[0]), "int64")}


def _needs_meta(ref: Any, params: int, specs: Sequence[InputSpec]) -> bool:
    """Weightless capture for big weights, or when one eager forward would need GiBs for attention scores."""
    if params > META_PARAMS:
        return True
    heads = (
        int(ref.config.get("num_attention_heads") or 1)
        if not isinstance(ref.config.get("num_attention_heads"), list)
        else 1
    )
    for spec in specs:
        for dims, _ in spec.values():
            if len(dims) == 2 and dims[0] * heads * dims[1] * dims[1] * 4 > META_ACTIVATION_BYTES:
                return True
    return False


def run_check(
    spec_or_ref: Any,
    shapes: Any = None,
    *,
    sdk: str = "2.32",
    target: str = "inf2",
    task: str | None = None,
    plan: str | Path | None = None,
    weightless: bool | None = None,
    training: bool = False,
    full_model: bool = False,
    trust_pickle: bool = False,
    factory_dirs: Sequence[str | Path] = (),
    trust_native: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ReadinessReport:
    """Check one model against the Neuron rules for ``sdk`` and ``target``.

    shapes: None (batch 1 x seq 128, or the factory's example inputs), a list of --shape strings, a list of
    {name: (dims, dtype)} dicts, or a plan dict / plan file path with sequence_buckets and batch_buckets.
    training: also check the backward pass and an AdamW step (ops that exist only when training).
    full_model: export every layer of a config with many identical layers (default: a 2-layer copy, which has
    the same operators, dtypes and findings).
    trust_pickle / trust_native / factory_dirs: see chipswap.models.resolve_model.
    progress: called with each stage's name as it starts ("resolving the model", "exporting ...").

    Any failure that is not a readiness finding raises ChipswapError (one line; the CLI exits 2).
    """
    t0 = time.perf_counter()
    if target not in TARGETS:
        hint = closest(target, TARGETS)
        raise ChipswapError(
            f"unknown target {one_line(target, 40)!r}"
            + (f"; did you mean {', '.join(hint)}?" if hint else "")
            + f"; one of {', '.join(TARGETS)}"
        )
    ruleset = load_ruleset(sdk)
    try:
        with reporting(progress):
            _stage("resolving the model")
            report = _run(
                spec_or_ref,
                shapes,
                ruleset=ruleset,
                target=target,
                task=task,
                plan=plan,
                weightless=weightless,
                training=training,
                full_model=full_model,
                trust_pickle=trust_pickle,
                factory_dirs=tuple(factory_dirs),
                trust_native=trust_native,
            )
    except (ChipswapError, KeyboardInterrupt):
        raise
    except MemoryError:
        raise ChipswapError(
            "the check ran out of memory; use smaller --shape sizes (or a config above "
            f"{META_PARAMS:,} parameters is checked without weights)"
        ) from None
    except RecursionError:
        raise ChipswapError(
            "the model is nested too deeply to capture (recursion limit); simplify it"
        ) from None
    except Exception as exc:  # noqa: BLE001 - exit 2 with one line, never a traceback or exit 1
        raise ChipswapError(
            f"could not check {one_line(str(spec_or_ref), 80)}: {type(exc).__name__}: "
            f"{one_line(str(exc).splitlines()[0] if str(exc).strip() else '', 200)}; this is not a readiness "
            "finding: fix the input or report it with the command you ran"
        ) from None
    report.wall_s = time.perf_counter() - t0
    return report


def _run(
    spec_or_ref: Any,
    shapes: Any,
    *,
    ruleset: RuleSet,
    target: str,
    task: str | None,
    plan: Any,
    weightless: bool | None,
    training: bool,
    full_model: bool,
    trust_pickle: bool,
    factory_dirs: tuple[Any, ...],
    trust_native: bool = False,
) -> ReadinessReport:
    from chipswap import models
    from chipswap.readiness.capture import capture_exported

    if isinstance(spec_or_ref, models.ModelRef):
        ref = spec_or_ref
        trust = {
            "trust_pickle": ref.trust_pickle or trust_pickle,
            "trust_native": ref.trust_native or trust_native,
        }
        ref = replace(ref, **trust)
        if factory_dirs and not ref.factory_dirs:
            ref = replace(ref, factory_dirs=tuple(str(Path(d).resolve()) for d in factory_dirs))
    else:
        trust = {"trust_pickle": trust_pickle, "trust_native": trust_native}
        ref = models.resolve_model(str(spec_or_ref), task=task, factory_dirs=factory_dirs, **trust)
    task = task or ref.task

    import torch

    versions = {
        "neuron_sdk": ruleset.sdk,
        "neuronx_cc": ruleset.neuronx_cc,
        "torch_neuronx": ruleset.torch_neuronx,
        "rules_as_of": ruleset.as_of,
        "rules_source": ruleset.source,
        "torch (capture)": torch.__version__,
    }
    common = dict(
        model=ref.name,
        model_kind=ref.kind,
        task=task,
        sdk=ruleset.sdk,
        target=target,
        ruleset=ruleset,
        versions=versions,
    )
    asked = plan if plan is not None else shapes  # the shapes to check: --plan's buckets, else --shape
    if ref.kind == "exported":
        if training:
            raise ChipswapError(
                "--training needs the model's code (a preset, config.json or factory), not a saved .pt2 "
                "program: the backward pass is not in the file"
            )
        specs = _coerce_specs(ref, asked)
        _stage("loading the exported program")
        ep = models.load_exported(ref)
        shape_strs = tuple(
            ",".join(f"{k}={'x'.join(map(str, d))}:{dt}" for k, (d, dt) in s.items()) for s in (specs or [])
        )
        inventory = capture_exported(ep, shapes=shape_strs)
        return _report(common, inventory, weightless=False)
    if ref.kind == "factory":
        _stage("building the model (factory)")
        out = models.call_entry(ref)
        if not _is_torch(out):
            return _run_jax(ref, out, common, training=training, shapes=shapes, plan=plan)
        module, example = models.split_factory_output(ref, out)
        return _run_torch_factory(ref, module, example, common, asked=asked, training=training)
    return _run_config(
        ref,
        common,
        task=task,
        asked=asked,
        weightless=weightless,
        training=training,
        full_model=full_model,
    )


def _is_torch(out: Any) -> bool:
    """A PyTorch factory's output, unless it looks like a JAX entry point's (fn, args) with jax loaded."""
    from chipswap.models import is_torch_module

    if is_torch_module(out) or (isinstance(out, tuple) and out and is_torch_module(out[0])):
        return True
    if "jax" not in sys.modules:
        return True  # then split_factory_output explains what a factory must return
    return not (callable(out) or (isinstance(out, tuple) and len(out) > 0 and callable(out[0])))


def _report(common: dict[str, Any], inventory: Any, **kw: Any) -> ReadinessReport:
    """The report from the fields every path shares (`common`, with the versions), the inventory captured and
    the path's own fields (`kw`, which win over `common`)."""
    _stage("evaluating the Neuron rules")
    assessment = evaluate(inventory, common["ruleset"], common["target"])
    notes = tuple(kw.pop("notes", ())) + tuple(inventory.notes)
    fields = {**common, **kw}
    return ReadinessReport(**fields, inventory=inventory, assessment=assessment, wall_s=0.0, notes=notes)


def _run_jax(ref: Any, out: Any, common: dict[str, Any], **kw: Any) -> ReadinessReport:
    from chipswap.readiness.capture.jaxhlo import capture_jax, jax_versions, split_entry

    if kw.get("shapes") or kw.get("plan"):
        raise ChipswapError(
            f"{ref.source} is a JAX entry point: its example arguments fix the shapes; drop --shape/--plan "
            "and "
            "return arguments of the shape you want checked"
        )
    fn, args, kwargs = split_entry(out, ref.source)
    _stage("lowering to HLO")
    inventory = capture_jax(fn, args, kwargs, name=ref.source)
    versions = {k: v for k, v in common["versions"].items() if not k.startswith("torch")} | jax_versions()
    notes = (
        (
            "--training: a JAX entry point is checked as given; return your train step (with jax.grad) "
            "to check "
            "the backward pass",
        )
        if kw.get("training")
        else ()
    )
    return _report(common, inventory, versions=versions, weightless=False, framework="jax", notes=notes)


def _run_torch_factory(
    ref: Any,
    module: Any,
    example: Any,
    common: dict[str, Any],
    *,
    asked: Any,
    training: bool,
) -> ReadinessReport:
    import inspect

    from chipswap.readiness.capture import capture_module, make_inputs

    specs = _coerce_specs(ref, asked)
    if specs is None:
        if not example:
            raise ChipswapError(
                f"factory {one_line(ref.source)} gives no example inputs; "
                "pass --shape NAME=DIMS:DTYPE for each input, or return (model, {name: tensor})"
            )
        specs = [{k: (tuple(v.shape), str(v.dtype).replace("torch.", "")) for k, v in example.items()}]
    params = inspect.signature(module.forward).parameters
    names = (
        list(example)
        if example
        else [n for n, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    )
    if any(p.kind == p.VAR_KEYWORD for p in params.values()) and example:
        names = []  # **kwargs forward: any name goes
    _validate_specs(ref, specs, names)
    exporting(len(specs))
    inventory = capture_module(module, specs, strip=None, vocab_size=None, example=example)
    if training:
        inputs = make_inputs(specs[0], example=example)
        inventory = _add_training(inventory, module, inputs, strip=None)
    return _report(common, inventory, weightless=False, training=training)


def _run_config(
    ref: Any,
    common: dict[str, Any],
    *,
    task: Any,
    asked: Any,
    weightless: bool | None,
    training: bool,
    full_model: bool,
) -> ReadinessReport:
    import transformers

    from chipswap import models
    from chipswap.readiness.capture import capture_module, make_inputs
    from chipswap.readiness.capture.growth import with_growth

    common["versions"]["transformers (capture)"] = transformers.__version__
    info = models.model_inputs(ref, task=task)
    specs = _coerce_specs(ref, asked, task)
    if specs is None:
        specs = default_specs(ref, [1], [default_seq(ref)], task=task)
    _validate_specs(ref, specs, info.accepted)
    checked_ref, checked = (ref, "the full model") if full_model else models.representative(ref)
    names = list(dict.fromkeys(n for s in specs for n in s))
    if training and info.labels and "labels" in info.accepted:
        names.append("labels")

    def build(on_meta: bool) -> Any:
        return models.build_model(
            checked_ref, meta=on_meta, task=task, input_names=names, experts_implementation="eager"
        )

    # build on the meta device first (no weight memory): its parameter count decides whether weights fit
    _stage(f"building {checked_ref.name}")
    module = build(True) if weightless is not False else None
    if weightless is not None:
        meta = weightless
    else:
        meta = _needs_meta(checked_ref, models.count_parameters(module), specs)
    if not meta:
        _stage("building with weights")
        module = build(False)
    device = "meta" if meta else "cpu"
    exporting(len(specs), meta)
    strip = models.WRAPPED_ATTR + "."
    inventory = capture_module(
        module,
        specs,
        device=device,
        vocab_size=(vocab := ref.config.get("vocab_size")),
        strip=strip,
        run_eager=not meta,
        highs=info.highs,
    )
    inventory = with_growth(
        inventory, module, specs[0], device=device, vocab_size=vocab, highs=info.highs, config=ref.config
    )
    if training:
        train_spec = _with_labels(info, specs[0])
        inputs = make_inputs(train_spec, device=device, highs=info.highs)
        inventory = _add_training(inventory, module, inputs, strip=strip)
    return _report(common, inventory, weightless=meta, training=training, checked=checked)


def _add_training(inventory: Any, module: Any, inputs: dict[str, Any], *, strip: str | None) -> Any:
    """The forward inventory plus the backward and optimizer ops of one training step (and train-mode forward
    ops the eval export does not have, e.g. dropout)."""
    from chipswap.readiness.capture import quiet
    from chipswap.readiness.capture.training import training_ops
    from chipswap.readiness.rules import CaptureIssue

    if not inventory.exported and any(i.kind in ("data_dependent", "export_error") for i in inventory.issues):
        note = "backward pass not traced: the forward does not export (fix the blockers first)"
        return replace(inventory, notes=(*inventory.notes, note))
    was_training = module.training
    _stage("tracing the training step")
    try:
        with quiet():
            ops = training_ops(module, inputs, strip=strip)
    except (ChipswapError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - unknown, never a pass: reported as an issue
        issue = CaptureIssue(
            kind="training_unchecked",
            message=f"the training step could not be traced ({type(exc).__name__}: "
            f"{one_line(str(exc).splitlines()[0] if str(exc).strip() else '', 160)})",
        )
        return replace(inventory, issues=(*inventory.issues, issue))
    finally:
        module.train(was_training)
    forward_kinds = {op.kind for op in inventory.ops}
    extra = [
        replace(op, phase="forward (train mode)")
        for op in ops
        if op.phase == "forward" and op.kind not in forward_kinds
    ]
    late = [op for op in ops if op.phase != "forward"]
    return replace(
        inventory,
        ops=(*inventory.ops, *extra, *late),
        method=inventory.method + "; training step traced with make_fx (core ATen): backward + AdamW update",
    )
