"""The bundled example's fleet sizes under each modelling choice of issue 21, one at a time
(docs/simulation.md, "The bundled example before and after"): the same `chipswap plan --example
llama-serving` with the GPU side's scheduler policy or the traffic scaling method swapped.

    python bench/example_scheduling.py after           # the plan's defaults: chunked prefill, superposition
    python bench/example_scheduling.py prefill-first   # GPU side prefill-first (TGI), superposition
    python bench/example_scheduling.py copy-in-place   # GPU side prefill-first, traffic copied in place
    python bench/example_scheduling.py chunked-copy    # chunked prefill, traffic copied in place

Prints the GPU fleet and each candidate's instance count. About 30 s each (a whole plan, no AWS calls).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from chipswap.cli.plan import example_path  # noqa: E402
from chipswap.plan import run_plan  # noqa: E402
from chipswap.plan import simulation as stage  # noqa: E402
from chipswap.plan.workload_file import load_workload  # noqa: E402

VARIANTS = ("after", "prefill-first", "copy-in-place", "chunked-copy")


def main() -> None:
    variant = sys.argv[1] if len(sys.argv) > 1 else "after"
    if variant not in VARIANTS:
        sys.exit(f"example_scheduling: unknown variant {variant!r}; use one of {', '.join(VARIANTS)}")
    original = stage.scheduling_of

    def gpu_prefill_first(workload, padded, mode):  # type: ignore[no-untyped-def]
        stack, policy, budget = original(workload, padded, mode)
        return (stack, "prefill-first", budget) if not padded else (stack, policy, budget)

    if variant in ("prefill-first", "copy-in-place"):
        stage.scheduling_of = gpu_prefill_first
    path = example_path("llama-serving")
    text = path.read_text(encoding="utf-8")
    if variant in ("copy-in-place", "chunked-copy"):
        text = text.replace("scale = 5.0", 'scale = 5.0\nscale_method = "copy-in-place"', 1)
    with tempfile.TemporaryDirectory() as tmp:
        for f in path.parent.iterdir():
            if f.is_file():
                shutil.copy(f, Path(tmp) / f.name)
        (Path(tmp) / path.name).write_text(text, encoding="utf-8")
        result = run_plan(load_workload(Path(tmp) / path.name, None), Path(tmp) / path.name)
    counts = ", ".join(f"{c.instance} {c.count}" for c in result.candidates)
    sched = result.scheduling
    print(
        f"{variant}: GPU {result.gpu_fleet.count} x {result.fleet_instance}; {counts}; "
        f"GPU policy {sched.get('gpu_policy')}, scaling {sched.get('scale_method')}"
    )


if __name__ == "__main__":
    main()
