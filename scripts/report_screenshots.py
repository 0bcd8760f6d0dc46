"""Screenshots of the bundled examples' reports for docs/plan.md: `chipswap plan --example NAME --no-aws`,
the HTML rendered by headless Chromium, trimmed, reduced to a small palette, saved as docs/img/report-*.png.

    python scripts/report_screenshots.py [--out docs/img]

Needs chromium (`make browser`). Only reads the reports it writes into a temporary folder.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLES = ("classifier-serving", "llama-serving", "finetune")


def shoot(name: str, out: Path, work: Path) -> Path:
    from PIL import Image

    report = work / name
    subprocess.run(
        [sys.executable, "-m", "chipswap", "plan", "--example", name, "--no-aws", "-q", "--out", str(report)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    raw = work / f"{name}.png"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
         f"--user-data-dir={work / 'profile'}", "--window-size=1000,9000", f"--screenshot={raw}",
         (report / "report.html").resolve().as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    img = Image.open(raw).convert("RGB")
    # trim the empty page below the report (the background colour of the last rows)
    bg = img.getpixel((5, img.height - 1))
    bottom = img.height
    while bottom > 200 and all(img.getpixel((x, bottom - 1)) == bg for x in range(0, img.width, 7)):
        bottom -= 1
    img = img.crop((0, 0, img.width, min(img.height, bottom + 20)))
    dest = out / f"report-{name}.png"
    img.quantize(colors=96, method=Image.Quantize.MEDIANCUT).save(dest, optimize=True)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in EXAMPLES:
            print(shoot(name, args.out, Path(tmp)))


if __name__ == "__main__":
    main()
