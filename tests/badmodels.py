"""Known-bad modules for the readiness check: each one trips exactly one Neuron rule.

Every module marks the offending source line with a ``# BAD: <tag>`` comment; tests find that line number with
``bad_line(tag)`` so the expected file:line is computed from this file, not copied from output.
Factories (``make_<name>``) return ``(module, example_inputs)`` so the CLI can check them as
``tests.badmodels:make_nonzero``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve()


def marked_line(path: Path, tag: str, marker: str = "BAD") -> int:
    """1-based line number of the line of ``path`` ending in ``# <marker>: <tag>``."""
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# {marker}: {tag}"):
            return i
    raise KeyError(tag)


def bad_line(tag: str) -> int:
    """1-based line number of the line carrying ``# BAD: <tag>`` in this file."""
    return marked_line(HERE, tag)


class _Projected(nn.Module):
    """What most modules below start with: one 8 -> 8 projection (`self.proj`) ahead of the construct."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)


class DataDependentBranch(_Projected):
    """Python `if` on a tensor value: the branch taken depends on data."""

    def forward(self, x):
        y = self.proj(x)
        if y.sum() > 0:  # BAD: branch
            return y * 2
        return y - 1


class NonZero(_Projected):
    def forward(self, x):
        y = self.proj(x)
        idx = torch.nonzero(y > 0)  # BAD: nonzero
        return idx.float().sum(0)


class ItemAsShape(_Projected):
    """A tensor value read back with .item() and used as a size."""

    def forward(self, x, n):
        k = n.max().item()  # BAD: item
        return self.proj(x)[:, :k]


class Float64Buffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer("scale", torch.ones(8, dtype=torch.float64))

    def forward(self, x):
        y = self.proj(x)
        return y.double() * self.scale  # BAD: float64


class ComplexTensor(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 16)

    def forward(self, x):
        y = self.proj(x).reshape(x.shape[0], 8, 2)
        z = torch.view_as_complex(y)  # BAD: complex
        return torch.view_as_real(z * z)


class CondModule(_Projected):
    def forward(self, x):
        y = self.proj(x)
        return torch.cond(y.sum() > 0, lambda t: t * 2, lambda t: t - 1, (y,))  # BAD: cond


@torch.library.custom_op("chipswap_test::fused_gelu", mutates_args=())
def fused_gelu(x: torch.Tensor) -> torch.Tensor:
    """Stands in for a CUDA/Triton kernel carried over from a GPU code path."""
    return torch.nn.functional.gelu(x)


@fused_gelu.register_fake
def _(x):
    return torch.empty_like(x)


class CustomOp(_Projected):
    def forward(self, x):
        return fused_gelu(self.proj(x))  # BAD: custom_op


class IntTopk(_Projected):
    def forward(self, x, ids):
        top = torch.topk(ids, 2, dim=-1)  # BAD: topk
        return self.proj(x), top.values


class BoolIndex(_Projected):
    def forward(self, x):
        y = self.proj(x)
        return y[y > 0]  # BAD: boolindex


class Good(_Projected):
    def forward(self, x):
        return torch.relu(self.proj(x))


class Raises(nn.Module):
    def forward(self, x):
        raise RuntimeError("this forward always fails")  # BAD: raises


class KVCacheWrite(nn.Module):
    """A float write at int64 positions without accumulate (a KV-cache update): not a scatter-reduce."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer("cache", torch.zeros(16, 8))

    def forward(self, x, pos):
        cache = self.cache.clone()
        cache.index_put_((pos,), self.proj(x))  # GOOD: kv_write
        return cache


class FloatIndexAdd(_Projected):
    def forward(self, x, pos):
        return torch.zeros(16, 8).index_add(0, pos, self.proj(x))  # GOOD: index_add


class IntAccumulate(_Projected):
    """Counting into an int64 buffer with accumulate=True: a scatter-reduce on integer data."""

    def forward(self, x, pos):
        counts = torch.zeros(16, dtype=torch.int64)
        counts = counts.index_put((pos,), torch.ones_like(pos), accumulate=True)  # BAD: int_accumulate
        return self.proj(x), counts


class IntScatterAdd(_Projected):
    def forward(self, x, pos):
        hist = torch.zeros(16, dtype=torch.int64)
        hist = hist.scatter_add(0, pos, torch.ones_like(pos))  # BAD: scatter_add
        return self.proj(x), hist


class Experts(nn.Module):
    """Hand-written top-1 MoE dispatch: each expert takes the tokens routed to it (data-dependent counts)."""

    def __init__(self, n: int = 4):
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(n))

    def forward(self, x, choice):
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            rows = torch.nonzero(choice == i).squeeze(-1)  # BAD: moe
            out = out.index_add(0, rows, expert(x[rows]))
        return out


class TinyMoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(8, 4)
        self.moe = Experts()

    def forward(self, x):
        choice = self.router(x).argmax(-1)
        return self.moe(x, choice)


class SegmentEmbedding(nn.Module):
    """BERT-style inputs with a 10-row vocabulary and 2 segment ids: random ids up to 99 would not fit."""

    def __init__(self):
        super().__init__()
        self.words = nn.Embedding(10, 8)
        self.segments = nn.Embedding(2, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, input_ids, token_type_ids):
        return self.proj(self.words(input_ids) + self.segments(token_type_ids))


class PairwiseDistance(_Projected):
    """torch.cdist: the forward lowers, its backward (_cdist_backward) has no lowering: a finding only
    with --training."""

    def forward(self, x, y):
        return torch.cdist(self.proj(x), y)  # BAD: cdist_backward


class ExitsInForward(nn.Module):
    def forward(self, x):
        raise SystemExit(0)


def _x():
    torch.manual_seed(0)
    return torch.randn(2, 8)


# tag -> (factory name, expected rule id), filled where each bad factory is defined
EXPECTED: dict[str, tuple[str, str]] = {}


def _expect(tag: str, rule: str) -> Callable[[Callable], Callable]:
    """Record that factory `make_<tag>` must yield `rule` at its `# BAD: <tag>` line."""

    def mark(make: Callable) -> Callable:
        EXPECTED[tag] = (f"make_{tag}", rule)
        return make

    return mark


def _entry(
    module: type[nn.Module], **extra: Callable[[], torch.Tensor]
) -> Callable[[], tuple[nn.Module, dict]]:
    """A `make_*` entry point: a fresh `module` and its inputs (`x` and each named extra), built per call."""

    def make() -> tuple[nn.Module, dict]:
        return module(), {"x": _x(), **{name: build() for name, build in extra.items()}}

    return make


make_branch = _expect("branch", "NCC_EMOD025")(_entry(DataDependentBranch))
make_nonzero = _expect("nonzero", "NCC_EMOD025")(_entry(NonZero))
make_item = _expect("item", "NCC_EMOD025")(_entry(ItemAsShape, n=lambda: torch.tensor([3, 5])))
make_float64 = _expect("float64", "CHIP_DTYPE_F64")(_entry(Float64Buffer))
make_complex = _expect("complex", "NCC_EVRF004")(_entry(ComplexTensor))
make_cond = _expect("cond", "CHIP_COND")(_entry(CondModule))
make_custom_op = _expect("custom_op", "NCC_EHCA005")(_entry(CustomOp))
make_topk = _expect("topk", "NCC_EVRF013")(
    _entry(IntTopk, ids=lambda: torch.arange(16, dtype=torch.int64).reshape(2, 8))
)
make_boolindex = _expect("boolindex", "NCC_EMOD025")(_entry(BoolIndex))
make_good = _entry(Good)
make_raises = _entry(Raises)


def make_not_a_module():
    return 42


def _pos():
    return torch.tensor([3, 7], dtype=torch.int64)


make_kv_write = _entry(KVCacheWrite, pos=_pos)
make_index_add = _entry(FloatIndexAdd, pos=_pos)
make_int_accumulate = _expect("int_accumulate", "NCC_EVRF016")(_entry(IntAccumulate, pos=_pos))
make_scatter_add = _expect("scatter_add", "NCC_EVRF016")(_entry(IntScatterAdd, pos=_pos))


@_expect("moe", "CHIP_MOE_ROUTING")
def make_moe():
    torch.manual_seed(0)
    return TinyMoE(), {"x": torch.randn(6, 8)}


def make_segments():
    ids = torch.tensor([[1, 5, 9, 2]], dtype=torch.int64)
    return SegmentEmbedding(), {"input_ids": ids, "token_type_ids": torch.tensor([[0, 0, 1, 1]])}


def make_cdist():
    torch.manual_seed(0)
    return PairwiseDistance(), {"x": torch.randn(2, 4, 8), "y": torch.randn(2, 5, 8)}


def make_exits():
    raise SystemExit(3)


make_forward_exits = _entry(ExitsInForward)


def make_keyboard_like():
    raise GeneratorExit("odd exception type")


# tag -> factory that must check clean (no blocker): plain writes and float accumulation at int64 positions
GOOD = {"kv_write": "make_kv_write", "index_add": "make_index_add"}


def good_line(tag: str) -> int:
    return marked_line(HERE, tag, "GOOD")
