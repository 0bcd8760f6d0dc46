"""The workload file: the examples validate; bad input is one line naming file, key and expected form."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from chipswap.cli.plan import EXAMPLES, example_path
from chipswap.errors import ChipswapError
from chipswap.plan.workload import Workload
from chipswap.plan.workload_file import load_workload, parse_workload, schema_help


def example_dict(name: str = "llama-serving") -> dict[str, Any]:
    return tomllib.loads(example_path(name).read_text())


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "w.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_bundled_examples_validate(name: str) -> None:
    wl = load_workload(example_path(name))
    assert wl.targets.candidates and wl.model is not None  # every figure is projected from the model
    if wl.kind == "serving":
        assert wl.traffic is not None and wl.slo.any
        assert wl.throughput is None and not wl.figures  # nothing about speed typed in
    else:
        assert wl.job is not None and wl.job.job_tokens is not None


def test_finetune_example_is_the_seed_worked_example() -> None:
    wl = load_workload(example_path("finetune"))
    assert wl.fleet.instance == "p5.48xlarge"
    assert wl.job is not None and wl.job.gpu_hours == 20 and wl.job.gpu_source == "seed example"
    trn = wl.job.candidates["trn1.32xlarge"]
    assert trn.hours == 26 and trn.source == "seed example"
    assert wl.porting.engineer_days == 3


def _err(data: dict[str, Any]) -> str:
    with pytest.raises(ChipswapError) as ei:
        parse_workload(data, "w.toml")
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith("w.toml: ")
    return msg


def test_unknown_key_is_named() -> None:
    d = example_dict()
    d["fleet"]["colour"] = "blue"
    msg = _err(d)
    assert "unknown key fleet.colour" in msg


def test_unknown_top_level_table_is_named() -> None:
    d = example_dict()
    d["budget"] = {"usd": 1}
    assert "unknown key budget" in _err(d)


def test_wrong_type_names_key_and_expected_form() -> None:
    d = example_dict()
    d["fleet"]["count"] = "five"
    msg = _err(d)
    assert "fleet.count" in msg and "expected an integer" in msg and "'five'" in msg


def test_wrong_literal_lists_choices() -> None:
    d = example_dict()
    d["pricing"]["term"] = "forever"
    msg = _err(d)
    assert "pricing.term" in msg and "'on-demand'" in msg and "'3yr'" in msg


def test_missing_required_key() -> None:
    d = example_dict()
    del d["porting"]
    assert "porting: missing" in _err(d)


def test_negative_days_rejected() -> None:
    d = example_dict()
    d["porting"]["engineer_days"] = -1
    msg = _err(d)
    assert "porting.engineer_days" in msg and ">= 0" in msg


@pytest.mark.parametrize(
    ("slo", "expect"),
    [
        ({"p99_ms": 0}, "slo.p99_ms: expected a number > 0"),
        ({"p99_ms": -5}, "slo.p99_ms: expected a number > 0"),
        ({"p99_ms": 100, "p50_ms": 200}, "slo: expected p50_ms <= p99_ms"),
    ],
)
def test_impossible_slo(slo: dict[str, float], expect: str) -> None:
    d = example_dict()
    d["slo"] = slo
    assert expect in _err(d)


def test_trace_and_steady_rate_are_exclusive() -> None:
    d = example_dict()
    d["traffic"]["steady_rps"] = 3.0
    assert "traffic: expected exactly one of trace, steady_rps" in _err(d)


def test_candidate_without_throughput_is_named() -> None:
    """Without a [model] nothing can be projected, so every candidate needs a stated figure."""
    d = example_dict()
    del d["model"]
    d["targets"]["candidates"].append("inf2.8xlarge")
    msg = _err(d)
    assert 'throughput.candidates: expected a table [throughput.candidates."inf2.xlarge"]' in msg
    assert "or a [model] to project it" in msg


def test_candidate_without_throughput_is_projected_with_a_model() -> None:
    d = example_dict()
    d["targets"]["candidates"].append("inf2.8xlarge")
    assert "inf2.8xlarge" in parse_workload(d, "w.toml").targets.candidates


def test_training_needs_a_job_table() -> None:
    d = example_dict("finetune")
    del d["job"]
    assert "job: expected a [job] table" in _err(d)


def test_not_toml(tmp_path: Path) -> None:
    p = write(tmp_path, "title = \n")
    with pytest.raises(ChipswapError, match=r"w.toml is not valid TOML"):
        load_workload(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ChipswapError, match="workload file not found"):
        load_workload(tmp_path / "nope.toml")


def _fields(model: type[BaseModel]) -> list[tuple[str, str]]:
    out = []
    for name, f in model.model_fields.items():
        assert f.description, f"{model.__name__}.{name} has no description"
        out.append((name, f.description))
        ann = f.annotation
        for sub in (ann, *getattr(ann, "__args__", ())):
            for cand in (sub, *getattr(sub, "__args__", ())):
                if isinstance(cand, type) and issubclass(cand, BaseModel):
                    out.extend(_fields(cand))
    return out


def test_every_field_is_documented_and_in_the_help() -> None:
    text = schema_help()
    fields = _fields(Workload)
    assert len(fields) > 50
    for name, desc in fields:
        assert desc in text, f"description of {name} missing from the help"
    assert 'throughput.candidates."<instance>".speed_factor' in text
    assert "fleet.count = integer (default 1)" in text


# ------------------------------------------------------------------------------- QA: errors name the real key


def test_typo_key_is_reported_before_the_missing_key_it_hides() -> None:
    d = example_dict("finetune")
    d["job"]["gpu_hour"] = d["job"].pop("gpu_hours")
    msg = _err(d)
    assert "unknown key job.gpu_hour; did you mean gpu_hours?" in msg
    assert "missing" not in msg


def test_typo_table_is_reported_before_the_missing_table() -> None:
    d = example_dict("finetune")
    d["portng"] = d.pop("porting")
    msg = _err(d)
    assert "unknown key portng; did you mean porting?" in msg


def test_unknown_key_in_a_candidate_table_suggests_its_fields() -> None:
    d = example_dict("finetune")
    d["job"]["candidates"]["trn1.32xlarge"]["hourz"] = 3
    assert "did you mean hours?" in _err(d)


def test_unknown_region_is_named_with_did_you_mean() -> None:
    d = example_dict()
    d["fleet"]["region"] = "us-eats-1"
    msg = _err(d)
    assert "fleet.region: unknown region 'us-eats-1'; did you mean us-east-1?" in msg
    assert "fleet.term" not in msg


def test_typo_candidate_is_named_with_closest_instances() -> None:
    d = example_dict("finetune")
    d["targets"]["candidates"] = ["trn1.32xlarg"]
    msg = _err(d)
    assert "targets.candidates[0]: unknown instance type 'trn1.32xlarg'" in msg
    assert "did you mean trn1.32xlarge" in msg
    assert "(top level)" not in msg


def test_typo_candidate_table_key_is_named() -> None:
    d = example_dict("finetune")
    d["job"]["candidates"] = {"trn1.32xlarg": d["job"]["candidates"]["trn1.32xlarge"]}
    msg = _err(d)
    assert msg.startswith('w.toml: job.candidates: expected a table [job.candidates."trn1.32xlarge"]')
    assert "'trn1.32xlarg'" in msg


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_hours_name_file_and_key(value: float) -> None:
    d = example_dict("finetune")
    d["job"]["gpu_hours"] = value
    msg = _err(d)
    assert "job.gpu_hours: expected a finite number" in msg


def test_non_finite_from_toml_file(tmp_path: Path) -> None:
    text = example_path("finetune").read_text().replace("gpu_hours = 20", "gpu_hours = inf")
    p = write(tmp_path, text)
    with pytest.raises(ChipswapError, match=r"w.toml: job.gpu_hours: expected a finite number"):
        load_workload(p)


# ----------------------------------------------------------------------------------------- QA: the CLI


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from chipswap.cli.main import main

    with pytest.raises(SystemExit) as ei:
        main(argv)
        raise SystemExit(0)
    out, err = capsys.readouterr()
    return int(ei.value.code or 0), out, err


def test_plan_on_a_directory_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(["plan", str(tmp_path)], capsys)
    assert code == 2
    assert "is a directory; pass a workload .toml file" in err and "permissions" not in err
    assert err.count("\n") == 1


def test_plan_out_is_a_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "report"
    f.write_text("x")
    code, _, err = _cli(["plan", "--out", str(f)], capsys)
    assert code == 2
    assert f"--out {f} is a file; pass a folder" in err


def test_plan_help_names_close_margin_and_shows_no_duplicate_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    _, out, _ = _cli(["plan", "--help"], capsys)
    assert "--close-margin PERCENT" in out
    assert "--close-margin <str>" not in out
    flat = " ".join(out.split())
    assert "(default 20). [default" not in flat and ") [default: 20]" not in flat


def test_workload_help_json_is_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    code, out, _ = _cli(["workload-help", "--json"], capsys)
    assert code == 0
    schema = json.loads(out)
    assert schema == json.loads(json.dumps(Workload.model_json_schema(), default=str))
    assert "fleet" in schema["properties"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_print_example_round_trips(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["workload-help", "--example", name], ["plan", "--print-example", name]):
        code, out, _ = _cli(argv, capsys)
        assert code == 0
        p = tmp_path / "my.toml"
        p.write_text(out)
        assert load_workload(p) == load_workload(example_path(name))


def test_print_example_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(["workload-help", "--example", "llama-servng"], capsys)
    assert code == 2 and "did you mean llama-serving" in err


def test_trace_column_hint_points_at_the_workload_table() -> None:
    from chipswap.cli.plan import workload_trace_hint

    msg = (
        "t.csv: no prompt_tokens column found among a, b; "
        "name it with --prompt-col COLUMN (recognised: x, ...)"
    )
    out = workload_trace_hint(msg, Path("w.toml"))
    assert "--prompt-col" not in out
    assert 'name it in w.toml with [traffic.columns] prompt_tokens = "COLUMN"' in out
    assert workload_trace_hint("other problem; fix it", Path("w.toml")) == "other problem; fix it"


def test_plan_with_a_trace_missing_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    text = example_path("llama-serving").read_text().replace('trace = "bundled"', 'trace = "t.csv"')
    assert 'trace = "t.csv"' in text
    p = write(tmp_path, text)
    code, _, err = _cli(["plan", str(p), "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert "[traffic.columns] prompt_tokens" in err and "--prompt-col" not in err


def test_trace_without_timestamps_is_an_error() -> None:
    from types import SimpleNamespace

    from chipswap.cli.plan import _require_arrival_rates

    wl = load_workload(example_path("llama-serving"))
    no_ts = SimpleNamespace(traffic=SimpleNamespace(mean_rps=None))
    with pytest.raises(ChipswapError, match="traffic.trace has no timestamp column") as ei:
        _require_arrival_rates(no_ts, wl, Path("w.toml"))
    assert "[traffic.columns] timestamp" in str(ei.value) and "steady_rps" in str(ei.value)
    _require_arrival_rates(SimpleNamespace(traffic=SimpleNamespace(mean_rps=2.5)), wl, Path("w.toml"))


# ------------------------------------------------------------------------- QA: every reason is shown


def _fake_result(**extra: Any) -> Any:
    from types import SimpleNamespace

    from chipswap.verdict.rules import Reason, Verdict

    reasons = (
        Reason("stable", "pass", "neuron", "stable model", "changes", 0.0, "<= 1"),
        Reason(
            "overflow", "fail", "gpu", "12% of requests overflow the largest shape", "overflow", 12.0, "<= 5%"
        ),
    )
    econ = (Reason("saving", "pass", None, "saving clear", "saving", 40.0, ">= 20%"),)
    v = Verdict("move serving to Inferentia", "it pays", reasons, econ)
    base = {
        "verdict": v,
        "monthly_now": SimpleNamespace(value=None),
        "fleet_count": 2,
        "fleet_instance": "g6e.12xlarge",
        "best": None,
        "flips": (),
        "notes": ("GPU fleet is oversized: 3x the peak",),
    }
    base.update(extra)
    return SimpleNamespace(**base)


def test_terminal_summary_shows_every_reason_and_note() -> None:
    from chipswap.cli.plan import summary_lines

    r = _fake_result()
    text = "\n".join(summary_lines(r))
    for x in (*r.verdict.reasons, *r.verdict.economics):
        assert x.line() in text
    assert "GPU fleet is oversized: 3x the peak" in text


def test_report_reason_rows_are_generic() -> None:
    from types import SimpleNamespace

    from chipswap.report.html import reason_rows, report_notes

    r = _fake_result(warnings=("assumed throughput",))
    v = SimpleNamespace(
        reasons=r.verdict.reasons, economics=r.verdict.economics, cautions=(r.verdict.reasons[1],)
    )
    rows = reason_rows(v)
    assert [x.rule for x in rows] == ["stable", "overflow", "saving"]  # each once
    assert report_notes(r) == ["GPU fleet is oversized: 3x the peak", "assumed throughput"]
