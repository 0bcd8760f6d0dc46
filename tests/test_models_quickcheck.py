"""The config check without transformers (chipswap.models.quickcheck, issue 38): every config it accepts,
transformers accepts and builds too (the shipped presets of its families and a few hundred mutations of
them: a differential test against the real config classes and a meta-device build); what it does not accept
goes through transformers as before (same error lines); `chipswap project` on an accepted config imports
neither torch nor transformers, and prints the same JSON either way."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chipswap.errors import ChipswapError
from chipswap.models import checked, quickcheck, resolve
from chipswap.models.quickcheck import COMMON, FAMILIES, accepts, installed_transformers
from tests.cli_helpers import run_json
from tests.model_helpers import count_builds

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "src" / "chipswap" / "data" / "models"
ARCH = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
        "qwen3": "Qwen3ForCausalLM", "mixtral": "MixtralForCausalLM",
        "qwen3_moe": "Qwen3MoeForCausalLM"}  # fmt: skip
INSTALLED = installed_transformers()
VERSION = quickcheck.TRANSFORMERS_VERSIONS[-1]  # the version the table mirrors (the pure tests pass it)
# A test that compares with the installed transformers needs the version the table mirrors; another one (a
# newer release on a fresh install) sends every config to transformers' own check, which is always correct.
MIRRORED = ", ".join(quickcheck.TRANSFORMERS_VERSIONS)
mirrors_installed = pytest.mark.skipif(
    INSTALLED not in quickcheck.TRANSFORMERS_VERSIONS,
    reason=f"transformers {INSTALLED} is installed, quickcheck mirrors {MIRRORED}: every config takes"
    " transformers' own check; add the version once these tests pass on it",
)


def _preset_config(name: str) -> dict:
    """A shipped preset's config as a user's config.json (architectures and dtype added, as bench_cli)."""
    cfg = json.loads((MODELS / f"{name}.json").read_text())["config"]
    return {**cfg, "architectures": [ARCH[cfg["model_type"]]], "torch_dtype": "bfloat16"}


def _presets() -> list[str]:
    out = []
    for f in sorted(MODELS.glob("*.json")):
        if json.loads(f.read_text())["config"].get("model_type") in FAMILIES:
            out.append(f.stem)
    return out


PRESETS = _presets()


def _transformers_builds(cfg: dict, tmp_path: Path) -> None:
    """transformers' own check, as resolve_model ran it on every new config before: the config class, then
    a build on the meta device (raises ChipswapError when either refuses)."""
    from chipswap.models.build import build_model
    from chipswap.models.spec import ModelRef, _normalize, _validate_hf_config

    _validate_hf_config(cfg, "mutant")
    ref = ModelRef(kind="hf-config", name="mutant", config=_normalize(cfg), task="causal-lm",
                   source=str(tmp_path / "config.json"), path=str(tmp_path / "config.json"))  # fmt: skip
    build_model(ref, meta=True)


def _shallow(cfg: dict) -> dict:
    """The same config with 2 layers (acceptance does not depend on depth; builds stay fast)."""
    return {**cfg, "num_hidden_layers": min(cfg["num_hidden_layers"], 2)}


@mirrors_installed
def test_the_table_mirrors_the_installed_transformers_config_classes():
    """Every key the table knows is a field of the family's transformers config class or one of the few
    keyword arguments every config takes; an upgrade of transformers makes this fail until the differential
    tests below pass on it and its version joins TRANSFORMERS_VERSIONS (until then: the slow check)."""
    from transformers import CONFIG_MAPPING

    kwargs = {"model_type", "_name_or_path", "torch_dtype", "rope_theta", "rope_scaling"}
    for family, own in FAMILIES.items():
        fields = {f.name for f in dataclasses.fields(CONFIG_MAPPING[family])}
        extra = {"head_dim"} if family == "qwen3_moe" else set()  # an attribute its attention reads
        unknown = sorted(k for k in {**COMMON, **own} if k not in fields | kwargs | extra)
        assert not unknown, (family, unknown)


def test_another_transformers_version_or_task_or_family_means_the_slow_check():
    cfg = _preset_config("tiny-llama")
    assert accepts(cfg, "causal-lm", VERSION)
    assert not accepts(cfg, "causal-lm", "4.0.0") and not accepts(cfg, "causal-lm", None)
    assert not accepts(cfg, "sequence-classification", VERSION)
    assert not accepts({**cfg, "model_type": "gemma"}, "causal-lm", VERSION)
    assert not accepts({**cfg, "model_type": ["llama"]}, "causal-lm", VERSION)
    assert not accepts({**cfg, "quantization_config": {"quant_method": "fp8"}}, "causal-lm", VERSION)


def test_any_value_of_any_key_is_an_answer_never_an_exception():
    """Data is only looked at: every probe value under every key (the rope table first, so it is read before
    the sizes it is compared with) gives True or False."""
    base = {"rope_scaling": ROPE, **_tiny("llama")}
    for key in sorted({**COMMON, **FAMILIES["llama"]}):
        for v in (*PROBES, {"a": [1]}, [[1]], 10**400, "x" * 10**5):
            assert accepts({**base, key: v}, "causal-lm", VERSION) in (True, False)


@mirrors_installed
@pytest.mark.parametrize("name", PRESETS)
def test_every_shipped_preset_of_a_known_family_is_accepted_and_transformers_agrees(name, tmp_path):
    cfg = _preset_config(name)
    assert accepts(cfg, "causal-lm", VERSION), name
    _transformers_builds(_shallow(cfg), tmp_path)


# values tried for every key (each kind's edges and the wrong types transformers' strict fields refuse)
PROBES = (0, 1, 2, 3, 5, 7, 8, 64, -1, 10**6, True, False, 1.0, 0.5, 1e-6, 1e-5, -0.5, 2.5, float("nan"),
          "silu", "gelu", "gelu_new", "relu", "swish", "tanh", "x", "", "bfloat16", "float32", "float8", None,
          [], [1], [1, 2], ["x"], {}, {"rope_type": "linear", "factor": 2.0})  # fmt: skip
ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}  # fmt: skip
BASES = {
    "llama": "tiny-llama", "mistral": "tiny-mistral", "qwen2": "qwen2-1.5b", "qwen3": "qwen3-0.6b",
    "mixtral": "mixtral-8x7b", "qwen3_moe": "qwen3-30b-a3b",
}  # fmt: skip


def _tiny(family: str) -> dict:
    """The family's preset shrunk to a few-kilobyte model (the same keys; sizes consistent)."""
    cfg = _preset_config(BASES[family])
    small = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128}  # fmt: skip
    if "head_dim" in cfg:
        small["head_dim"] = 16
    if "moe_intermediate_size" in cfg:
        small["moe_intermediate_size"] = 32
    for k in ("num_local_experts", "num_experts"):
        if k in cfg:
            small[k] = 4
    if "num_experts_per_tok" in cfg:
        small["num_experts_per_tok"] = 2
    if "sliding_window" in cfg:
        small["sliding_window"] = 32
    return {**cfg, **{k: v for k, v in small.items() if k in cfg or k == "max_position_embeddings"}}


