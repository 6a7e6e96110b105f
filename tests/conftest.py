"""What every tier shares: the shared helpers' folder on ``sys.path`` and the one runtime
fixture.

The tests are placed by what they start: ``unit/`` (nothing: no kernel, no subprocess; its
conftest fails a test that does), ``kernel/`` (real kernels through a runtime),
``integration/`` (the whole system: servers, notebooks, browsers, the CLI), and the named
suites ``security/`` and ``reliability/``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

try:
    import dsh_jupyter  # noqa: F401
except ModuleNotFoundError:  # running from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Helpers shared by more than one folder are imported by bare name, as each folder's own are.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from runtime_support import RuntimeFactory, runtime_factory

from dsh_jupyter.kernel import KernelRuntimeConfig


@pytest.fixture
def runtime_defaults() -> KernelRuntimeConfig:
    """The configuration ``make_runtime`` starts from: no warm pool, so a test's kernels
    are the ones it asks for."""
    return KernelRuntimeConfig(pool_size=0)


@pytest.fixture
async def make_runtime(runtime_defaults: KernelRuntimeConfig) -> AsyncIterator[RuntimeFactory]:
    """``await make_runtime(**overrides)``: an entered runtime, closed after the test."""
    async with AsyncExitStack() as stack:
        yield runtime_factory(stack, runtime_defaults)
