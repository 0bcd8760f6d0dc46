"""Issue 32 item 4: every number checked for physical range at the boundary (chipswap.ranges).

The values the hostile-input pass reported (tracebacks from tiny positive numbers, nonsense counts accepted),
the edges of every unit in the table (just inside accepted, just outside refused), and coverage: every
numeric option of the command line and every numeric workload field has a unit in the table, so a new flag
or field without one fails here.
"""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from chipswap import ranges as R
from chipswap.errors import ChipswapError
from tests.cli_helpers import run_inproc

WORKLOAD = """title = "t"
[traffic]
steady_rps = 20.0
prompt_tokens = 512
output_tokens = 32
[fleet]
instance = "g6e.xlarge"
count = 10
[targets]
candidates = ["inf2.xlarge"]
[porting]
engineer_days = 10
[throughput]
gpu_requests_per_s = 3.0
[throughput.candidates."inf2.xlarge"]
requests_per_s = {candidate}
{extra}
"""
FIGURE = '[figures."inf2.xlarge".throughput]\nvalue = {v}\nunit = "requests/s"\nsource = "measured"\n'
JOB = ("cost", "job", "--baseline", "p5.48xlarge", "--candidate", "trn1.32xlarge")
SERVE = ("cost", "serve", "--instance", "inf2.xlarge")


def _one_line_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, _out, err = run_inproc(capsys, *args)
    assert code == 2, (args, code, err)
    assert err.count("\n") == 1 and err.startswith("chipswap: error: ") and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------------------------ the reported values
@pytest.mark.parametrize(
    ("candidate", "extra", "key", "value"),
    [
        ("1.8", FIGURE.format(v="5e-324"), 'figures."inf2.xlarge".throughput.value', "5e-324"),
        ("1.8", FIGURE.format(v="1e-300"), 'figures."inf2.xlarge".throughput.value', "1e-300"),
        ("5e-324", "", 'throughput.candidates."inf2.xlarge".requests_per_s', "5e-324"),
        ("1e-300", "", 'throughput.candidates."inf2.xlarge".requests_per_s', "1e-300"),
    ],
)
def test_tiny_workload_figures_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, candidate: str, extra: str, key: str, value: str
) -> None:
    """Issue 32: throughput.value = 5e-324 ended in OverflowError (plan/sizing.py), 1e-300 in
    decimal.InvalidOperation (plan/result.py)."""
    w = tmp_path / "w.toml"
    w.write_text(WORKLOAD.format(candidate=candidate, extra=extra))
    err = _one_line_error(capsys, "plan", str(w), "--out", str(tmp_path / "out"), "--no-aws")
    span = R.span(R.Spec("rate"))
    assert f"{key}: expected {span}" in err and value in err and "give a value in that range" in err, err
    assert not (tmp_path / "out").exists()


def test_the_range_is_inclusive_in_a_workload(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    lo = R.show(R.UNITS["rate"].lo)
    w = tmp_path / "w.toml"
    w.write_text(WORKLOAD.format(candidate=lo, extra=FIGURE.format(v=lo)))
    code, _out, err = run_inproc(capsys, "plan", str(w), "--out", str(tmp_path / "out"), "--no-aws")
    assert code == 0, err
    assert (tmp_path / "out" / "report.json").is_file()


@pytest.mark.parametrize(
    ("args", "flag", "value", "unit"),
    [
        ((*SERVE, "--throughput", "1e-30"), "--throughput", "1e-30", "rate"),
        ((*SERVE, "--throughput", "5e-324"), "--throughput", "5e-324", "rate"),
        ((*JOB, "--baseline-hours", "1e-300", "--candidate-hours", "26"), "--baseline-hours", "1e-300",
         "hours"),
        ((*JOB, "--baseline-hours", "20", "--candidate-hours", "26", "--candidate-count", "1e22"),
         "--candidate-count", "1e22", "instances"),
        ((*JOB, "--baseline-hours", "20", "--candidate-hours", "26", "--candidate-count", "1" + "0" * 22),
         "--candidate-count", "1" + "0" * 22, "instances"),
        ((*JOB, "--baseline-hours", "20", "--candidate-hours", "26", "--runs-per-month=1e-300"),
         "--runs-per-month", "1e-300", "per_month"),
        ((*JOB, "--baseline-hours", "20", "--candidate-hours", "26", "--day-rate", "1e30"),
         "--day-rate", "1e30", "usd_per_day"),
    ],
)
def test_reported_flag_values_are_one_line(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], flag: str, value: str, unit: str
) -> None:
    err = _one_line_error(capsys, *args)
    r = R.UNITS[unit]
    assert f"{flag} is {value}" in err and R.show(r.lo) in err and R.show(r.hi) in err and r.unit in err, err
    assert f"e.g. {flag} {r.example}" in err, err


