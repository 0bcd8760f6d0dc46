"""The workload file: the examples validate; bad input is one line naming file, key and expected form."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from chipswap.commands.plan import EXAMPLES, example_path
from chipswap.errors import ChipswapError
from chipswap.workload import Workload, load_workload, parse_workload, schema_help


def example_dict(name: str = "llama-serving") -> dict[str, Any]:
    return tomllib.loads(example_path(name).read_text())


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "w.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_bundled_examples_validate(name: str) -> None:
    wl = load_workload(example_path(name))
    assert wl.targets.candidates
    if wl.kind == "serving":
        assert wl.throughput is not None and wl.traffic is not None
    else:
        assert wl.job is not None


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
    assert "fleet.colour" in msg and "no such key" in msg


def test_unknown_top_level_table_is_named() -> None:
    d = example_dict()
    d["budget"] = {"usd": 1}
    assert "budget: no such key" in _err(d)


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
    d = example_dict()
    d["targets"]["candidates"].append("inf2.8xlarge")
    msg = _err(d)
    assert 'throughput.candidates: expected a table [throughput.candidates."inf2.8xlarge"]' in msg


def test_training_needs_a_job_table() -> None:
    d = example_dict("finetune")
    del d["job"]
    assert "job: expected a [job] table" in _err(d)


def test_not_toml(tmp_path: Path) -> None:
    p = write(tmp_path, "title = \n")
    with pytest.raises(ChipswapError, match=r"w.toml: not valid TOML"):
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
