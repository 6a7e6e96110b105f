"""Stateful runs through Code Mode: a scope's run_code programs share one kernel, other
scopes (and calls without one) have their own; the prompt says which runtime the model has.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dsh_jupyter import ToolCall, ToolRegistry, define_tool
from dsh_jupyter.agent import ScriptedModel, run_agent
from dsh_jupyter.codemode.prompt import FRESH_RUNS, STATEFUL_RUNS
from dsh_jupyter.codemode.sdk_python import python_sdk_instructions
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig, StatefulConfig
from dsh_jupyter.registry.scope import AgentScope

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90)]


def echo() -> Any:
    return define_tool(name="echo", description="Echo text.",
                       parameters={"type": "object", "properties": {"text": {"type": "string"}},
                                   "required": ["text"]},
                       output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                       execute=lambda args, ctx: args["text"])


@pytest.fixture
async def stateful_runtime() -> AsyncIterator[KernelRuntime]:
    config = KernelRuntimeConfig(pool_size=1, stateful=StatefulConfig())
    async with KernelRuntime(config) as runtime:
        yield runtime


def registry_on(runtime: KernelRuntime | None, mode: str = "code") -> ToolRegistry:
    registry = ToolRegistry(mode=mode, code_runtime=runtime)  # type: ignore[arg-type]
    registry.register(echo())
    return registry


async def run_code(registry: ToolRegistry, code: str, scope: AgentScope | None,
                   call_id: str = "c1") -> Any:
    result = await registry.execute(ToolCall(
        call_id=call_id, name="run_code", arguments={"code": code, "description": "test"},
        agent=scope))
    return result


async def test_each_scope_keeps_its_own_variables(stateful_runtime: KernelRuntime) -> None:
    registry = registry_on(stateful_runtime)
    alice, bob = registry.scope("alice"), registry.scope("bob")
    first = await run_code(registry, "word = await tools.echo({'text': 'kept'})", alice)
    assert not first.is_error, first.error
    # Both scopes at once: bob's program looks for alice's variable while alice's runs.
    looked, used = await asyncio.gather(
        run_code(registry, "return 'word' in globals()", bob, "c2"),
        run_code(registry, "await asyncio.sleep(0.3)\nreturn word * 2", alice, "c3"))
    assert looked.value["result"] is False and used.value["result"] == "keptkept"
    loose = await run_code(registry, "return 'word' in globals()", None, "c4")
    assert loose.value["result"] is False
    assert {s.key for s in stateful_runtime.sessions} == {
        alice.session_key, bob.session_key, registry.session_key}
    assert alice.session_key != bob.session_key and alice.session_key.startswith("scope-")

    assert await stateful_runtime.reset(alice.session_key) is True
    gone = await run_code(registry, "return word", alice, "c5")
    assert gone.is_error and "NameError: name 'word' is not defined" in gone.error.message


async def test_a_scope_named_like_a_disposed_one_starts_fresh(
        stateful_runtime: KernelRuntime) -> None:
    registry = registry_on(stateful_runtime)
    first = registry.scope("agent")
    await run_code(registry, "word = 'old'", first)
    first.dispose()
    second = registry.scope("agent")
    fresh = await run_code(registry, "return 'word' in globals()", second, "c2")
    assert fresh.value["result"] is False


async def test_an_agent_uses_a_variable_from_its_previous_step(
        stateful_runtime: KernelRuntime) -> None:
    registry = registry_on(stateful_runtime)
    scope = registry.scope("explorer")
    model = ScriptedModel([
        {"tool_calls": [{"name": "run_code", "arguments": {
            "code": "rows = [await tools.echo({'text': t}) for t in 'abc']\nprint(len(rows))",
            "description": "load the rows"}}]},
        {"tool_calls": [{"name": "run_code", "arguments": {
            "code": "return '-'.join(rows)", "description": "join the loaded rows"}}]},
        {"content": "a-b-c"},
    ])
    result = await run_agent(registry, model, "explore", scope=scope)
    assert result.stop == "answered", result.error
    tools = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert tools == ["3", "a-b-c"]
    system = model.requests[0].messages[0]["content"]
    assert isinstance(system, str)
    assert STATEFUL_RUNS in system and FRESH_RUNS[0] not in system


def test_the_instructions_say_which_runtime_the_model_has() -> None:
    stateless = registry_on(KernelRuntime())
    stateful = registry_on(KernelRuntime(KernelRuntimeConfig(stateful=StatefulConfig())))
    plain = stateless.prompt().section("tools:sdk")
    kept = stateful.prompt().section("tools:sdk")
    assert plain is not None and kept is not None
    # Stateless: the seed's fixed text, byte for byte (the golden SDK tests check the rest).
    assert plain.text.startswith(python_sdk_instructions())
    assert FRESH_RUNS[0] in plain.text and STATEFUL_RUNS not in plain.text
    assert kept.text == plain.text.replace(FRESH_RUNS[0], STATEFUL_RUNS)
    assert KernelRuntime().stateful is False

    found = registry_on(KernelRuntime(), mode="discovery").prompt().section("tools:sdk")
    kept_found = registry_on(KernelRuntime(KernelRuntimeConfig(stateful=StatefulConfig())),
                             mode="discovery").prompt().section("tools:sdk")
    assert found is not None and kept_found is not None
    assert FRESH_RUNS[1] in found.text
    assert kept_found.text == found.text.replace(FRESH_RUNS[1], STATEFUL_RUNS)
