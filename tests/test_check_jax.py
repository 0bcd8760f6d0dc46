"""JAX / Flax entry points: lowered to HLO on the CPU and checked with the same rules as PyTorch graphs.

Known-bad functions in tests/jaxmodels.py each yield their rule at the line marked `# BAD: <tag>`; Flax MLP,
CNN and transformer blocks check clean; bad entry points are one-line exit-2 errors.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("jax")

from chipswap.errors import ChipswapError  # noqa: E402
from chipswap.readiness import rules as R  # noqa: E402
from chipswap.readiness.capture import jaxhlo  # noqa: E402
from chipswap.readiness.check import load_ruleset, run_check  # noqa: E402
from tests import jaxmodels  # noqa: E402
from tests.cli_helpers import run_inproc  # noqa: E402


@pytest.fixture(autouse=True)
def _x64_off():
    import jax

    yield
    jax.config.update("jax_enable_x64", False)


@pytest.mark.parametrize("tag", sorted(jaxmodels.EXPECTED))
def test_known_bad_jax_function_yields_rule_at_its_line(tag):
    entry, rule, severity = jaxmodels.EXPECTED[tag]
    report = run_check(f"tests.jaxmodels:{entry}", target="trn1")
    line = jaxmodels.bad_line(tag)
    hits = [
        f for f in report.findings if f.rule == rule and (f.location or "").endswith(f"jaxmodels.py:{line}")
    ]
    assert hits, [(f.rule, f.location) for f in report.findings]
    assert hits[0].severity == severity
    assert report.framework == "jax" and report.exit_code == (1 if report.blockers else 0)
    assert report.exit_code == (1 if severity == "blocker" else 0)


@pytest.mark.parametrize("entry", jaxmodels.GOOD)
def test_flax_models_and_plain_scatter_are_clean(entry):
    report = run_check(f"tests.jaxmodels:{entry}", target="trn1")
    assert report.exit_code == 0 and not report.blockers, [
        (f.rule, f.op, f.location) for f in report.findings
    ]
    assert [f for f in report.findings if f.severity in ("warn", "slow")] == []
    kinds = set(report.assessment.counts("supported"))
    assert kinds and all(k.startswith("hlo::") for k in kinds)
    if entry != "make_scatter_set":
        assert "hlo::dot" in kinds  # the dense layers are really in the inventory


def test_flax_block_locations_point_at_user_or_flax_code():
    report = run_check("tests.jaxmodels:make_flax_transformer_block")
    dots = [op for op, _ in report.assessment.statuses if op.kind == "hlo::dot"]
    assert dots and all(op.location is None or "jaxmodels.py" in op.location for op in dots)
    assert any(op.location and "jaxmodels.py" in op.location for op in dots)


@pytest.mark.parametrize(
    "entry,needle",
    [
        ("make_raises", "raised ValueError"),
        ("make_no_args", "no example arguments"),
        ("make_none_args", "no example arguments"),
        ("make_needs_x64", "x64 is disabled"),
        ("make_shape_mismatch", "raised TypeError while lowering"),
    ],
)
def test_bad_jax_entry_point_is_one_line_exit_2(entry, needle, capsys):
    code, _, err = run_inproc(capsys, "check", f"tests.jaxmodels:{entry}")
    assert code == 2, err
    assert err.startswith("chipswap: error: ") and needle in err and err.count("\n") == 1


def test_jax_report_json_names_framework_and_versions(capsys):
    code, out, _ = run_inproc(capsys, "check", "tests.jaxmodels:make_fft", "--json")
    j = json.loads(out)
    assert code == 1 and j["framework"] == "jax" and "jax (capture)" in j["versions"]
    assert not any(k.startswith("torch") for k in j["versions"])
    (f,) = [f for f in j["findings"] if f["rule"] == "NCC_EVRF001"]
    assert f["op"].startswith("hlo::fft")


def test_shape_flags_are_refused_for_jax_entry_points():
    with pytest.raises(ChipswapError, match="example arguments fix the shapes"):
        run_check("tests.jaxmodels:make_fft", ["x=1x8:float32"])


HLO = """HloModule jit_f, entry_computation_layout={(s32[8]{0})->(s32[8]{0}, f32[<=8]{0})}

