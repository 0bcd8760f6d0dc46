"""Write one benchmark's section into docs/benchmarks.md, leaving the other sections untouched.

Each benchmark owns the text between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`.
"""

from __future__ import annotations

import platform
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
# Every benchmark imports this module first: it puts the source tree (and the repository root, for the tests'
# reference simulator) on the path, so `python bench/bench_<area>.py` runs from a checkout without an install.
for _path in (ROOT, ROOT / "src"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
HEADER = (
    "# Benchmarks\n\n"
    "Each section is written by the script that produced it (`make bench` runs them all;\n"
    "the command for each section is quoted in it). Numbers are medians of repeated runs on the\n"
    "machine named in the section; these machines are noisy, so compare ratios measured side by side.\n"
)


def machine_line() -> str:
    import os

    return (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"run {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}"
    )


def write_section(name: str, title: str, command: str, body: str) -> None:
    """Replace (or append) the section `name` in docs/benchmarks.md."""
    from chipswap.atomic import atomic_write_text

    text = DOC.read_text() if DOC.exists() else HEADER
    section = (
        f"<!-- bench:{name} -->\n## {title}\n\nCommand: `{command}`  \nMachine: {machine_line()}\n\n"
        f"{body.strip()}\n<!-- /bench:{name} -->"
    )
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    atomic_write_text(DOC, text)
