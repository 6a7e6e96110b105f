"""Shared fixtures for kernel runtime tests: runtimes on real kernels (``make_runtime`` is
tests/conftest.py's), recording bindings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

try:
    import dsh_jupyter  # noqa: F401
except ModuleNotFoundError:  # running from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernel_support import Recorder, RuntimeFactory

from dsh_jupyter.kernel import KernelRuntime


@pytest.fixture(params=["comm", "socket"])
async def runtime(request: pytest.FixtureRequest, make_runtime: RuntimeFactory) -> KernelRuntime:
    """A runtime per carrier of tool calls: every test using it runs over both."""
    return await make_runtime(carrier=request.param)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()
