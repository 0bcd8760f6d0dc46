"""Command-line entry point: a thin Typer layer over plain functions.

Each command lives in chipswap.cli.<name> and exposes `register(app)`. This module only wires them up and
turns ChipswapError into one line on stderr with exit code 2 (no traceback). It may not hold any logic.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from chipswap import __version__
from chipswap.errors import ChipswapError
from chipswap.ranges import check_flags
from chipswap.textsafe import one_line

try:  # typer >= 0.20 vendors click as typer._click; older releases use click itself
    from typer._click import exceptions as _click_exc
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as _click_exc  # type: ignore[no-redef]

_NoArgsIsHelp = getattr(_click_exc, "NoArgsIsHelpError", type("_NeverRaised", (Exception,), {}))
_Abort = getattr(_click_exc, "Abort", KeyboardInterrupt)

# Order is the order shown in --help.
COMMAND_MODULES = (
    "plan",
    "shapes",
    "check",
    "project",
    "calibrate",
    "cost",
    "catalog",
    "capacity",
    "config",
    "compile",
    "cache",
    "serve",
    "bench",
    "trial",
)

app = typer.Typer(
    name="chipswap",
    help=(
        "Should this model move from GPUs to AWS Inferentia / Trainium? chipswap plans fixed shapes from "
        "your traffic, checks what the Neuron compiler will reject, prices the move with break-even, and "
        "compiles and serves the model once per shape."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"chipswap {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
    config: str = typer.Option(
        None, "--config", metavar="FILE",
        help="Use this project config file (trusted whoever owns it), or 'none' for no project file.",
    ),
) -> None:
    """chipswap command line."""


for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"chipswap.cli.{_name}")
    except ModuleNotFoundError as _exc:  # a command still being written must not break the others
        if _exc.name != f"chipswap.cli.{_name}":
            raise
        continue
    _mod.register(app)


def fail(message: str, code: int = 2) -> None:
    # Every error is one printable line, whatever file text it quotes: a name read from a data file must not
    # recolour the terminal or forge a second line.
    sys.stderr.write(f"chipswap: error: {one_line(message, max_chars=4000)}\n")
    sys.stderr.flush()
    raise SystemExit(code)


MAX_ERROR_LINES = 20  # several problems of one input: at most this many lines, each distinct


def _global_config(args: list[str]) -> list[str]:
    """The arguments after a leading `--config FILE` (which it records for chipswap.cli.config), so the
    numeric-flag check finds the command whatever global option comes first."""
    from chipswap.cli.config import EXPLICIT_CONFIG

    EXPLICIT_CONFIG.set(None)
    rest = list(args)
    while rest and rest[0].startswith("--config"):
        name, eq, value = rest[0].partition("=")
        if name != "--config":
            break
        if not eq:
            if len(rest) < 2:
                break
            value = rest[1]
        EXPLICIT_CONFIG.set(value)
        rest = rest[1:] if eq else rest[2:]
    return rest


def main(argv: list[str] | None = None) -> None:
    from chipswap.traffic.source import FOLLOW_LINKS

    FOLLOW_LINKS.set(
        False
    )  # each run starts refusing symlinks out of a trace folder (shapes --follow-symlinks)
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:2] == ["bench", "import"]:  # a sub-command of bench (its URL argument is never "import")
        args = ["bench-import", *args[2:]]
    try:
        command_args = _global_config(args)
        check_flags(command_args)  # every numeric flag in its physical range
        rv = app(args=args, standalone_mode=False, prog_name="chipswap")
    except ChipswapError as exc:
        lines = list(dict.fromkeys(getattr(exc, "lines", None) or ()))  # one line per distinct problem
        if len(lines) > MAX_ERROR_LINES:
            more = len(lines) - MAX_ERROR_LINES + 1
            rest = f"{more:,} more problems of the same input; fix those above first"
            lines = [*lines[: MAX_ERROR_LINES - 1], rest]
        for line in lines[:-1]:  # several problems of one input: one line each
            sys.stderr.write(f"chipswap: error: {one_line(line, max_chars=4000)}\n")
        fail(str(lines[-1] if lines else exc), exc.exit_code)
    except _NoArgsIsHelp as exc:
        # `chipswap` (or a sub-app) with no arguments: show help, as --help would
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:
            typer.echo(ctx.get_help())
        raise SystemExit(0) from None
    except _click_exc.ClickException as exc:
        # usage errors: one line naming the option, exit 2
        fail(exc.format_message().replace("\n", " "), 2)
    except (KeyboardInterrupt, _Abort):
        fail("interrupted", 130)
    except BrokenPipeError:
        os._exit(0)
    except OSError as exc:  # a path the OS refuses (ENAMETOOLONG, ELOOP, EACCES...) anywhere: one line
        where = exc.filename if exc.filename is not None else "a path"
        fail(f"{where}: {exc.strerror or exc}; use a shorter or accessible path", 2)
    if isinstance(rv, int):
        raise SystemExit(rv)


if __name__ == "__main__":
    main()
