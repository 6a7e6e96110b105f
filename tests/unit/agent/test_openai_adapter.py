"""The OpenAI-compatible adapter over real HTTP: retries, errors, malformed
responses, configuration."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import httpx2
import pytest
from agent_support import ChatServer, completion

from dsh_jupyter import AbortSignal, ToolRegistry
from dsh_jupyter.agent import (
    ChatRequest,
    ModelConfigError,
    ModelHTTPError,
    ModelResponseError,
    ModelUnavailableError,
    OpenAIChatModel,
    RetryPolicy,
    run_agent,
)

pytestmark = pytest.mark.timeout(30)

HELLO = ChatRequest(messages=({"role": "user", "content": "hello"},))


def quick(url: str, **kw: Any) -> OpenAIChatModel:
    kw.setdefault("retry", RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.05))
    return OpenAIChatModel(base_url=url, model="m", timeout=kw.pop("timeout", 10.0), **kw)


async def test_transient_5xx_is_retried_then_succeeds(server: ChatServer,
                                                      model: OpenAIChatModel) -> None:
    server.reply({"error": {"message": "overloaded"}}, status=503)
    server.reply(b"<html>bad gateway</html>", status=502, headers={"Content-Type": "text/html"})
    server.answer("fine")

    result = await run_agent(ToolRegistry(), model, "hi")

    assert result.stop == "answered" and result.answer == "fine"
    assert len(server.received) == 3
    assert all(r.body == server.received[0].body for r in server.received)
    assert result.responses[0].attempts == 3 and result.accounting.requests[0].attempts == 3


async def test_dropped_connection_is_retried(server: ChatServer) -> None:
    server.reply(drop=True)
    server.answer("after the drop")
    response = await quick(server.base_url).complete(HELLO, signal=AbortSignal.never())
    assert response.content == "after the drop" and response.attempts == 2


async def test_retry_after_is_honoured(server: ChatServer) -> None:
    server.reply({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "0.3"})
    server.reply({"error": {"message": "slow down"}}, status=429,
                 headers={"retry-after-ms": "200"})
    server.answer("ok")
    loop = asyncio.get_running_loop()
    began = loop.time()
    response = await quick(server.base_url).complete(HELLO, signal=AbortSignal.never())
    assert response.content == "ok" and response.attempts == 3
    assert loop.time() - began >= 0.5


async def test_a_retry_after_beyond_the_bound_fails_at_once(server: ChatServer) -> None:
    server.reply({"error": {"message": "come back tomorrow"}}, status=429,
                 headers={"Retry-After": "3600"})
    with pytest.raises(ModelHTTPError) as caught:
        await quick(server.base_url).complete(HELLO, signal=AbortSignal.never())
    assert caught.value.status == 429 and len(server.received) == 1
    assert "asked to retry after 3600 s, more than RetryPolicy.max_retry_after" in str(
        caught.value)
    assert "come back tomorrow" in str(caught.value)


async def test_the_policy_times_the_retries(server: ChatServer) -> None:
    # The SDK's retry loop waits as the RetryPolicy says, not its own 0.5 s, 1 s, 2 s ...
    for _ in range(3):
        server.reply({"error": {"message": "busy"}}, status=503)
    server.answer("soon")
    loop = asyncio.get_running_loop()
    began = loop.time()
    quick_retries = RetryPolicy(max_attempts=4, initial_delay=0.01, max_delay=0.02)
    response = await quick(server.base_url, retry=quick_retries).complete(
        HELLO, signal=AbortSignal.never())
    assert response.content == "soon" and response.attempts == 4
    assert loop.time() - began < 0.4
    # ... longer ones too
    server.reply({"error": {"message": "busy"}}, status=503)
    server.answer("later")
    began = loop.time()
    slow_retries = RetryPolicy(max_attempts=2, initial_delay=0.6, jitter=0)
    response = await quick(server.base_url, retry=slow_retries).complete(
        HELLO, signal=AbortSignal.never())
    assert response.content == "later" and loop.time() - began >= 0.6


async def test_retries_are_bounded(server: ChatServer, model: OpenAIChatModel) -> None:
    for _ in range(3):
        server.reply({"error": {"message": "still down"}}, status=500)

    result = await run_agent(ToolRegistry(), model, "hi")

    assert result.stop == "model_error" and len(server.received) == 3
    error = result.error
    assert isinstance(error, ModelHTTPError) and error.code == "MODEL_HTTP_ERROR"
    assert error.status == 500 and error.attempts == 3
    assert error.message.endswith(
        "returned 500 Internal Server Error: still down (gave up after 3 attempts)")
    assert result.accounting.requests[0].attempts == 3


async def test_client_errors_are_not_retried(server: ChatServer) -> None:
    server.reply({"error": {"message": "Invalid schema for function 'x'"}}, status=400)
    with pytest.raises(ModelHTTPError) as caught:
        await quick(server.base_url).complete(HELLO, signal=AbortSignal.never())
    assert len(server.received) == 1 and caught.value.attempts == 1
    assert str(caught.value).endswith("returned 400 Bad Request: Invalid schema for function 'x'")


async def test_connection_refused_gives_up_after_the_attempts() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ModelUnavailableError) as caught:
        await quick(f"http://127.0.0.1:{port}/v1").complete(HELLO, signal=AbortSignal.never())
    assert caught.value.attempts == 3 and "ConnectError" in str(caught.value)
    assert "gave up after 3 attempts" in str(caught.value)


async def test_read_timeout_is_retried_then_reported(server: ChatServer) -> None:
    server.answer("late", delay=5)
    server.answer("late", delay=5)
    model = quick(server.base_url, timeout=0.2,
                  retry=RetryPolicy(max_attempts=2, initial_delay=0.01))
    with pytest.raises(ModelUnavailableError, match="ReadTimeout"):
        await model.complete(HELLO, signal=AbortSignal.never())
    assert len(server.received) == 2


@pytest.mark.parametrize(("body", "field", "message"), [
    (b"<html>oops</html>", "",
     'the response body: expected a JSON body, received text/html "<html>oops</html>" (str)'),
    ({"choices": []}, "choices", "choices: expected a non-empty array, received [] (list)"),
    ({"object": "list"}, "choices", "choices: expected a non-empty array, received null (null)"),
    ({"choices": [{"message": "hi"}]}, "choices[0].message",
     'choices[0].message: expected an object, received "hi" (str)'),
    ({"choices": [{"message": {"content": 7}}]}, "choices[0].message.content",
     "expected a string or null, received 7 (int)"),
    ({"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": 42, "arguments": "{}"}}]}}]},
     "choices[0].message.tool_calls[0].function.name",
     "choices[0].message.tool_calls[0].function.name: expected a non-empty string, "
     "received 42 (int)"),
    ({"choices": [{"message": {"tool_calls": [{"function": {"name": "f", "arguments": 3}}]}}]},
     "choices[0].message.tool_calls[0].function.arguments", "expected a JSON string"),
    ({**completion("x"), "usage": {"prompt_tokens": "many"}}, "usage.prompt_tokens",
     'expected an integer or null, received "many" (str)'),
    ({"error": {"message": "quota exceeded"}}, "error",
     'the API returned an error instead of a completion: "quota exceeded" (str)'),
])
async def test_malformed_responses_name_the_field_and_what_came(
        server: ChatServer, model: OpenAIChatModel, body: Any, field: str,
        message: str) -> None:
    headers = {"Content-Type": "text/html"} if isinstance(body, bytes) else {}
    server.reply(body, headers=headers)

    result = await run_agent(ToolRegistry(), model, "hi")

    assert result.stop == "model_error" and len(server.received) == 1  # not retried
    error = result.error
    assert isinstance(error, ModelResponseError) and error.code == "MODEL_RESPONSE_INVALID"
    assert error.field == field
    assert error.message.startswith("malformed chat-completions response: ")
    assert message in error.message


async def test_tolerated_variants(server: ChatServer) -> None:
    body = completion(None, [("", "f", "")], usage=None)
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"a": 1}
    body["choices"][0]["message"]["reasoning_content"] = "thinking"
    server.reply(body)
    response = await quick(server.base_url).complete(HELLO, signal=AbortSignal.never())
    call = response.tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("", "f", '{"a": 1}')
    assert response.reasoning == "thinking" and response.prompt_tokens is None


async def test_options_headers_and_a_caller_owned_client(server: ChatServer) -> None:
    server.answer("a")
    server.answer("b")
    async with httpx2.AsyncClient() as client:
        model = quick(server.base_url, options={"temperature": 0}, headers={"X-Test": "1"},
                      client=client)
        await model.complete(HELLO, signal=AbortSignal.never())
        await model.complete(HELLO, signal=AbortSignal.never())
        assert not client.is_closed
    first = server.received[0]
    assert first.body == {"model": "m", "temperature": 0,
                          "messages": [{"role": "user", "content": "hello"}]}
    assert first.headers["x-test"] == "1" and "authorization" not in first.headers


def test_from_env() -> None:
    env = {"DSH_MODEL": "deepseek-chat", "DSH_MODEL_BASE_URL": "https://api.deepseek.com/",
           "DSH_API_KEY": "sk-dsh", "OPENAI_API_KEY": "sk-openai"}
    model = OpenAIChatModel.from_env(env)
    assert model.name == "deepseek-chat"
    assert model.url == "https://api.deepseek.com/chat/completions"
    assert "sk-" not in repr(model) and "key=set" in repr(model)
    assert OpenAIChatModel.from_env({"DSH_MODEL": "m", "OPENAI_API_KEY": "k"}).url == (
        "https://api.openai.com/v1/chat/completions")
    assert "key=none" in repr(OpenAIChatModel.from_env({"DSH_MODEL": "llama3"}))
    with pytest.raises(ModelConfigError, match="set DSH_MODEL to the model name"):
        OpenAIChatModel.from_env({"OPENAI_API_KEY": "k"})
    with pytest.raises(ModelConfigError, match="base_url must be an http"):
        OpenAIChatModel(model="m", base_url="localhost:11434")
    with pytest.raises(ModelConfigError,
                       match=r"client must be an httpx2\.AsyncClient .*, got httpx\.AsyncClient"):
        OpenAIChatModel(model="m", client=httpx.AsyncClient())  # type: ignore[arg-type]


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    policy = RetryPolicy(initial_delay=1.0, max_delay=4.0, jitter=0.25)
    for retry, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 4.0)]:
        delays = {policy.backoff(retry) for _ in range(50)}
        assert all(0.75 * ceiling <= d <= ceiling for d in delays) and len(delays) > 1
