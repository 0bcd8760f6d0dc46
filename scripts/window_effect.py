"""Print what sliding-window attention changes in a projection: each windowed config against the same blocks
with the window removed (= the projection before windows were modelled: a model without a window projects bit
for bit as before, tests/test_projection_windows.py).

    PYTHONPATH=src python scripts/window_effect.py

The table in docs/projection.md ("Sliding windows") is this script's output. Reads only the shipped presets,
tests/hf_configs/ and the shipped catalog / platform files.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from chipswap.models import load_preset
from chipswap.projection import api
from chipswap.projection.work import work_from_config, work_from_dims

ROOT = Path(__file__).resolve().parents[1]
CASES = (
    ("gemma-2-9b", "g6e.xlarge", 2000, 200),
    ("gemma-2-9b", "g6e.xlarge", 7000, 500),
    ("gemma-2-9b", "p5.48xlarge", 7000, 500),
    ("mistral-7b", "g6e.xlarge", 16000, 500),
    ("mistral-7b", "p5.48xlarge", 16000, 500),
)


def _work(name: str):
    path = ROOT / "tests" / "hf_configs" / f"{name}.json"
    cfg = json.loads(path.read_text()) if path.exists() else load_preset(name)["config"]
    return work_from_config(cfg, name=name, task="causal-lm")


def _row(p, length: int) -> str:
    c = p.config
    step = p.times.decode_step_s(8, length) * 1e3
    layout = f"TP{c.tp_degree}x{c.replicas}, batch {c.max_batch}"
    return f"{p.requests_per_s.value:.3f} ({layout}, TPOT@8 {step:.1f} ms)"


def main() -> None:
    cat = api.load_catalog()
    print("| model, instance | prompt + output | without the window | with it |")
    print("|---|---|---|---|")
    for name, inst, prompt, out in CASES:
        w = _work(name)
        plain = work_from_dims(replace(w.dims, sliding_window=0, sliding_layers=0))
        a, b = (
            api.project_serving(x, inst, prompt_tokens=prompt, output_tokens=out, catalog=cat)
            for x in (plain, w)
        )
        ctx = prompt + out // 2
        print(f"| {name}, {inst} | {prompt:,} + {out} | {_row(a, ctx)} | {_row(b, ctx)} |")


if __name__ == "__main__":
    main()
