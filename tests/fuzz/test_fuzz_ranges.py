"""Issue 32: every numeric flag and every numeric workload field, fuzzed at the edges of physics.

The field and flag lists come from the range table (chipswap.ranges.FLAGS, and the workload's units through
chipswap.plan.workload_file.numeric_fields), so a new flag or field is fuzzed as soon as it has a unit (and
tests/test_ranges.py fails until it has one). Each draws subnormals, huge values, negative zero, NaN/inf
spellings and the unit's own edges; one more test sets every number of a workload to an edge of its range at
once (extreme ratios: the smallest throughput beside the largest rate). The contract is the suite's
(tests/fuzz/harness.py): no traceback, exit 0 or 2 with one error line, nothing written outside the sandbox;
a value the table refuses must exit 2.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chipswap import ranges as R
from chipswap.cli.main import main as cli_main
from tests.fuzz import strategies as S
from tests.fuzz.harness import Sandbox, echoed_controls, run
from tests.fuzz.test_fuzz_inputs import SCALE, SERVING, TRAINING, _check, _settings
from tests.fuzz.test_fuzz_inputs import box as box  # noqa: F401 - the suite's sandbox fixture

# ------------------------------------------------------------------------------------------- every flag
JOB = ["cost", "job", "--baseline", "p5.48xlarge", "--candidate", "trn1.32xlarge", "--baseline-hours", "20",
       "--candidate-hours", "26"]
TINY_WORKLOAD = (
    'title = "fuzz"\n[traffic]\nsteady_rps = 20.0\nprompt_tokens = 512\noutput_tokens = 32\n'
    '[fleet]\ninstance = "g6e.xlarge"\ncount = 10\n[targets]\ncandidates = ["inf2.xlarge"]\n'
    "[porting]\nengineer_days = 10\n[throughput]\ngpu_requests_per_s = 3.0\n"
    '[throughput.candidates."inf2.xlarge"]\nrequests_per_s = 1.8\n'
)
# A command line each flag is added to: cheap commands run for real; a command that would start work
# (serve, bench, compile, check, trial) is given a missing input, so it stops with one line after its flags
# parse.
BASE_ARGV: dict[str, list[str]] = {
    "plan": ["plan", "{work}/w.toml", "--no-aws", "--out", "{out}/report"],
    "shapes": ["shapes", "--json"],
    "check": ["check", "{work}/missing-config.json"],
    "project": ["project", "tiny-distilbert", "-i", "trn1.32xlarge"],
    "capacity": ["capacity", "inf2.xlarge", "--no-aws"],
    "compile": ["compile", "{work}/missing-model", "--seq-len", "8"],
    "serve": ["serve", "{work}/missing-set.json"],
    "bench": ["bench", "http://127.0.0.1:9", "--trace", "{work}/missing.csv"],
    "trial": ["trial", "{work}/missing.toml", "--out", "{out}/kit"],
    "cost job": JOB,
    "cost serve": ["cost", "serve", "--instance", "inf2.xlarge", "--throughput", "5"],
    "cache prune": ["cache", "prune", "--dry-run"],
}
TRAINING_FLAGS = {"--seq-len", "--nodes", "--global-batch"}  # project: with --train-tokens


def _argv(key: str, value: str, box: Sandbox) -> list[str]:
    command, flag = key.rsplit(" ", 1)
    argv = [a.replace("{work}", str(box.work)).replace("{out}", str(box.out)) for a in BASE_ARGV[command]]
    if command == "project" and flag in TRAINING_FLAGS:
        argv += ["--train-tokens", "1e9"]
    if command == "cost serve" and flag.startswith("--baseline") and flag != "--baseline-throughput":
        argv += ["--baseline", "g5.xlarge", "--baseline-throughput", "3"]
    if command == "cost serve" and flag == "--baseline-throughput":
        argv += ["--baseline", "g5.xlarge"]
    if flag in argv:  # replace the base's own value
        i = argv.index(flag)
        return [*argv[:i], f"{flag}={value}", *argv[i + 2 :]]
    return [*argv, f"{flag}={value}"]


def _flag_values(key: str) -> st.SearchStrategy[str]:
    specs = R.FLAGS[key]
    spec = specs[0]
    r = R.UNITS[spec.unit]
    number = S.edge_values(float(r.lo), float(r.hi), r.integer).map(
        lambda v: repr(v) if isinstance(v, float) else str(v)
    )
    one = st.one_of(number, st.sampled_from(S.NAN_INF_SPELLINGS))
    if len(specs) == 1:
        return one
    rest = [R.UNITS[s.unit].example for s in specs[1:]]
    return one.map(lambda v: ",".join([v, *rest]))


@pytest.mark.parametrize("key", sorted(R.FLAGS))
def test_fuzz_every_numeric_flag(box: Sandbox, key: str) -> None:

    @_settings("range_flags", key, 1)
    @given(value=_flag_values(key))
    def case(value: str) -> None:
        box.reset()
        (box.work / "w.toml").write_text(TINY_WORKLOAD)
        argv = _argv(key, value, box)
        outcome = run(box, lambda: cli_main(argv), cli=True)
        why = R.flag_problem(key, value)
        extra = echoed_controls(outcome.out + outcome.err)
        if why is not None and outcome.code != 2:
            extra.append(f"the table refuses {value!r} ({why}) but the command exited {outcome.code}")
        _check("range_flags", key, outcome, allowed=(2,) if why else (0, 2), extra=extra)

    case()


# ----------------------------------------------------------------------------------- every workload field
def _fields() -> dict[tuple[str, ...], R.Spec]:
    from chipswap.plan.workload_file import numeric_fields

    return numeric_fields()


FIELDS = _fields()
TRAINING_KEYS = ("job", "figures.<instance>.run_hours", "figures.<instance>.tokens_per_s")


def _template(key: tuple[str, ...]) -> dict[str, Any]:
    dotted = ".".join(key)
    return copy.deepcopy(TRAINING if dotted.startswith(TRAINING_KEYS) else SERVING)


def _place(doc: dict[str, Any], key: tuple[str, ...], value: Any) -> dict[str, Any]:
    """`doc` with `value` at `key` ("<instance>" -> a candidate), creating tables, replacing an exclusive
    sibling (requests_per_s / speed_factor, hours / speed_factor) so the field itself is what is judged."""
    instance = doc["targets"]["candidates"][0]
    path = [instance if p == "<instance>" else p for p in key]
    if path[0] == "figures":
        name, field = path[2], path[3]
        base = {"throughput": "requests/s", "ttft_p99": "ms", "e2e_p99": "ms", "tokens_per_s": "tokens/s",
                "run_hours": "h"}[name]
        figure = {"value": 1.0, "unit": base, "source": "measured", field: value}
        doc.setdefault("figures", {}).setdefault(instance, {})[name] = figure
        return doc
    if len(path) > 2 and path[-2] == instance:  # a candidate's table
        table = {path[-1]: value}
        if path[-1] == "p99_ms":
            table["requests_per_s"] = 1.0
        node = doc
        for p in path[:-2]:
            node = node.setdefault(p, {})
        node[instance] = table
        return doc
    node = doc
    for p in path[:-1]:
        node = node.setdefault(p, {})
    node[path[-1]] = value
    return doc


@pytest.mark.parametrize("key", [pytest.param(k, id=".".join(k)) for k in sorted(FIELDS)])
def test_fuzz_every_workload_number(box: Sandbox, key: tuple[str, ...]) -> None:
    """A subnormal and a value past the unit's largest in every field (refused as it is read, so cheap);
    `make fuzz` (CHIPSWAP_FUZZ_SCALE > 1) adds drawn edge values, each a whole plan."""
    spec = FIELDS[key]
    r = R.UNITS[spec.unit]
    name = ".".join(key)

    def one(value: Any) -> None:
        box.reset()
        doc = _place(_template(key), key, value)
        f = box.work / "workload.toml"
        f.write_bytes(S.to_toml(doc))
        argv = ["plan", str(f), "--no-aws", "--out", str(box.out / "report")]
        outcome = run(box, lambda: cli_main(argv), cli=True)
        extra = echoed_controls(outcome.out + outcome.err)
        refused = R.problem(value, spec) is not None
        if refused and outcome.code != 2:
            extra.append(f"{name} = {value!r} is outside its unit but the plan exited {outcome.code}")
        _check("range_fields", name, outcome, allowed=(2,) if refused else (0, 2), extra=extra)

    for value in (5e-324, int(r.hi) * 10 if r.integer else float(r.hi) * 10):
        one(value)
    if SCALE > 1:

        @_settings("range_fields", name, 0.25)
        @given(value=S.edge_values(float(r.lo), float(r.hi), r.integer))
        def case(value: Any) -> None:
            one(value)

        case()


# ---------------------------------------------------------------------------------------- extreme ratios
def _bounds(key: tuple[str, ...]) -> tuple[float, float]:
    """The numbers a field takes: its unit's range narrowed by the field's own gt/ge/le."""
    import annotated_types as at

    from chipswap.plan import workload as W
    from chipswap.plan.workload_file import _submodel

    r = R.UNITS[FIELDS[key].unit]
    lo, hi = float(r.lo), float(r.hi)
    model: Any = W.Workload
    field = None
    for part in key:
        if part == "<instance>":
            continue
        if part not in model.model_fields:
            return lo, hi  # figures.<instance>.<figure>.value
        field = model.model_fields[part]
        model = _submodel(field.annotation) or model
    for m in field.metadata if field is not None else ():
        if isinstance(m, at.Le):
            hi = min(hi, float(m.le))
        if isinstance(m, at.Gt):
            lo = max(lo, float(m.gt) * (1 + 1e-9) if m.gt else lo)
        if isinstance(m, at.Ge):
            lo = max(lo, float(m.ge))
    return lo, hi


def _leaf_keys(doc: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(path in the document, its key in FIELDS) for every number of `doc` that has a unit."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _leaf_keys(v, (*path, k))
    elif S._is_number(doc):
        for key in FIELDS:
            if len(key) == len(path) and all(a in (b, "<instance>") for a, b in zip(key, path, strict=True)):
                out.append((path, key))
    return out


@pytest.mark.slow  # a whole plan per input (make test-slow)
@pytest.mark.parametrize("template", ["serving", "training"])
def test_fuzz_extreme_ratios(box: Sandbox, template: str) -> None:
    """Every number of a workload at an edge of what its field accepts, all at once."""
    base = SERVING if template == "serving" else TRAINING
    leaves = _leaf_keys(base)
    assert len(leaves) >= 8

    @_settings("range_ratios", template, 3)
    @given(edges=st.lists(st.sampled_from(["lo", "hi", "mid"]), min_size=len(leaves), max_size=len(leaves)))
    def case(edges: list[str]) -> None:
        box.reset()
        doc = copy.deepcopy(base)
        for (path, key), edge in zip(leaves, edges, strict=True):
            lo, hi = _bounds(key)
            value: Any = {"lo": lo, "hi": hi, "mid": (lo * hi) ** 0.5}[edge]
            node = doc
            for p in path[:-1]:
                node = node[p]
            if isinstance(node[path[-1]], int):  # an integer field stays one
                value = int(value) if edge != "lo" else int(-(-lo // 1))
            node[path[-1]] = value
        f = box.work / "workload.toml"
        f.write_bytes(S.to_toml(doc))
        argv = ["plan", str(f), "--no-aws", "--out", str(box.out / "report")]
        outcome = run(box, lambda: cli_main(argv), cli=True)
        extra = echoed_controls(outcome.out + outcome.err)
        _check("range_ratios", template, outcome, allowed=(0, 2), extra=extra)

    case()


@pytest.mark.parametrize("command", ["cost job", "cost serve"])
def test_fuzz_cost_flags_at_their_edges(box: Sandbox, command: str) -> None:
    """Every numeric flag of a cost command at once, each at an edge of its unit (or 0 where allowed)."""
    keys = [k for k in R.FLAGS if k.startswith(command + " --") and len(R.FLAGS[k]) == 1]
    keys = [k for k in keys if not k.endswith(("--baseline-rate",))]

    @_settings("range_cost", command, 3)
    @given(edges=st.lists(st.sampled_from(["lo", "hi", "zero"]), min_size=len(keys), max_size=len(keys)))
    def case(edges: list[str]) -> None:
        box.reset()
        argv = list(BASE_ARGV[command])
        if command == "cost serve":
            argv += ["--baseline", "g5.xlarge"]
        for key, edge in zip(keys, edges, strict=True):
            spec = R.FLAGS[key][0]
            r = R.UNITS[spec.unit]
            d = {"lo": r.lo, "hi": r.hi, "zero": 0 if spec.zero else r.lo}[edge]
            flag = key.rsplit(" ", 1)[1]
            if flag in argv:
                i = argv.index(flag)
                del argv[i : i + 2]
            argv.append(f"{flag}={R.show(d)}")
        outcome = run(box, lambda: cli_main(argv), cli=True)
        extra = echoed_controls(outcome.out + outcome.err)
        _check("range_cost", command, outcome, allowed=(0, 2), extra=extra)

    case()