def _mutants(family: str) -> list[dict]:
    base = _tiny(family)
    keys = sorted({**COMMON, **FAMILIES[family]})
    out = [base, {**base, "rope_scaling": ROPE}, {**base, "rope_scaling": {**ROPE, "factor": 8}}]
    for key in keys:
        out += [{**base, key: v} for v in PROBES]
    # sizes against each other: heads / KV heads / widths that do not divide, odd head widths, top-k
    for heads, kv, hidden in ((4, 3, 64), (6, 2, 64), (4, 4, 60), (8, 8, 56), (2, 1, 64), (16, 4, 64)):
        out.append({**base, "num_attention_heads": heads, "num_key_value_heads": kv, "hidden_size": hidden})
    for k, e in ((5, 4), (4, 4), (0, 4)):
        if "num_experts_per_tok" in base:
            out.append({**base, "num_experts_per_tok": k})
            out.append({**base, "num_experts_per_tok": k, "num_local_experts" if family == "mixtral"
                        else "num_experts": e})  # fmt: skip
    return out


def _differential(family: str, tmp_path: Path, every: int = 1) -> tuple[int, int]:
    from chipswap.models.spec import check_config_bounds

    accepted = fallback = 0
    for i, cfg in enumerate(_mutants(family)):
        if i % every:
            continue
        try:
            check_config_bounds(cfg, "mutant")  # chipswap's own bounds run first on either path
        except ChipswapError:
            continue
        if not accepts(cfg, "causal-lm", VERSION):
            fallback += 1
            continue
        accepted += 1
        try:
            _transformers_builds(cfg, tmp_path)
        except ChipswapError as exc:  # pragma: no cover - the failure this test exists to catch
            raise AssertionError(f"accepted without transformers, refused by it: {cfg}: {exc}") from None
    return accepted, fallback


