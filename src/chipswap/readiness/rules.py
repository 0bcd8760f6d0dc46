"""Readiness rule engine: op inventory + rule tables -> op statuses and findings.

Pure: no torch, no files, no clock. The capture layer (chipswap.readiness.capture) builds the Inventory;
chipswap.readiness.check
loads the TOML tables from data/neuron_rules/ and passes the parsed dicts to ``ruleset_from_dicts``.

Every op gets a status: ``supported``, ``unsupported``, ``unknown`` or ``excluded`` (graph bookkeeping such as
shape queries and runtime asserts, left out of the counts the way torch_neuronx.analyze leaves out prim::
nodes).
Unknown is never counted as supported.

Two op vocabularies share the engine: core-ATen ops from torch.export (``aten::addmm``) and HLO instructions
lowered from JAX (``hlo::sort``). HLO opcodes get their status from the per-opcode Neuron evidence table
(``hlo_opcodes`` in the op tables), with per-SDK overrides for version-dependent opcodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

SEVERITIES = ("blocker", "slow", "warn", "info")
TARGETS = ("inf1", "inf2", "trn1", "trn2")
STATUSES = ("supported", "unsupported", "unknown", "excluded")
# namespaces the engine treats as framework ops (anything else is a custom op)
FRAMEWORK_NAMESPACES = ("aten", "prims", "higher_order", "python", "hlo")
LOWERING = "Lowering to HLO"
COMPILER = "neuronx-cc"
CUSTOM_CALL = "neuronx-cc (custom-call target)"
# evidence class of an HLO opcode (shared/reference/neuron/hlo_opcode_neuron_evidence.csv) -> op status.
# Restricted opcodes count as supported; their restrictions (integer operands, reductions) are rules.
HLO_STATUS = {
    "documented": "supported",
    "documented_restricted": "supported",
    "restricted": "supported",
    "mentioned_supported": "supported",
    "supported": "supported",  # only through a per-SDK override of a version-dependent opcode
    "reported_unsupported": "unsupported",
    "unsupported": "unsupported",  # per-SDK override
    "version_dependent": "unknown",
    "mentioned": "unknown",
    "unknown": "unknown",
    "structural": "excluded",
}


@dataclass(frozen=True)
class OpUse:
    """One op node of the captured (core ATen) graph."""

    kind: str  # "aten::addmm", "higher_order::cond", "mylib::fused_gelu"
    overload: str = "default"
    in_dtypes: tuple[str, ...] = ()  # dtypes of tensor inputs ("float32", "int64", ...)
    out_dtypes: tuple[str, ...] = ()
    module_path: str = ""  # e.g. "distilbert.transformer.layer.0.attention"
    location: str | None = None  # innermost non-library "file:line"
    code: str = ""  # that source line
    node: str = ""  # graph node name
    unbacked: bool = False  # output shape depends on tensor values
    composite: bool = False  # torch has a backend-agnostic (CompositeExplicitAutograd) kernel
    original: str | None = None  # kind of the op this one was decomposed from
    signature: str = ""  # one-node graph text, e.g. "%topk = aten.topk.default(%ids: i64[2, 8], 2)"
    stack: str = ""  # source frames, innermost last
    data_dtype: str = (
        ""  # dtype of the first tensor operand (the data a scatter writes into, the keys a sort sorts)
    )
    attrs: tuple[
        tuple[str, str], ...
    ] = ()  # constant arguments by schema name, e.g. (("accumulate", "True"),)
    module_types: tuple[str, ...] = ()  # class names of the enclosing modules, outermost first
    phase: str = "forward"  # "forward", "backward" or "optimizer" (training captures)

    @property
    def namespace(self) -> str:
        return self.kind.split("::", 1)[0]

    @property
    def name(self) -> str:
        return self.kind.split("::", 1)[-1]

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.in_dtypes + self.out_dtypes))

    def attr(self, name: str) -> str | None:
        return next((v for k, v in self.attrs if k == name), None)


@dataclass(frozen=True)
class CaptureIssue:
    """Something the capture hit that is not an op: a data-dependent guard, an export error, a dynamic dim."""

    # data_dependent | dynamic_dim | export_error | missing_fake_kernel | mismatched_fake_kernel | guard
    kind: str
    message: str
    location: str | None = None
    code: str = ""
    module_path: str = ""
    op: str = ""
    module_types: tuple[str, ...] = ()  # class names of the module(s) the failing line runs in


@dataclass(frozen=True)
class Inventory:
    ops: tuple[OpUse, ...]
    issues: tuple[CaptureIssue, ...] = ()
    shapes: tuple[str, ...] = ()  # one string per captured shape set
    exported: bool = True  # False when only draft_export (or nothing) produced a graph
    method: str = ""  # how it was captured, e.g. "torch.export (non-strict) + core ATen, symbolic seq dim"
    notes: tuple[
        str, ...
    ] = ()  # what the inventory leaves out and why (e.g. a data-dependent module stubbed)
    stubbed: tuple[str, ...] = ()  # module classes replaced by placeholders to capture the rest


@dataclass(frozen=True)
class Clause:
    ops: frozenset[str] | None = None
    dtypes: frozenset[str] | None = None
    in_dtypes: frozenset[str] | None = None
    namespaces: frozenset[str] | None = None
    not_namespaces: frozenset[str] | None = None
    status: str | None = None
    failure_at: str | None = None
    unbacked: bool | None = None
    issue_kinds: frozenset[str] | None = None
    data_dtypes: frozenset[str] | None = None  # dtype of the first tensor operand
    attrs: Mapping[str, frozenset[str]] | None = (
        None  # every named constant argument must take a listed value
    )
    modules: frozenset[str] | None = (
        None  # case-insensitive substrings of the module path or module class names
    )
    phases: frozenset[str] | None = None

    @property
    def is_issue_clause(self) -> bool:
        return self.issue_kinds is not None


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    targets: tuple[str, ...]
    title: str
    evidence: str
    source: str
    as_of: str
    fix: str
    when: tuple[Clause, ...]
    aggregate: str = "location"  # "location": one finding per source line; "graph": one finding in all
    supersedes: tuple[str, ...] = ()  # rule ids this rule replaces on the ops / issues it matches


@dataclass(frozen=True)
class OpTables:
    lowered: frozenset[str]  # torch-xla overloads ("addmm", "add.Tensor")
    neuronx_listed: frozenset[str]  # "aten::addmm"
    inf1: Mapping[str, str]  # "aten::addmm" -> supported | limited | removed
    hlo: Mapping[str, Mapping[str, str]]  # aten name -> {hlo, status, evidence, source}
    non_compute: frozenset[str]
    sources: Mapping[str, str] = field(default_factory=dict)
    inf1_aliases: Mapping[str, str] = field(default_factory=dict)  # core op -> op name on the Inf1 list
    # HLO opcode -> {status, conditions, evidence, source}; status is the evidence class of the shared table
    hlo_opcodes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    custom_call_targets: frozenset[str] = frozenset()  # custom-call targets neuronx-cc recognises
    custom_call_structural: frozenset[str] = frozenset()  # sharding annotations: no computation
    custom_call_host: frozenset[str] = frozenset()  # host (Python) callbacks
    custom_call_platform: tuple[str, ...] = ()  # prefixes of CPU-only lowerings (LAPACK, DUCC FFT)
    # "name.overload" -> the aten op its CompositeImplicitAutograd kernel calls (what torch-xla sees)
    implicit: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RuleSet:
    sdk: str
    neuronx_cc: str
    torch_neuronx: str
    as_of: str
    source: str
    rules: tuple[Rule, ...]
    tables: OpTables
    note: str = ""
    hlo_overrides: Mapping[str, str] = field(default_factory=dict)  # opcode -> evidence class for this SDK


@dataclass(frozen=True)
class OpStatus:
    status: str
    basis: str
    failure_at: str | None = None


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    title: str
    op: str
    dtype: str
    module_path: str
    location: str | None
    code: str
    fix: str
    evidence: str
    source: str
    as_of: str
    count: int = 1
    locations: tuple[str, ...] = ()  # other locations folded into this finding (aggregate="graph")
    message: str = ""


@dataclass(frozen=True)
class Assessment:
    sdk: str
    target: str
    statuses: tuple[tuple[OpUse, OpStatus], ...]
    findings: tuple[Finding, ...]

    def counts(self, status: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for op, st in self.statuses:
            if st.status == status:
                out[op.kind] = out.get(op.kind, 0) + 1
        return dict(sorted(out.items()))

    @property
    def support_percentage(self) -> Decimal:
        """supported / (supported + unsupported + unknown) over counted nodes, in percent, 2 decimals."""
        n_sup = sum(1 for _, s in self.statuses if s.status == "supported")
        n_all = sum(1 for _, s in self.statuses if s.status in ("supported", "unsupported", "unknown"))
        if n_all == 0:
            return Decimal("0.00")
        return (Decimal(100) * n_sup / n_all).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)

    @property
    def blockers(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "blocker")


# --------------------------------------------------------------------------------------- parsing the tables


def _fs(v: Any) -> frozenset[str] | None:
    if v is None:
        return None
    if isinstance(v, str):
        return frozenset([v])
    return frozenset(str(x) for x in v)


_CLAUSE_KEYS = {
    "ops",
    "dtypes",
    "in_dtypes",
    "namespaces",
    "not_namespaces",
    "status",
    "failure_at",
    "unbacked",
    "issue_kinds",
    "data_dtypes",
    "attrs",
    "modules",
    "phases",
}


def clause_from_dict(d: Mapping[str, Any], where: str = "") -> Clause:
    bad = set(d) - _CLAUSE_KEYS
    if bad:
        raise ValueError(f"unknown clause key(s) {sorted(bad)} in rule {where}")
    attrs = d.get("attrs")
    if attrs is not None and not isinstance(attrs, Mapping):
        raise ValueError(f"clause attrs must be a table of name -> values in rule {where}")
    return Clause(
        ops=_fs(d.get("ops")),
        dtypes=_fs(d.get("dtypes")),
        in_dtypes=_fs(d.get("in_dtypes")),
        namespaces=_fs(d.get("namespaces")),
        not_namespaces=_fs(d.get("not_namespaces")),
        status=d.get("status"),
        failure_at=d.get("failure_at"),
        unbacked=d.get("unbacked"),
        issue_kinds=_fs(d.get("issue_kinds")),
        data_dtypes=_fs(d.get("data_dtypes")),
        attrs={str(k): _fs(v) or frozenset() for k, v in attrs.items()} if attrs is not None else None,
        modules=frozenset(m.lower() for m in _fs(d.get("modules")) or ()) if "modules" in d else None,
        phases=_fs(d.get("phases")),
    )


def rule_from_dict(d: Mapping[str, Any]) -> Rule:
    rid = str(d.get("id", ""))
    for key in ("id", "severity", "title", "evidence", "source", "as_of", "fix", "when"):
        if not d.get(key):
            raise ValueError(f"rule {rid or '?'} lacks {key!r}")
    if d["severity"] not in SEVERITIES:
        raise ValueError(f"rule {rid}: severity {d['severity']!r} not in {SEVERITIES}")
    targets = tuple(d.get("targets") or TARGETS)
    if set(targets) - set(TARGETS):
        raise ValueError(f"rule {rid}: unknown target(s) {sorted(set(targets) - set(TARGETS))}")
    agg = d.get("aggregate", "location")
    if agg not in ("location", "graph"):
        raise ValueError(f"rule {rid}: aggregate must be location or graph")
    return Rule(
        id=rid,
        severity=d["severity"],
        targets=targets,
        title=d["title"],
        evidence=d["evidence"],
        source=d["source"],
        as_of=str(d["as_of"]),
        fix=d["fix"],
        when=tuple(clause_from_dict(c, rid) for c in d["when"]),
        aggregate=agg,
        supersedes=tuple(str(x) for x in d.get("supersedes", ())),
    )


def tables_from_dict(d: Mapping[str, Any]) -> OpTables:
    return OpTables(
        lowered=frozenset(d["torch_xla"]["lowered"]),
        neuronx_listed=frozenset(d["torch_neuronx"]["listed"]),
        inf1=dict(d["inf1"]["ops"]),
        hlo={k: dict(v) for k, v in d["hlo"]["aten"].items()},
        non_compute=frozenset(d["non_compute"]["ops"]),
        inf1_aliases=dict(d.get("inf1_aliases", {}).get("ops", {})),
        implicit={str(k): str(v) for k, v in d.get("implicit_decompositions", {}).get("ops", {}).items()},
        sources={
            k: d[k]["source"] for k in ("torch_xla", "torch_neuronx", "inf1", "hlo") if "source" in d[k]
        },
    )


def with_hlo_tables(tables: OpTables, hlo: Mapping[str, Any]) -> OpTables:
    """Add the HLO opcode evidence table (data/neuron_rules/hlo.toml) to the op tables."""
    opcodes = {str(k): {kk: str(vv) for kk, vv in v.items()} for k, v in hlo["opcodes"].items()}
    bad = {v.get("status") for v in opcodes.values()} - set(HLO_STATUS)
    if bad:
        raise ValueError(f"unknown HLO evidence class(es) {sorted(str(b) for b in bad)}")
    return replace(
        tables,
        hlo_opcodes=opcodes,
        custom_call_targets=frozenset(hlo["custom_call"]["targets"]),
        custom_call_structural=frozenset(hlo["custom_call"].get("structural", ())),
        custom_call_host=frozenset(hlo["custom_call"].get("host_callbacks", ())),
        custom_call_platform=tuple(hlo["custom_call"].get("platform_prefixes", ())),
    )


def ruleset_from_dicts(
    rules: Mapping[str, Any], ops: Mapping[str, Any], hlo: Mapping[str, Any] | None = None
) -> RuleSet:
    tables = tables_from_dict(ops)
    if hlo is not None:
        tables = with_hlo_tables(tables, hlo)
    overrides = {str(k): str(v) for k, v in rules.get("hlo_overrides", {}).items()}
    bad = set(overrides.values()) - set(HLO_STATUS)
    if bad:
        raise ValueError(f"unknown HLO evidence class(es) in hlo_overrides: {sorted(bad)}")
    return RuleSet(
        sdk=str(rules["sdk"]),
        neuronx_cc=str(rules.get("neuronx_cc", "")),
        torch_neuronx=str(rules.get("torch_neuronx", "")),
        as_of=str(rules.get("as_of", "")),
        source=str(rules.get("source", "")),
        note=str(rules.get("note", "")),
        rules=tuple(rule_from_dict(r) for r in rules.get("rule", [])),
        tables=tables,
        hlo_overrides=overrides,
    )


# ------------------------------------------------------------------------------------------------ op status


def _lowering_keys(op: OpUse) -> list[str]:
    name, ov = op.name, op.overload
    keys = [f"{name}.{ov}", f"{name}_copy.{ov}", f"{name}.{ov}_out", f"{name}.out"]
    if ov == "default":
        keys += [name, f"{name}_copy"]
    return keys


def classify(op: OpUse, tables: OpTables, target: str) -> OpStatus:
    """Support status of one op on ``target`` from the published tables (first match wins)."""
    ns = op.namespace
    if ns == "hlo":
        return classify_hlo(op, tables, {})
    if ns == "python" or op.kind in tables.non_compute:
        return OpStatus("excluded", "graph bookkeeping (not an arithmetic op)")
    if ns == "higher_order":
        if op.name == "cond":
            return OpStatus("unsupported", "HLO conditional is reported unsupported", COMPILER)
        return OpStatus("unknown", f"higher-order op {op.name}: support depends on its body")
    if ns not in ("aten", "prims"):
        return OpStatus("unsupported", f"custom op in namespace {ns!r}: no torch-xla lowering", LOWERING)
    if ns == "prims":
        return OpStatus("unknown", "prims op left after decomposition")
    if target == "inf1":
        names = [op.kind, op.original, tables.inf1_aliases.get(op.kind)]
        st = next((tables.inf1[n] for n in names if n and n in tables.inf1), None)
        if st in ("supported", "limited"):
            return OpStatus("supported", f"torch-neuron (Inf1) operator list: {st}")
        if st == "removed":
            return OpStatus("unsupported", "removed from the torch-neuron (Inf1) operator list", "neuron-cc")
        return OpStatus("unknown", "not on the torch-neuron (Inf1) operator list")
    hlo = tables.hlo.get(op.name)
    lowered = any(k in tables.lowered for k in _lowering_keys(op))
    if hlo is not None and hlo.get("status") == "unsupported":
        return OpStatus("unsupported", f"becomes HLO {hlo.get('hlo')}, which neuronx-cc rejects", COMPILER)
    if hlo is not None and (lowered or op.composite):
        return OpStatus("unknown", f"lowers to HLO {hlo.get('hlo')}: no public neuronx-cc statement")
    if lowered:
        return OpStatus("supported", "torch-xla lowers it to HLO")
    target_op = tables.implicit.get(f"{op.name}.{op.overload}")
    if target_op is not None and any(k in tables.lowered for k in (target_op, f"{target_op}.default")):
        return OpStatus(
            "supported",
            f"PyTorch's CompositeImplicitAutograd kernel calls aten::{target_op}, which torch-xla lowers",
        )
    if op.kind in tables.neuronx_listed:
        return OpStatus("supported", "on the torch-neuronx supported-operators page")
    if op.composite:
        return OpStatus(
            "supported", "PyTorch decomposes it (CompositeExplicitAutograd kernel) into other ops"
        )
    return OpStatus(
        "unsupported", "no torch-xla lowering and no PyTorch decomposition: CPU fallback", LOWERING
    )


def classify_hlo(op: OpUse, tables: OpTables, overrides: Mapping[str, str]) -> OpStatus:
    """Status of one HLO instruction from the opcode evidence table (and this SDK's overrides)."""
    opcode = op.name
    if opcode == "custom-call":
        target = op.attr("custom_call_target") or "?"
        if target in tables.custom_call_targets:
            return OpStatus("supported", f"custom-call target {target} is on neuronx-cc's recognised list")
        if target in tables.custom_call_structural:
            return OpStatus("excluded", f"custom-call {target}: a sharding annotation, no computation")
        if target in tables.custom_call_host:
            return OpStatus(
                "unsupported",
                f"custom-call {target} is a host (Python) callback; JAX host callbacks are "
                "not supported on Neuron",
                CUSTOM_CALL,
            )
        if target.startswith(tables.custom_call_platform) and tables.custom_call_platform:
            return OpStatus(
                "unknown",
                f"custom-call {target} is JAX's CPU lowering of a library routine; its Neuron "
                "lowering has no public statement",
            )
        return OpStatus(
            "unsupported", f"custom-call target {target} is not on neuronx-cc's recognised list", CUSTOM_CALL
        )
    row = tables.hlo_opcodes.get(opcode)
    if row is None:
        return OpStatus("unknown", f"HLO opcode {opcode} is not in the Neuron evidence table")
    evidence = overrides.get(opcode, row.get("status", "unknown"))
    status = HLO_STATUS.get(evidence, "unknown")
    cond = row.get("conditions") or row.get("evidence") or ""
    basis = f"HLO {opcode}: {evidence.replace('_', ' ')}" + (f" ({cond})" if cond else "")
    if status == "unsupported":
        return OpStatus("unsupported", basis, COMPILER)
    if status == "excluded":
        return OpStatus("excluded", f"HLO {opcode}: structural (no computation of its own)")
    return OpStatus(status, basis)


# ------------------------------------------------------------------------------------------------- matching


def _modules_match(patterns: frozenset[str], path: str, types: tuple[str, ...]) -> bool:
    hay = [path.lower(), *(t.lower() for t in types)]
    return any(p in h for p in patterns for h in hay if h)


def _issue_matches(c: Clause, issue: CaptureIssue) -> bool:
    if c.issue_kinds is None or issue.kind not in c.issue_kinds:
        return False
    if c.modules is not None and not _modules_match(c.modules, issue.module_path, issue.module_types):
        return False
    return True


def _op_matches(c: Clause, op: OpUse, st: OpStatus) -> bool:
    if c.is_issue_clause:
        return False
    if c.ops is not None and op.kind not in c.ops and (op.original is None or op.original not in c.ops):
        return False
    if c.dtypes is not None and not (set(op.dtypes) & c.dtypes):
        return False
    if c.in_dtypes is not None and not (set(op.in_dtypes) & c.in_dtypes):
        return False
    if c.namespaces is not None and op.namespace not in c.namespaces:
        return False
    if c.not_namespaces is not None and op.namespace in c.not_namespaces:
        return False
    if c.status is not None and st.status != c.status:
        return False
    if c.failure_at is not None and st.failure_at != c.failure_at:
        return False
    if c.unbacked is not None and op.unbacked != c.unbacked:
        return False
    if c.data_dtypes is not None and op.data_dtype not in c.data_dtypes:
        return False
    if c.attrs is not None and any(op.attr(k) not in v for k, v in c.attrs.items()):
        return False
    if c.modules is not None and not _modules_match(c.modules, op.module_path, op.module_types):
        return False
    if c.phases is not None and op.phase not in c.phases:
        return False
    return True


def _matched_dtype(c: Clause, op: OpUse) -> str:
    if c.data_dtypes and op.data_dtype in c.data_dtypes:
        return op.data_dtype
    want = c.in_dtypes or c.dtypes
    if want:
        hit = [d for d in op.dtypes if d in want]
        if hit:
            return hit[0]
    return ",".join(op.dtypes)


def _describe(op: OpUse, st: OpStatus, rule: Rule) -> str:
    target = op.attr("custom_call_target")
    if target:
        return f"{op.kind}({target})" + (f" ({st.basis})" if rule.id == "NCC_EHCA005" else "")
    if op.phase != "forward":
        grad = f", gradient of {op.original}" if op.original and op.phase == "backward" else ""
        return f"{op.kind} ({op.phase}{grad})"
    return (
        f"{op.kind} ({st.basis})"
        if rule.id in ("CHIP_CPU_FALLBACK", "CHIP_UNKNOWN_OP", "NCC_EVRF001")
        else op.kind
    )


def evaluate(inv: Inventory, rs: RuleSet, target: str) -> Assessment:
    """Classify every op and apply every rule for ``target``; findings are grouped and ordered by severity."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; one of {TARGETS}")
    status_cache: dict[tuple, OpStatus] = {}
    sts = []
    for op in inv.ops:
        skey = (op.kind, op.overload, op.composite, op.original, op.attr("custom_call_target"))
        if skey not in status_cache:
            status_cache[skey] = (
                classify_hlo(op, rs.tables, rs.hlo_overrides)
                if op.namespace == "hlo"
                else classify(op, rs.tables, target)
            )
        sts.append((op, status_cache[skey]))
    statuses = tuple(sts)
    rules = [r for r in rs.rules if target in r.targets]
    groups: dict[tuple, dict[str, Any]] = {}
    order: list[tuple] = []

    def add(rule: Rule, key_loc: str, **fields: Any) -> None:
        key = (rule.id, rule.severity, key_loc if rule.aggregate == "location" else "*")
        g = groups.get(key)
        if g is None:
            groups[key] = {"rule": rule, "count": 1, "locations": [], **fields}
            order.append(key)
        else:
            g["count"] += 1
            loc = fields.get("location")
            if loc and loc != g.get("location") and loc not in g["locations"]:
                g["locations"].append(loc)

    def unsuperseded(hits: Sequence[tuple[Rule, Any]]) -> list[tuple[Rule, Any]]:
        gone = {rid for r, _ in hits for rid in r.supersedes}
        return [(r, c) for r, c in hits if r.id not in gone]

    match_cache: dict[tuple, list[tuple[Rule, Clause]]] = {}
    for op, st in statuses:
        mkey = (
            op.kind,
            op.in_dtypes,
            op.out_dtypes,
            op.unbacked,
            op.original,
            op.data_dtype,
            op.attrs,
            op.module_path,
            op.module_types,
            op.phase,
            st,
        )
        hits = match_cache.get(mkey)
        if hits is None:
            hits = []
            for rule in rules:
                c = next((c for c in rule.when if _op_matches(c, op, st)), None)
                if c is not None:
                    hits.append((rule, c))
            hits = match_cache[mkey] = [(r, c) for r, c in unsuperseded(hits) if c is not None]
        for rule, c in hits:
            add(
                rule,
                op.location or f"{op.module_path}|{op.kind}",
                op=_describe(op, st, rule),
                dtype=_matched_dtype(c, op),
                module_path=op.module_path,
                location=op.location,
                code=op.code,
                message="",
            )
    for issue in inv.issues:
        issue_hits: list[tuple[Rule, Clause | None]] = [
            (rule, None) for rule in rules if any(_issue_matches(c, issue) for c in rule.when)
        ]
        for rule, _ in unsuperseded(issue_hits):
            add(
                rule,
                issue.location or issue.message,
                op=issue.op or issue.kind,
                dtype="",
                module_path=issue.module_path,
                location=issue.location,
                code=issue.code,
                message=issue.message,
            )

    findings = []
    for key in order:
        g = groups[key]
        r: Rule = g["rule"]
        findings.append(
            Finding(
                rule=r.id,
                severity=r.severity,
                title=r.title,
                op=g["op"],
                dtype=g["dtype"],
                module_path=g["module_path"],
                location=g["location"],
                code=g["code"],
                fix=r.fix,
                evidence=r.evidence,
                source=r.source,
                as_of=r.as_of,
                count=g["count"],
                locations=tuple(g["locations"]),
                message=g["message"],
            )
        )
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (rank[f.severity], f.rule, f.location or "", f.op))
    return Assessment(sdk=rs.sdk, target=target, statuses=statuses, findings=tuple(_dedupe(findings)))


def _dedupe(findings: Iterable[Finding]) -> list[Finding]:
    """Drop a data-dependence finding at a line that already has the same rule (issue + op on one line)."""
    seen: set[tuple[str, str | None]] = set()
    out = []
    for f in findings:
        key = (f.rule, f.location) if f.location else (f.rule + f.op + f.module_path, None)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    return out
