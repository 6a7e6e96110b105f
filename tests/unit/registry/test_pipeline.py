"""The execution pipeline: stage order, every error code, cancellation, results."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from typing import Any

import pytest

from dsh_jupyter import (
    AbortController,
    Accept,
    AdditionalContext,
    Allow,
    Approval,
    Ask,
    Block,
    Deny,
    ToolCall,
    ToolError,
    ToolExecution,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
    enforce_timeouts,
)
from dsh_jupyter.json_dump import dump_json
from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.registry.execution import ExecutionToken
from dsh_jupyter.registry.offload import LARGE_NODES, LARGE_TEXT, is_large
from dsh_jupyter.registry.policy import ANSWERED_BY_ABORT

ECHO_PARAMS = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def echo_tool(**extra: Any) -> Any:
    async def run(args: Any, ctx: ToolRunContext) -> str:
        return str(args["text"])

    return define_tool(name="echo", description="Echo.", parameters=ECHO_PARAMS,
                       output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                       execute=run, **extra)


def call(name: str = "echo", args: Any = None, **kw: Any) -> ToolCall:
    return ToolCall(call_id=kw.pop("call_id", "c1"), name=name,
                    arguments={"text": "hi"} if args is None else args, **kw)


async def test_success_value_and_content() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    result = await registry.execute(call())
    assert not result.is_error
    assert result.value == "hi"
    assert result.content == ({"type": "text", "text": "hi"},)
    assert result.error is None


async def test_typed_tool_from_function() -> None:
    registry = ToolRegistry()

    @registry.tool
    async def add(a: int, b: int = 2) -> int:
        """Add two numbers."""
        return a + b

    result = await registry.execute(call("add", {"a": 1}))
    assert result.value == 3 and result.text == "3"
    bad = await registry.execute(call("add", {"a": "1"}))
    assert bad.is_error and bad.error is not None
    assert bad.error.code == "INVALID_ARGS"
    assert '"a" must be an integer' in bad.error.message
    assert bad.text == f"Error: {bad.error.message}"


async def test_stage_order_is_fixed() -> None:
    registry = ToolRegistry()
    order: list[str] = []

    async def body(args: Any, ctx: ToolRunContext) -> str:
        order.append("body")
        return "v"

    def finalize(execution: ToolExecution, result: Any) -> None:
        order.append("finalize")

    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=body, finalize_content=finalize))

    async def pre(execution: ToolExecution, decision: Any) -> None:
        order.append("pre")

    def guard(execution: ToolExecution) -> None:
        order.append("guard")

    async def around(execution: ToolExecution, call_next: Any) -> Any:
        order.append("wrap-in")
        result = await call_next()
        order.append("wrap-out")
        return result

    async def post(execution: ToolExecution, result: Any) -> None:
        order.append("post")

    registry.on_result(lambda e, r: order.append("observe"))
    registry.on_post_execute(post)
    registry.on_execute(around)
    registry.guard(guard)
    registry.on_pre_execute(pre)
    await registry.execute(call("t", {}))
    assert order == ["pre", "guard", "wrap-in", "body", "wrap-out", "post", "finalize",
                     "observe"]


async def test_unknown_tool_lists_known_names() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    result = await registry.execute(call("nope"))
    assert result.error is not None and result.error.code == "UNKNOWN_TOOL"
    assert "echo" in result.error.message


async def test_non_json_arguments_fail_before_policy() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    seen: list[str] = []
    registry.on_pre_execute(lambda e, d: seen.append("pre"))
    for bad in ({"text": float("nan")}, {"text": {1, 2}}, ["not", "an", "object"]):
        result = await registry.execute(call(args=bad))
        assert result.error is not None and result.error.code == "INVALID_ARGS", bad
    assert seen == []


async def test_arguments_are_frozen_snapshots() -> None:
    registry = ToolRegistry()
    seen: list[Any] = []

    async def body(args: Any, ctx: ToolRunContext) -> str:
        seen.append(args)
        with pytest.raises(TypeError):
            args["x"] = 1
        return "ok"

    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)}, execute=body))
    original = {"list": [1, 2]}
    await registry.execute(call("t", original))
    original["list"].append(3)
    assert seen[0] == {"list": [1, 2]}


async def test_invalid_tool_output() -> None:
    registry = ToolRegistry()

    async def body(args: Any, ctx: ToolRunContext) -> Any:
        return {"count": "three"}

    registry.register(define_tool(
        name="t", parameters={"type": "object"},
        output={"schema": {"type": "object", "properties": {"count": {"type": "integer"}}},
                "render": lambda a, v: "x"}, execute=body))
    result = await registry.execute(call("t", {}))
    assert result.error is not None and result.error.code == "INVALID_TOOL_OUTPUT"
    assert '"count" must be an integer' in result.error.message


async def test_tool_exceptions_become_failures() -> None:
    registry = ToolRegistry()

    async def boom(args: Any, ctx: ToolRunContext) -> str:
        raise ValueError("disk on fire")

    async def coded(args: Any, ctx: ToolRunContext) -> str:
        raise ToolError("no such file", code="NOT_FOUND")

    for name, fn in (("boom", boom), ("coded", coded)):
        registry.register(define_tool(name=name, parameters={"type": "object"},
                                      output={"schema": {"type": "string"},
                                              "render": lambda a, v: str(v)}, execute=fn))
    boom_result = await registry.execute(call("boom", {}))
    assert boom_result.text == "Error: ValueError: disk on fire"
    coded_result = await registry.execute(call("coded", {}))
    assert coded_result.error is not None and coded_result.error.code == "NOT_FOUND"


# --- pre-execute, approval, guards ------------------------------------------------------


async def test_pre_execute_waterfall_and_deny() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    decisions: list[Any] = []

    def first(execution: ToolExecution, decision: Any) -> Any:
        decisions.append(decision)
        return Deny("not today")

    def second(execution: ToolExecution, decision: Any) -> Any:
        decisions.append(decision)
        return None  # keep

    registry.on_pre_execute(first)
    registry.on_pre_execute(second)
    result = await registry.execute(call())
    assert decisions == [Allow(), Deny("not today")]
    assert result.error is not None and result.error.code == "DENIED"
    assert result.text == "Error: not today"


async def test_ask_without_approval_service_degrades_to_deny() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    registry.on_pre_execute(lambda e, d: Ask("writes files"))
    result = await registry.execute(call())
    assert result.error is not None and result.error.code == "DENIED"
    assert "writes files" in result.error.message and "no approval service" in result.error.message


class ScriptedApprovals:
    """Answers each approval request with the next of ``answers``."""

    def __init__(self, *answers: Approval) -> None:
        self.answers = list(answers)

    async def request(self, execution: ToolExecution, reason: str | None) -> Approval:
        return self.answers.pop(0)


async def test_ask_goes_to_the_approval_service() -> None:
    registry = ToolRegistry(approval=ScriptedApprovals(
        Approval(approved=True), Approval(approved=False, answered_by="ci-policy")))
    registry.register(echo_tool())
    registry.on_pre_execute(lambda e, d: Ask("writes files"))
    assert not (await registry.execute(call())).is_error
    rejected = await registry.execute(call())
    assert rejected.error is not None and "ci-policy" in rejected.error.message


async def test_approvals_are_events_and_an_unanswered_one_says_the_call_was_stopped() -> None:
    registry = ToolRegistry(approval=ScriptedApprovals(
        Approval(approved=True, answered_by="user"),
        Approval(approved=False, answered_by=ANSWERED_BY_ABORT, note="run_code settled")))
    registry.register(echo_tool())
    registry.on_pre_execute(lambda e, d: Ask("writes files"))
    events: list[Any] = []
    registry.on_event(events.append)
    assert not (await registry.execute(call())).is_error
    stopped = await registry.execute(call())
    assert stopped.error is not None and stopped.error.message == (
        "writes files (not answered: the call was stopped: run_code settled)")
    asked = [(e["kind"], e.get("reason"), e.get("approved"), e.get("answered_by"))
             for e in events if e["kind"].startswith("tool/approval")]
    assert asked == [("tool/approval-request", "writes files", None, None),
                     ("tool/approval", None, True, "user"),
                     ("tool/approval-request", "writes files", None, None),
                     ("tool/approval", None, False, "abort")]


async def test_guards_are_monotonic_and_run_global_first() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    agent = registry.scope("a")
    order: list[str] = []

    def scoped(execution: ToolExecution) -> str:
        order.append("scoped")
        return "scope says no"

    def global_guard(execution: ToolExecution) -> None:
        order.append("global")

    agent.guard(scoped)
    registry.guard(global_guard)
    registry.on_post_execute(lambda e, r: Accept(content="overridden"))
    result = await registry.execute(call(agent=agent))
    assert order == ["global", "scoped"]
    # a later stage cannot turn a guard denial back into permission
    assert result.error is not None and result.error.code == "DENIED"
    plain = await registry.execute(call())
    assert not plain.is_error and plain.text == "overridden"


async def test_hook_failures_are_reported_not_raised() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())

    def broken(execution: ToolExecution, decision: Any) -> Any:
        raise RuntimeError("bug in policy")

    undo = registry.on_pre_execute(broken)
    result = await registry.execute(call())
    assert result.error is not None and result.error.code == "HOOK_FAILED"
    assert "bug in policy" in result.error.message
    undo()
    assert not (await registry.execute(call())).is_error


# --- post-execute -----------------------------------------------------------------------


async def test_post_execute_value_replacement_is_revalidated_and_rerendered() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    undo = registry.on_post_execute(lambda e, r: Accept(value="replaced"))
    result = await registry.execute(call())
    assert result.value == "replaced" and result.text == "replaced"
    undo()
    registry.on_post_execute(lambda e, r: Accept(value=42))
    bad = await registry.execute(call())
    assert bad.error is not None and bad.error.code == "INVALID_TOOL_OUTPUT"


async def test_post_execute_content_replacement_keeps_value() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    registry.on_post_execute(lambda e, r: Accept(content="shown"))
    result = await registry.execute(call())
    assert result.value == "hi" and result.text == "shown"


async def test_post_execute_cannot_replace_both() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    registry.on_post_execute(lambda e, r: Accept(content="a", value="b"))
    result = await registry.execute(call())
    assert result.error is not None and result.error.code == "HOOK_FAILED"


async def test_contexts_deferred_then_attached_block_keeps_only_its_own() -> None:
    registry = ToolRegistry()

    async def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context(AdditionalContext(source="tool", text="from body"))
        return "v"

    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)}, execute=body))
    undo = registry.on_post_execute(
        lambda e, r: Accept(contexts=[AdditionalContext(source="post", text="from post")]))
    result = await registry.execute(call("t", {}))
    assert [c.text for c in result.additional_contexts] == ["from body", "from post"]
    undo()
    registry.on_post_execute(lambda e, r: Block(
        "blocked: secret", contexts=[AdditionalContext(source="policy", text="why")]))
    blocked = await registry.execute(call("t", {}))
    assert blocked.error is not None and blocked.error.code == "BLOCKED"
    assert blocked.text == "Error: blocked: secret"
    assert [c.text for c in blocked.additional_contexts] == ["why"]


async def test_finalize_content_runs_once_on_every_outcome() -> None:
    registry = ToolRegistry()
    seen: list[bool] = []

    def finalize(execution: ToolExecution, result: ToolResult) -> str:
        seen.append(result.is_error)
        return "final: " + result.text

    async def body(args: Any, ctx: ToolRunContext) -> str:
        if args.get("fail"):
            raise RuntimeError("x")
        return "ok"

    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=body, finalize_content=finalize))
    ok = await registry.execute(call("t", {}))
    bad = await registry.execute(call("t", {"fail": True}))
    pre_aborted = AbortController()
    pre_aborted.abort("stop")
    aborted = await registry.execute(call("t", {}, signal=pre_aborted.signal))
    assert seen == [False, True, True]
    assert ok.text == "final: ok" and ok.value == "ok"
    assert bad.text.startswith("final: Error:")
    assert aborted.text.startswith("final: Error:")


@pytest.mark.parametrize(("broken", "message"), [
    ("raises", "cannot redact this result"),
    ("returns a number",
     "finalize_content of t returned int; expected a string, content blocks or None"),
])
async def test_a_failing_finalize_content_gives_its_message(
        broken: str, message: str, caplog: pytest.LogCaptureFixture) -> None:
    """The seed: any thrown call becomes exactly ``Error: <message>``. A finalizer that
    raises (or returns something that is not content) gives its message as HOOK_FAILED;
    none of the content it was given is kept (a redaction that crashed must not leak it),
    the contexts are, and observers see the result once."""
    registry = ToolRegistry()
    observed: list[Any] = []

    def finalize(execution: ToolExecution, result: Any) -> Any:
        if broken == "raises":
            raise ValueError("cannot redact this result")
        return 42

    async def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context(AdditionalContext(source="s", text="kept"))
        return "password=hunter2"

    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=body, finalize_content=finalize))
    registry.on_result(lambda e, r: observed.append(r))
    result = await registry.execute(call("t", {}))
    assert result.error is not None and result.error.code == "HOOK_FAILED"
    assert result.error.message == message
    assert result.text == f"Error: {message}"
    assert not hasattr(result, "value") or result.value is None
    assert [c.text for c in result.additional_contexts] == ["kept"]
    assert observed == [result]
    assert "finalize_content of t failed" in caplog.text


async def test_observer_failures_are_contained(caplog: pytest.LogCaptureFixture) -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    seen: list[str] = []

    def broken(execution: ToolExecution, result: Any) -> None:
        raise RuntimeError("observer bug")

    registry.on_result(broken)
    registry.on_result(lambda e, r: seen.append(e.call_id))
    result = await registry.execute(call())
    assert not result.is_error and seen == ["c1"]
    assert "observer bug" in caplog.text


# --- cancellation -----------------------------------------------------------------------


async def test_pre_aborted_call_skips_every_policy_stage() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    seen: list[str] = []
    registry.on_pre_execute(lambda e, d: seen.append("pre"))
    registry.guard(lambda e: seen.append("guard"))
    controller = AbortController()
    controller.abort("user stop")
    result = await registry.execute(call(signal=controller.signal))
    assert result.error is not None and result.error.code == "ABORTED_BEFORE_DISPATCH"
    assert seen == []


async def test_abort_during_policy_is_aborted_before_dispatch() -> None:
    registry = ToolRegistry()
    ran: list[str] = []

    async def body(args: Any, ctx: ToolRunContext) -> str:
        ran.append("body")
        return "x"

    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=body))
    controller = AbortController()

    async def pre(execution: ToolExecution, decision: Any) -> None:
        controller.abort("changed my mind")

    registry.on_pre_execute(pre)
    result = await registry.execute(call("t", {}, signal=controller.signal))
    assert result.error is not None and result.error.code == "ABORTED_BEFORE_DISPATCH"
    assert ran == []


async def test_deny_is_more_specific_than_abort() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    controller = AbortController()

    def pre(execution: ToolExecution, decision: Any) -> Any:
        controller.abort("late")
        return Deny("policy")

    registry.on_pre_execute(pre)
    result = await registry.execute(call(signal=controller.signal))
    assert result.error is not None and result.error.code == "DENIED"


async def test_abort_after_body_started_turns_success_into_aborted() -> None:
    registry = ToolRegistry()
    controller = AbortController()
    settled: list[str] = []

    async def body(args: Any, ctx: ToolRunContext) -> str:
        controller.abort("stop")
        await asyncio.sleep(0.01)  # ignores the signal, still finishes
        settled.append("done")
        return "finished anyway"

    async def failing(args: Any, ctx: ToolRunContext) -> str:
        controller.abort("stop")
        raise ToolError("tool failed first", code="OWN")

    for name, fn in (("t", body), ("f", failing)):
        registry.register(define_tool(name=name, parameters={"type": "object"},
                                      output={"schema": {"type": "string"},
                                              "render": lambda a, v: str(v)}, execute=fn))
    result = await registry.execute(call("t", {}, signal=controller.signal))
    assert settled == ["done"]
    assert result.error is not None and result.error.code == "ABORTED"
    controller2 = AbortController()
    controller = controller2
    failed = await registry.execute(call("f", {}, signal=controller2.signal))
    assert failed.error is not None and failed.error.code == "OWN"


async def test_cooperative_body_sees_the_signal() -> None:
    registry = ToolRegistry()
    started = asyncio.Event()

    async def slow(args: Any, ctx: ToolRunContext) -> str:
        started.set()
        await ctx.signal.run(asyncio.sleep(10))
        return "never"

    registry.register(define_tool(name="slow", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=slow))
    controller = AbortController()
    task = asyncio.create_task(registry.execute(call("slow", {}, signal=controller.signal)))
    await started.wait()
    controller.abort("user stop")
    result = await task
    assert result.error is not None and result.error.code == "ABORTED"
    assert "user stop" in result.error.message


async def test_task_cancellation_waits_for_body_and_publishes_result() -> None:
    registry = ToolRegistry()
    finished: list[str] = []
    published: list[str | None] = []
    started = asyncio.Event()

    async def body(args: Any, ctx: ToolRunContext) -> str:
        started.set()
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0)  # cleanup that must complete
            finished.append("cleaned up")
        return "never"

    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=body))
    registry.on_result(lambda e, r: published.append(r.error.code if r.error else "ok"))
    task = asyncio.create_task(registry.execute(call("t", {})))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == ["cleaned up"]
    assert published == ["ABORTED"]


async def test_timeout_wrapper() -> None:
    registry = ToolRegistry()

    async def slow(args: Any, ctx: ToolRunContext) -> str:
        await ctx.signal.wait()
        return "stopped"

    registry.register(define_tool(name="slow", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=slow, timeout_ms=20))
    # declarative until the wrapper is installed
    controller = AbortController()
    asyncio.get_running_loop().call_later(0.1, controller.abort, "test over")
    unenforced = await registry.execute(call("slow", {}, signal=controller.signal))
    assert unenforced.error is not None and unenforced.error.code == "ABORTED"
    registry.on_execute(enforce_timeouts())
    result = await registry.execute(call("slow", {}))
    assert result.error is not None and result.error.code == "TOOL_TIMEOUT"


async def test_wrapper_may_replace_signal_but_caller_stays_fused() -> None:
    registry = ToolRegistry()
    seen: list[Any] = []
    started = asyncio.Event()

    async def body(args: Any, ctx: ToolRunContext) -> str:
        seen.append(ctx.signal)
        started.set()
        await ctx.signal.wait()
        return "x"

    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=body))
    substitute = AbortController()

    async def around(execution: ToolExecution, call_next: Any) -> Any:
        return await call_next(signal=substitute.signal)

    registry.on_execute(around)
    caller = AbortController()
    task = asyncio.create_task(registry.execute(call("t", {}, signal=caller.signal)))
    await started.wait()
    caller.abort("caller")
    result = await task
    assert seen[0] is not caller.signal and seen[0].reason == "caller"
    assert result.error is not None and result.error.code == "ABORTED"


async def test_wrapper_authored_success_is_normalised() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())
    from dsh_jupyter import ToolSuccess

    async def cache(execution: ToolExecution, call_next: Any) -> Any:
        return ToolSuccess(value=123, content=({"type": "text", "text": "cached"},))

    registry.on_execute(cache)
    result = await registry.execute(call())
    assert result.error is not None and result.error.code == "INVALID_TOOL_OUTPUT"


async def test_execution_mode_classifier() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool(is_concurrency_safe=lambda args: args.get("text") == "safe"))

    @registry.tool(is_concurrency_safe=lambda args: "yes")  # truthy is not True
    async def other() -> str:
        return ""

    assert registry.execution_mode(call(args={"text": "safe"})) == "parallel"
    assert registry.execution_mode(call(args={"text": "x"})) == "exclusive"
    assert registry.execution_mode(call(args={"text": 1})) == "exclusive"  # invalid
    assert registry.execution_mode(call("other", {})) == "exclusive"
    assert registry.execution_mode(call("missing", {})) == "exclusive"


@pytest.mark.parametrize("mode", ["code", "both"])
async def test_execution_mode_classifies_the_call_execute_would_run(mode: str) -> None:
    """000: executionMode reads the resolved definition: under ``code`` a model-direct call
    to a concurrency-safe tool resolves to UNKNOWN_TOOL, so it is exclusive; the same call
    from a program (with a parent) is parallel."""
    registry = ToolRegistry(mode=mode)  # type: ignore[arg-type]
    registry.register(echo_tool(is_concurrency_safe=lambda args: True))
    direct = call(args={"text": "a"})
    executed = await registry.execute(direct)
    collapsed = executed.error is not None and executed.error.code == "UNKNOWN_TOOL"
    assert collapsed is (mode == "code")
    assert registry.execution_mode(direct) == ("exclusive" if collapsed else "parallel")
    sub_call = dataclasses.replace(direct, parent=ExecutionToken())
    assert registry.execution_mode(sub_call) == "parallel"


async def test_wrapper_may_fail_with_its_own_code() -> None:
    registry = ToolRegistry()
    registry.register(echo_tool())

    async def quota(execution: ToolExecution, call_next: Any) -> Any:
        raise ToolError("daily quota used up", code="QUOTA")

    registry.on_execute(quota)
    result = await registry.execute(call())
    assert result.error is not None and result.error.code == "QUOTA"
    assert result.text == "Error: daily quota used up"


# --- large values leave the event loop ----------------------------------------------------


def test_is_large_is_a_bounded_estimate() -> None:
    assert not is_large("x" * 100) and is_large("x" * (LARGE_TEXT + 1))
    assert not is_large(list(range(LARGE_NODES))) and is_large(list(range(LARGE_NODES + 1)))
    assert is_large({"logs": [], "result": [{"a": i} for i in range(LARGE_NODES)]})
    assert is_large(("t", ["x" * (LARGE_TEXT + 1)]))
    deep: list[Any] = []
    for _ in range(LARGE_NODES + 1):
        deep = [deep]
    assert is_large(deep)
    assert not is_large(object()) and not is_large(None) and not is_large({"a": [1, 2]})


def threaded_registry(seen: dict[str, set[int]], **extra: Any) -> ToolRegistry:
    """A tool returning ``list(range(n))`` whose hooks note the threads they ran on."""

    def note(stage: str) -> None:
        seen.setdefault(stage, set()).add(threading.get_ident())

    def dump(raw: Any) -> Any:
        note("dump_output")
        return raw

    def render(args: Any, value: Any) -> str:
        note("render")
        return dump_json(value, indent=2)

    def meta(args: Any, value: Any) -> Any:
        note("meta")
        return {"count": len(value)}

    async def body(args: Any, ctx: ToolRunContext) -> Any:
        note("body")
        return list(range(args["n"]))

    definition = define_tool(
        name="numbers", parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
        output={"schema": {"type": "array", "items": {"type": "integer"}}, "render": render,
                "presentation_meta": meta},
        execute=body, finalize_content=lambda execution, result: note("finalize"), **extra)
    registry = ToolRegistry()
    registry.register(dataclasses.replace(definition, dump_output=dump))
    registry.on_pre_execute(lambda execution, decision: note("pre"))
    registry.on_post_execute(lambda execution, result: note("post"))
    registry.on_result(lambda execution, result: note("observer"))
    return registry


async def test_a_large_value_is_rendered_in_a_worker_thread_with_the_same_result() -> None:
    loop_thread = threading.get_ident()
    results = {}
    threads: dict[str, dict[str, set[int]]] = {}
    for size, n in (("small", 10), ("large", LARGE_NODES * 3)):
        seen: dict[str, set[int]] = {}
        registry = threaded_registry(seen)
        results[size] = await registry.execute(call("numbers", {"n": n}))
        threads[size] = seen
        result = results[size]
        assert not result.is_error, result
        assert result.value == list(range(n)) and isinstance(result.value, list)
        assert result.text == json.dumps(list(range(n)), indent=2)
        assert result.meta == {"count": n}
    assert all(ids == {loop_thread} for ids in threads["small"].values()), threads["small"]
    large = threads["large"]
    off_loop = {"dump_output", "render", "meta"}
    for stage in off_loop:
        assert loop_thread not in large[stage], stage
    assert all(large[stage] == {loop_thread} for stage in large.keys() - off_loop), large


async def test_a_large_replacement_value_is_rendered_off_the_loop_too() -> None:
    loop_thread = threading.get_ident()
    seen: dict[str, set[int]] = {}
    registry = threaded_registry(seen)
    big: list[JsonValue] = [*range(LARGE_NODES * 2)]
    registry.on_post_execute(lambda execution, result: Accept(value=big))
    result = await registry.execute(call("numbers", {"n": 1}))
    assert result.value == big and result.meta == {"count": len(big)}
    assert result.text == json.dumps(big, indent=2)
    assert seen["render"] - {loop_thread}, "the replacement was rendered on the loop"


async def test_a_cancelled_call_still_waits_for_its_render_thread() -> None:
    started, release = threading.Event(), threading.Event()

    def slow_render(args: Any, value: Any) -> str:
        started.set()
        release.wait(10)
        return "rendered"

    registry = ToolRegistry()
    registry.register(define_tool(
        name="numbers", parameters={"type": "object"},
        output={"schema": {"type": "array"}, "render": slow_render},
        execute=lambda args, ctx: list(range(LARGE_NODES * 2))))
    published: list[Any] = []
    registry.on_result(lambda execution, result: published.append(result))
    task = asyncio.create_task(registry.execute(call("numbers", {})))
    assert await asyncio.to_thread(started.wait, 10)
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done()  # the render thread still runs: the call waits for it
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [r.error.code for r in published] == ["ABORTED"]


async def test_the_run_context_is_the_execution() -> None:
    """The seed's ToolRunContext extends ToolExecution: a body reads ``ctx.parent``,
    ``ctx.call_id`` and ``ctx.agent`` directly."""
    registry = ToolRegistry()
    scope = registry.scope("helper")
    seen: list[tuple[Any, ...]] = []

    async def body(args: Any, ctx: ToolRunContext) -> str:
        seen.append((isinstance(ctx, ToolExecution), ctx.call_id, ctx.parent, ctx.agent,
                     ctx.name, ctx.arguments, ctx.is_top_level, ctx.execution.token is ctx.token))
        return "ok"

    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=body))
    parent = ExecutionToken()
    await registry.execute(ToolCall(call_id="c7", name="t", arguments={"k": 1},
                                    agent=scope, parent=parent))
    assert seen == [(True, "c7", parent, scope, "t", {"k": 1}, False, True)]


def test_the_fast_constructors_build_what_the_dataclasses_build() -> None:
    """The pipeline builds its execution view and run context from their slots
    (``new_execution``, ``ToolRunContext.of``); field for field, they are what the
    dataclasses' own ``__init__`` builds, and a field added later is not forgotten."""
    from dsh_jupyter.abort import AbortSignal
    from dsh_jupyter.registry.execution import new_execution

    registry = ToolRegistry()
    registry.register(echo_tool())
    definition = registry.get("echo")
    scope = registry.scope("s")
    values = {"token": ExecutionToken(), "call_id": "c", "name": "echo",
              "arguments": {"text": "x"}, "signal": AbortSignal(), "agent": scope,
              "parent": ExecutionToken(), "definition": definition}
    built = new_execution(**values)  # type: ignore[arg-type]
    expected = ToolExecution(**values)  # type: ignore[arg-type]
    assert [f.name for f in dataclasses.fields(ToolExecution)] == list(values)
    for name in values:
        assert getattr(built, name) is getattr(expected, name)

    def defer(context: Any) -> None:
        return None

    operational = AbortSignal()
    context = ToolRunContext.of(built, operational, defer, None, defer)
    own = {"execution": built, "_defer": defer, "_annotate": None, "_attach": defer}
    reference = ToolRunContext(**{**values, "signal": operational, **own})  # type: ignore[arg-type]
    assert ([f.name for f in dataclasses.fields(ToolRunContext)]
            == [*values, "execution", "_defer", "_annotate", "_attach"])
    for field in dataclasses.fields(ToolRunContext):
        assert getattr(context, field.name) is getattr(reference, field.name), field.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.call_id = "changed"  # type: ignore[misc]
