"""Writes the parts of docs/simulation.md that quote data files: the stacks under load and their held-out
knee errors (src/chipswap/data/platforms/stack_load.toml, via chipswap.projection.stack_load.docs_block),
between the markers <!-- stack-load --> and <!-- /stack-load -->. Run it after bench/bench_knee.py --write;
tests/test_stack_load.py fails while the two disagree.

    python bench/simulation_docs.py
"""

from __future__ import annotations

from pathlib import Path

import _results  # noqa: F401  (puts src/ on the path)
from chipswap.projection.stack_load import DOCS_MARK, docs_block, load_stack_load

DOC = Path(__file__).resolve().parent.parent / "docs" / "simulation.md"


def main() -> None:
    text = DOC.read_text()
    start, end = f"<!-- {DOCS_MARK} -->", f"<!-- /{DOCS_MARK} -->"
    if start not in text or end not in text:
        raise SystemExit(f"{DOC}: markers {start} ... {end} not found; put them where the block belongs")
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    DOC.write_text(f"{head}{start}\n{docs_block(load_stack_load())}\n{end}{tail}")
    print(f"wrote {DOC} ({DOCS_MARK})")


if __name__ == "__main__":
    main()
