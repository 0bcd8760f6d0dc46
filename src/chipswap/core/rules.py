"""Readiness rule engine: op inventory + rule tables -> op statuses and findings.

Pure: no torch, no files, no clock. The capture layer (chipswap.capture) builds the Inventory; chipswap.check
loads the TOML tables from data/neuron_rules/ and passes the parsed dicts to ``ruleset_from_dicts``.

Every op gets a status: ``supported``, ``unsupported``, ``unknown`` or ``excluded`` (graph bookkeeping such as
shape queries and runtime asserts, left out of the counts the way torch_neuronx.analyze leaves out prim::
nodes).
Unknown is never counted as supported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

SEVERITIES = ("blocker", "slow", "warn", "info")
TARGETS = ("inf1", "inf2", "trn1", "trn2")
STATUSES = ("supported", "unsupported", "unknown", "excluded")
# namespaces the engine treats as framework ops (anything else is a custom op)
FRAMEWORK_NAMESPACES = ("aten", "prims", "higher_order", "python")
LOWERING = "Lowering to HLO"
COMPILER = "neuronx-cc"


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

    @property
    def namespace(self) -> str:
        return self.kind.split("::", 1)[0]

    @property
    def name(self) -> str:
        return self.kind.split("::", 1)[-1]

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.in_dtypes + self.out_dtypes))


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


@dataclass(frozen=True)
class Inventory:
    ops: tuple[OpUse, ...]
    issues: tuple[CaptureIssue, ...] = ()
    shapes: tuple[str, ...] = ()  # one string per captured shape set
    exported: bool = True  # False when only draft_export (or nothing) produced a graph
    method: str = ""  # how it was captured, e.g. "torch.export (non-strict) + core ATen, symbolic seq dim"


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


@dataclass(frozen=True)
class OpTables:
    lowered: frozenset[str]  # torch-xla overloads ("addmm", "add.Tensor")
    neuronx_listed: frozenset[str]  # "aten::addmm"
    inf1: Mapping[str, str]  # "aten::addmm" -> supported | limited | removed
    hlo: Mapping[str, Mapping[str, str]]  # aten name -> {hlo, status, evidence, source}
    non_compute: frozenset[str]
    sources: Mapping[str, str] = field(default_factory=dict)
    inf1_aliases: Mapping[str, str] = field(default_factory=dict)  # core op -> op name on the Inf1 list


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
}


def clause_from_dict(d: Mapping[str, Any], where: str = "") -> Clause:
    bad = set(d) - _CLAUSE_KEYS
    if bad:
        raise ValueError(f"unknown clause key(s) {sorted(bad)} in rule {where}")
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
    )


def tables_from_dict(d: Mapping[str, Any]) -> OpTables:
    return OpTables(
        lowered=frozenset(d["torch_xla"]["lowered"]),
        neuronx_listed=frozenset(d["torch_neuronx"]["listed"]),
        inf1=dict(d["inf1"]["ops"]),
        hlo={k: dict(v) for k, v in d["hlo"]["aten"].items()},
        non_compute=frozenset(d["non_compute"]["ops"]),
        inf1_aliases=dict(d.get("inf1_aliases", {}).get("ops", {})),
        sources={
            k: d[k]["source"] for k in ("torch_xla", "torch_neuronx", "inf1", "hlo") if "source" in d[k]
        },
    )


def ruleset_from_dicts(rules: Mapping[str, Any], ops: Mapping[str, Any]) -> RuleSet:
    return RuleSet(
        sdk=str(rules["sdk"]),
        neuronx_cc=str(rules.get("neuronx_cc", "")),
        torch_neuronx=str(rules.get("torch_neuronx", "")),
        as_of=str(rules.get("as_of", "")),
        source=str(rules.get("source", "")),
        note=str(rules.get("note", "")),
        rules=tuple(rule_from_dict(r) for r in rules.get("rule", [])),
        tables=tables_from_dict(ops),
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
    if op.kind in tables.neuronx_listed:
        return OpStatus("supported", "on the torch-neuronx supported-operators page")
    if op.composite:
        return OpStatus(
            "supported", "PyTorch decomposes it (CompositeExplicitAutograd kernel) into other ops"
        )
    return OpStatus(
        "unsupported", "no torch-xla lowering and no PyTorch decomposition: CPU fallback", LOWERING
    )


# ------------------------------------------------------------------------------------------------- matching


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
    return True


def _matched_dtype(c: Clause, op: OpUse) -> str:
    want = c.in_dtypes or c.dtypes
    if want:
        hit = [d for d in op.dtypes if d in want]
        if hit:
            return hit[0]
    return ",".join(op.dtypes)


def _describe(op: OpUse, st: OpStatus, rule: Rule) -> str:
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
        skey = (op.kind, op.overload, op.composite, op.original)
        if skey not in status_cache:
            status_cache[skey] = classify(op, rs.tables, target)
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

    match_cache: dict[tuple, Clause | None] = {}
    for rule in rules:
        for op, st in statuses:
            mkey = (id(rule), op.kind, op.in_dtypes, op.out_dtypes, op.unbacked, op.original, st)
            if mkey not in match_cache:
                match_cache[mkey] = next((c for c in rule.when if _op_matches(c, op, st)), None)
            c = match_cache[mkey]
            if c is not None:
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
            if any(c.issue_kinds is not None and issue.kind in c.issue_kinds for c in rule.when):
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
