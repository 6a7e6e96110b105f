"""What goes wrong around the gateway reaches the run as a clear ``kernel-exit``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_support import GatewayRuntimeFactory, LocalGateway, free_port, start_gateway
from kernel_support import Recorder, run

from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.kernel.gateway_config import GatewayConfig
from dsh_jupyter.runtime import FunctionBindings, RunRequest

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]


async def test_wrong_token_is_reported(make_runtime: GatewayRuntimeFactory,
                                       gateway: LocalGateway) -> None:
    runtime = await make_runtime(gateway=gateway.config(token="not-the-token"))
    result = await run(runtime, "return 1")
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    message = result.failure.message
    assert f"the gateway at {gateway.url} refused to start a kernel (HTTP 401" in message
    assert "set GatewayConfig.token" in message
    assert "not-the-token" not in message and gateway.token not in message


async def test_missing_token_is_reported(make_runtime: GatewayRuntimeFactory,
                                         gateway: LocalGateway) -> None:
    runtime = await make_runtime(gateway=gateway.config(token=None))
    result = await run(runtime, "return 1")
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert "HTTP 401" in result.failure.message


async def test_unreachable_gateway_is_reported(make_runtime: GatewayRuntimeFactory) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    runtime = await make_runtime(gateway=GatewayConfig(url=url, token="t"))
    result = await run(runtime, "return 1")
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert f"cannot reach the gateway at {url} to start a kernel" in result.failure.message


async def test_unknown_kernelspec_is_reported(make_runtime: GatewayRuntimeFactory) -> None:
    runtime = await make_runtime(kernel_name="no-such-spec")
    result = await run(runtime, "return 1")
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert "no-such-spec" in result.failure.message


async def test_pool_keeps_failing_quietly_then_reports(make_runtime: GatewayRuntimeFactory,
                                                       gateway: LocalGateway) -> None:
    runtime = await make_runtime(gateway=gateway.config(token="wrong"), pool_size=2)
    for _ in range(2):
        result = await run(runtime, "return 1")
        assert result.failure is not None and "HTTP 401" in result.failure.message


@pytest.fixture
def own_gateway(tmp_path: Path) -> Iterator[LocalGateway]:
    """A gateway this test may kill (the session's must survive)."""
    started = start_gateway(tmp_path / "own-gateway")
    try:
        yield started
    finally:
        started.stop()


async def test_gateway_gone_mid_run(own_gateway: LocalGateway) -> None:
    config = KernelRuntimeConfig(pool_size=0, startup_seconds=30,
                                 gateway=own_gateway.config(shutdown_seconds=1.0))
    kernel_pids: list[int] = []

    async def kill_gateway(args: JsonValue) -> JsonValue:
        assert isinstance(args, int)
        kernel_pids.append(args)
        os.kill(own_gateway.pid, signal.SIGKILL)
        return None

    program = "import os\nawait tools.kill_gateway(os.getpid())\nawait asyncio.sleep(60)"
    loop = asyncio.get_running_loop()
    try:
        async with KernelRuntime(config) as runtime:
            started = loop.time()
            result = await run(runtime, program, {"kill_gateway": kill_gateway})
            assert loop.time() - started < 15
    finally:
        for pid in kernel_pids:  # the killed gateway could not shut its kernel down
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert result.failure.message.startswith("lost the connection to the gateway")


@pytest.fixture(scope="module")
def legacy_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGateway]:
    """A gateway that speaks only the legacy JSON framing (as Enterprise Gateway 3 does)."""
    started = start_gateway(tmp_path_factory.mktemp("legacy-gateway"), extra_args=(
        "--ZMQChannelsWebsocketConnection.kernel_ws_protocol=",))
    try:
        yield started
    finally:
        started.stop()


async def test_legacy_json_framing(make_runtime: GatewayRuntimeFactory,
                                   legacy_gateway: LocalGateway, recorder: Recorder) -> None:
    runtime = await make_runtime(gateway=legacy_gateway.config(), pool_size=1)
    pool = runtime._pool
    assert pool is not None
    await pool.wait_filled()
    assert pool._ready[0].process.connection_info["protocol"] == "legacy"
    program = """\
print("legacy")
results = await asyncio.gather(*(tools.slow({"n": n}) for n in range(3)))
return [r["args"]["n"] for r in results]
"""
    result = await run(runtime, program, {"slow": recorder.binding("slow", delay=0.3)})
    assert (result.failure, result.value, result.logs) == (None, [0, 1, 2], ("legacy",))
    assert recorder.max_active == 3


async def test_v1_framing_is_preferred(make_runtime: GatewayRuntimeFactory) -> None:
    runtime = await make_runtime(pool_size=1)
    assert runtime._pool is not None
    await runtime._pool.wait_filled()
    assert runtime._pool._ready[0].process.connection_info["protocol"] == "v1"


@pytest.mark.parametrize("delay", [0.005, 0.2])
async def test_abort_while_starting_leaves_no_kernel(make_runtime: GatewayRuntimeFactory,
                                                     gateway: LocalGateway,
                                                     delay: float) -> None:
    from dsh_jupyter.abort import AbortController

    runtime = await make_runtime()
    controller = AbortController()
    asyncio.get_running_loop().call_later(delay, controller.abort, "changed my mind")
    result = await runtime.run(RunRequest("return 1", FunctionBindings({}), controller.signal))
    assert result.failure is not None
    assert (result.failure.kind, result.failure.message) == ("abort", "changed my mind")
    await runtime.aclose()  # waits for the deletion of a kernel created meanwhile
    assert await asyncio.to_thread(gateway.kernel_ids) == []