@mirrors_installed
def test_what_it_accepts_transformers_builds_a_sample():
    """A fast sample of the differential test below (every 7th mutant of two families)."""
    for family in ("llama", "qwen3_moe"):
        accepted, fallback = _differential(family, Path("/nonexistent"), every=7)
        assert accepted >= 10 and fallback >= 10, (family, accepted, fallback)


@mirrors_installed
@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_what_it_accepts_transformers_builds(family, tmp_path):
    """Every mutant the quick check accepts, transformers accepts and builds (the check is never looser)."""
    accepted, fallback = _differential(family, tmp_path)
    assert accepted >= 40 and fallback >= 100, (family, accepted, fallback)


@pytest.fixture
def no_memo(tmp_path, monkeypatch):
    return count_builds(tmp_path, monkeypatch)


def _write(tmp_path: Path, cfg: dict, name: str = "m") -> Path:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return d / "config.json"


@mirrors_installed
def test_an_accepted_config_is_not_built_and_not_remembered(tmp_path, no_memo):
    ref = resolve.resolve_model(str(_write(tmp_path, _preset_config("qwen2.5-7b"))))
    assert no_memo == [] and not (tmp_path / "memo").exists() and ref.task == "causal-lm"


def test_a_config_transformers_rejects_gets_the_same_error_line(tmp_path, no_memo):
    bad = {**_preset_config("tiny-llama"), "num_attention_heads": 5}  # the width is not a multiple of 5
    with pytest.raises(ChipswapError, match="transformers rejects the config"):
        resolve.resolve_model(str(_write(tmp_path, bad)))
    big = {**_preset_config("tiny-llama"), "hidden_size": 10**12}  # the bound, before anything else
    with pytest.raises(ChipswapError, match="hidden_size"):
        resolve.resolve_model(str(_write(tmp_path, big, "big")))
    odd = {**_preset_config("tiny-llama"), "rms_norm_eps": 1}  # an int where transformers wants a float
    with pytest.raises(ChipswapError, match="transformers rejects the config"):
        resolve.resolve_model(str(_write(tmp_path, odd, "odd")))


CASES = [
    ("qwen2.5-7b", ["-i", "inf2.48xlarge", "-i", "p5.48xlarge"]),
    ("llama-3-70b", ["-i", "p5.48xlarge", "--train-tokens", "2e9", "--nodes", "32"]),
    ("mixtral-8x7b", ["-i", "p5.48xlarge", "--prompt-tokens", "2048", "--output-tokens", "128"]),
    ("qwen3-30b-a3b", ["-i", "trn1.32xlarge", "-i", "g6e.12xlarge"]),
]


@mirrors_installed
@pytest.mark.parametrize("name,args", CASES)
def test_project_prints_the_same_json_with_or_without_transformers_check(name, args, tmp_path, capsys,
                                                                        monkeypatch, no_memo):  # fmt: skip
    f = str(_write(tmp_path, _preset_config(name)))
    fast = run_json(capsys, "project", f, *args, "--json")
    assert no_memo == []
    monkeypatch.setattr(resolve, "accepts", lambda *a: False)  # the path every new config took before
    slow = run_json(capsys, "project", f, *args, "--json")
    assert no_memo == ["m"] and fast == slow
    assert json.dumps(fast).count('"value"') >= 2  # figures were compared, not two empty answers


@mirrors_installed
def test_project_on_an_accepted_config_imports_neither_torch_nor_transformers(tmp_path):
    f = _write(tmp_path, _preset_config("qwen2.5-7b"))
    code = (
        "import sys\nfrom chipswap.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "bad = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "assert not bad, bad\nprint('clean')\n"
    )
    argv = [sys.executable, "-c", code, "project", str(f), "-i", "inf2.48xlarge", "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           checked.ENV_VAR: str(tmp_path / "memo")}  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert r.returncode == 0 and r.stdout.strip().endswith("clean"), r.stderr[-2000:]
    assert not (tmp_path / "memo").exists()


def test_another_installed_transformers_sends_every_config_to_its_own_check(tmp_path, monkeypatch, no_memo):
    """A fresh install that resolves to a transformers release the table does not mirror: the config is built
    by transformers (and remembered), never accepted on the table's word."""
    monkeypatch.setattr(resolve, "installed_transformers", lambda: "999.0.0")
    ref = resolve.resolve_model(str(_write(tmp_path, _preset_config("tiny-llama"))))
    assert no_memo == ["m"] and ref.task == "causal-lm"
