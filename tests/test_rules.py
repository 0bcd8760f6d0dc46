"""chipswap.readiness.rules: op statuses and findings from hand-built inventories and the shipped rule
tables."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from chipswap.readiness import rules as R
from chipswap.readiness.check import load_ruleset, sdk_versions
from chipswap.readiness.rules import CaptureIssue, Inventory, OpUse


def op(kind, *, ins=("float32",), outs=("float32",), loc="m.py:1", **kw):
    return OpUse(kind=kind, in_dtypes=tuple(ins), out_dtypes=tuple(outs), location=loc, **kw)


def ids(assessment, severity=None):
    return {f.rule for f in assessment.findings if severity is None or f.severity == severity}


@pytest.fixture(scope="module")
def rs232():
    return load_ruleset("2.32")


def test_core_module_is_pure():
    src = Path(R.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert not imported & {"torch", "transformers", "os", "pathlib", "io", "time", "tomllib", "json"}


def test_shipped_rule_files_parse_and_carry_provenance():
    assert {"2.26", "2.27", "2.32"} <= set(sdk_versions())
    for sdk in sdk_versions():
        rs = load_ruleset(sdk)
        assert rs.sdk == sdk and rs.rules
        for r in rs.rules:
            assert r.severity in R.SEVERITIES and set(r.targets) <= set(R.TARGETS)
            assert r.source and r.as_of and r.fix and r.evidence and r.when
        covered = {t for r in rs.rules for t in r.targets}
        assert covered == set(R.TARGETS)


def test_bad_rule_table_is_rejected():
    base = {
        "id": "X",
        "severity": "fatal",
        "title": "t",
        "evidence": "e",
        "source": "s",
        "as_of": "a",
        "fix": "f",
        "when": [{"ops": ["aten::x"]}],
    }
    with pytest.raises(ValueError, match="severity"):
        R.rule_from_dict(base)
    with pytest.raises(ValueError, match="clause"):
        R.rule_from_dict({**base, "severity": "warn", "when": [{"opz": ["aten::x"]}]})
    with pytest.raises(ValueError, match="target"):
        R.rule_from_dict({**base, "severity": "warn", "targets": ["inf9"]})


def test_statuses_from_tables(rs232):
    t = rs232.tables
    assert R.classify(op("aten::addmm"), t, "inf2").status == "supported"
    assert R.classify(op("aten::view"), t, "inf2").status == "supported"
    # lowered by torch-xla but the HLO opcode has no Neuron statement -> unknown, never supported
    assert R.classify(op("aten::acos"), t, "inf2").status == "unknown"
    fft = R.classify(op("aten::_fft_r2c", ins=("float32",), outs=("complex64",)), t, "inf2")
    assert (fft.status, fft.failure_at) == (
        "unsupported",
        R.COMPILER,
    )  # analyze() doc: fft fails at neuronx-cc
    tri = R.classify(op("aten::triangular_solve"), t, "inf2")
    assert (tri.status, tri.failure_at) == ("unsupported", R.COMPILER)
    cpu = R.classify(op("aten::_made_up_kernel"), t, "inf2")
    assert (cpu.status, cpu.failure_at) == ("unsupported", R.LOWERING)
    assert R.classify(op("aten::_made_up_kernel", composite=True), t, "inf2").status == "supported"
    assert R.classify(op("aten::sym_size", overload="int"), t, "inf2").status == "excluded"
    assert R.classify(op("python::getitem"), t, "inf2").status == "excluded"
    assert R.classify(op("mylib::fused"), t, "inf2").status == "unsupported"


def test_inf1_uses_torch_neuron_operator_list(rs232):
    t = rs232.tables
    assert R.classify(op("aten::addmm"), t, "inf1").status == "supported"
    assert R.classify(op("aten::embedding", ins=("float32", "int64")), t, "inf1").status == "unsupported"
    # decomposed op matched through the op it came from
    ln = op("aten::native_layer_norm", original="aten::layer_norm")
    assert R.classify(ln, t, "inf1").status == "supported"
    # core op matched through the TorchScript-level name on the Inf1 list (derived alias table)
    assert R.classify(op("aten::_softmax"), t, "inf1").status == "supported"
    assert R.classify(op("aten::index", overload="Tensor"), t, "inf1").status == "unknown"
    a = R.evaluate(Inventory(ops=(op("aten::embedding", ins=("float32", "int64")),)), rs232, "inf1")
    assert "CHIP_CPU_FALLBACK" in ids(a, "slow")


def test_unknown_is_never_counted_as_supported(rs232):
    inv = Inventory(ops=(op("aten::addmm"), op("aten::acos"), op("aten::sym_size", overload="int")))
    a = R.evaluate(inv, rs232, "inf2")
    assert str(a.support_percentage) == "50.00"
    assert a.counts("unknown") == {"aten::acos": 1}
    assert "CHIP_UNKNOWN_OP" in ids(a, "warn")


def test_cpu_fallback_is_slow_not_blocker(rs232):
    a = R.evaluate(Inventory(ops=(op("aten::_made_up_kernel"),)), rs232, "trn1")
    assert ids(a) == {"CHIP_CPU_FALLBACK"} and not a.blockers


def test_data_dependent_ops_and_issues_block(rs232):
    inv = Inventory(
        ops=(
            op("aten::nonzero", ins=("bool",), outs=("int64",), loc="a.py:3"),
            op("aten::index", overload="Tensor", unbacked=True, loc="a.py:9"),
        ),
        issues=(CaptureIssue(kind="data_dependent", message="m", location="a.py:20"),),
    )
    for target in R.TARGETS:
        a = R.evaluate(inv, rs232, target)
        locs = {f.location for f in a.blockers if f.rule == "NCC_EMOD025"}
        assert locs == {"a.py:3", "a.py:9", "a.py:20"}, target


def test_integer_topk_only(rs232):
    assert "NCC_EVRF013" in ids(R.evaluate(Inventory(ops=(op("aten::topk", ins=("int64",)),)), rs232, "inf2"))
    assert "NCC_EVRF013" not in ids(R.evaluate(Inventory(ops=(op("aten::topk"),)), rs232, "inf2"))
    sort = R.evaluate(Inventory(ops=(op("aten::sort", ins=("int32",)),)), rs232, "trn1")
    assert "NCC_EVRF013.sort" in ids(sort, "warn")


def test_complex_is_version_gated():
    c64 = Inventory(ops=(op("aten::mul", ins=("complex64",), outs=("complex64",)),))
    c128 = Inventory(ops=(op("aten::mul", ins=("complex128",), outs=("complex128",)),))
    for sdk in ("2.26", "2.27"):
        assert "NCC_EVRF004" in ids(R.evaluate(c64, load_ruleset(sdk), "inf2"), "blocker")
    a = R.evaluate(c64, load_ruleset("2.32"), "inf2")
    assert "NCC_EVRF004.c64" in ids(a, "warn") and not a.blockers
    assert "NCC_EVRF004" in ids(R.evaluate(c64, load_ruleset("2.32"), "inf1"), "blocker")
    assert "NCC_EVRF004" in ids(R.evaluate(c128, load_ruleset("2.32"), "trn2"), "blocker")


def test_dtype_rules_by_target(rs232):
    f64 = Inventory(ops=(op("aten::mul", ins=("float64",), outs=("float64",)),))
    assert "CHIP_DTYPE_F64" in ids(R.evaluate(f64, rs232, "inf2"), "warn")
    assert "CHIP_DTYPE_F64" in ids(R.evaluate(f64, rs232, "inf1"), "blocker")
    i64 = Inventory(
        ops=tuple(op("aten::embedding", ins=("float32", "int64"), loc=f"e.py:{i}") for i in range(5))
    )
    on_inf2 = [f for f in R.evaluate(i64, rs232, "inf2").findings if f.rule == "NCC_EVRF062"]
    on_trn2 = [f for f in R.evaluate(i64, rs232, "trn2").findings if f.rule == "NCC_EVRF062"]
    assert (
        len(on_inf2) == 1 and on_inf2[0].count == 5 and len(on_inf2[0].locations) == 4
    )  # graph-level, folded
    assert "--native-int64" in on_trn2[0].fix and "--native-int64" not in on_inf2[0].fix
    e4m3 = Inventory(ops=(op("aten::_to_copy", outs=("float8_e4m3fn",)),))
    e5m2 = Inventory(ops=(op("aten::_to_copy", outs=("float8_e5m2",)),))
    fnuz = Inventory(ops=(op("aten::_to_copy", outs=("float8_e5m2fnuz",)),))
    assert "NCC_EVRF051" in ids(R.evaluate(e4m3, rs232, "trn2"), "blocker")
    assert not R.evaluate(e5m2, rs232, "trn2").blockers
    assert "NCC_ESPP004.inf1_fp8" in ids(R.evaluate(e5m2, rs232, "inf1"), "blocker")
    assert "NCC_EVRF005" in ids(R.evaluate(fnuz, rs232, "trn2"), "blocker")


def test_control_flow_and_custom_ops(rs232):
    inv = Inventory(ops=(op("higher_order::cond"), op("higher_order::while_loop"), op("triton::kernel")))
    a = R.evaluate(inv, rs232, "trn2")
    assert {"CHIP_COND", "NCC_EHCA005"} <= ids(a, "blocker")
    assert "CHIP_WHILE" in ids(a, "warn")
    miss = Inventory(ops=(), issues=(CaptureIssue(kind="missing_fake_kernel", message="x", op="mylib::k"),))
    assert "NCC_EHCA005" in ids(R.evaluate(miss, rs232, "inf2"), "blocker")


def test_autocast_default_differs_by_sdk():
    mm = Inventory(ops=(op("aten::mm"),))
    assert "CHIP_AUTOCAST_MATMULT" in ids(R.evaluate(mm, load_ruleset("2.26"), "inf2"))
    assert "CHIP_AUTOCAST_MATMULT" not in ids(R.evaluate(mm, load_ruleset("2.27"), "inf2"))


def test_findings_sorted_by_severity(rs232):
    inv = Inventory(ops=(op("aten::acos", loc="z.py:1"), op("aten::nonzero", ins=("bool",), loc="z.py:2")))
    sev = [f.severity for f in R.evaluate(inv, rs232, "inf2").findings]
    assert sev == sorted(sev, key=R.SEVERITIES.index)


def test_unknown_target_rejected(rs232):
    with pytest.raises(ValueError):
        R.evaluate(Inventory(ops=()), rs232, "inf3")


INTS = ("int64",)


def test_scatter_rule_keys_on_written_dtype_and_accumulate(rs232):
    """NCC_EVRF016 is about reductions into integer/bool data, not about int64 index tensors."""

    def hit(op_):
        return "NCC_EVRF016" in ids(R.evaluate(Inventory(ops=(op_,)), rs232, "trn1"))

    kv = op(
        "aten::index_put", ins=("float32", "int64"), data_dtype="float32", attrs=(("accumulate", "False"),)
    )
    acc_float = op(
        "aten::index_put", ins=("float32", "int64"), data_dtype="float32", attrs=(("accumulate", "True"),)
    )
    acc_int = op("aten::index_put", ins=("int64",), data_dtype="int64", attrs=(("accumulate", "True"),))
    set_int = op("aten::index_put", ins=("int64",), data_dtype="int64", attrs=(("accumulate", "False"),))
    add_float = op("aten::index_add", ins=("float32", "int64"), data_dtype="float32")
    add_int = op("aten::scatter_add", ins=("int32", "int64"), data_dtype="int32")
    hlo_add_int = op("hlo::scatter", ins=("int32",), data_dtype="int32", attrs=(("accumulate", "True"),))
    hlo_set_int = op("hlo::scatter", ins=("int32",), data_dtype="int32", attrs=(("accumulate", "False"),))
    assert (
        not hit(kv)
        and not hit(acc_float)
        and not hit(set_int)
        and not hit(add_float)
        and not hit(hlo_set_int)
    )
    assert hit(acc_int) and hit(add_int) and hit(hlo_add_int)


def test_moe_routing_rule_matches_modules_and_supersedes_generic_findings(rs232):
    routing = CaptureIssue(
        kind="data_dependent",
        message="m",
        location="moe.py:9",
        module_path="layers.0.mlp.experts",
        module_types=("MixtralExperts",),
    )
    plain = CaptureIssue(kind="data_dependent", message="m", location="x.py:3", module_path="encoder.layer")
    by_type = CaptureIssue(
        kind="export_error", message="m", location="y.py:4", module_types=("SparseMoeBlock",)
    )
    nz = op("aten::nonzero", ins=("bool",), outs=("int64",), loc="r.py:5", module_path="moe.router")
    a = R.evaluate(Inventory(ops=(nz,), issues=(routing, plain, by_type)), rs232, "trn1")
    got = {(f.rule, f.location) for f in a.findings if f.severity == "blocker"}
    assert ("CHIP_MOE_ROUTING", "moe.py:9") in got and ("CHIP_MOE_ROUTING", "y.py:4") in got
    assert ("CHIP_MOE_ROUTING", "r.py:5") in got
    assert ("NCC_EMOD025", "x.py:3") in got  # not in an MoE module: the generic rule
    # superseded on the MoE lines: no second finding for the same cause
    assert not {loc for rule, loc in got if rule in ("NCC_EMOD025", "CHIP_TRACE_FAIL")} & {
        "moe.py:9",
        "y.py:4",
        "r.py:5",
    }


def test_supersedes_is_per_op_not_global(rs232):
    cond = op("hlo::conditional", loc="c.py:1")
    fft = op("hlo::fft", loc="f.py:2")
    a = R.evaluate(Inventory(ops=(cond, fft)), rs232, "trn1")
    got = {(f.rule, f.location) for f in a.findings}
    assert ("CHIP_COND", "c.py:1") in got and ("NCC_EVRF001", "c.py:1") not in got
    assert ("NCC_EVRF001", "f.py:2") in got


def test_backward_ops_are_labelled_with_their_phase(rs232):
    grad = op("aten::_cdist_backward", phase="backward", original="aten::_cdist_backward")
    (f,) = R.evaluate(Inventory(ops=(grad,)), rs232, "trn1").findings
    assert f.rule == "CHIP_CPU_FALLBACK" and "backward" in f.op


def test_bad_clause_attrs_rejected():
    base = {
        "id": "X",
        "severity": "warn",
        "title": "t",
        "evidence": "e",
        "source": "s",
        "as_of": "a",
        "fix": "f",
    }
    with pytest.raises(ValueError, match="attrs"):
        R.rule_from_dict({**base, "when": [{"ops": ["aten::x"], "attrs": ["accumulate"]}]})


def test_hlo_table_matches_the_shared_evidence_csvs():
    """data/neuron_rules/hlo.toml is generated from shared/reference/neuron/; it must still say the same."""
    import csv
    import tomllib

    ref = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference" / "neuron"
    if not (ref / "hlo_opcode_neuron_evidence.csv").exists():
        pytest.skip("shared/reference not present")
    shipped = tomllib.loads(
        (Path(R.__file__).resolve().parents[1] / "data" / "neuron_rules" / "hlo.toml").read_text()
    )
    with open(ref / "hlo_opcode_neuron_evidence.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["hlo_opcode"]: r["neuronx_cc_status"] for r in rows} == {
        k: v["status"] for k, v in shipped["opcodes"].items()
    }
    with open(ref / "neuronx_cc_custom_call_targets.csv", newline="") as fh:
        targets = {r["custom_call_target"] for r in csv.DictReader(fh)}
    assert set(shipped["custom_call"]["targets"]) | set(shipped["custom_call"]["not_listed"]) == targets
    assert set(R.HLO_STATUS) >= {v["status"] for v in shipped["opcodes"].values()}
