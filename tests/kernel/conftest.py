"""Shared fixtures for kernel runtime tests: runtimes on real kernels, recording bindings."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

try:
    import dsh_jupyter  # noqa: F401
except ModuleNotFoundError:  # running from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernel_support import Recorder, RuntimeFactory

from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig


@pytest.fixture
async def make_runtime() -> AsyncIterator[RuntimeFactory]:
    """``await make_runtime(**config)``: an entered runtime, disposed after the test."""
    runtimes: list[KernelRuntime] = []

    async def make(**overrides: object) -> KernelRuntime:
        options: dict[str, object] = {"pool_size": 0}
        options.update(overrides)
        runtime = KernelRuntime(KernelRuntimeConfig(**options))  # type: ignore[arg-type]
        await runtime.__aenter__()
        runtimes.append(runtime)
        return runtime

    yield make
    for runtime in runtimes:
        await runtime.aclose()


@pytest.fixture(params=["comm", "socket"])
async def runtime(request: pytest.FixtureRequest, make_runtime: RuntimeFactory) -> KernelRuntime:
    """A runtime per carrier of tool calls: every test using it runs over both."""
    return await make_runtime(carrier=request.param)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()
