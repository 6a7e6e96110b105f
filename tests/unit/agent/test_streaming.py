"""Streamed responses (``stream=True``) for each API against the scripted server:
text deltas as they arrive, the same response at the end, errors mid-stream, and
``agent/text-delta`` events from the loop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agent_support import ChatServer, completion, message, response, sse

from dsh_jupyter import AbortController, AbortSignal, ToolRegistry, define_tool
from dsh_jupyter.agent import (
    AnthropicChatModel,
    ChatRequest,
    ModelResponseError,
    ModelUnavailableError,
    OpenAIChatModel,
    RetryPolicy,
    ScriptedModel,
    run_agent,
)
from dsh_jupyter.errors import ToolAbortedError

pytestmark = pytest.mark.timeout(30)

QUICK = RetryPolicy(max_attempts=2, initial_delay=0.01, max_delay=0.05)


def hello(into: list[str]) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": "hello"},), on_text=into.append)


def claude(server: ChatServer) -> AnthropicChatModel:
    return AnthropicChatModel(base_url=server.root_url, model="claude-test", api_key="k",
                              stream=True, timeout=10.0, retry=QUICK)


def openai(server: ChatServer, api: Any = "chat") -> OpenAIChatModel:
    return OpenAIChatModel(base_url=server.base_url, model="gpt-test", api_key="k", api=api,
                           stream=True, timeout=10.0, retry=QUICK)


def claude_stream(*texts: str, calls: tuple[tuple[str, str, list[str]], ...] = (),
                  usage: dict[str, int] | None = None) -> bytes:
    """A Messages event stream: one text block streamed in ``texts``, then one
    ``tool_use`` block per ``(id, name, input JSON pieces)``."""
    events: list[tuple[str | None, Any]] = [("message_start", {
        "type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
            "content": [], "stop_reason": None,
            "usage": usage or {"input_tokens": 50, "output_tokens": 1}}}),
        ("ping", {"type": "ping"})]
    index = 0
    if texts:
        events.append(("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}}))
        events.extend(("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": t}})
                      for t in texts)
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    for offset, (call_id, name, pieces) in enumerate(calls):
        at = index + offset
        events.append(("content_block_start", {
            "type": "content_block_start", "index": at,
            "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}}))
        events.extend(("content_block_delta", {
            "type": "content_block_delta", "index": at,
            "delta": {"type": "input_json_delta", "partial_json": p}}) for p in pieces)
        events.append(("content_block_stop", {"type": "content_block_stop", "index": at}))
    events.append(("message_delta", {
        "type": "message_delta", "delta": {"stop_reason": "tool_use" if calls else "end_turn"},
        "usage": {"output_tokens": 12}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return sse(*events)


def word_count() -> Any:
    return define_tool(
        name="word_count", description="Count the words in a text.",
        parameters={"type": "object", "properties": {"text": {"type": "string"}},
                    "required": ["text"]},
        output={"schema": {"type": "integer"}, "render": lambda a, v: str(v)},
        execute=lambda args, ctx: len(args["text"].split()),
        is_concurrency_safe=lambda args: True)


async def test_anthropic_run_streams_text_deltas_as_events(server: ChatServer) -> None:
    registry = ToolRegistry()
    registry.register(word_count())
    events: list[dict[str, Any]] = []
    registry.on_event(lambda e: events.append(dict(e)))
    server.stream(claude_stream("Counting ", "both.", calls=(
        ("toolu_1", "word_count", ['{"text": "one', ' two three"}']),
        ("toolu_2", "word_count", ['{"text"', ': "four five"}'])),
        usage={"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 1}))
    server.stream(claude_stream("3 and ", "2."))

    result = await run_agent(registry, claude(server), "Count them.")

    assert result.stop == "answered" and result.answer == "3 and 2."
    first = result.responses[0]
    assert first.content == "Counting both." and first.finish_reason == "tool_calls"
    assert [(c.id, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("toolu_1", {"text": "one two three"}), ("toolu_2", {"text": "four five"})]
    assert (first.prompt_tokens, first.completion_tokens) == (100, 12)
    deltas = [(e["step"], e["text"]) for e in events if e["kind"] == "agent/text-delta"]
    assert deltas == [(1, "Counting "), (1, "both."), (2, "3 and "), (2, "2.")]
    kinds = [e["kind"] for e in events]
    assert kinds.index("agent/text-delta") > kinds.index("agent/request")
    assert kinds.index("agent/text-delta") < kinds.index("agent/response")
    assert server.received[0].body["stream"] is True
    assert [m["content"] for m in server.received[1].body["messages"][2:]] == [[
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "2"}]]


async def test_chat_completions_stream(server: ChatServer) -> None:
    server.stream(sse(
        (None, chunk({"role": "assistant", "content": ""})),
        (None, chunk({"content": "Let me "})),
        (None, chunk({"content": "count."})),
        (None, chunk({"tool_calls": [{"index": 0, "id": "a", "type": "function",
                                      "function": {"name": "f", "arguments": ""}}]})),
        (None, chunk({"tool_calls": [{"index": 1, "id": "b", "type": "function",
                                      "function": {"name": "g", "arguments": '{"y"'}}]})),
        (None, chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x": 1}'}}]})),
        (None, chunk({"tool_calls": [{"index": 1, "function": {"arguments": ": 2}"}}]},
                     "tool_calls")),
        (None, {"id": "c", "object": "chat.completion.chunk", "model": "test-model",
                "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 8}}),
        (None, "[DONE]")))
    texts: list[str] = []

    answer = await openai(server).complete(hello(texts), signal=AbortSignal.never())

    assert texts == ["Let me ", "count."] and answer.content == "Let me count."
    assert [(c.id, c.name, c.arguments) for c in answer.tool_calls] == [
        ("a", "f", '{"x": 1}'), ("b", "g", '{"y": 2}')]
    assert answer.finish_reason == "tool_calls"
    assert (answer.prompt_tokens, answer.completion_tokens) == (30, 8)
    body = server.received[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_responses_stream(server: ChatServer) -> None:
    final = response("Hello there.", [("call_1", "f", {"a": 1})], usage=(20, 4))
    server.stream(sse(
        ("response.created", {"type": "response.created",
                              "response": {**final, "status": "in_progress", "output": []}}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Hello"}),
        ("response.output_text.delta", {"type": "response.output_text.delta",
                                        "delta": " there."}),
        ("response.completed", {"type": "response.completed", "response": final})))
    texts: list[str] = []

    answer = await openai(server, "responses").complete(hello(texts), signal=AbortSignal.never())

    assert texts == ["Hello", " there."] and answer.content == "Hello there."
    assert [(c.id, c.name) for c in answer.tool_calls] == [("call_1", "f")]
    assert (answer.prompt_tokens, answer.completion_tokens) == (20, 4)
    assert server.received[0].body["stream"] is True


async def test_a_plain_json_answer_to_a_streamed_request_is_read(server: ChatServer) -> None:
    server.reply(message("not streamed"))
    server.reply(completion("not streamed"))
    server.reply(response("not streamed"))
    for model in (claude(server), openai(server), openai(server, "responses")):
        texts: list[str] = []
        answer = await model.complete(hello(texts), signal=AbortSignal.never())
        assert answer.content == "not streamed" and texts == []


@pytest.mark.parametrize(("body", "field", "problem"), [
    (sse(("message_start", "{not json")), "events[0]", 'expected JSON data, received "{not json"'),
    (sse(("content_block_start", {"type": "content_block_start", "index": 0,
                                  "content_block": {"type": "text", "text": ""}})),
     "events[0].type", 'expected message_start first, received "content_block_start"'),
    (sse(("ping", {"type": "ping"})), "", "the stream ended before message_start"),
    # events[3]: the SDK drops the ping (events[1] on the wire) before the adapter sees it.
    (claude_stream(calls=(("t", "f", ['{"x": ']),)), "events[3].input",
     'expected the input_json_delta pieces to make JSON, received "{\\"x\\": "'),
    (claude_stream("partial") + sse(("error", {"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}})), "error",
     'the API returned an error instead of a message: "Overloaded" (str)'),
])
async def test_malformed_streams_name_the_event(server: ChatServer, body: bytes, field: str,
                                                problem: str) -> None:
    server.stream(body)
    with pytest.raises(ModelResponseError) as caught:
        await claude(server).complete(hello([]), signal=AbortSignal.never())
    assert caught.value.field == field and len(server.received) == 1
    assert problem in str(caught.value)


async def test_a_stream_cut_mid_way_is_unavailable_and_not_retried(server: ChatServer) -> None:
    body = claude_stream("one ", "two ", "three")
    server.stream(body, cut=body.index(b"two"))
    texts: list[str] = []
    with pytest.raises(ModelUnavailableError) as caught:
        await claude(server).complete(hello(texts), signal=AbortSignal.never())
    assert texts == ["one "] and len(server.received) == 1
    assert "streamed events: RemoteProtocolError" in str(caught.value)


async def test_abort_mid_stream_stops_promptly(server: ChatServer) -> None:
    body = claude_stream("first ", "never")
    server.stream(body, cut=body.index(b"never") - 60, pause=10)
    controller = AbortController()
    texts: list[str] = []

    def stop_at_the_first_text(text: str) -> None:
        texts.append(text)
        controller.abort("user stop")

    loop = asyncio.get_running_loop()
    task = asyncio.create_task(claude(server).complete(
        ChatRequest(messages=({"role": "user", "content": "hi"},),
                    on_text=stop_at_the_first_text), signal=controller.signal))
    began = loop.time()
    with pytest.raises(ToolAbortedError):
        await task
    assert texts == ["first "] and loop.time() - began < 2


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "model": "test-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def test_reasoning_comes_through_streams(server: ChatServer) -> None:
    server.stream(sse((None, chunk({"role": "assistant", "reasoning_content": "Two and "})),
                      (None, chunk({"reasoning_content": "two."})),
                      (None, chunk({"content": "4"}, "stop")), (None, "[DONE]")))
    texts: list[str] = []
    answer = await openai(server).complete(hello(texts), signal=AbortSignal.never())
    assert (answer.reasoning, answer.content, texts) == ("Two and two.", "4", ["4"])

    thought = claude_stream("4")
    start = thought.index(b"event: content_block_start")
    server.stream(thought[:start] + sse(
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "thinking", "thinking": "",
                                                   "signature": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "thinking_delta", "thinking": "Add."}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "signature_delta", "signature": "s"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}))
        + thought[start:].replace(b'"index": 0', b'"index": 1'))
    texts.clear()
    answer = await claude(server).complete(hello(texts), signal=AbortSignal.never())
    assert (answer.reasoning, answer.content, texts) == ("Add.", "4", ["4"])


async def test_a_stream_is_retried_until_it_starts(server: ChatServer) -> None:
    server.reply({"type": "error", "error": {"message": "Overloaded"}}, status=529)
    server.stream(claude_stream("fine"))
    texts: list[str] = []
    answer = await claude(server).complete(hello(texts), signal=AbortSignal.never())
    assert answer.content == "fine" and answer.attempts == 2 and texts == ["fine"]


@pytest.mark.parametrize(("api", "body", "field", "problem"), [
    ("chat", sse((None, chunk({"content": "Half"})), (None, {"error": {"message": "gone"}})),
     "error", 'the API returned an error instead of a completion: "gone" (str)'),
    # A piece of a call without the "index" that says which call it belongs to.
    ("chat", sse((None, chunk({"content": "Let me "})),
                 (None, chunk({"tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}))),
     "events[1]", "events[1]: the openai package could not fold the event: TypeError: "),
    ("responses", sse(("error", {"type": "error", "message": "model crashed"})), "error",
     'the API returned an error instead of a response: "model crashed" (str)'),
    ("responses", sse(("response.output_text.delta", {"type": "response.output_text.delta",
                                                      "delta": "Hel"})),
     "", "the stream ended without a response.completed event"),
])
async def test_malformed_openai_streams(server: ChatServer, api: str, body: bytes, field: str,
                                        problem: str) -> None:
    server.stream(body)
    with pytest.raises(ModelResponseError) as caught:
        await openai(server, api).complete(hello([]), signal=AbortSignal.never())
    assert caught.value.field == field and len(server.received) == 1
    assert problem in str(caught.value)


async def test_a_failing_text_sink_is_not_a_malformed_stream(server: ChatServer) -> None:
    def broken(text: str) -> None:
        raise ValueError("the sink broke")

    server.stream(claude_stream("one ", "two"))
    with pytest.raises(ValueError, match="the sink broke"):
        await claude(server).complete(
            ChatRequest(messages=({"role": "user", "content": "hi"},), on_text=broken),
            signal=AbortSignal.never())


async def test_models_that_do_not_stream_emit_no_deltas() -> None:
    registry = ToolRegistry()
    events: list[dict[str, Any]] = []
    registry.on_event(lambda e: events.append(dict(e)))
    await run_agent(registry, ScriptedModel([{"content": "ok"}]), "hi")
    assert "agent/text-delta" not in [e["kind"] for e in events]


async def test_a_live_view_shows_streamed_text_as_it_comes(server: ChatServer) -> None:
    from dsh_jupyter import ToolRegistry
    from dsh_jupyter.widgets import LiveView
    from dsh_jupyter.widgets.answer import AnswerCard

    seen: list[str] = []
    registry = ToolRegistry()
    with LiveView(registry) as view:
        def watch(event: Any) -> None:
            if event["kind"] == "agent/text-delta":
                (card,) = view._shown
                assert isinstance(card, AnswerCard)
                seen.append(card.text)  # what the card says at each piece

        undo = registry.on_event(watch)
        server.stream(sse((None, chunk({"role": "assistant", "content": "Four"})),
                          (None, chunk({"content": ", I think."}, "stop")), (None, "[DONE]")))
        result = await run_agent(registry, openai(server), "2 + 2?")
        undo()
    assert result.answer == "Four, I think."
    assert seen == ["Four", "Four, I think."]
    (card,) = view._shown
    assert isinstance(card, AnswerCard) and card.document().status == "ok"
    assert "Four, I think." in str(view)
