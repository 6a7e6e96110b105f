"""OpenAIChatModel(api="responses") over real HTTP against the scripted server:
input items, function_call items, retries, errors, abort."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_support import ChatServer, response

from dsh_jupyter import AbortController, AbortSignal, ToolRegistry, define_tool
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
from dsh_jupyter.errors import ToolAbortedError

pytestmark = pytest.mark.timeout(30)

HELLO = ChatRequest(messages=({"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "hello"}))


@pytest.fixture
def responses(server: ChatServer) -> OpenAIChatModel:
    return OpenAIChatModel(base_url=server.base_url, model="gpt-test", api_key="sk-test",
                           api="responses", timeout=10.0,
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


async def test_a_text_answer(server: ChatServer, responses: OpenAIChatModel) -> None:
    body = response("Hello there.", usage=(42, 7))
    body["output"].insert(0, {"type": "reasoning", "id": "rs_1",
                              "summary": [{"type": "summary_text", "text": "Greet."}]})
    server.reply(body)

    answer = await responses.complete(HELLO, signal=AbortSignal.never())

    assert answer.content == "Hello there." and answer.finish_reason == "stop"
    assert (answer.prompt_tokens, answer.completion_tokens) == (42, 7)
    assert answer.reasoning == "Greet." and answer.model == "test-model"
    sent = server.received[0]
    assert sent.path == "/v1/responses" and responses.url.endswith("/v1/responses")
    assert sent.body == {"model": "gpt-test", "instructions": "Be brief.", "store": False,
                         "input": [{"role": "user", "content": "hello"}]}
    assert sent.headers["authorization"] == "Bearer sk-test"


async def test_parallel_function_calls_in_a_full_run(server: ChatServer,
                                                     responses: OpenAIChatModel) -> None:
    registry = ToolRegistry()
    registry.register(word_count())
    server.reply(response("Counting.", [("call_a", "word_count", {"text": "one two three"}),
                                        ("call_b", "word_count", {"text": "four five"})]))
    server.reply(response("3 and 2.", usage=(300, 5)))

    result = await run_agent(registry, responses, "Count 'one two three' and 'four five'.")

    assert result.stop == "answered" and result.answer == "3 and 2."
    assert [c.id for c in result.responses[0].tool_calls] == ["call_a", "call_b"]
    assert result.responses[0].finish_reason == "tool_calls"
    assert result.accounting.prompt_tokens == 400
    first, second = (r.body for r in server.received)
    assert first["tools"] == [{
        "type": "function", "name": "word_count", "description": "Count the words in a text.",
        "parameters": first["tools"][0]["parameters"], "strict": False}]
    assert first["instructions"] == result.messages[0]["content"]
    assert second["input"][1:] == [
        {"role": "assistant", "content": "Counting."},
        {"type": "function_call", "call_id": "call_a", "name": "word_count",
         "arguments": '{"text": "one two three"}'},
        {"type": "function_call", "call_id": "call_b", "name": "word_count",
         "arguments": '{"text": "four five"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "3"},
        {"type": "function_call_output", "call_id": "call_b", "output": "2"}]


async def test_an_incomplete_response_reports_why(server: ChatServer,
                                                  responses: OpenAIChatModel) -> None:
    body = response("Partial")
    body.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    server.reply(body)
    answer = await responses.complete(HELLO, signal=AbortSignal.never())
    assert answer.content == "Partial" and answer.finish_reason == "length"


async def test_errors_and_retries(server: ChatServer, responses: OpenAIChatModel) -> None:
    server.reply({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "0.3"})
    server.reply({"error": {"message": "oops"}}, status=502)
    server.reply(response("ok"))
    loop = asyncio.get_running_loop()
    began = loop.time()
    answer = await responses.complete(HELLO, signal=AbortSignal.never())
    assert answer.content == "ok" and answer.attempts == 3 and loop.time() - began >= 0.3

    server.reply({"error": {"message": "Unknown parameter: 'input[0].foo'."}}, status=400)
    with pytest.raises(ModelHTTPError) as caught:
        await responses.complete(HELLO, signal=AbortSignal.never())
    assert caught.value.attempts == 1 and str(caught.value) == (
        f"POST {server.base_url}/responses returned 400 Bad Request: "
        "Unknown parameter: 'input[0].foo'.")

    for _ in range(3):
        server.reply(drop=True)
    with pytest.raises(ModelUnavailableError, match="RemoteProtocolError") as dropped:
        await responses.complete(HELLO, signal=AbortSignal.never())
    assert dropped.value.attempts == 3


@pytest.mark.parametrize(("body", "field", "problem"), [
    ({"object": "response", "status": "completed"}, "output",
     "expected an array, received null (null)"),
    ({"output": [{"type": "function_call", "call_id": "a", "arguments": "{}"}]},
     "output[0].name", "expected a non-empty string, received null (null)"),
    ({"output": [{"type": "message", "content": [{"type": "output_text", "text": None}]}]},
     "output[0].content[0].text", "expected a string, received null (null)"),
    ({"output": [], "usage": {"input_tokens": 1.5}}, "usage.input_tokens",
     "expected an integer or null, received 1.5 (float)"),
    ({"status": "failed", "error": {"code": "server_error", "message": "model crashed"},
      "output": []}, "error",
     'the API returned an error instead of a response: "model crashed" (str)'),
])
async def test_malformed_responses_name_the_field(server: ChatServer, responses: OpenAIChatModel,
                                                  body: Any, field: str, problem: str) -> None:
    server.reply(body)
    with pytest.raises(ModelResponseError) as caught:
        await responses.complete(HELLO, signal=AbortSignal.never())
    assert caught.value.field == field and len(server.received) == 1
    assert str(caught.value) == f"malformed Responses API response: {field}: {problem}"


async def test_abort_mid_request_stops_promptly(server: ChatServer,
                                                responses: OpenAIChatModel) -> None:
    server.reply(response("too late"), delay=10)
    controller = AbortController()
    loop = asyncio.get_running_loop()
    request = asyncio.create_task(responses.complete(HELLO, signal=controller.signal))
    await server.until_received(1)
    began = loop.time()
    controller.abort("user stop")
    with pytest.raises(ToolAbortedError):
        await request
    assert loop.time() - began < 1


def test_from_env_selects_the_api() -> None:
    model = OpenAIChatModel.from_env({"DSH_MODEL": "gpt-x", "DSH_MODEL_API": "responses"})
    assert model.api == "responses" and model.url == "https://api.openai.com/v1/responses"
    assert OpenAIChatModel.from_env({"DSH_MODEL": "gpt-x"}).api == "chat"
    with pytest.raises(ModelConfigError, match='DSH_MODEL_API must be "chat" or "responses"'):
        OpenAIChatModel.from_env({"DSH_MODEL": "gpt-x", "DSH_MODEL_API": "assistants"})
