"""Fixtures shared by several test modules.

The `moto` fixture: one fake-AWS server (real HTTP on loopback, tests.aws_helpers) per module using it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def moto() -> Iterator[Any]:
    """One moto server (real AWS HTTP on loopback, tests.aws_helpers) per test module that asks for it."""
    from tests.aws_helpers import moto_server

    with moto_server() as server:
        yield server
