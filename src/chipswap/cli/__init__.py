"""The command line: a thin Typer layer, one module per command.

- main.py    the app: wires every command module's `register(app)` and turns ChipswapError into one line on
             stderr with exit code 2.
- <name>.py  one command (or sub-app): parse flags, call the capability packages, print. No logic here.

`main` below is the `chipswap` entry point (pyproject's [project.scripts]); importing one command module does
not build the whole app.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """Run the chipswap command line (builds the app on first use)."""
    from chipswap.cli.main import main as run

    run(argv)
