"""`chipswap project MODEL --instance NAME ...`: predicted throughput and latency of a model on instances.

Parses flags, reads the trace (chipswap.traffic), calls chipswap.projection.api and prints tables (rich) or
JSON.
No projection logic here. Every figure printed is a projection with its error band.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from chipswap.cli.common import console as shared_console
from chipswap.cli.common import maybe_flag, print_table, switch
from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

HELP = (
    "Predict throughput and latency of MODEL (a preset, a config.json, or module:factory) on each "
    "--instance, "
    "from its work per request shape and a roofline calibrated on published benchmarks (GPU and Neuron). "
    "Searches tensor-parallel degree, replicas, batch and weight dtype under the memory rules, and prints "
    "the "
    "chosen configuration, why the others lost, and every figure as projected +- its held-out error band. "
    "Lengths come from --trace (default: the bundled Azure code trace) or --prompt-tokens/--output-tokens. "
    "--train-tokens projects a training run instead. A measured figure of your own always beats these."
)
MAX_INSTANCES = 32


def _fmt_s(x: float) -> str:
    return f"{x * 1e3:,.0f} ms" if x < 10 else f"{x:,.1f} s"


def _pm(fig: Any, fmt: Any = None) -> str:
    from chipswap.projection.serving.coverage import OUTSIDE, is_outside

    if is_outside(fig.band):  # no honest band under +-100 %: a labelled refusal, not a number
        return OUTSIDE
    text = fmt(fig.value) if fmt else f"{fig.value:,.2f}"
    return f"{text} ±{fig.band * 100:.0f}%"


def _lengths(trace: Path | None, prompt: int | None, output: int | None, mode: str) -> tuple[Any, Any, str]:
    if trace is not None and prompt is not None:
        raise ChipswapError(
            f"both --trace and --prompt-tokens given: {trace}, {prompt}; pass one way to give lengths"
        )
    if prompt is not None:
        if prompt < 1:
            raise ChipswapError(
                f"--prompt-tokens must be >= 1, got {prompt}; give the prompt length in tokens"
            )
        if output is not None and output < 0:
            raise ChipswapError(f"--output-tokens must be >= 0, got {output}; give the output length")
        from chipswap.shapes.histogram import MAX_LENGTH

        for flag, value in (("--prompt-tokens", prompt), ("--output-tokens", output)):
            if value is not None and value > MAX_LENGTH:
                raise ChipswapError(
                    f"{flag} is {value:,}, over the {MAX_LENGTH:,}-token limit per request; give a real one"
                )
        if mode == "llm" and output is None:
            raise ChipswapError("--output-tokens is missing; an LLM projection needs the output length too")
        return prompt, output or 0, f"{prompt} prompt + {output or 0} output tokens"
    if output is not None:
        raise ChipswapError(f"--output-tokens given without --prompt-tokens: {output}; pass both")
    from chipswap.traffic import bundled_trace_path, read_trace

    tr = read_trace(trace or bundled_trace_path())
    where = "bundled Azure code trace" if trace is None else str(trace)
    outputs = tr.output_tokens
    if mode == "llm" and outputs is None:
        raise ChipswapError(
            f"trace {trace} has no output-token column; an LLM projection needs output lengths"
        )
    return tr.prompt_tokens, outputs, f"{len(tr):,} requests from {where}"


def _serving_table(console: Console, p: Any) -> None:
    cfg = p.config
    title = f"{p.model} on {p.instance} ({p.family}, {p.mode}" + (f", stack {p.stack})" if p.stack else ")")
    if cfg is None:
        from chipswap.projection.serving.coverage import OUTSIDE

        what = "not projected" if p.reason.startswith(OUTSIDE) else "does not fit"
        console.print(f"[bold]{one_line(title)}[/bold]: {what}: {one_line(p.reason)}")
        return
    console.print(
        f"[bold]{one_line(title)}[/bold]: TP{cfg.tp_degree} x {cfg.replicas} replicas, batch up to "
        f"{cfg.max_batch}, {cfg.weight_dtype} weights; {one_line(cfg.why)}"
    )
    if p.mode == "llm":
        console.print(
            f"  instance throughput: {_pm(p.requests_per_s)} requests/s, "
            f"{_pm(p.output_tokens_per_s, lambda v: f'{v:,.0f}')} "
            "output tokens/s (projected)"
        )
        t = Table(show_edge=False)
        for col in (
            "shape",
            "prompt",
            "output",
            "TTFT (batch 1)",
            f"TPOT (batch {cfg.max_batch})",
            "end to end",
        ):
            t.add_column(col, justify="right")
        for s in p.shapes:
            t.add_row(
                s.shape.label,
                f"{s.shape.prompt:,}"
                + (f" ({s.padded_prompt:,})" if s.padded_prompt != s.shape.prompt else ""),
                f"{s.shape.output:,}",
                _pm(s.ttft, _fmt_s),
                _pm(s.tpot, _fmt_s),
                _pm(s.e2e, _fmt_s),
            )
        print_table(console, t)
        b = Table(show_edge=False, title="per batch size, mean request, whole instance")
        for col in ("batch", "TPOT", "end to end", "requests/s", "output tok/s"):
            b.add_column(col, justify="right")
        for x in p.batches:
            b.add_row(
                str(x.batch),
                _pm(x.tpot, _fmt_s),
                _pm(x.e2e, _fmt_s),
                _pm(x.requests_per_s),
                _pm(x.output_tokens_per_s, lambda v: f"{v:,.0f}"),
            )
        print_table(console, b)
    else:
        console.print(
            f"  instance throughput: {_pm(p.requests_per_s, lambda v: f'{v:,.0f}')} inferences/s (projected)"
        )
        t = Table(show_edge=False)
        for col in ("length", "batch", "latency", "inferences/s"):
            t.add_column(col, justify="right")
        for x in p.buckets:
            t.add_row(
                str(x.length),
                str(x.batch),
                _pm(x.latency, _fmt_s),
                _pm(x.inferences_per_s, lambda v: f"{v:,.0f}"),
            )
        print_table(console, t)


def _print_rejected(console: Console, p: Any, limit: int = 8) -> None:
    if p.rejected:
        console.print(f"  configurations not chosen ({len(p.rejected)}):")
        for c, why in p.rejected[:limit]:
            console.print(f"    - {one_line(c)}: {one_line(why)}")
        if len(p.rejected) > limit:
            console.print(f"    ... {len(p.rejected) - limit} more (--json lists all)")
    for n in p.notes:
        console.print(f"  note: {one_line(n)}")
    if p.stacks:
        console.print(f"  calibrated on: {one_line('; '.join(p.stacks))}")


def _training_tables(
    console: Console, work: Any, results: list[Any], tokens: float, seq: int, nodes: int
) -> None:
    t = Table(
        title=f"training {work.name}: {tokens:,.0f} tokens at sequence length {seq} on {nodes} node"
        + ("s" if nodes != 1 else "")
    )
    for col in ("instance", "dtype", "layout", "tokens/s per node", "hours"):
        t.add_column(col, justify="right")
    for r in results:
        t.add_row(
            r.instance, r.dtype, r.layout.label(), _pm(r.tokens_per_s_per_node, lambda v: f"{v:,.0f}"),
            _pm(r.hours, lambda v: f"{v:,.1f}"),
        )  # fmt: skip
    print_table(console, t)
    for r in results:
        shares = ", ".join(f"{k.replace('_', ' ')} {v:.0%}" for k, v in r.breakdown.items() if v >= 0.005)
        m = r.memory_gib
        unfit = sum("does not fit" in w for _, w in r.rejected)
        what = (
            "pinned (--train-layout)"
            if r.pinned
            else f"conventional {r.stack} layout"
            if r.conventional is not None
            else f"{r.stack} recipe stack, chipswap's fastest feasible layout"
        )
        console.print(f"  {r.instance}: {what}: {one_line(r.layout.label())}")
        if r.best is not None and r.best_tokens_per_s_per_node is not None and r.best != r.layout:
            ratio = r.best_tokens_per_s_per_node / r.tokens_per_s_per_node.value
            console.print(
                f"    chipswap's fastest feasible layout: {one_line(r.best.label())}: "
                f"{r.best_tokens_per_s_per_node:,.0f} tokens/s per node ({ratio:.2f}x)"
            )
        console.print(
            f"    step time: {one_line(shares)}; peak memory per device {m['peak_gib']:,.1f} of "
            f"{m['capacity_gib']:,.1f} GiB ({r.feasible} of "
            f"{r.feasible + unfit} layouts fit)"
        )
        for lay, why in r.rejected[:3]:
            console.print(f"    not chosen: {one_line(lay)}: {one_line(why)}")
        console.print(f"    band +-{r.tokens_per_s_per_node.band:.0%}: {one_line(r.band_basis)}")
        for n in r.notes:
            console.print(f"    note: {one_line(n)}")


def register(app: typer.Typer) -> None:
    @app.command("project", help=HELP)
    def project(
        model: str = typer.Argument(..., help="preset name, config.json path, or package.module:factory"),
        instance: list[str] = typer.Option(
            ...,
            "--instance",
            "-i",
            help="instance type to project on (repeat for several), e.g. inf2.48xlarge",
        ),
        trace: Path | None = maybe_flag("--trace", help="trace file (.csv/.jsonl/.parquet) for lengths"),
        prompt_tokens: int | None = maybe_flag(
            "--prompt-tokens", help="one prompt length instead of a trace"
        ),
        output_tokens: int | None = maybe_flag("--output-tokens", help="output length with --prompt-tokens"),
        mode: str | None = maybe_flag("--mode", help="llm or encoder (default: from the model's task)"),
        task: str | None = maybe_flag("--task", help="model task (e.g. causal-lm, sequence-classification)"),
        dtype: str = typer.Option(
            "bf16",
            "--dtype",
            help="bf16 (16-bit weights only), any (8-bit may win, labelled), or int8/fp8/...",
        ),
        bucket: list[int] = typer.Option(
            [], "--bucket", help="compiled prompt length on Neuron (repeat); default powers of two from 128"
        ),
        train_tokens: float | None = maybe_flag(
            "--train-tokens", help="project a training run of this many tokens instead of serving"
        ),
        seq_len: int | None = maybe_flag(
            "--seq-len", help="training sequence length (with --train-tokens; default 4096)"
        ),
        train_dtype: str | None = maybe_flag(
            "--train-dtype", help="bf16 (default, like for like) or fp8 (H100/H200/B200, Trainium2)"
        ),
        train_fp8_recipe: str | None = maybe_flag(
            "--train-fp8-recipe",
            help="fp8 scaling recipe with --train-dtype fp8: tensorwise (default), rowwise or mxfp8 (B200)",
        ),
        nodes: int | None = maybe_flag("--nodes", help="training nodes (instances) of the run (default 1)"),
        global_batch: int | None = maybe_flag(
            "--global-batch", help="training global batch in sequences (default ~2M tokens a step)"
        ),
        train_layout: str | None = maybe_flag(
            "--train-layout",
            help="pin the training layout: tp=8,pp=1,cp=1,dp=8,sharding=fsdp|hsdp|zero1|none,"
            "recompute=none|selective|full,micro_batch=2,vp=1 (every key optional; default: the conventional "
            "layout, with chipswap's fastest beside it)",
        ),
        train_stack: str | None = maybe_flag(
            "--train-stack",
            help="training stack on GPUs: pytorch (FSDP / DTensor: torchtitan, LLM Foundry; default) or "
            "megatron (NeMo / Megatron-Core)",
        ),
        stack: str | None = maybe_flag(
            "--stack",
            help="serving stack: nxdi-vllm (Neuron default), nxdi-tgi, tnx-2.18; vllm (GPU default), trtllm, "
            "tgi; applies to the instances of its side (Neuron or GPU)",
        ),
        tp: int | None = maybe_flag("--tp", help="pin the tensor-parallel degree (LLM mode)"),
        replicas: int | None = maybe_flag("--replicas", help="pin the replicas per instance (LLM)"),
        batch: int | None = maybe_flag("--batch", help="pin the (compiled) batch per replica (LLM)"),
        sampling: str = typer.Option(
            "device", "--sampling", help="where tokens are sampled on Neuron stacks: device or cpu"
        ),
        as_json: bool = switch("--json", help="print JSON instead of tables"),
    ) -> None:
        from chipswap.economics.catalog_io import load_catalog
        from chipswap.projection.api import model_work, project_serving

        if len(instance) > MAX_INSTANCES:
            raise ChipswapError(f"too many --instance options: {len(instance)}; give at most {MAX_INSTANCES}")
        if any(b < 1 or b > 1 << 20 for b in bucket):
            raise ChipswapError(
                f"--bucket must be 1..1048576 tokens, got {bucket}; give compiled prompt lengths"
            )
        training_only = [
            f
            for f, v in (("--seq-len", seq_len), ("--train-dtype", train_dtype), ("--nodes", nodes),
                         ("--global-batch", global_batch), ("--train-layout", train_layout),
                         ("--train-stack", train_stack), ("--train-fp8-recipe", train_fp8_recipe))
            if v is not None
        ]  # fmt: skip
        seq_len = 4096 if seq_len is None else seq_len
        nodes = 1 if nodes is None else nodes
        if not 1 <= seq_len <= 1 << 20 or not 1 <= nodes <= 100_000:
            raise ChipswapError(
                f"--seq-len must be 1..1048576 and --nodes 1..100000, got {seq_len:,} and {nodes:,}; give "
                "values in those ranges"
            )
        for flag, value, hi in (("--tp", tp, 256), ("--replicas", replicas, 1024), ("--batch", batch, 4096)):
            if value is not None and not 1 <= value <= hi:
                raise ChipswapError(f"{flag} must be 1..{hi}, got {value}; give a positive layout size")
        if training_only and train_tokens is None:
            raise ChipswapError(
                f"{', '.join(training_only)} shape a training projection; add --train-tokens N or drop them"
            )
        if sampling not in ("device", "cpu"):
            raise ChipswapError(f"unknown --sampling: {sampling!r}; use device or cpu")
        from chipswap.projection.stacks import get_stack

        side_stack = get_stack(stack, field="--stack") if stack is not None else None
        catalog = load_catalog()
        insts = [catalog.instance(n) for n in instance]  # unknown names fail before any work
        work = model_work(model, task=task)
        console = shared_console()
        pinned = [f for f, v in (("--tp", tp), ("--replicas", replicas), ("--batch", batch)) if v is not None]
        if pinned and (
            train_tokens is not None or (mode or "llm").lower() != "llm" or work.kind != "decoder"
        ):
            raise ChipswapError(
                f"{', '.join(pinned)} pin an LLM serving layout, but this is "
                + (
                    "a training projection; pin a training layout with --train-layout tp=8,pp=1,... instead"
                    if train_tokens is not None
                    else "an encoder projection; drop them"
                )
            )
        if train_tokens is not None:
            from chipswap.projection.training.layout import parse_layout
            from chipswap.projection.training.project import project_training as project_layout

            pin = parse_layout(train_layout, defer=True) if train_layout is not None else None
            results = [
                project_layout(
                    work, i, tokens=train_tokens, seq_len=seq_len, dtype=train_dtype, nodes=nodes,
                    global_batch=global_batch, catalog=catalog, layout=pin, stack=train_stack,
                    fp8_recipe=train_fp8_recipe,
                )
                for i in insts
            ]  # fmt: skip
            if as_json:
                typer.echo(
                    json.dumps({"model": work.name, "training": [r.as_dict() for r in results]}, indent=2)
                )
                return
            _training_tables(console, work, results, train_tokens, seq_len, nodes)
            return
        use_mode = (mode or ("llm" if work.kind == "decoder" else "encoder")).lower()
        if use_mode not in ("llm", "encoder"):
            raise ChipswapError(f"unknown --mode: {mode!r}; use llm or encoder")
        prompts, outputs, what = _lengths(trace, prompt_tokens, output_tokens, use_mode)
        if side_stack is not None and not any(
            (i.is_neuron and side_stack.side == "neuron") or (not i.is_neuron and side_stack.side == "gpu")
            for i in insts
        ):
            raise ChipswapError(
                f"--stack {side_stack.id} is a {side_stack.side} stack but no --instance is a "
                f"{side_stack.side} instance; pick a stack of the instances' side"
            )
        results = [
            project_serving(
                work,
                i,
                prompt_tokens=prompts,
                output_tokens=outputs,
                mode=use_mode,
                dtype=dtype,
                buckets=bucket or None,
                catalog=catalog,
                tp=tp,
                replicas=replicas,
                batch=batch,
                stack=side_stack.id
                if side_stack is not None and (side_stack.side == "neuron") == i.is_neuron
                else None,
                sampling=sampling,
            )
            for i in insts
        ]
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "model": work.name,
                        "lengths": what,
                        "work_source": work.source,
                        "projections": [r.as_dict() for r in results],
                    },
                    indent=2,
                )
            )
            return
        console.print(
            f"{one_line(work.name)}: {work.params / 1e9:,.2f} B parameters ({work.source}); lengths: {what}"
        )
        for r in results:
            console.print()
            _serving_table(console, r)
            _print_rejected(console, r)
