"""The plan's readiness memo (chipswap.plan.readiness_memo, issue 38): a re-plan of the same model reads the
result it computed before; anything the result depends on changes the key; an entry that the user's key did
not sign, that was edited, or that is malformed is ignored (the check runs again); factories are never
memoised."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chipswap.models.spec import ModelRef
from chipswap.plan import readiness as stage
from chipswap.plan import readiness_memo as memo
from chipswap.plan.result import ReadinessSummary

FINDING = {"rule": "r1", "severity": "blocker", "title": "t", "other_locations": ["a:1", "b:2"], "count": 2}


@pytest.fixture
def memo_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "memo"
    monkeypatch.setenv(memo.ENV_VAR, str(folder))
    monkeypatch.setenv("CHIPSWAP_CACHE_KEY", str(tmp_path / "key" / "cache.key"))
    return folder


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Stand in the real check (its own tests cover it): count the calls, return a summary with findings."""
    calls: list[int] = []

    def checked(*args: Any) -> ReadinessSummary:
        seq = args[3]
        calls.append(seq)
        return ReadinessSummary(
            True, "checked", "inf2", "2.32", f"batch 1 x {seq}", 1, 1, 87.5, (FINDING,), 9.5, "# md",
            {"inf2": (1, 87.5, (FINDING,)), "trn2": (0, None, ())},
        )  # fmt: skip

    monkeypatch.setattr(stage, "_checked", checked)
    monkeypatch.setattr(stage, "targets", lambda s: ("inf2", "trn2"))
    return calls


def setup_for(ref: ModelRef, kind: str = "serving") -> Any:
    model = SimpleNamespace(task="causal-lm", full_check=False)
    return SimpleNamespace(workload=SimpleNamespace(model=model), model=ref, kind=kind)


def llama(layers: int = 32) -> ModelRef:
    return ModelRef("preset", "llama-3-8b", {"model_type": "llama", "num_hidden_layers": layers})


SHAPES = SimpleNamespace(sequence_buckets=(512, 2048))


def test_a_re_plan_reads_the_result_back(memo_dir: Path, checks: list[int]) -> None:
    first = stage.readiness(setup_for(llama()), SHAPES)
    assert checks == [2048] and len(list(memo_dir.glob("*.json"))) == 1
    again = stage.readiness(setup_for(llama()), SHAPES)
    assert checks == [2048]  # not checked again
    assert again.note.startswith(first.note) and "readiness memo" in again.note
    from dataclasses import replace

    assert replace(again, note=first.note) == first  # every field, tuples and all, as computed


@pytest.mark.parametrize(
    "change",
    [
        lambda: (setup_for(llama(layers=40)), SHAPES),  # another config
        lambda: (setup_for(llama()), SimpleNamespace(sequence_buckets=(512, 4096))),  # another shape
        lambda: (setup_for(llama(), kind="training"), SHAPES),  # a training step
    ],
)
def test_what_the_result_depends_on_is_in_the_key(memo_dir: Path, checks: list[int], change: Any) -> None:
    stage.readiness(setup_for(llama()), SHAPES)
    stage.readiness(*change())
    assert len(checks) == 2


def test_an_edited_or_foreign_entry_is_ignored(memo_dir: Path, checks: list[int], tmp_path: Path) -> None:
    stage.readiness(setup_for(llama()), SHAPES)
    (entry,) = memo_dir.glob("*.json")
    doc = json.loads(entry.read_text())
    doc["result"]["blockers"] = 0  # a planted "no blockers", tag left as it was
    entry.write_text(json.dumps(doc))
    assert stage.readiness(setup_for(llama()), SHAPES).blockers == 1
    assert len(checks) == 2
    # signed with another key: ignored as well
    from chipswap.compile.signing import TAG_FIELD, tag

    doc["result"]["blockers"] = 0
    doc[TAG_FIELD] = tag(b"k" * 32, doc)
    entry.write_text(json.dumps(doc))
    assert stage.readiness(setup_for(llama()), SHAPES).blockers == 1
    for junk in ("{", "[]", json.dumps({**doc, "result": [1]}), "x" * (memo.MAX_ENTRY_BYTES + 1)):
        entry.write_text(junk)
        assert stage.readiness(setup_for(llama()), SHAPES).blockers == 1
    assert len(checks) == 7


def test_off_and_factories_are_never_memoised(
    memo_dir: Path, checks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    factory = ModelRef("factory", "mymodels:build", {})
    stage.readiness(setup_for(factory), SHAPES)
    stage.readiness(setup_for(factory), SHAPES)
    assert len(checks) == 2 and not memo_dir.exists()
    monkeypatch.setenv(memo.ENV_VAR, "off")
    stage.readiness(setup_for(llama()), SHAPES)
    stage.readiness(setup_for(llama()), SHAPES)
    assert len(checks) == 4 and not memo_dir.exists()


@pytest.mark.parametrize("under", [True, False])
def test_an_unwritable_memo_only_means_checking_again(
    tmp_path: Path, checks: list[int], monkeypatch: pytest.MonkeyPatch, under: bool
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    # a folder under a file cannot be made; a file where the folder should be is not one
    monkeypatch.setenv(memo.ENV_VAR, str(blocker / "memo" if under else blocker))
    monkeypatch.setenv("CHIPSWAP_CACHE_KEY", str(tmp_path / "key" / "cache.key"))
    stage.readiness(setup_for(llama()), SHAPES)
    stage.readiness(setup_for(llama()), SHAPES)
    assert len(checks) == 2
