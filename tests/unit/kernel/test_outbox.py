"""Sending to a kernel that does not read: the outbox's rules, scripted, without a kernel.

The first tests drive :class:`Outbox` with a scripted transport; the last ones put a
real zmq peer (or websocket server) that never reads behind a host connection.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Sized
from pathlib import Path
from typing import Any, cast

import pytest
import zmq
import zmq.asyncio

from dsh_jupyter.kernel.transport.channels import Outbox
from dsh_jupyter.kernel.transport.connection import KernelConnection

pytestmark = pytest.mark.timeout(30)


class ScriptedTransport:
    """Takes messages while ``open``; ``send`` waits until it opens."""

    def __init__(self) -> None:
        self.open = True
        self.opened = asyncio.Event()
        self.sent: list[int] = []
        self.waiters = 0
        self.most_waiters = 0

    def try_send(self, message: int) -> bool:
        if self.open:
            self.sent.append(message)
        return self.open

    async def send(self, message: int) -> None:
        self.waiters += 1
        self.most_waiters = max(self.most_waiters, self.waiters)
        try:
            await self.opened.wait()
        finally:
            self.waiters -= 1
        self.sent.append(message)

    def reopen(self) -> None:
        self.open = True
        self.opened.set()


def outbox(transport: ScriptedTransport) -> Outbox[int]:
    return Outbox(transport.try_send, transport.send)


async def flushed(box: Outbox[int]) -> None:
    """Let the flusher run until it is done (a few turns of the loop)."""
    for _ in range(100):
        if not box.flushing:
            return
        await asyncio.sleep(0)
    raise AssertionError("the outbox is still flushing")


async def test_a_message_the_transport_takes_does_not_wait() -> None:
    transport = ScriptedTransport()
    box = outbox(transport)
    assert box.post(1, max_waiting=0)
    assert (transport.sent, len(box), box.flushing) == ([1], 0, False)


async def test_refused_messages_wait_and_leave_in_order() -> None:
    transport = ScriptedTransport()
    box = outbox(transport)
    transport.open = False
    assert all(box.post(n, max_waiting=10) for n in range(5))
    transport.open = True  # taking again, but the waiting ones go first
    assert box.post(5, max_waiting=10)
    assert transport.sent == []
    transport.reopen()
    await flushed(box)
    assert transport.sent == [0, 1, 2, 3, 4, 5]


async def test_a_full_outbox_drops_the_message() -> None:
    transport = ScriptedTransport()
    box = outbox(transport)
    transport.open = False
    accepted = [box.post(n, max_waiting=3) for n in range(5)]
    assert accepted == [True, True, True, False, False]
    assert len(box) == 3


async def test_requests_wait_without_a_bound() -> None:
    transport = ScriptedTransport()
    box = outbox(transport)
    transport.open = False
    assert all(box.post(n, max_waiting=None) for n in range(10_000))
    assert len(box) == 10_000


async def test_one_flusher_waits_for_one_message_at_a_time() -> None:
    transport = ScriptedTransport()
    box = outbox(transport)
    transport.open = False
    for n in range(1000):
        box.post(n, max_waiting=1000)
        await asyncio.sleep(0)
    transport.reopen()
    await flushed(box)
    assert transport.most_waiters == 1
    assert transport.sent == list(range(1000))


async def test_closing_drops_what_waits_and_ends_the_flusher() -> None:
    transport = ScriptedTransport()
    box = outbox(transport)
    transport.open = False
    box.post(1, max_waiting=10)
    box.post(2, max_waiting=10)
    await asyncio.sleep(0)
    box.close()
    await asyncio.sleep(0)
    assert (len(box), box.flushing, transport.waiters) == (0, False, 0)
    assert box.post(3, max_waiting=10)  # closed: accepted and dropped, never sent
    assert transport.sent == []


async def test_a_transport_that_fails_drops_what_waits() -> None:
    async def gone(_message: int) -> None:
        raise ConnectionError("the kernel is gone")

    box: Outbox[int] = Outbox(lambda _message: False, gone)
    box.post(1, max_waiting=10)
    box.post(2, max_waiting=10)
    await flushed(box)
    assert len(box) == 0


# --- a real zmq peer that does not read ---------------------------------------------------

KEY = "a-key"


@pytest.fixture
async def deaf_kernel(tmp_path: Path
                      ) -> AsyncIterator[tuple[zmq.asyncio.Socket, KernelConnection]]:
    """A bound shell ROUTER that reads nothing until the test does, and a connection to it
    (over IPC, whose small socket buffers fill fast)."""
    context = zmq.asyncio.Context()
    shell = context.socket(zmq.ROUTER)
    iopub = context.socket(zmq.PUB)
    shell.setsockopt(zmq.LINGER, 0)
    iopub.setsockopt(zmq.LINGER, 0)
    base = str(tmp_path / "kernel")
    shell.bind(f"ipc://{base}-1")
    iopub.bind(f"ipc://{base}-2")
    info: dict[str, Any] = {"key": KEY, "signature_scheme": "hmac-sha256", "transport": "ipc",
                            "ip": base, "shell_port": 1, "iopub_port": 2}
    connection = KernelConnection(context, info, max_message_bytes=1 << 20)
    try:
        yield shell, connection
    finally:
        connection.close()
        shell.close(0)
        iopub.close(0)
        context.term()


async def connected(shell: zmq.asyncio.Socket, connection: KernelConnection) -> None:
    """Until the connection reaches the peer (zmq connects in the background): one message
    sent, and read by the peer."""
    connection.send_comm("c", {"probe": True}, max_waiting=1)
    await asyncio.wait_for(shell.recv_multipart(), 5)


def flood(connection: KernelConnection, max_waiting: int, limit: int = 1_000_000) -> int:
    """Send comm messages until one is dropped; returns how many were accepted."""
    for n in range(limit):
        connection.send_comm("c", {"n": n}, max_waiting=max_waiting)
        if connection.overflowed:
            return n
    raise AssertionError(f"{limit} messages sent and none dropped")


async def test_a_peer_that_does_not_read_overflows_the_outbox_not_pyzmq(
        deaf_kernel: tuple[zmq.asyncio.Socket, KernelConnection]) -> None:
    shell, connection = deaf_kernel
    await connected(shell, connection)  # zmq's own buffers fill first
    accepted = flood(connection, max_waiting=10)
    await asyncio.sleep(0.05)  # the flusher waits for POLLOUT
    assert accepted > 1000  # zmq took its high-water mark's worth before the outbox filled
    # pyzmq queues a future per send on its asyncio socket (O(n²) to complete): here it
    # holds at most the flusher's one wait for POLLOUT.
    assert len(cast(Sized, connection.shell._send_futures)) <= 1  # private: pyzmq has no type


async def test_waiting_messages_reach_the_peer_in_order_once_it_reads(
        deaf_kernel: tuple[zmq.asyncio.Socket, KernelConnection]) -> None:
    shell, connection = deaf_kernel
    await connected(shell, connection)
    accepted = flood(connection, max_waiting=100)
    received: list[int] = []
    while len(received) < accepted:
        frames = await asyncio.wait_for(shell.recv_multipart(), 5)
        content = frames[frames.index(b"<IDS|MSG>") + 5]
        received.append(int(content.split(b'"n":')[1].rstrip(b"}}")))
    assert received == list(range(accepted))


# --- a websocket server that does not read -------------------------------------------------

async def test_a_gateway_that_does_not_read_overflows_the_outbox() -> None:
    pytest.importorskip("websockets")
    from websockets.asyncio.client import connect
    from websockets.asyncio.server import ServerConnection, serve

    from dsh_jupyter.kernel.transport.gateway_connection import V1_PROTOCOL, GatewayConnection

    stop = asyncio.Event()

    async def deaf(connection: ServerConnection) -> None:
        connection.transport.pause_reading()
        await stop.wait()

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options: dict[str, Any] = {"subprotocols": [V1_PROTOCOL], "compression": None,
                               "close_timeout": 0.1}
    pad = "x" * 10_000
    async with serve(deaf, "127.0.0.1", port, **options):
        client = await connect(f"ws://127.0.0.1:{port}", **options)
        channels = GatewayConnection(client, url="ws://test")
        try:
            for n in range(1_000_000):
                channels.send_comm("c", {"n": n, "pad": pad}, max_waiting=10)
                if channels.overflowed:
                    break
                await asyncio.sleep(0)  # the transport writes what the socket takes
            assert channels.overflowed
            # asyncio's buffer stays near its high-water mark: the flusher writes one frame
            # and waits for it to drain, the rest waits in the outbox.
            transport = client.transport
            high = transport.get_write_buffer_limits()[1]
            assert transport.get_write_buffer_size() <= high + 2 * (len(pad) + 1024)
        finally:
            stop.set()
            await channels.aclose()
