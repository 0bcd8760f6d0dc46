"""Fuzzed model configs through `chipswap check`: exit 2 with one line for every malformed config, never a
traceback, never exit 1 from a crash (exit 1 means "the check ran and found blockers" to a CI gate).

Hypothesis mutates small valid configs of several architectures (wrong types, missing keys, inconsistent or
wrong-length lists, absurd sizes, unknown architectures). Seeded (derandomized) and bounded so CI stays fast;
set CHIPSWAP_FUZZ_EXAMPLES to run more.
"""

from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli_helpers import run_inproc
from tests.zoo_configs import CONFIGS

BASES = {
    "bert": {
        "model_type": "bert",
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "vocab_size": 128,
        "max_position_embeddings": 32,
    },
    "llama": {
        "model_type": "llama",
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "vocab_size": 128,
        "max_position_embeddings": 32,
    },
    "swin": CONFIGS["swin"],
    "convnext": CONFIGS["convnext"],
    "wav2vec2": CONFIGS["wav2vec2"],
    "t5": {
        "model_type": "t5",
        "d_model": 32,
        "d_ff": 64,
        "num_layers": 1,
        "num_heads": 4,
        "d_kv": 8,
        "vocab_size": 128,
    },
}
EXAMPLES = int(os.environ.get("CHIPSWAP_FUZZ_EXAMPLES", "24"))

_bad_values = st.one_of(
    st.sampled_from(["12", "abc", "", "1e3", "None", "[2, 2]"]),
    st.sampled_from([None, True, False, -1, 0, -(10**6), 10**7, 10**15, 1.5, -0.5, 1e300]),
    st.lists(st.one_of(st.integers(-3, 5), st.text(max_size=3)), max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


@st.composite
def mutated_configs(draw):
    base_name = draw(st.sampled_from(sorted(BASES)))
    cfg = json.loads(json.dumps(BASES[base_name]))
    for _ in range(draw(st.integers(1, 3))):
        keys = sorted(cfg)
        op = draw(st.sampled_from(["retype", "delete", "list", "unknown_type", "add"]))
        key = draw(st.sampled_from(keys))
        if op == "retype":
            cfg[key] = draw(_bad_values)
        elif op == "delete" and key != "model_type":
            del cfg[key]
        elif op == "list":
            lists = [k for k in keys if isinstance(cfg[k], list)]
            if lists:
                k = draw(st.sampled_from(lists))
                cfg[k] = draw(
                    st.one_of(
                        st.just(cfg[k][:-1]),
                        st.just(cfg[k] + cfg[k]),
                        st.just([]),
                        st.just([str(v) for v in cfg[k]]),
                    )
                )
            else:
                cfg[key] = [cfg[key], cfg[key]]
        elif op == "unknown_type":
            cfg["model_type"] = draw(st.sampled_from(["bertt", "no-such-arch", "", "../bert", 7]))
        else:
            cfg[draw(st.text(min_size=1, max_size=8))] = draw(_bad_values)
    return base_name, cfg


def _check(tmp_path, capsys, cfg) -> tuple[int, str, str]:
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg, allow_nan=True))
    return run_inproc(capsys, "check", str(p), "--json")


def _assert_clean_outcome(code: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err
    assert code in (0, 1, 2), (code, err)
    if code == 2:
        assert err.startswith("chipswap: error: ") and err.count("\n") == 1, err
    else:
        report = json.loads(out)  # a finished check: its exit code says what it found
        assert report["exit_code"] == code
        if code == 1:
            assert report["verdict"] == "blocked" and any(
                f["severity"] == "blocker" for f in report["findings"]
            )
            # a crash inside chipswap is never reported as a finding
            assert not any(f["rule"] == "CHIP_TRACE_FAIL" for f in report["findings"]), report["findings"]


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=mutated_configs())
def test_fuzzed_configs_exit_cleanly(case, tmp_path, capsys):
    _name, cfg = case
    _assert_clean_outcome(*_check(tmp_path, capsys, cfg))


@pytest.mark.parametrize(
    "base,change,needle",
    [
        ("bert", {"hidden_size": "32"}, "hidden_size must be a number"),
        ("bert", {"num_hidden_layers": 1.5}, "whole number"),
        ("bert", {"num_attention_heads": True}, "must be a number"),
        ("llama", {"vocab_size": None, "max_position_embeddings": -4}, "max_position_embeddings"),
        ("swin", {"num_heads": [2]}, "swin"),  # a list shorter than the number of stages
        ("convnext", {"hidden_sizes": [16]}, "convnext"),  # fewer sizes than num_stages
        ("swin", {"depths": [1, "2"]}, "depths[1] must be a number"),
        ("bert", {"model_type": "no-such-arch"}, "no-such-arch"),
        ("bert", {"model_type": None}, "model_type"),
        ("wav2vec2", {"conv_stride": [5]}, "conv"),
        ("t5", {"num_layers": 10**9}, "num_layers"),
        # read as transformers reads it (non-finite floats allowed in a config), then refused as a size
        ("llama", {"hidden_size": math.inf}, "hidden_size must be a whole number, got inf"),
    ],
)
def test_known_malformed_configs_are_one_line_exit_2(base, change, needle, tmp_path, capsys):
    cfg = {**BASES[base], **change}
    code, out, err = _check(tmp_path, capsys, cfg)
    assert code == 2, (code, out[:300], err)
    assert err.startswith("chipswap: error: ") and err.count("\n") == 1 and needle in err, err
    assert "Traceback" not in out + err


@pytest.mark.parametrize(
    "text,needle",
    [
        ('{"model_type": "bert", "hidden_size": NaN}', "hidden_size must be a whole number, got nan"),
        ("[" * 200 + "]" * 200, "nested deeper"),
        ('"just a string"', "not a JSON object"),
        ("\xff\xfe not utf8", "UTF-8"),
    ],
)
def test_broken_config_files_are_one_line_exit_2(text, needle, tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_bytes(text.encode("latin-1"))
    code, _, err = run_inproc(capsys, "check", str(p))
    assert code == 2 and needle in err and err.count("\n") == 1, err
