"""`chipswap check MODEL`: will this model compile on Neuron? Exit 0 ready, 1 blockers, 2 usage error."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from chipswap.cli.common import maybe_flag, switch

SEVERITY_STYLE = {"blocker": "bold red", "slow": "yellow", "warn": "magenta", "info": "dim"}
# the 70B preset checks in well under a minute (docs/benchmarks.md); a forward that never returns is a bug
DEFAULT_CHECK_TIMEOUT_S = 900.0


def check(
    model: str = typer.Argument(
        ...,
        help="Preset name (distilbert-base, llama-3-70b, ...), a transformers config.json, "
        "package.module:factory or path/to/file.py:factory (PyTorch, or a JAX entry point returning "
        "(fn, args)), "
        "or a torch.export .pt2 file.",
    ),
    task: str = maybe_flag(
        "--task",
        help="Model head: base, sequence-classification, causal-lm, masked-lm, image-classification, "
        "seq2seq-lm, speech-seq2seq, audio-classification, ctc, encoder (default: the preset's or config's).",
    ),
    shape: list[str] = maybe_flag(
        "--shape", help="Input shape NAME=DIMxDIM[:DTYPE], repeatable (e.g. input_ids=1x128:int64)."
    ),
    plan: Path = maybe_flag(
        "--plan",
        help="Shape plan (chipswap.shapeplan/1, written by chipswap shapes --out plan.json; any file name): "
        "checks every batch x sequence bucket.",
    ),
    sdk: str = typer.Option("2.32", "--sdk", help="Neuron SDK whose rules apply: 2.26, 2.27 or 2.32."),
    target: str = typer.Option("inf2", "--target", help="Instance family: inf1, inf2, trn1 or trn2."),
    as_json: bool = switch("--json", help="Print the report as JSON (torch_neuronx.analyze keys)."),
    markdown: Path = maybe_flag("--markdown", help="Also write the report as Markdown to this file."),
    out: Path = maybe_flag("--out", help="Also write the JSON report to this file."),
    training: bool = switch(
        "--training",
        help="Also check one training step: the backward pass and an AdamW update (ops that exist only when "
        "training, e.g. embedding-gradient scatter-adds, dropout).",
    ),
    full_model: bool = switch(
        "--full-model",
        help="Export every layer. Default: a config with many identical layers is checked as a 2-layer copy "
        "(same operators, dtypes and findings, a fraction of the time).",
    ),
    trust_pickle: bool = switch(
        "--trust-pickle",
        help="Let a .pt2 file unpickle Python objects (runs code from the file). Default: weights-only "
        "loading; "
        "a file that needs unpickling is refused.",
    ),
    trust_native: bool = switch(
        "--trust-native",
        help="Let a .pt2 file load the AOTInductor shared objects it carries (runs native code from the "
        "file). Default: an archive with native code is refused.",
    ),
    timeout: float = typer.Option(
        DEFAULT_CHECK_TIMEOUT_S,
        "--timeout",
        help="Seconds the whole check may take (building the model, its forward, the export); past it: one "
        "error line, exit 2.",
    ),
    factory_path: list[Path] = maybe_flag(
        "--factory-path",
        help="Folder a factory module may be imported from (repeatable). The current folder is not searched "
        "unless given here (or on PYTHONPATH).",
    ),
) -> None:
    """Predict what the Neuron compiler will reject, naming the op, module and source line."""
    from chipswap.atomic import atomic_write_text
    from chipswap.errors import ChipswapError
    from chipswap.readiness.check import run_check

    if shape and plan:
        raise ChipswapError("pass either --shape or --plan, not both; --plan checks every bucket in the plan")
    from chipswap.cli.stages import StageProgress
    from chipswap.deadline import check_timeout, deadline
    from chipswap.textsafe import one_line

    limit = check_timeout(timeout)
    # each stage on stderr: a rich spinner on a terminal, a line per stage otherwise (big models take
    # minutes); off a terminal the lines wait for the capture, so a config that fails to build stays one line
    progress = StageProgress("chipswap check", hold_until=("exporting", "lowering", "evaluating"))
    with (
        contextlib.closing(progress),
        deadline(
            limit,
            f"check of {one_line(model, 80)}",
            "on a busy machine pass a longer --timeout; if the CPU used is far below it, the model's factory "
            "or forward may be waiting on something that never comes",
        ),
    ):
        report = run_check(
            model,
            list(shape) if shape else None,
            sdk=sdk,
            target=target,
            task=task,
            plan=plan,
            training=training,
            full_model=full_model,
            trust_pickle=trust_pickle,
            trust_native=trust_native,
            factory_dirs=tuple(factory_path or ()),
            progress=progress.say,
        )
    if out:
        atomic_write_text(out, report.to_json())
    if markdown:
        atomic_write_text(markdown, report.to_markdown())
    if as_json:
        typer.echo(report.to_json(), nl=False)
    else:
        _print_table(report)
    raise typer.Exit(report.exit_code)


def _print_table(report) -> None:
    from rich.markup import escape
    from rich.table import Table

    from chipswap.cli.common import console as shared_console
    from chipswap.cli.common import print_table
    from chipswap.textsafe import one_line

    console = shared_console()
    a = report.assessment
    n = {s: sum(a.counts(s).values()) for s in ("supported", "unsupported", "unknown")}
    verdict_style = {"blocked": "bold red", "ready with warnings": "yellow", "ready": "bold green"}[
        report.verdict
    ]
    console.print(
        f"[bold]{escape(one_line(report.model, 120))}[/bold] on {report.target}, Neuron SDK {report.sdk} "
        f"({report.compiler_label}, assumed): "
        f"[{verdict_style}]{report.verdict}[/{verdict_style}]"
    )
    console.print(
        f"shapes: {'; '.join(report.inventory.shapes)}"
        + ("  (meta device, no weights)" if report.weightless else ""),
        markup=False,
        highlight=False,
    )
    console.print(
        f"checked: {report.checked}"
        + ("; training step (forward, backward, AdamW update)" if report.training else ""),
        markup=False,
        highlight=False,
    )
    console.print(
        f"ops: {n['supported']} supported, {n['unsupported']} unsupported, {n['unknown']} unknown; "
        f"support {a.support_percentage}% (unknown counts as not supported)"
    )
    for note in report.notes:
        console.print(f"note: {one_line(note, 400)}", markup=False, highlight=False)
    if not report.findings:
        console.print("no findings")
        return
    table = Table(show_lines=False)
    for col in ("severity", "rule", "op", "dtype", "module", "file:line", "n"):
        table.add_column(col, overflow="fold")
    for f in report.findings:
        style = SEVERITY_STYLE.get(f.severity, "")
        table.add_row(
            f"[{style}]{f.severity}[/{style}]" if style else f.severity,
            *(
                escape(one_line(c, 300))
                for c in (f.rule, f.op, f.dtype, f.module_path or "-", f.location or "-")
            ),
            str(f.count),
        )
    print_table(console, table)
    for rid in dict.fromkeys(f.rule for f in report.findings):
        f = next(x for x in report.findings if x.rule == rid)
        console.print(f"[bold]{escape(rid)}[/bold] {escape(f.title)}. Fix: {escape(f.fix)}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("check")(check)
