"""The serving-stack registry: which software stack a projection assumes, as plain data.

What it is for: `chipswap project --stack`, the workload's `stack` / `gpu_stack` fields, the projection's
physical time model (chipswap.projection.serving.physics) and the simulator's scheduling policy (issue 21 maps
these
ids
to policies) all name stacks by the ids below (fixed in /work/notes/stacks.md; do not rename). Every projected
figure names the stack it assumes.

Pure data and lookups: no I/O, no numbers fitted here. May not import the projection or the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

from chipswap.errors import ChipswapError, closest


@dataclass(frozen=True)
class Stack:
    """One serving stack. side: "neuron" or "gpu". calibration: how its time model is obtained
    ("sdk-tables": the Neuron SDK's published tables through the chip family's fit; "stack-fit": the
    hardware efficiencies of the chip family plus stack terms fitted on published runs of this stack;
    "gpu-tables": the NVIDIA fit, whose published rows are all TensorRT-LLM)."""

    id: str
    side: str
    description: str
    calibration: str
    default: bool = False


STACKS: tuple[Stack, ...] = (
    Stack(
        "nxdi-vllm",
        "neuron",
        "vLLM with the Neuron plugin on NxD Inference (2025-26)",
        "stack-fit",
        default=True,
    ),
    Stack("nxdi-tgi", "neuron", "optimum-neuron TGI on NxD Inference (2025-26)", "stack-fit"),
    Stack(
        "tnx-2.18",
        "neuron",
        "Transformers NeuronX on Neuron SDK 2.18 (the SDK's published tables, 2024)",
        "sdk-tables",
    ),
    Stack("vllm", "gpu", "vLLM (V1 engine)", "gpu-tables", default=True),
    Stack("trtllm", "gpu", "TensorRT-LLM", "gpu-tables"),
    Stack("tgi", "gpu", "Text Generation Inference", "gpu-tables"),
)
SIDES = ("neuron", "gpu")
# the GPU stack whose published rows the NVIDIA fit is made of (every usable GPU row is TensorRT-LLM)
GPU_CALIBRATED_STACK = "trtllm"


def stack_ids(side: str | None = None) -> list[str]:
    return [s.id for s in STACKS if side is None or s.side == side]


def default_stack(side: str) -> str:
    for s in STACKS:
        if s.side == side and s.default:
            return s.id
    raise ChipswapError(f"unknown side: {side!r}; use neuron or gpu")


def get_stack(stack_id: str, side: str | None = None, *, field: str = "stack") -> Stack:
    """The stack named `stack_id`; an unknown name, or one of the other side, is a one-line error."""
    for s in STACKS:
        if s.id == stack_id:
            if side is not None and s.side != side:
                raise ChipswapError(
                    f"{field} {stack_id!r} is a {s.side} stack, not a {side} one; use one of "
                    f"{', '.join(stack_ids(side))}"
                )
            return s
    near = closest(str(stack_id), stack_ids(side))
    raise ChipswapError(
        f"unknown {field}: {str(stack_id)[:60]!r}; "
        + (f"did you mean {', '.join(near)}? " if near else "")
        + f"use one of {', '.join(stack_ids(side))}"
    )


def stack_for(stack_id: str | None, side: str) -> Stack:
    """The stack to use on `side`: the one named (checked) or the side's default."""
    return get_stack(stack_id, side) if stack_id else get_stack(default_stack(side))


def as_rows() -> list[dict[str, str | bool]]:
    """The registry as plain rows (for JSON output and other packages)."""
    return [
        {
            "id": s.id,
            "side": s.side,
            "description": s.description,
            "calibration": s.calibration,
            "default": s.default,
        }
        for s in STACKS
    ]