def test_tiny_bench_goodput_is_refused(tmp_path: Path) -> None:
    from chipswap.bench import read_bench_results
    from tests.fuzz.test_fuzz_inputs import BENCH

    for v, ok in ((5e-324, False), (1e-300, False), (float(R.UNITS["rate"].lo), True)):
        doc = copy.deepcopy(BENCH)
        doc["goodput"]["requests_per_s"] = v
        f = tmp_path / "bench.json"
        f.write_text(json.dumps(doc))
        if ok:
            assert read_bench_results(f).goodput_rps == v
            continue
        with pytest.raises(ChipswapError, match=r"goodput\.requests_per_s is .*requests/s") as exc:
            read_bench_results(f)
        assert repr(v) in str(exc.value) and "\n" not in str(exc.value)


def test_a_fleet_sized_past_the_range_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("cost", "serve", "--instance", "inf2.xlarge", "--throughput", "0.000001", "--rps", "1000000000",
            "--utilization", "0.0001")
    err = _one_line_error(capsys, *args)
    assert "needs 10,000,000,000,000,000,000 instances" in err and R.span(R.Spec("instances")) in err, err


# ------------------------------------------------------------------------------------------ the table's edges
def _edges(r: R.Range) -> tuple[list[Decimal], list[Decimal]]:
    step = Decimal(1) if r.integer else Decimal("0.000001")
    inside = [r.lo, r.hi, r.lo * (1 + step) if not r.integer else r.lo + 1]
    below = r.lo - 1 if r.integer else r.lo * (1 - step)
    above = r.hi + 1 if r.integer else r.hi * (1 + step)
    outside = [below, above, Decimal("5e-324"), -r.lo]
    return inside, [d for d in outside if d != 0]


@pytest.mark.parametrize("unit", sorted(R.UNITS))
def test_each_unit_edge(unit: str) -> None:
    r = R.UNITS[unit]
    assert 0 < r.lo < r.hi
    inside, outside = _edges(r)
    for d in inside:
        assert R.problem(d, R.Spec(unit)) is None, (unit, d)
        assert R.problem(float(d), R.Spec(unit)) is None, (unit, d)
    for d in outside:
        assert R.problem(d, R.Spec(unit)) is not None, (unit, d)
    assert R.problem(0, R.Spec(unit)) is not None and R.problem(0, R.Spec(unit, zero=True)) is None
    assert R.problem(-0.0, R.Spec(unit, zero=True)) is None
    for bad in ("nan", "inf", "-Infinity", float("nan"), float("inf")):
        assert "not finite" in (R.problem(bad, R.Spec(unit)) or ""), (unit, bad)
    if r.integer:
        assert "not a whole number" in (R.problem(r.lo + Decimal("0.5"), R.Spec(unit)) or "")


def test_downstream_arithmetic_stays_exact_at_the_edges() -> None:
    """The products the planner forms of in-range numbers round to the cent: the largest bill (instances x
    $/h x hours x months), the cost per 1M requests at the smallest throughput and utilization."""
    u = R.UNITS
    bill = u["instances"].hi * u["usd_per_hour"].hi * u["hours_per_month"].hi * u["months"].hi
    per_million = Decimal(10**6) / u["rate"].lo * u["usd_per_hour"].hi / 3600 / u["fraction"].lo
    for d in (bill, per_million, u["days"].hi * u["usd_per_day"].hi, u["usd"].hi * u["instances"].hi):
        assert d.quantize(Decimal("0.01")).is_finite()
    assert float(u["rate"].hi) / float(u["rate"].lo) < 1e300  # a fleet from rate / throughput stays finite


@pytest.mark.parametrize("key", sorted(k for k in R.FLAGS if not R.FLAGS[k][0].own))
def test_flag_edges(key: str) -> None:
    """Every flag the table alone bounds: its unit's edges inside accepted, just outside refused, naming
    the flag, the value, the range with its unit and an example."""
    specs = R.FLAGS[key]
    flag = key.rsplit(" ", 1)[1]
    for i, spec in enumerate(specs):
        r = R.UNITS[spec.unit]
        inside, outside = _edges(r)
        others = [R.UNITS[s.unit].example for s in specs]
        for d in inside + outside:
            items = list(others)
            items[i] = R.show(d) if d.is_finite() else str(d)
            why = R.flag_problem(key, ",".join(items))
            if d in inside:
                assert why is None, (key, d, why)
            else:
                assert why is not None and why.startswith(f"{flag}") and r.unit in why, (key, d, why)


def test_own_bound_commands_still_refuse_the_subnormal_gap() -> None:
    for key, specs in R.FLAGS.items():
        if specs[0].own:
            assert R.flag_problem(key, "5e-324") is not None, key
            assert R.flag_problem(key, "0") is None, key  # 0 is left to the command's own message


