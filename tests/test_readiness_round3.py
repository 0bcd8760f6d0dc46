"""Readiness round 3: the architectures teams bring next, configs as transformers writes them, graphs that
grow with the sequence, and findings that agree between PyTorch and JAX.

The zoo below is written as transformers itself writes each config (`Config(...).save_pretrained`), at the
real depth where a depth-dependent field is the point (DINOv2 and ViTDet at 12 layers) and otherwise
small. Each entry carries the finding expected *before* the run, with the reason in docs/readiness.md
("Zoo, round 3").
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chipswap.errors import ChipswapError
from chipswap.readiness.capture.growth import ISSUE_KIND, MIN_EXTRA_NODES, growth_issue
from tests.cli_helpers import run_cli

_SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 512}


def _configs():
    import transformers as T

    moe = {
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "first_k_dense_replace": 1,
    }
    mla = {"kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16}
    return {
        # name: (config, expected rule ids above info, expected "checked" words)
        "dinov2": (T.Dinov2Config(**{**_SMALL, "image_size": 56, "patch_size": 14}), set(), "2-layer copy"),
        "vitdet": (
            T.VitDetConfig(
                hidden_size=64, num_attention_heads=4, image_size=64, patch_size=16, pretrain_image_size=64
            ),
            set(),
            "2-layer copy",
        ),
        "whisper-large-v3-shape": (
            T.WhisperConfig(
                d_model=64,
                encoder_layers=32,
                decoder_layers=32,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=128,
                decoder_ffn_dim=128,
                num_mel_bins=128,
                vocab_size=512,
                max_source_positions=1500,
                pad_token_id=0,
                bos_token_id=1,
                eos_token_id=2,
                decoder_start_token_id=1,
            ),
            set(),
            "2-layer copy",
        ),
        "gemma2": (
            T.Gemma2Config(**_SMALL, num_hidden_layers=4, num_key_value_heads=2, head_dim=16),
            set(),
            "full",
        ),
        "gemma3": (
            T.Gemma3TextConfig(**_SMALL, num_hidden_layers=6, num_key_value_heads=2, head_dim=16),
            set(),
            "full",
        ),
        "deepseek-v2-lite-shape": (
            T.DeepseekV2Config(
                **_SMALL,
                **moe,
                **mla,
                num_hidden_layers=3,
                num_key_value_heads=4,
                n_shared_experts=2,
                q_lora_rank=None,
                n_group=1,
                topk_group=1,
            ),
            {"CHIP_MOE_ROUTING"},
            "",
        ),
        "deepseek-v3-shape": (
            T.DeepseekV3Config(
                **_SMALL,
                **moe,
                **mla,
                num_hidden_layers=3,
                num_key_value_heads=4,
                n_shared_experts=1,
                q_lora_rank=32,
                n_group=2,
                topk_group=1,
            ),
            {"CHIP_MOE_ROUTING"},
            "",
        ),
        "gpt-oss": (
            T.GptOssConfig(
                **_SMALL, num_hidden_layers=2, num_key_value_heads=2, head_dim=16, num_local_experts=8
            ),
            {"CHIP_MOE_ROUTING"},
            "",
        ),
        "mamba": (
            T.MambaConfig(hidden_size=64, num_hidden_layers=4, vocab_size=512, state_size=8),
            {"CHIP_GRAPH_GROWS"},
            "",
        ),
        "mamba2": (
            T.Mamba2Config(
                hidden_size=64,
                num_hidden_layers=4,
                num_heads=4,
                head_dim=32,
                vocab_size=512,
                state_size=8,
                n_groups=1,
            ),
            set(),
            "2-layer copy",
        ),
        "recurrent-gemma": (
            T.RecurrentGemmaConfig(**_SMALL, lru_width=64, num_hidden_layers=3),
            {"CHIP_GRAPH_GROWS"},
            "",
        ),
    }


ZOO = (
    "dinov2",
    "vitdet",
    "whisper-large-v3-shape",
    "gemma2",
    "gemma3",
    "deepseek-v2-lite-shape",
    "deepseek-v3-shape",
    "gpt-oss",
    "mamba",
    "mamba2",
    "recurrent-gemma",
)
# The diffusion UNet of the issue's list is not covered: diffusers is not a chipswap dependency
# (docs/readiness.md).


def _written(tmp_path, name):
    cfg = _configs()[name][0]
    folder = tmp_path / name
    cfg.save_pretrained(folder)  # as transformers writes it (Mamba-2: {"__float__": "Infinity"})
    return folder / "config.json"


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_next_architectures_check_with_the_finding_written_down_before(name, tmp_path):
    from chipswap.readiness.check import run_check

    path = _written(tmp_path, name)
    _, expected, checked = _configs()[name]
    report = run_check(str(path))
    found = {f.rule for f in report.findings if f.severity in ("blocker", "slow", "warn")}
    # nothing beyond the expected finding except the dtype warnings every complex-rope model carries
    assert expected <= found, (name, found)
    assert found - expected <= {"NCC_EVRF004.c64"}, (name, found)
    assert checked in report.checked


@pytest.mark.slow
def test_mamba_and_recurrent_gemma_carry_the_growth_factor(tmp_path):
    from chipswap.readiness.check import run_check

    for name in ("mamba", "recurrent-gemma"):
        report = run_check(str(_written(tmp_path, name)))
        (entry,) = [f for f in report.findings_json() if f["rule"] == "CHIP_GRAPH_GROWS"]
        assert entry["severity"] == "warn"
        factor = float(entry["message"].split("(x", 1)[1].split(" ", 1)[0])
        assert 1.3 < factor < 2.0  # linear growth: a bit under 2x nodes for 2x tokens (the fixed part)


def test_a_transformer_graph_does_not_grow():
    assert growth_issue(16, 32, 201, 201, 128) is None


@given(
    fixed=st.integers(min_value=10, max_value=10_000),
    per_token=st.integers(min_value=0, max_value=200),
    checked=st.integers(min_value=33, max_value=65_536),
)
def test_growth_rule_extrapolates_a_linear_graph_exactly(fixed, per_token, checked):
    short, long = 16, 32
    n_short, n_long = fixed + per_token * short, fixed + per_token * long
    issue = growth_issue(short, long, n_short, n_long, checked)
    if n_long <= n_short * 1.10 or n_long - n_short < MIN_EXTRA_NODES:
        assert issue is None
        return
    assert issue is not None and issue.kind == ISSUE_KIND
    assert f"about {fixed + per_token * checked:,} at the checked length {checked}:" in issue.message


def test_mamba2_config_as_transformers_writes_it_is_read(tmp_path):
    from chipswap.models import resolve_model

    path = _written(tmp_path, "mamba2")
    assert '"__float__": "Infinity"' in path.read_text()
    ref = resolve_model(str(path))
    assert ref.config["time_step_limit"][1] == float("inf")
    # the older bare literal too
    bare = tmp_path / "bare.json"
    bare.write_text(path.read_text().replace('{\n      "__float__": "Infinity"\n    }', "Infinity"))
    assert "Infinity" in bare.read_text() and "__float__" not in bare.read_text()
    assert resolve_model(str(bare)).config["time_step_limit"][1] == float("inf")


def test_a_bad_float_tag_is_one_line(tmp_path):
    from chipswap.models import resolve_model

    path = _written(tmp_path, "mamba2")
    path.write_text(path.read_text().replace('"__float__": "Infinity"', '"__float__": "lots"'))
    with pytest.raises(ChipswapError, match="__float__ must be one of"):
        resolve_model(str(path))


def test_chipswap_data_files_still_refuse_non_finite_numbers():
    from chipswap.datafile import parse_json

    with pytest.raises(ChipswapError):
        parse_json('{"rate": Infinity}', "bench file")


@pytest.mark.slow
def test_dinov2_at_real_depth_from_the_cli(tmp_path):
    path = _written(tmp_path, "dinov2")
    assert json.loads(path.read_text())["out_features"] == ["stage12"]
    r = run_cli("check", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2-layer copy of its 12" in r.stdout.replace("\n", " ")


def test_layer_copy_rewrites_stage_fields_it_keeps_valid(tmp_path):
    from chipswap.models import REPRESENTATIVE_DEPTH, representative, resolve_model

    cfg = json.loads(_written(tmp_path, "dinov2").read_text())
    cfg["out_features"], cfg["out_indices"] = ["stage3", "stage6", "stage12"], [3, 6, 12]
    path = tmp_path / "multi.json"
    path.write_text(json.dumps(cfg))
    small, words = representative(resolve_model(str(path)))
    assert "2-layer copy" in words
    assert small.config["out_indices"] == [REPRESENTATIVE_DEPTH]
    assert small.config["out_features"] == [f"stage{REPRESENTATIVE_DEPTH}"]


@pytest.fixture
def jax_entries(tmp_path):
    pytest.importorskip("jax")
    src = tmp_path / "jentries.py"
    src.write_text(
        "import jax.numpy as jnp\n"
        "import numpy as np\n"
        "def eigh():\n"
        "    return (lambda x: jnp.linalg.eigh(x @ x.T)[0].sum()), (jnp.ones((8, 8), jnp.float32),)\n"
        "def svd():\n"
        "    return (lambda x: jnp.linalg.svd(x)[1].sum()), (jnp.ones((8, 8), jnp.float32),)\n"
        "def f64():\n"
        "    return (lambda x: (x * 2).sum()), (np.ones((4,), np.float64),)\n"
    )
    return src


@pytest.mark.parametrize("entry", ["eigh", "svd"])
def test_jax_eigh_and_svd_are_the_same_blocker_as_in_pytorch(jax_entries, entry):
    from chipswap.readiness.check import run_check

    report = run_check(f"{jax_entries}:{entry}", factory_dirs=[jax_entries.parent])
    assert {(f.rule, f.severity) for f in report.findings} == {("CHIP_ITERATIVE_LINALG", "blocker")}


def test_jax_float64_without_x64_is_reported_as_what_is_checked(jax_entries):
    from chipswap.readiness.check import run_check

    report = run_check(f"{jax_entries}:f64", factory_dirs=[jax_entries.parent])
    assert "arg0=4:float32 (given as float64; x64 is disabled)" in report.inventory.shapes[0]


def test_a_blocker_is_not_restated_as_a_fallback_on_inf1():
    from chipswap.readiness.check import run_check

    report = run_check("tests/badmodels.py:make_item", target="inf1")
    on_item = {f.rule for f in report.findings if "_local_scalar_dense" in f.op}
    assert on_item == {"NCC_EMOD025"}


def test_distribution_validation_is_found_after_dynamo_turned_it_off(tmp_path):
    """torch._dynamo switches validate_args off process-wide the first time it runs (a torch.cond export);
    the check still reports validation as the model runs it on Neuron (PyTorch's default), and restores the
    process's setting after."""
    import torch

    from chipswap.readiness.check import run_check

    run_check("tests/badmodels.py:make_cond")
    before = torch.distributions.Distribution._validate_args
    src = tmp_path / "dist_after_cond.py"
    src.write_text(
        "import torch\n"
        "class Sample(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.distributions.Normal(x, torch.ones_like(x)).rsample()\n"
        "def make():\n"
        "    return Sample(), {'x': torch.randn(2, 4)}\n"
    )
    report = run_check(f"{src}:make", factory_dirs=[tmp_path])
    assert "CHIP_DIST_VALIDATE" in {f.rule for f in report.findings}
    assert torch.distributions.Distribution._validate_args == before
