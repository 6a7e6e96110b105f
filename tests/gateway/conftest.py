"""Fixtures for remote-kernel tests: one real Kernel Gateway per session, runtimes on it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

try:
    import dsh_jupyter  # noqa: F401
except ModuleNotFoundError:  # running from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# The kernel tests' helpers (Recorder, run) serve here too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel"))

pytest.importorskip("websockets", reason="remote kernels need the gateway extra")

from gateway_support import GATEWAY_BIN, GatewayRuntimeFactory, LocalGateway, start_gateway
from kernel_support import Recorder

from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig

if not GATEWAY_BIN.exists():
    pytest.skip("jupyter-kernelgateway is not installed", allow_module_level=True)



@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGateway]:
    """A Kernel Gateway on 127.0.0.1 with token auth, stopped by PID after the session."""
    started = start_gateway(tmp_path_factory.mktemp("gateway"))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
async def make_runtime(gateway: LocalGateway) -> AsyncIterator[GatewayRuntimeFactory]:
    """``await make_runtime(**config)``: an entered runtime whose kernels come from the
    session's gateway (``gateway=`` overrides it), disposed after the test."""
    runtimes: list[KernelRuntime] = []

    async def make(**overrides: object) -> KernelRuntime:
        options: dict[str, object] = {"pool_size": 0, "gateway": gateway.config(),
                                      "startup_seconds": 30.0}
        options.update(overrides)
        runtime = KernelRuntime(KernelRuntimeConfig(**options))  # type: ignore[arg-type]
        await runtime.__aenter__()
        runtimes.append(runtime)
        return runtime

    yield make
    for runtime in runtimes:
        await runtime.aclose()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()
