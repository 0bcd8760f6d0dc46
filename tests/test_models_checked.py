"""The memo of config.json files transformers accepted (chipswap.models.checked): a config is built on the
meta device once, then recognised by its hash; a rejected config is checked (and refused) every time; any
change to the config, its task or the checks means a new check."""

from __future__ import annotations

import json

import pytest

from chipswap.errors import ChipswapError
from chipswap.models import checked, resolve
from tests.model_helpers import count_builds

CFG = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 128, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
}  # fmt: skip


@pytest.fixture
def builds(tmp_path, monkeypatch):
    monkeypatch.setattr(resolve, "accepts", lambda *a: False)  # the memo is for configs transformers checks
    return count_builds(tmp_path, monkeypatch)


def _write(tmp_path, cfg, name="config.json"):
    d = tmp_path / name.replace(".json", "")
    d.mkdir(exist_ok=True)
    f = d / "config.json"
    f.write_text(json.dumps(cfg))
    return f


def test_an_accepted_config_is_built_once_then_recognised(tmp_path, builds, monkeypatch):
    f = _write(tmp_path, CFG)
    a = resolve.resolve_model(str(f))
    assert builds == ["config"] and len(list((tmp_path / "memo").iterdir())) == 1
    monkeypatch.setattr(checked, "_SEEN", set())  # a new process: the marker on disk is what it finds
    b = resolve.resolve_model(str(f))
    assert builds == ["config"] and a == b
    other = _write(tmp_path, {**CFG, "num_hidden_layers": 3}, "other.json")
    resolve.resolve_model(str(other))  # a changed config is checked again
    assert builds == ["config", "other"]
    resolve.resolve_model(str(f), task="base")  # so is the same config for another task
    assert builds == ["config", "other", "config"]


def test_a_rejected_config_is_refused_every_time(tmp_path, builds):
    f = _write(tmp_path, {**CFG, "num_attention_heads": 5})  # 32 is not a multiple of 5
    for _ in range(2):
        with pytest.raises(ChipswapError, match="transformers rejects the config"):
            resolve.resolve_model(str(f))
    assert not (tmp_path / "memo").exists()


def test_the_cheap_checks_still_run_on_a_remembered_config(tmp_path, builds, monkeypatch):
    f = _write(tmp_path, CFG)
    resolve.resolve_model(str(f))
    monkeypatch.setattr(checked, "config_key", lambda cfg, task: "x" * 64)  # everything looks remembered
    checked.remember("x" * 64)
    f.write_text(json.dumps({**CFG, "hidden_size": 10**12}))
    with pytest.raises(ChipswapError, match="hidden_size"):
        resolve.resolve_model(str(f))


def test_the_key_covers_the_checking_code_and_transformers(monkeypatch):
    k = checked.config_key(CFG, "causal-lm")
    assert k == checked.config_key(dict(reversed(list(CFG.items()))), "causal-lm")  # key order is not content
    monkeypatch.setattr(checked, "_SALT", ["another transformers"])
    assert checked.config_key(CFG, "causal-lm") != k


def test_an_unwritable_memo_only_means_checking_again(tmp_path, builds, monkeypatch):
    (tmp_path / "memo").write_text("a file where the folder should be")
    f = _write(tmp_path, CFG)
    resolve.resolve_model(str(f))
    monkeypatch.setattr(checked, "_SEEN", set())
    resolve.resolve_model(str(f))
    assert len(builds) == 2
