"""The Anthropic Messages adapter over real HTTP against the scripted server:
block mapping, parallel tool use, cache breakpoints, retries, errors, abort."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agent_support import ChatServer, message

from dsh_jupyter import (
    AbortController,
    AbortSignal,
    Accept,
    AdditionalContext,
    ToolRegistry,
    define_tool,
)
from dsh_jupyter.agent import (
    AnthropicChatModel,
    ChatRequest,
    ModelConfigError,
    ModelHTTPError,
    ModelResponseError,
    ModelUnavailableError,
    RetryPolicy,
    ScriptedModel,
    dump_script,
    run_agent,
)
from dsh_jupyter.agent.adapters._http import require_sdk
from dsh_jupyter.errors import ToolAbortedError

pytestmark = pytest.mark.timeout(30)

HELLO = ChatRequest(messages=({"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "hello"}))
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
def claude(server: ChatServer) -> AnthropicChatModel:
    return AnthropicChatModel(base_url=server.root_url, model="claude-test", api_key="sk-ant",
                              max_tokens=1000, timeout=10.0,
                              retry=RetryPolicy(max_attempts=3, initial_delay=0.01,
                                                max_delay=0.05))


def word_count() -> Any:
    return define_tool(
        name="word_count", description="Count the words in a text.",
        parameters={"type": "object", "properties": {"text": {"type": "string"}},
                    "required": ["text"]},
        output={"schema": {"type": "integer"}, "render": lambda a, v: str(v)},
        execute=lambda args, ctx: len(args["text"].split()),
        is_concurrency_safe=lambda args: True)


async def test_a_text_answer(server: ChatServer, claude: AnthropicChatModel) -> None:
    server.reply(message("Hello", " there.", usage={
        "input_tokens": 12, "cache_read_input_tokens": 3000,
        "cache_creation_input_tokens": 40, "output_tokens": 5}))

    response = await claude.complete(HELLO, signal=AbortSignal.never())

    assert response.content == "Hello there." and response.tool_calls == ()
    assert response.finish_reason == "stop" and response.model == "test-model"
    assert (response.prompt_tokens, response.completion_tokens) == (3052, 5)
    sent = server.received[0]
    assert sent.path == "/v1/messages"
    assert sent.body == {
        "model": "claude-test", "max_tokens": 1000,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]}
    assert sent.headers["authorization"] == "Bearer sk-ant" or sent.headers["x-api-key"]


async def test_parallel_tool_use_in_a_full_run(server: ChatServer, claude: AnthropicChatModel,
                                               tmp_path: Path) -> None:
    registry = ToolRegistry()
    registry.register(word_count())
    registry.on_post_execute(lambda execution, result: Accept(contexts=[
        AdditionalContext(source="audit", text=f"{execution.name} ran")]))
    server.reply(message("Counting both.", calls=[
        ("toolu_1", "word_count", {"text": "one two three"}),
        ("toolu_2", "word_count", {"text": "four five"})]))
    server.reply(message("3 and 2."))

    result = await run_agent(registry, claude, "Count 'one two three' and 'four five'.")

    assert result.stop == "answered" and result.answer == "3 and 2."
    assert result.accounting.tool_calls == 2
    assert [c.id for c in result.responses[0].tool_calls] == ["toolu_1", "toolu_2"]
    first, second = (r.body for r in server.received)
    assert first["tools"] == [{
        "name": "word_count", "description": "Count the words in a text.",
        "input_schema": first["tools"][0]["input_schema"], "cache_control": EPHEMERAL}]
    assert first["tools"][0]["input_schema"]["required"] == ["text"]
    assert first["system"][0]["cache_control"] == EPHEMERAL
    assert first["system"][0]["text"] == result.messages[0]["content"]
    assert second["tools"] == first["tools"] and second["system"] == first["system"]
    # The assistant turn as blocks; both results (then the contexts) in one user message.
    assert second["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Counting both."},
            {"type": "tool_use", "id": "toolu_1", "name": "word_count",
             "input": {"text": "one two three"}},
            {"type": "tool_use", "id": "toolu_2", "name": "word_count",
             "input": {"text": "four five"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "2"},
            {"type": "text", "text": "word_count ran"},
            {"type": "text", "text": "word_count ran"}]}]
    assert result.accounting.prompt_tokens == 200

    script = tmp_path / "recorded.json"
    dump_script(result.responses, script)
    replayed = await run_agent(registry, ScriptedModel.from_file(script),
                               "Count 'one two three' and 'four five'.")
    assert replayed.messages == result.messages


async def test_tool_use_arguments_come_back_as_json_text(server: ChatServer,
                                                         claude: AnthropicChatModel) -> None:
    server.reply(message(calls=[("a", "f", {"x": [1, "é"]}), ("b", "g", {})]))
    response = await claude.complete(HELLO, signal=AbortSignal.never())
    assert response.content is None and response.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("a", "f", '{"x": [1, "é"]}'), ("b", "g", "{}")]


async def test_without_cache_breakpoints(server: ChatServer) -> None:
    server.reply(message("ok"))
    model = AnthropicChatModel(base_url=server.root_url, model="m", cache=False)
    request = ChatRequest(messages=HELLO.messages, tools=({"type": "function", "function": {
        "name": "f", "description": "", "parameters": {"type": "object"}}},))
    await model.complete(request, signal=AbortSignal.never())
    body = server.received[0].body
    assert "cache_control" not in str(body)
    assert body["tools"] == [{"name": "f", "description": "",
                              "input_schema": {"type": "object"}}]
    headers = server.received[0].headers
    assert "authorization" not in headers and "x-api-key" not in headers  # no key given


async def test_invalid_arguments_in_history_become_an_empty_input(
        server: ChatServer, claude: AnthropicChatModel) -> None:
    server.reply(message("ok"))
    request = ChatRequest(messages=(
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]},
        {"role": "tool", "tool_call_id": "x", "content": "Error: invalid arguments"}))
    await claude.complete(request, signal=AbortSignal.never())
    assert server.received[0].body["messages"][1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "x", "name": "f", "input": {}}]}


async def test_client_errors_are_not_retried(server: ChatServer,
                                             claude: AnthropicChatModel) -> None:
    server.reply({"type": "error", "error": {"type": "invalid_request_error",
                                             "message": "max_tokens: must be at most 64000"}},
                 status=400)
    with pytest.raises(ModelHTTPError) as caught:
        await claude.complete(HELLO, signal=AbortSignal.never())
    assert len(server.received) == 1 and caught.value.attempts == 1
    assert caught.value.status == 400 and caught.value.code == "MODEL_HTTP_ERROR"
    assert str(caught.value) == (f"POST {server.root_url}/v1/messages returned 400 Bad Request: "
                                 "max_tokens: must be at most 64000")


async def test_429_retry_after_and_529_overloaded_are_retried(
        server: ChatServer, claude: AnthropicChatModel) -> None:
    server.reply({"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
                 status=429, headers={"retry-after": "0.4"})
    server.reply({"type": "error", "error": {"type": "overloaded_error",
                                             "message": "Overloaded"}}, status=529)
    server.reply(message("ok"))
    loop = asyncio.get_running_loop()
    began = loop.time()
    response = await claude.complete(HELLO, signal=AbortSignal.never())
    assert response.content == "ok" and response.attempts == 3
    assert loop.time() - began >= 0.4


async def test_a_retry_after_beyond_the_bound_fails_at_once(
        server: ChatServer, claude: AnthropicChatModel) -> None:
    # The SDK alone would wait as long as asked.
    server.reply({"type": "error", "error": {"type": "rate_limit_error", "message": "quota"}},
                 status=429, headers={"retry-after": "3600"})
    with pytest.raises(ModelHTTPError) as caught:
        await claude.complete(HELLO, signal=AbortSignal.never())
    assert caught.value.status == 429 and caught.value.attempts == 1
    assert len(server.received) == 1
    assert str(caught.value) == (
        f"POST {server.root_url}/v1/messages returned 429 Too Many Requests and asked to retry "
        "after 3600 s, more than RetryPolicy.max_retry_after (60 s): quota")


async def test_5xx_retries_are_bounded(server: ChatServer, claude: AnthropicChatModel) -> None:
    for _ in range(3):
        server.reply({"type": "error", "error": {"type": "api_error", "message": "down"}},
                     status=500)

    result = await run_agent(ToolRegistry(), claude, "hi")

    error = result.error
    assert result.stop == "model_error" and len(server.received) == 3
    assert isinstance(error, ModelHTTPError) and error.attempts == 3
    assert error.message.endswith(
        "returned 500 Internal Server Error: down (gave up after 3 attempts)")
    assert result.accounting.requests[0].attempts == 3


async def test_dropped_connections_end_as_unavailable(server: ChatServer,
                                                      claude: AnthropicChatModel) -> None:
    for _ in range(3):
        server.reply(drop=True)
    with pytest.raises(ModelUnavailableError) as caught:
        await claude.complete(HELLO, signal=AbortSignal.never())
    assert caught.value.attempts == 3 and caught.value.code == "MODEL_UNAVAILABLE"
    assert "RemoteProtocolError" in str(caught.value)
    assert "gave up after 3 attempts" in str(caught.value)


@pytest.mark.parametrize(("body", "field", "problem"), [
    (b"<html>oops</html>", "", 'expected a JSON body, received text/html "<html>oops</html>"'),
    ({"type": "message", "role": "assistant"}, "content",
     "expected an array, received null (null)"),
    ({"content": [{"type": "text", "text": 7}]}, "content[0].text",
     "expected a string, received 7 (int)"),
    ({"content": [{"type": "tool_use", "id": "a", "name": 42, "input": {}}]}, "content[0].name",
     "expected a non-empty string, received 42 (int)"),
    ({"content": [{"type": "tool_use", "id": "a", "name": "f", "input": "x=1"}]},
     "content[0].input", 'expected an object, received "x=1" (str)'),
    ({"content": [], "usage": {"input_tokens": "many"}}, "usage.input_tokens",
     'expected an integer or null, received "many" (str)'),
    ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error",
     'the API returned an error instead of a message: "Overloaded" (str)'),
])
async def test_malformed_responses_name_the_field(server: ChatServer, claude: AnthropicChatModel,
                                                  body: Any, field: str, problem: str) -> None:
    server.reply(body, headers={"Content-Type": "text/html"} if isinstance(body, bytes) else {})
    with pytest.raises(ModelResponseError) as caught:
        await claude.complete(HELLO, signal=AbortSignal.never())
    assert caught.value.field == field and len(server.received) == 1
    where = field or "the response body"
    assert str(caught.value).startswith(f"malformed Messages API response: {where}: {problem}")


async def test_abort_mid_request_stops_promptly(server: ChatServer,
                                                claude: AnthropicChatModel) -> None:
    server.reply(message("too late"), delay=10)
    controller = AbortController()
    loop = asyncio.get_running_loop()
    request = asyncio.create_task(claude.complete(HELLO, signal=controller.signal))
    await server.until_received(1)
    began = loop.time()
    controller.abort("user stop")
    with pytest.raises(ToolAbortedError):
        await request
    assert loop.time() - began < 1


def test_from_env_and_configuration() -> None:
    model = AnthropicChatModel.from_env({"DSH_MODEL": "claude-x", "ANTHROPIC_API_KEY": "sk-a",
                                         "DSH_MAX_TOKENS": "2048"})
    assert (model.name, model.provider, model.max_tokens) == ("claude-x", "anthropic", 2048)
    assert model.url == "https://api.anthropic.com/v1/messages"
    assert "sk-" not in repr(model) and "key=set" in repr(model)
    local = AnthropicChatModel.from_env({"DSH_MODEL": "m",
                                         "ANTHROPIC_BASE_URL": "http://127.0.0.1:4000/"})
    assert local.base_url == "http://127.0.0.1:4000" and "key=none" in repr(local)
    with pytest.raises(ModelConfigError, match="set DSH_MODEL to the model name"):
        AnthropicChatModel.from_env({"ANTHROPIC_API_KEY": "k"})
    with pytest.raises(ModelConfigError, match="DSH_MAX_TOKENS must be a positive integer"):
        AnthropicChatModel.from_env({"DSH_MODEL": "m", "DSH_MAX_TOKENS": "lots"})
    with pytest.raises(ModelConfigError, match="max_tokens must be a positive integer"):
        AnthropicChatModel(model="m", max_tokens=0)


def test_a_missing_client_package_names_the_extra() -> None:
    with pytest.raises(ModelConfigError) as caught:
        require_sdk("dsh_no_such_sdk", "SomeModel")
    assert str(caught.value) == ("SomeModel needs the dsh_no_such_sdk package: "
                                 "pip install 'dsh-jupyter[dsh_no_such_sdk]'")
