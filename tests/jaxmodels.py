"""Known-bad and known-good JAX / Flax entry points for the readiness check.

Each entry point returns ``(fn, args)`` as `chipswap check module:entry` expects. A bad one marks its
offending line with ``# BAD: <tag>``; tests find that line with ``bad_line(tag)``, so expected file:line
values come from this file, not from the output. ``EXPECTED`` maps each tag to its entry point and rule id.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve()


def bad_line(tag: str) -> int:
    from tests.badmodels import marked_line

    return marked_line(HERE, tag)


def _x(n: int = 8) -> jax.Array:
    return jnp.linspace(-1.0, 1.0, n, dtype=jnp.float32)


def _ids(n: int = 8) -> jax.Array:
    return jnp.arange(n, dtype=jnp.int32) % 5


# ------------------------------------------------------------------------------------------- known bad


def unique_no_size(x):
    return jnp.unique(x)  # BAD: unique


def python_branch(x):
    if x.sum() > 0:  # BAD: branch
        return x * 2
    return x - 1


def fft(x):
    return jnp.fft.fft(x).real  # BAD: fft


def int_sort(ids):
    return jnp.sort(ids)  # BAD: sort


def int_topk(ids):
    return jax.lax.top_k(ids, 2)[0]  # BAD: topk


def host_callback(x):
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return jax.pure_callback(lambda v: np.asarray(v) * 2, out, x)  # BAD: callback


def int_scatter_add(ids):
    return jnp.zeros(8, jnp.int32).at[ids].add(1)  # BAD: scatter_add


def argmax(x):
    return jnp.argmax(x)  # BAD: argmax


def int_dot(ids):
    return jnp.dot(ids, ids)  # BAD: int_dot


def cond(x):
    return jax.lax.cond(x.sum() > 0, lambda a: a * 2, lambda a: a - 1, x)  # BAD: cond


def float64(x):
    return x.astype(jnp.float64) * 2.0  # BAD: float64


# tag -> (entry point, expected rule id, severity), filled where each bad entry point is defined
EXPECTED: dict[str, tuple[str, str, str]] = {}


def _expect(tag: str, rule: str, severity: str) -> Callable[[Callable], Callable]:
    """Record that entry point `make_<tag>` must yield `rule` at `severity` (at its `# BAD: <tag>` line)."""

    def mark(make: Callable) -> Callable:
        EXPECTED[tag] = (f"make_{tag}", rule, severity)
        return make

    return mark


def _entry(fn: Callable, *inputs: Callable[[], jax.Array]) -> Callable[[], tuple[Callable, tuple]]:
    """A `make_*` entry point: `fn` and its arguments, each built at call time."""

    def make() -> tuple[Callable, tuple]:
        return fn, tuple(build() for build in inputs)

    return make


make_unique = _expect("unique", "NCC_EMOD025", "blocker")(_entry(unique_no_size, _ids))
make_branch = _expect("branch", "NCC_EMOD025", "blocker")(_entry(python_branch, _x))
make_fft = _expect("fft", "NCC_EVRF001", "blocker")(_entry(fft, _x))
make_sort = _expect("sort", "NCC_EVRF013.sort", "warn")(_entry(int_sort, _ids))
make_topk = _expect("topk", "NCC_EVRF013", "blocker")(_entry(int_topk, _ids))
make_callback = _expect("callback", "NCC_EHCA005", "blocker")(_entry(host_callback, _x))
make_scatter_add = _expect("scatter_add", "NCC_EVRF016", "blocker")(_entry(int_scatter_add, _ids))
make_argmax = _expect("argmax", "CHIP_JAX_VARIADIC_REDUCE", "blocker")(_entry(argmax, _x))
make_int_dot = _expect("int_dot", "CHIP_JAX_INT_DOT", "blocker")(_entry(int_dot, _ids))
make_cond = _expect("cond", "CHIP_COND", "blocker")(_entry(cond, _x))


@_expect("float64", "CHIP_DTYPE_F64", "warn")
def make_float64():
    jax.config.update("jax_enable_x64", True)  # the test that uses this restores the flag
    return float64, (np.linspace(-1.0, 1.0, 8),)


@_expect("dynamic", "NCC_EMOD025", "blocker")
def make_dynamic():
    """A symbolic batch dimension: the lowered program keeps a dynamic dimension."""
    from jax import export

    def f(x):
        return jnp.sin(x) * 2  # BAD: dynamic

    return f, (jax.ShapeDtypeStruct(export.symbolic_shape("b, 4"), jnp.float32),)


# ------------------------------------------------------------------------------------------- known good


def scatter_set(ids, x):
    """A plain write (no accumulate) into a float buffer, like a KV-cache update: not a scatter-reduce."""
    return jnp.zeros(8, jnp.float32).at[ids].set(x)


make_scatter_set = _entry(scatter_set, _ids, _x)


def _abstract_params(model, x):
    """Parameter shapes without running init (lowering needs shapes and dtypes only)."""
    return jax.eval_shape(model.init, jax.random.PRNGKey(0), x)


def make_flax_mlp():
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(32)(x))
            return nn.Dense(4)(x)

    model = MLP()
    x = jnp.ones((2, 16), jnp.float32)
    return model.apply, (_abstract_params(model, x), x)


def make_flax_cnn():
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(8, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), strides=(2, 2))
            x = x.reshape((x.shape[0], -1))
            return nn.Dense(10)(x)

    model = CNN()
    x = jnp.ones((2, 16, 16, 3), jnp.float32)
    return model.apply, (_abstract_params(model, x), x)


def make_flax_transformer_block():
    import flax.linen as nn

    class Block(nn.Module):
        dim: int = 32
        heads: int = 4

        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads, qkv_features=self.dim)(h, h)
            h = nn.LayerNorm()(x)
            h = nn.Dense(4 * self.dim)(h)
            h = nn.gelu(h, approximate=True)
            return x + nn.Dense(self.dim)(h)

    model = Block()
    x = jnp.ones((2, 16, 32), jnp.float32)
    return model.apply, (_abstract_params(model, x), x)


GOOD = ["make_scatter_set", "make_flax_mlp", "make_flax_cnn", "make_flax_transformer_block"]


# ------------------------------------------------------------------------------------------- bad input


def make_raises():
    raise ValueError("entry point is broken")


def make_no_args():
    return fft


def make_none_args():
    return fft, ()


def make_needs_x64():
    return float64, (np.linspace(-1.0, 1.0, 8),)


def make_shape_mismatch():
    def f(a, b):
        return a @ b

    return f, (jnp.ones((2, 3)), jnp.ones((4, 5)))