FileNames
1 "/home/u/model.py"
2 "/x/site-packages/jax/_src/numpy/lax_numpy.py"

FunctionNames
1 "f"
2 "sort"

FileLocations
1 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=8 end_column=21}
2 {file_name_id=2 function_name_id=2 line=99 end_line=99 column=1 end_column=2}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}

region_0.1 {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT add.1 = s32[] add(a, b)
}

ENTRY main.4 {
  ids.1 = s32[8]{0} parameter(0)
  zero = s32[] constant(0)
  z = s32[8]{0} broadcast(zero), dimensions={}
  idx = s32[8,1]{1,0} reshape(ids.1)
  @SCATTER@
  @CUSTOM@
  ROOT t = (s32[8]{0}, f32[<=8]{0}) tuple(sc, dyn)
}
"""


HLO = HLO.replace(
    "@SCATTER@",
    "sc = s32[8]{0} scatter(z, idx, ids.1), update_window_dims={}, inserted_window_dims={0}, "
    "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=region_0.1, "
    'metadata={op_name="scatter-add" stack_frame_id=2}',
).replace(
    "@CUSTOM@",
    'dyn = f32[<=8]{0} custom-call(ids.1), custom_call_target="lapack_sgetrf_ffi", '
    'metadata={op_name="x" stack_frame_id=1}',
)


def test_hlo_parser_reads_ops_types_frames_regions_and_dynamic_dims():
    inv = jaxhlo.hlo_inventory(HLO)
    kinds = [op.kind for op in inv.ops]
    # scalar regions belong to their op; parameters and tuples are plumbing
    assert kinds == ["hlo::constant", "hlo::broadcast", "hlo::reshape", "hlo::scatter", "hlo::custom-call"]
    sc = next(op for op in inv.ops if op.kind == "hlo::scatter")
    # the innermost frame is jax's own code: the user's line (the parent frame) is reported
    assert sc.location.endswith("model.py:12") and sc.module_path == "f"
    assert sc.data_dtype == "int32" and sc.attr("accumulate") == "True"
    # a constant with no frame takes its user's line
    assert next(op for op in inv.ops if op.kind == "hlo::constant").location.endswith("model.py:12")
    (issue,) = inv.issues
    assert issue.kind == "dynamic_dim" and "custom-call" in issue.message
    a = R.evaluate(inv, load_ruleset("2.32"), "trn1")
    got = {f.rule for f in a.findings}
    assert {"NCC_EVRF016", "NCC_EMOD025", "CHIP_UNKNOWN_OP"} <= got  # lapack_ is a CPU-only lowering: unknown


def test_hlo_opcode_statuses_come_from_the_evidence_table():
    rs = load_ruleset("2.32")
    t = rs.tables

    def st(opcode, **attrs):
        op = R.OpUse(kind=f"hlo::{opcode}", attrs=tuple(attrs.items()))
        return R.classify_hlo(op, t, rs.hlo_overrides).status

    assert st("add") == "supported" and st("dot") == "supported"
    assert st("fft") == "unsupported" and st("triangular-solve") == "unsupported"
    assert st("acos") == "unknown" and st("tuple") == "excluded"
    assert st("custom-call", custom_call_target="AwsNeuronSoftmax") == "supported"
    assert st("custom-call", custom_call_target="my_cuda_kernel") == "unsupported"
    assert st("custom-call", custom_call_target="Sharding") == "excluded"
    # version-dependent opcodes: complex64 real/imag resolved per SDK
    assert st("real") == "supported"
    old = load_ruleset("2.27")
    assert R.classify_hlo(R.OpUse(kind="hlo::real"), old.tables, old.hlo_overrides).status == "unknown"
