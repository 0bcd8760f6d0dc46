"""docs/claims.md is the code's output (chipswap.plan.claims), every line has chipswap's figure, its band and
its source (or a refusal with the reason), and the figures are what the projection and the catalog give when
recomputed here independently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chipswap.economics.catalog_io import load_catalog
from chipswap.plan.claims import SERVING_CASES, evaluate_claims, render_markdown
from chipswap.projection.api import model_work, project_serving
from tests.cli_helpers import run_inproc

PAGE = Path(__file__).resolve().parents[1] / "docs" / "claims.md"


@pytest.fixture(scope="module")
def lines():
    return evaluate_claims()


def test_the_page_is_the_codes_output(lines) -> None:
    assert PAGE.read_text(encoding="utf-8") == render_markdown(lines), (
        "docs/claims.md is stale: run `python scripts/gen_claims.py`"
    )


def test_every_line_has_a_figure_band_and_source_or_a_reason(lines) -> None:
    assert len(lines) >= 6
    for ln in lines:
        assert ln.claimed and ln.source and ln.case
        if ln.refused:
            assert len(ln.chipswap) > len("refused: ") + 20 and ln.band == "-"
        else:
            assert ln.band != "-" and any(ch.isdigit() for ch in ln.chipswap) and ln.true_if != "-"
    # issue 41: the training claim is answered by transfer from trn1, with a band, bf16 and fp8
    training = [ln for ln in lines if ln.case.startswith("training") and "trn2" in ln.case]
    assert len(training) == 2 and not any(ln.refused for ln in training)
    for ln in training:
        assert "transferred from trn1 by spec sheet, ±" in ln.source and "Capacity Block" in ln.chipswap
        assert "measured trn2 training throughput outranks this" in ln.true_if
    assert any("p5e.48xlarge" in ln.case and ln.refused for ln in lines)  # no price: no number
    assert {"26 h", "+30 to +40 %"} <= {ln.claimed for ln in lines}


def test_the_price_performance_figure_is_recomputed_independently(lines) -> None:
    cat = load_catalog()
    model, prompt, output = SERVING_CASES[0]
    work = model_work(model)
    n = project_serving(work, "trn2.48xlarge", prompt_tokens=prompt, output_tokens=output).requests_per_s
    g = project_serving(work, "p5en.48xlarge", prompt_tokens=prompt, output_tokens=output).requests_per_s
    rn = float(cat.rate("trn2.48xlarge", "us-east-2", "capacity-block").usd_per_hour)
    rg = float(cat.rate("p5en.48xlarge", "us-east-1", "on-demand").usd_per_hour)
    better = ((n.value / rn) / (g.value / rg) - 1) * 100
    low = ((n.low / rn) / (g.high / rg) - 1) * 100
    line = next(
        ln for ln in lines if "p5en" in ln.case and f"{prompt:,} prompt" in ln.case and model in ln.case
    )
    assert line.chipswap.startswith(f"{better:+.0f} %") and line.band.startswith(f"{low:+.0f} %")
    assert "Capacity Block, as of" in line.source and "on-demand" in line.source


def test_the_worked_examples_hours_are_the_plans_projection(lines) -> None:
    from chipswap.projection.training.project import project_training

    work = model_work("llama-3-8b")
    gpu = project_training(work, "p5.48xlarge", seq_len=4096)
    tokens = gpu.tokens_per_s_per_node.value * 20 * 3600
    trn = project_training(work, "trn1.32xlarge", tokens=tokens, seq_len=4096)
    line = next(ln for ln in lines if ln.claimed == "26 h")
    assert line.chipswap == f"{trn.hours.value:,.1f} h"
    assert f"{tokens / (26 * 3600):,.0f} tokens/s" in line.true_if


def test_the_command_prints_the_same_lines(capsys, lines) -> None:
    code, out, err = run_inproc(capsys, "plan", "--example", "trn2-claims", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert [g["chipswap"] for g in got] == [ln.chipswap for ln in lines]
    code, out, _ = run_inproc(capsys, "plan", "--example", "trn2-claims")
    assert code == 0 and "claimed 26 h; chipswap" in out and "(training tokens/s per $/h)" in out
    assert "refused: no training calibration" not in out


def test_the_training_price_performance_is_recomputed_independently(lines) -> None:
    """The trn2 training line: tokens/s per $/h from two independent projections and the two prices."""
    from chipswap.projection.training import project_training

    cat = load_catalog()
    work = model_work("llama-3-8b")
    n = project_training(work, "trn2.48xlarge", seq_len=4096, catalog=cat).tokens_per_s_per_node
    g = project_training(work, "p5en.48xlarge", seq_len=4096, catalog=cat).tokens_per_s_per_node
    rn = float(cat.rate("trn2.48xlarge", "us-east-2", "capacity-block").usd_per_hour)
    rg = float(cat.rate("p5en.48xlarge", "us-east-1", "on-demand").usd_per_hour)
    line = next(ln for ln in lines if ln.case.startswith("training") and "bf16" in ln.case)
    assert line.chipswap.startswith(f"{((n.value / rn) / (g.value / rg) - 1) * 100:+.0f} %")
    assert line.band.startswith(f"{((n.low / rn) / (g.high / rg) - 1) * 100:+.0f} %")
