"""What every transport's channels share, scripted without a kernel: the ready handshake
and sending through the outbox (see ``channels.BaseChannels``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dsh_jupyter.kernel.transport.channels import READY_RETRY_SECONDS, BaseChannels
from dsh_jupyter.kernel.transport.wire import Incoming

pytestmark = pytest.mark.timeout(10)

Reply = tuple[str, Incoming | None]


class ScriptedChannels(BaseChannels[tuple[str, str, dict[str, Any]]]):
    """Takes every message; ``answer(request_id)`` scripts what arrives for each request."""

    def __init__(self, answer: Any) -> None:
        super().__init__()
        self.sent: list[tuple[str, str, dict[str, Any]]] = []
        self._answer = answer
        self._arriving: asyncio.Queue[Reply] = asyncio.Queue()
        self._ids = iter(range(1, 1000))

    def _frame(self, msg_type: str, content: dict[str, Any]
               ) -> tuple[str, tuple[str, str, dict[str, Any]]]:
        msg_id = f"r{next(self._ids)}"
        return msg_id, (msg_id, msg_type, content)

    def _try_send(self, message: tuple[str, str, dict[str, Any]]) -> bool:
        self.sent.append(message)
        for reply in self._answer(message[0]):
            self._arriving.put_nowait(reply)
        return True

    async def _send_when_drained(self, message: tuple[str, str, dict[str, Any]]) -> None:
        raise AssertionError("the scripted transport never refuses")

    async def _next_reply(self, seconds: float) -> Reply | None:
        try:
            async with asyncio.timeout(seconds):
                return await self._arriving.get()
        except TimeoutError:
            return None

    def requests(self) -> list[str]:
        return [msg_type for _, msg_type, _ in self.sent]


def status(parent: str | None) -> Incoming:
    return Incoming("status", parent, {"execution_state": "busy"}, 10)


async def test_our_requests_status_on_iopub_means_ready() -> None:
    channels = ScriptedChannels(lambda request: [
        ("iopub", None), ("iopub", status("someone-else")), ("shell", status(request)),
        ("iopub", status(request))])
    await channels.wait_ready(5)
    assert channels.requests() == ["kernel_info_request"]


async def test_a_shell_answer_without_iopub_asks_again_soon() -> None:
    answers = iter([[("shell", status("r1"))], [("iopub", status("r2"))]])
    channels = ScriptedChannels(lambda _request: next(answers))
    loop = asyncio.get_running_loop()
    started = loop.time()
    await channels.wait_ready(5)
    assert channels.requests() == ["kernel_info_request"] * 2
    assert loop.time() - started < READY_RETRY_SECONDS


async def test_a_silent_kernel_is_asked_again_until_the_timeout() -> None:
    channels = ScriptedChannels(lambda _request: [])
    with pytest.raises(TimeoutError):
        await channels.wait_ready(2.1 * READY_RETRY_SECONDS)
    assert channels.requests() == ["kernel_info_request"] * 3


async def test_execute_and_comm_messages_go_through_the_outbox() -> None:
    channels = ScriptedChannels(lambda _request: [])
    request = channels.execute("1 + 1")
    channels.send_comm("c", {"kind": "result"})
    (first_id, first_type, first), (_, second_type, second) = channels.sent
    assert (first_id, first_type, first["code"], first["silent"]) == (
        request, "execute_request", "1 + 1", True)
    assert (second_type, second) == ("comm_msg", {"comm_id": "c", "data": {"kind": "result"}})
    assert not channels.overflowed