# ------------------------------------------------------------------------------------------------- coverage
NUMERIC_METAVARS = {"HOURS", "N", "USD_PER_H", "REQ_PER_S", "FRACTION", "DAYS", "USD", "PERCENT",
                    "UPFRONT,HOURLY,YEARS"}
NUMBER_TEXT_FLAGS = {"--seq-len", "--batch-sizes", "--arrival-rate"}  # numbers (or "trace") read as text


def _options() -> list[tuple[str, Any]]:
    import typer

    from chipswap.cli.main import app

    out = []

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*path, name])
            return
        out.extend((" ".join(path), p) for p in cmd.params if p.param_type_name == "option")

    walk(typer.main.get_command(app), [])
    return out


def _is_numeric(param: Any) -> bool:
    import typing

    ann = param.type_descriptor.annotation
    args = [a for a in (ann, *typing.get_args(ann)) if a is not type(None)]
    if any(a in (int, float) for a in args):
        return True
    return param.metavar in NUMERIC_METAVARS or param.opts[0] in NUMBER_TEXT_FLAGS


def test_every_numeric_option_of_the_cli_has_a_range() -> None:
    options = _options()
    numeric = [(cmd, p) for cmd, p in options if _is_numeric(p)]
    assert len(numeric) > 60  # the walk found the commands
    missing = []
    for cmd, p in numeric:
        for opt in p.opts:
            key = f"{cmd} {opt}"
            if R.FLAG_ALIASES.get(key, key) not in R.FLAGS:
                missing.append(key)
    assert not missing, f"give these flags a unit in chipswap.ranges.FLAGS: {missing}"
    known = {f"{cmd} {o}" for cmd, p in options for o in p.opts}
    stale = sorted(k for k in R.FLAGS if k not in known)
    assert not stale, f"FLAGS names options that do not exist: {stale}"


def test_every_numeric_workload_field_has_a_unit_inside_the_table() -> None:
    from chipswap.plan.workload_file import numeric_fields

    fields = numeric_fields()
    assert len(fields) > 40
    missing = [".".join(k) for k, spec in fields.items() if spec is None]
    assert not missing, f"give these workload fields a unit (Annotated[Real, In(unit)]): {missing}"
    for key, spec in fields.items():
        assert spec.unit in R.UNITS, key


def test_workload_field_bounds_lie_inside_their_unit() -> None:
    """A field's own le/lt never goes past its unit's largest (the table is the physical envelope)."""
    import annotated_types as at

    from chipswap.plan import workload as W
    from chipswap.plan.workload_file import _submodel, numeric_fields

    def field_of(path: tuple[str, ...]) -> Any:
        model: Any = W.Workload
        field = None
        for part in path:
            if part == "<instance>":
                continue
            field = model.model_fields[part]
            model = _submodel(field.annotation) or model
        return field

    for key, spec in numeric_fields().items():
        if key[-1] == "value" and key[0] == "figures":
            continue  # checked after unit conversion in InstanceFigures
        for m in field_of(key).metadata:
            hi = getattr(m, "le", None) if isinstance(m, at.Le) else getattr(m, "lt", None)
            if hi is not None:
                assert Decimal(str(hi)) <= R.UNITS[spec.unit].hi, (key, hi)


@pytest.mark.parametrize("key", ["traffic.steady_rps", "fleet.hours_per_month", "slo.p99_ms",
                                 "porting.engineer_days", "throughput.target_utilization"])
def test_workload_subnormal_refused_naming_the_field(tmp_path: Path, key: str) -> None:
    import tomllib

    from chipswap.plan.workload_file import parse_workload

    data = tomllib.loads(WORKLOAD.format(candidate="1.8", extra=""))
    table, name = key.split(".")
    data.setdefault(table, {})[name] = 5e-324
    with pytest.raises(ChipswapError) as exc:
        parse_workload(data, "w.toml")
    msg = str(exc.value)
    assert msg.startswith(f"w.toml: {key}: expected") and "5e-324" in msg and "\n" not in msg, msg
    data[table][name] = -0.0
    if key == "porting.engineer_days":  # zero is a real porting estimate; -0 is 0
        assert parse_workload(data, "w.toml").porting.engineer_days == 0.0


def test_docs_list_the_table() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()
    for unit, r in R.UNITS.items():
        row = f"| `{unit}` | {R.show(r.lo)} to {R.show(r.hi)}"
        assert row in text, f"docs/security.md: update the row of {unit}"


@pytest.mark.parametrize("value", ["1e-06", "0.000001", "0.00001"])
def test_a_microsecond_check_timeout_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str
) -> None:
    """Found by the range fuzz (seed 3201): the deadline's timer fired before its guard was entered."""
    err = _one_line_error(capsys, "check", str(tmp_path / "config.json"), "--timeout", value)
    assert "did not finish within" in err and "--timeout" in err, err
