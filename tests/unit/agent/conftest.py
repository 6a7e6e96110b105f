"""Fixtures for the agent tests: a scripted chat-completions server per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import dsh_jupyter  # noqa: F401
except ModuleNotFoundError:  # running from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from agent_support import ChatServer

from dsh_jupyter.agent import OpenAIChatModel, RetryPolicy


@pytest.fixture
def server() -> Iterator[ChatServer]:
    chat = ChatServer().start()
    try:
        yield chat
    finally:
        chat.stop()


@pytest.fixture
def model(server: ChatServer) -> OpenAIChatModel:
    """A client for ``server`` with quick retries."""
    return OpenAIChatModel(base_url=server.base_url, model="test-model", api_key="sk-test",
                           timeout=10.0,
                           retry=RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.05))
