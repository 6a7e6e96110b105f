"""Fixtures for remote-kernel tests: one real Kernel Gateway per session, runtimes on it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import dsh_jupyter  # noqa: F401
except ModuleNotFoundError:  # running from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

# The kernel tests' helpers (Recorder, run) serve here too.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernel"))

pytest.importorskip("websockets", reason="remote kernels need the gateway extra")

from gateway_support import GATEWAY_BIN, LocalGateway, start_gateway
from kernel_support import Recorder

from dsh_jupyter.kernel import KernelRuntimeConfig

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
def runtime_defaults(gateway: LocalGateway) -> KernelRuntimeConfig:
    """``make_runtime`` (tests/conftest.py) here starts kernels on the session's gateway
    (``gateway=`` overrides it)."""
    return KernelRuntimeConfig(pool_size=0, gateway=gateway.config(), startup_seconds=30.0)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()
