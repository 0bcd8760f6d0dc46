"""Growth found in every scan (issue 42): the growth probe prepares the model as the main check did (Jamba's
experts stubbed, so its per-token Mamba-1 scan is found), probes above the largest chunk or block size (a
chunked scan like qwen3_next's Gated DeltaNet, chunks of 64, is flat at 16 and 32 tokens), and says in a
note when it could not run. Mamba-2 hybrids (a chunked scan vectorised over chunks) still do not grow.

The configs are tiny and random-weight, written as transformers writes them; each check exports the model
several times, so the live checks are slow-marked (about a minute of CPU each on a quiet core)."""

from __future__ import annotations

import pytest

from chipswap.readiness.capture.growth import (
    PROBE_LENGTHS,
    growth_issue,
    largest_chunk,
    probe_lengths,
    with_growth,
)
from chipswap.readiness.rules import Inventory

_SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 512}  # fmt: skip


def _configs():
    import transformers as T

    return {
        "jamba": T.JambaConfig(
            **_SMALL, num_hidden_layers=2, num_experts=4, num_experts_per_tok=2, expert_layer_period=2,
            expert_layer_offset=1, attn_layer_period=2, attn_layer_offset=1, mamba_d_state=8, mamba_dt_rank=8,
            use_mamba_kernels=False,
        ),
        "qwen3-next": T.Qwen3NextConfig(
            **_SMALL, num_hidden_layers=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, shared_expert_intermediate_size=32, linear_key_head_dim=16,
            linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
            layer_types=["linear_attention", "full_attention"],
        ),
        "bamba": T.BambaConfig(
            **_SMALL, num_hidden_layers=2, mamba_n_heads=4, mamba_d_head=32, mamba_d_state=8,
            mamba_n_groups=1,
            mamba_chunk_size=32, attn_layer_indices=[1],
        ),
    }  # fmt: skip


def test_probe_lengths_go_above_the_largest_chunk_the_config_names() -> None:
    assert probe_lengths({}) == (PROBE_LENGTHS,)
    assert probe_lengths({"chunk_size": 256, "block_size": 64}) == (PROBE_LENGTHS, (512, 1024))
    assert probe_lengths({"text_config": {"mamba_chunk_size": 128}})[-1] == (256, 512)
    assert largest_chunk({"layer_types": ["linear_attention", "full_attention"]}) == 64
    assert largest_chunk({"chunk_size_feed_forward": 0, "block_size": True}) is None
    assert probe_lengths({"chunk_size": 8}) == (PROBE_LENGTHS,)  # already above it


def test_a_chunk_loop_is_found_from_its_steady_gain_per_chunk() -> None:
    issue = growth_issue(128, 256, 3415, 3517, 512, chunk=64)
    assert (
        issue is not None and "chunks of 64 tokens" in issue.message and "51 nodes per chunk" in issue.message
    )
    assert growth_issue(128, 256, 3364, 3364, 512, chunk=64) is None  # a transformer: flat
    assert growth_issue(128, 256, 3415, 3517, 512) is None  # too little for a per-token loop


def test_a_probe_that_cannot_run_says_so(monkeypatch) -> None:
    import chipswap.readiness.capture.growth as growth

    def fails(_module, _inputs):
        raise RuntimeError("Could not guard on data-dependent expression u0 > 0")

    monkeypatch.setattr(growth, "_count_nodes", fails)
    inv = Inventory(ops=(), exported=False, stubbed=("JambaExperts",))
    spec = {"input_ids": ((1, 128), "int64")}
    import torch

    module = torch.nn.Linear(2, 2)
    got = with_growth(inv, module, spec, device="meta", vocab_size=512, highs=None, config={})
    assert got.issues == () and len(got.notes) == 1
    assert got.notes[0].startswith("the growth probe could not export at 16 tokens (RuntimeError")
    monkeypatch.setattr(growth, "_count_nodes", lambda _m, _i: 100)  # flat at 16 and 32 tokens
    far = with_growth(Inventory(ops=()), module, spec, device="meta", vocab_size=512, highs=None,
                      config={"chunk_size": 4096})  # fmt: skip
    assert "could not export above the chunk size 4096" in far.notes[-1]


def _rules(tmp_path, name: str) -> set[str]:
    from chipswap.readiness.check import run_check

    folder = tmp_path / name
    _configs()[name].save_pretrained(folder)
    report = run_check(str(folder / "config.json"))
    return {f.rule for f in report.findings if f.severity in ("blocker", "slow", "warn")}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "grows"), [("jamba", True), ("qwen3-next", True), ("bamba", False)])
def test_hybrids_carry_the_growth_finding_where_their_scan_loops(tmp_path, name, grows) -> None:
    found = _rules(tmp_path, name)
    assert ("CHIP_GRAPH_GROWS" in found) is grows, (name, found)


def test_a_timeout_names_the_cpu_used_and_the_load_not_the_model() -> None:
    import time

    from chipswap.deadline import deadline
    from chipswap.errors import ChipswapError

    with pytest.raises(ChipswapError) as ei, deadline(0.2, "check of m", "pass a longer --timeout"):
        time.sleep(5)  # a block that waits uses no CPU: the line says so
    msg = str(ei.value)
    assert "did not finish within 0.2 s on this machine (" in msg and "s of CPU used" in msg, msg
    assert "load average" in msg and "never return" not in msg, msg
