"""The one way tests get a kernel runtime: ``make_runtime``, a typed factory whose runtimes
are entered with ``async with`` on the test's exit stack and closed, in reverse order, when
the test ends (also when it fails). ``tests/conftest.py`` serves it as a fixture; a folder
whose runtimes need other defaults (``tests/integration/gateway``: kernels on a gateway)
overrides the ``runtime_defaults`` fixture, not the factory."""

from __future__ import annotations

import dataclasses
from contextlib import AsyncExitStack
from typing import Any, Protocol

from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig


class RuntimeFactory(Protocol):
    """``await make_runtime(**overrides)``: a runtime on ``runtime_defaults`` with
    ``overrides`` (any :class:`KernelRuntimeConfig` field) applied, already entered."""

    async def __call__(self, **overrides: Any) -> KernelRuntime: ...


def runtime_factory(stack: AsyncExitStack, defaults: KernelRuntimeConfig) -> RuntimeFactory:
    """A factory entering each runtime it makes on ``stack``."""

    async def make(**overrides: Any) -> KernelRuntime:
        config = dataclasses.replace(defaults, **overrides)
        return await stack.enter_async_context(KernelRuntime(config))

    return make
