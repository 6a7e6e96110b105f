"""Live views follow a registry; replays draw the same cards from a log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from widget_support import walk, widget_html

from dsh_jupyter import (
    Ask,
    JsonlSessionWriter,
    ToolCall,
    ToolRegistry,
    ToolRunContext,
    define_tool,
    read_session,
)
from dsh_jupyter.events import SessionEvent
from dsh_jupyter.registry import GenericCallView, ReadLine, ReadResultView
from dsh_jupyter.testing import InProcessRuntime
from dsh_jupyter.widgets import LiveView, NotebookApprovals, RunCodeCard, ToolCard, replay

PROGRAM = """\
files = await tools.list_files({})
text = await tools.read_file({"path": files[0]})
try:
    await tools.read_file({"path": "missing.txt"})
except ToolCallError as error:
    print("caught:", error.message)
await tools.delete_file({"path": files[0]})
return len(text)"""


def make_registry(seen: list[str] | None = None,
                  views: list[LiveView] | None = None) -> ToolRegistry:
    """Three tools over one file; ``read_file`` records what ``views[0]`` shows."""
    files = {"a.txt": "alpha <b>beta</b>\n"}
    registry = ToolRegistry(mode="both", code_runtime=InProcessRuntime(),
                            approval=NotebookApprovals(policy="approve"))

    def present_read(args: Any, durable: Any) -> ReadResultView | None:
        if durable.is_error:
            return None
        text = files.get(args["path"], "")
        return ReadResultView(path=args["path"], offset=1, total_lines=1,
                              lines=(ReadLine(number=1, text=text.rstrip()),))

    async def list_files(args: Any, ctx: ToolRunContext) -> list[str]:
        return sorted(files)

    async def read_file(args: Any, ctx: ToolRunContext) -> str:
        if seen is not None and views:  # what a notebook shows while the call runs
            seen.append(str(views[0]))
        if args["path"] not in files:
            raise KeyError(args["path"])
        return files[args["path"]]

    async def delete_file(args: Any, ctx: ToolRunContext) -> str:
        return "deleted"

    for name, body, present in (("list_files", list_files, None),
                                ("read_file", read_file, present_read),
                                ("delete_file", delete_file, None)):
        registry.register(define_tool(
            name=name, parameters={"type": "object"}, execute=body, present_result=present,
            output={"schema": {}, "render": lambda a, v: str(v)}))
    registry.on_pre_execute(lambda e, d: Ask("deleting is final")
                            if e.name == "delete_file" else None)
    return registry


async def run(registry: ToolRegistry, code: str = PROGRAM, call_id: str = "r1") -> Any:
    return await registry.execute(ToolCall(call_id=call_id, name="run_code",
                                           arguments={"code": code, "description": "Tidy"}))


EXPECTED = """\
[ok] Tidy — run_code
  program (8 lines):
    files = await tools.list_files({})
    text = await tools.read_file({"path": files[0]})
    try:
        await tools.read_file({"path": "missing.txt"})
    except ToolCallError as error:
        print("caught:", error.message)
    await tools.delete_file({"path": files[0]})
    return len(text)
  tool calls (4):
    [ok] list_files
    [ok] read_file — path="a.txt"
    [error] read_file — path="missing.txt"
      KeyError: 'missing.txt'
    [ok] delete_file — path="a.txt"
      approval: approved by policy 'approve': no IPython kernel
  logs:
    caught: KeyError: 'missing.txt'
  result:
    18"""


async def test_live_view_follows_a_run_code_program(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []
    views: list[LiveView] = []
    registry = make_registry(seen, views)
    view = LiveView(registry)
    views.append(view)
    widget = view.widget  # displayed before the run, as in a notebook
    result = await run(registry)
    assert not result.is_error, result
    assert str(view) == EXPECTED
    # The nested cards appeared while the program ran, one at a time.
    assert seen[0].endswith('[ok] list_files\n    [running] read_file — path="a.txt"')
    assert seen[1].endswith('[running] read_file — path="missing.txt"')
    card = view.cards[0]
    assert isinstance(card, RunCodeCard) and list(widget.children) == [card.widget]
    sub_widgets = [w for w in walk(widget) if "dsh-sub-call" in w._dom_classes]
    assert len(sub_widgets) == 4
    approval = [w for w in walk(widget) if "dsh-approval" in w._dom_classes]
    assert len(approval) == 1 and approval[0] in list(walk(sub_widgets[3]))
    assert "ms</span>" in widget_html(widget)  # durations in the widget only
    assert "ms" not in str(view._repr_mimebundle_(exclude=["text/plain"]))
    assert caplog.text == ""  # the sink never failed


async def test_top_level_calls_get_their_presenters_cards() -> None:
    registry = make_registry()
    view = LiveView(registry)
    await registry.execute(ToolCall(call_id="c1", name="read_file", arguments={"path": "a.txt"}))
    await registry.execute(ToolCall(call_id="c2", name="nope", arguments={}))
    first, second = view.cards
    assert isinstance(first, ToolCard) and str(first) == (
        '[ok] read_file\n  input:\n    {\n      "path": "a.txt"\n    }\n  path: a.txt\n'
        "  lines 1 to 1 of 1\n    1 | alpha <b>beta</b>")
    assert str(second).startswith("[error: UNKNOWN_TOOL] nope\n  error:\n    unknown tool")


async def test_dispose_stops_following() -> None:
    registry = make_registry()
    approvals = registry.approval
    assert isinstance(approvals, NotebookApprovals)
    with LiveView(registry) as view:
        await run(registry, "return 1")
        # A tuple: after `assert view.following` mypy would take it as True past the block.
        assert (view.following, approvals._hosts) == (True, [view])
    assert not view.following and approvals._hosts == []
    await run(registry, "return 2", call_id="r2")
    assert len(view.cards) == 1
    view.dispose()  # idempotent


async def test_replay_draws_the_same_cards_without_running(tmp_path: Path) -> None:
    registry = make_registry()
    log = tmp_path / "session.jsonl"
    live = LiveView(registry)
    with JsonlSessionWriter(log) as writer:
        registry.on_event(writer)
        await run(registry)
        await registry.execute(ToolCall(call_id="c1", name="read_file",
                                        arguments={"path": "a.txt"}))
    runtime = registry.code_runtime
    assert isinstance(runtime, InProcessRuntime) and runtime.runs == 1
    replayed = replay(log, registry=registry)
    assert runtime.runs == 1  # nothing ran again
    # The approval is not in the log: it shows only where it was answered.
    live_text = str(live).replace(
        "\n      approval: approved by policy 'approve': no IPython kernel", "")
    assert str(replayed) == live_text
    assert replayed._repr_mimebundle_(exclude=["text/plain"]).keys() == \
        live._repr_mimebundle_(exclude=["text/plain"]).keys()
    # Without the registry (an old log): generic cards, the run_code card unchanged.
    generic = str(replay(read_session(log)))
    assert generic.split("\n\n")[0] == str(replayed).split("\n\n")[0]
    assert "lines 1 to 1 of 1" in str(replayed) and "lines 1 to 1" not in generic


def test_replay_tolerates_partial_logs() -> None:
    events: list[SessionEvent] = [
        {"kind": "tool/code-dispatch-start", "root_call_id": "r", "parent_call_id": "r",
         "call_id": "r:code:1", "name": "a", "arguments": {}, "agent": None, "time": 1.0},
        {"kind": "tool/result", "call_id": "x", "name": "t", "arguments": {},
         "agent": None, "is_error": False, "content": [{"type": "text", "text": "hi"}],
         "started": 1.0, "ended": 2.0},
    ]
    view = replay(events)
    assert str(view) == ("[running] Run code — run_code\n  program (1 line):\n    \n"
                         "  tool calls (1):\n    [queued] a\n\n[ok] t\n    hi")


def test_a_running_card_shows_the_last_progress_until_its_result() -> None:
    call: SessionEvent = {"kind": "tool/call", "call_id": "c", "name": "copy", "arguments": {},
                          "agent": None, "time": 1.0}
    events: list[SessionEvent] = [call]
    for done, message in ((1.0, None), (2.0, "half way")):
        events.append({"kind": "tool/progress", "call_id": "c", "name": "copy",
                       "progress": done, "total": 4.0, "message": message, "time": 1.0 + done})
    view = replay(events)
    assert str(view) == "[running] copy\n  progress 2/4: half way"
    view.apply({"kind": "tool/result", "call_id": "c", "name": "copy", "arguments": {},
                "agent": None, "is_error": False, "content": [{"type": "text", "text": "ok"}],
                "started": 1.0, "ended": 4.0})
    assert str(view) == "[ok] copy\n    ok"


def test_empty_view_fallbacks() -> None:
    bundle = replay([])._repr_mimebundle_()
    assert bundle["text/plain"] == "(no tool calls)"
    assert "(no tool calls)" in bundle["text/html"] and "(no tool calls)" in bundle[
        "text/markdown"]


async def test_agent_calls_use_their_scopes_definitions() -> None:
    registry = ToolRegistry()

    def tool(title: str) -> Any:
        return define_tool(name="t", parameters={"type": "object"},
                           output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                           execute=lambda a, c: "x",
                           present_call=lambda args: GenericCallView(title=title))

    registry.register(tool("global t"))
    agent = registry.scope("agent")
    agent.register(tool("agent t"))
    view = LiveView(registry, scopes=[agent])
    await registry.execute(ToolCall(call_id="a", name="t", agent=agent))
    await registry.execute(ToolCall(call_id="g", name="t"))
    assert [card.document().title for card in view.cards] == ["agent t", "global t"]
    unaware = replay([], registry=registry)
    for event in [{"kind": "tool/call", "call_id": "a", "name": "t", "arguments": {},
                   "agent": "agent", "time": 0.0}]:
        unaware.apply(event)  # type: ignore[arg-type]
    # scope not given: the registry's live scope of that name still resolves it
    assert unaware.cards[0].document().title == "agent t"
    agent.dispose()
    gone = replay([], registry=registry)
    for event in [{"kind": "tool/call", "call_id": "a", "name": "t", "arguments": {},
                   "agent": "agent", "time": 0.0}]:
        gone.apply(event)  # type: ignore[arg-type]
    assert gone.cards[0].document().title == "global t"  # a disposed scope: globals


async def test_a_reused_call_id_gets_a_new_card() -> None:
    registry = ToolRegistry()
    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=lambda a, c: str(a.get("n"))))
    view = LiveView(registry)
    for n in (1, 2):  # a scripted model numbers its calls call_1... in every run
        await registry.execute(ToolCall(call_id="call_1", name="t", arguments={"n": n}))
    texts = [str(card) for card in view.cards]
    assert len(texts) == 2
    assert texts[0].endswith('"n": 1\n    }\n    1')
    assert texts[1].endswith('"n": 2\n    }\n    2')


def test_streamed_text_shows_as_it_comes_then_as_sent() -> None:
    from dsh_jupyter.widgets.answer import AnswerCard
    from dsh_jupyter.widgets.session import SessionView

    view = SessionView()
    view.apply({"kind": "agent/text-delta", "run_id": "r", "step": 1, "text": "The answer",
                "time": 0.0})
    view.apply({"kind": "agent/text-delta", "run_id": "r", "step": 1, "text": " is 4",
                "time": 0.1})
    (answer,) = view._shown
    assert isinstance(answer, AnswerCard) and answer.document().status == "running"
    widget_text = answer.widget.children[0].value
    assert "The answer is 4" in widget_text
    assert "The answer is 4" in str(view)
    view.apply({"kind": "agent/message", "run_id": "r", "step": 1, "index": 3, "time": 0.2,
                "message": {"role": "assistant", "content": "The answer is 4."}})
    assert answer.document().status == "ok" and answer.text == "The answer is 4."
    assert "The answer is 4." in answer.widget.children[0].value
    assert view.cards == ()  # tool cards only
    # A model that does not stream adds no card.
    view.apply({"kind": "agent/message", "run_id": "r", "step": 2, "index": 5, "time": 0.3,
                "message": {"role": "assistant", "content": "Done."}})
    assert len(view._shown) == 1
