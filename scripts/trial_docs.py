"""Write docs/trial.md's two kit blocks from the kit `chipswap trial` writes for the bundled example: what the
command prints (the summary and every file of the kit) and the README excerpt.

    python scripts/trial_docs.py            # rewrite the blocks between the markers in docs/trial.md
    python scripts/trial_docs.py --check    # exit 1 if a block differs from what the kit writes now

The excerpt is the README from its title to the end of its "Steps" section (the launch-keys table and the
fleet section follow in the docs page itself). tests/test_trial_live.py compares both blocks with a fresh kit.
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
SUMMARY_BEGIN = (
    "<!-- trial-summary: begin (scripts/trial_docs.py writes this block from `chipswap trial`) -->"
)
SUMMARY_END = "<!-- trial-summary: end -->"
KIT = "chipswap-trial"


def excerpt(readme: str) -> str:
    """The README's head: title to the end of Steps (up to the launch-settings section)."""
    head = readme.split("\n## Launch settings", 1)[0].rstrip("\n")
    return "```\n" + head + "\n```"


def block(doc: str, begin: str = BEGIN, end: str = END) -> str:
    """The current block in the docs page (between the markers)."""
    if begin not in doc or end not in doc:
        raise SystemExit(f"{DOC}: markers {begin!r} / {end!r} not found")
    return doc.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def replace_block(doc: str, new: str, begin: str = BEGIN, end: str = END) -> str:
    before, rest = doc.split(begin, 1)
    after = rest.split(end, 1)[1]
    return f"{before}{begin}\n{new}\n{end}{after}"


def fresh_kit() -> tuple[str, str]:
    """(what `chipswap trial` prints, the README it writes) on the bundled example, in a temporary folder; the
    folder is named chipswap-trial/ in the printed lines, as the command's default --out."""
    with tempfile.TemporaryDirectory() as tmp:
        kit = Path(tmp) / KIT
        r = subprocess.run(
            [sys.executable, "-m", "chipswap", "trial", "--out", str(kit), "--no-aws", "-q"],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise SystemExit(f"chipswap trial exited {r.returncode}: {r.stderr.strip()}")
        return r.stdout.replace(str(kit), KIT), (kit / "README.md").read_text()


def fresh_readme() -> str:
    return fresh_kit()[1]


def summary(stdout: str) -> str:
    return "```\n$ chipswap trial\n" + stdout.rstrip("\n") + "\n```"


def run(argv: list[str]) -> int:
    out, readme = fresh_kit()
    new, head = excerpt(readme), summary(out)
    doc = DOC.read_text()
    if "--check" in argv:
        same = block(doc) == new and block(doc, SUMMARY_BEGIN, SUMMARY_END) == head
        print("docs/trial.md kit blocks " + ("match the kit" if same else "differ from the kit"))
        return 0 if same else 1
    DOC.write_text(replace_block(replace_block(doc, new), head, SUMMARY_BEGIN, SUMMARY_END))
    print(f"wrote the kit blocks into {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
