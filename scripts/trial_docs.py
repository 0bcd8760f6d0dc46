"""Write the README excerpt in docs/trial.md from the kit `chipswap trial` writes for the bundled example.

    python scripts/trial_docs.py            # rewrite the block between the markers in docs/trial.md
    python scripts/trial_docs.py --check    # exit 1 if the block differs from what the kit writes now

The excerpt is the README from its title to the end of its "Steps" section (the launch-keys table and the
fleet section follow in the docs page itself). tests/test_trial_live.py compares the block with a fresh kit.
Touches only docs/trial.md (and a temporary folder for the kit).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "trial.md"
BEGIN = "<!-- trial-readme: begin (scripts/trial_docs.py writes this block from `chipswap trial`) -->"
END = "<!-- trial-readme: end -->"


def excerpt(readme: str) -> str:
    """The README's head: title to the end of Steps (up to the launch-settings section)."""
    head = readme.split("\n## Launch settings", 1)[0].rstrip("\n")
    return "```\n" + head + "\n```"


def block(doc: str) -> str:
    """The current excerpt in the docs page (between the markers)."""
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC}: markers {BEGIN!r} / {END!r} not found")
    return doc.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def replace_block(doc: str, new: str) -> str:
    before, rest = doc.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    return f"{before}{BEGIN}\n{new}\n{END}{after}"


def fresh_readme() -> str:
    """The README of `chipswap trial` on the bundled example, written into a temporary folder."""
    with tempfile.TemporaryDirectory() as tmp:
        kit = Path(tmp) / "chipswap-trial"
        r = subprocess.run(
            [sys.executable, "-m", "chipswap", "trial", "--out", str(kit)], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise SystemExit(f"chipswap trial exited {r.returncode}: {r.stderr.strip()}")
        return (kit / "README.md").read_text()


def run(argv: list[str]) -> int:
    new = excerpt(fresh_readme())
    doc = DOC.read_text()
    if "--check" in argv:
        same = block(doc) == new
        print("docs/trial.md README excerpt " + ("matches the kit" if same else "differs from the kit"))
        return 0 if same else 1
    DOC.write_text(replace_block(doc, new))
    print(f"wrote the README excerpt into {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
