"""Registration, scopes, shadowing, restrict masks, schemas and change notifications."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_jupyter import AgentScope, ToolCall, ToolRegistry, ToolRunContext, define_tool
from dsh_jupyter.errors import RegistrationError
from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.registry import ScopeView


def tool(name: str, result: str = "") -> Any:
    async def run(args: Any, ctx: Any) -> str:
        return result or name

    return define_tool(name=name, description=f"{name} tool", parameters={"type": "object"},
                       output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                       execute=run)


def names(registry: ToolRegistry, scope: Any = None) -> list[JsonValue]:
    return [s["name"] for s in registry.schemas(scope)]


def test_register_returns_an_undo_and_rejects_duplicates() -> None:
    registry = ToolRegistry()
    undo = registry.register(tool("a"))
    with pytest.raises(RegistrationError, match="already registered"):
        registry.register(tool("a"))
    undo()
    assert registry.get("a") is None
    registry.register(tool("a"))  # the name is free again


def test_run_code_is_reserved_in_every_mode() -> None:
    for mode in ("native", "code", "both"):
        registry = ToolRegistry(mode=mode)
        with pytest.raises(RegistrationError, match="reserved"):
            registry.register(tool("run_code"))
        with pytest.raises(RegistrationError, match="reserved"):
            registry.scope("a").register(tool("run_code"))


async def test_scoped_tool_shadows_global_for_that_agent_only() -> None:
    registry = ToolRegistry()
    registry.register(tool("read", "global read"))
    agent = registry.scope("planner")
    agent.register(tool("read", "planner read"))
    other = registry.scope("other")
    assert (await registry.execute(ToolCall(call_id="1", name="read", agent=agent))).value \
        == "planner read"
    assert (await registry.execute(ToolCall(call_id="2", name="read", agent=other))).value \
        == "global read"
    assert (await registry.execute(ToolCall(call_id="3", name="read"))).value == "global read"


def test_child_scopes_inherit_from_ancestors() -> None:
    registry = ToolRegistry()
    registry.register(tool("g"))
    parent = registry.scope("parent")
    parent.register(tool("p"))
    child = registry.scope("child", parent=parent)
    child.register(tool("c"))
    assert names(registry, child) == ["c", "g", "p"]
    assert names(registry, parent) == ["g", "p"]
    assert names(registry) == ["g"]


def test_restrict_allow_and_deny_intersect() -> None:
    registry = ToolRegistry()
    for n in ("a", "b", "c", "d"):
        registry.register(tool(n))
    agent = registry.scope("x")
    agent.restrict(allow=["a", "b", "c"])
    agent.restrict(deny=["b"])
    assert names(registry, agent) == ["a", "c"]


def test_allow_excludes_later_names_deny_admits_them() -> None:
    registry = ToolRegistry()
    registry.register(tool("a"))
    allow_scope = registry.scope("allow")
    deny_scope = registry.scope("deny")
    allow_scope.restrict(allow=["a"])
    deny_scope.restrict(deny=["a"])
    registry.register(tool("later"))
    assert names(registry, allow_scope) == ["a"]
    assert names(registry, deny_scope) == ["later"]


def test_allow_empty_hides_everything_inherited_but_own_tools_stay() -> None:
    registry = ToolRegistry()
    registry.register(tool("a"))
    agent = registry.scope("x")
    agent.register(tool("own"))
    agent.restrict(allow=[])
    assert names(registry, agent) == ["own"]


def test_restrict_masks_ancestor_scopes_and_reaches_descendants() -> None:
    registry = ToolRegistry()
    registry.register(tool("g"))
    parent = registry.scope("parent")
    parent.register(tool("p"))
    child = registry.scope("child", parent=parent)
    child.restrict(deny=["p"])  # an ancestor scope's tool is inherited too
    assert names(registry, child) == ["g"]
    parent.restrict(deny=["g"])
    grandchild = registry.scope("grandchild", parent=child)
    assert names(registry, grandchild) == []
    assert registry.get("g", grandchild) is None


def test_restrict_undo_and_snapshotted_filters() -> None:
    registry = ToolRegistry()
    registry.register(tool("a"))
    registry.register(tool("b"))
    agent = registry.scope("x")
    allowed = ["a"]
    undo = agent.restrict(allow=allowed)
    allowed.append("b")  # the filter was snapshotted
    assert names(registry, agent) == ["a"]
    undo()
    assert names(registry, agent) == ["a", "b"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs allow"),
        ({"deny": []}, "hides nothing"),
        ({"allow": ["run_code"]}, "reserved"),
        ({"allow": ["own"]}, "registered in scope 'x' itself"),
        ({"deny": ["ghost"]}, "inherited tools: a, b"),
        ({"allow": "a"}, "not one string"),
    ],
)
def test_restrict_rejections(kwargs: dict[str, Any], message: str) -> None:
    registry = ToolRegistry()
    registry.register(tool("a"))
    registry.register(tool("b"))
    agent = registry.scope("x")
    agent.register(tool("own"))
    with pytest.raises(RegistrationError, match=message):
        agent.restrict(**kwargs)


def test_restricting_the_global_layer_is_rejected() -> None:
    registry = ToolRegistry()
    registry.register(tool("a"))
    with pytest.raises(RegistrationError, match="global layer inherits nothing"):
        registry.restrict(allow=["a"])


def test_schemas_are_detached_copies() -> None:
    registry = ToolRegistry()
    registry.register(define_tool(
        name="t", description="d",
        parameters={"type": "object", "properties": {"x": {"type": "string"}}},
        output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
        execute=lambda a, c: "x"))
    schemas: list[Any] = registry.schemas()
    assert schemas == [{"name": "t", "description": "d", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}}}]
    schemas[0]["parameters"]["properties"]["x"]["type"] = "integer"
    fresh: list[Any] = registry.schemas()
    assert fresh[0]["parameters"]["properties"]["x"]["type"] == "string"


def test_change_notifications() -> None:
    registry = ToolRegistry()
    changes: list[tuple[str, str | None, tuple[str, ...]]] = []
    registry.on_change(lambda c: changes.append((c.kind, c.scope, c.names)))
    undo = registry.register(tool("a"))
    agent = registry.scope("x")
    undo_mask = agent.restrict(deny=["a"])
    undo_mask()
    undo()
    assert changes == [("register", None, ("a",)), ("scope", "x", ()),
                       ("restrict", "x", ("a",)), ("restrict", "x", ()),
                       ("unregister", None, ("a",))]


def test_scope_lifecycle() -> None:
    registry = ToolRegistry()
    parent = registry.scope("p")
    child = registry.scope("c", parent=parent)
    with pytest.raises(RegistrationError, match="already exists"):
        registry.scope("p")
    parent.dispose()
    assert child.disposed
    with pytest.raises(RegistrationError, match="disposed"):
        child.register(tool("a"))
    with pytest.raises(RegistrationError, match="not a live scope"):
        registry.schemas(child)
    registry.scope("p")  # the name is free again


def test_a_scope_is_the_scope_view_a_call_carries() -> None:
    # ctx.agent is typed by what a call reads of it (execution.py may not name AgentScope:
    # that would close an import cycle); mypy checks the assignment.
    registry = ToolRegistry()
    parent = registry.scope("p")
    child = registry.scope("c", parent=parent)
    view: ScopeView = child
    assert isinstance(view, ScopeView)
    assert (view.name, view.parent, view.chain, view.disposed) == (
        "c", parent, (parent, child), False)
    assert view.session_key == child.session_key


async def test_a_body_passes_its_scope_back_to_the_registry() -> None:
    registry = ToolRegistry()
    agent = registry.scope("a")
    agent.present_as("both")
    registry.register(tool("g"))
    seen: list[object] = []

    @agent.tool
    async def look(ctx: ToolRunContext) -> str:
        """Look around."""
        seen.extend([sorted(registry.visible(ctx.agent)), registry.mode_for(ctx.agent),
                     registry.get("g", ctx.agent) is registry.get("g"),
                     [s["name"] for s in registry.schemas(ctx.agent)],
                     ctx.agent is agent and isinstance(ctx.agent, AgentScope)])
        return ""

    result = await registry.execute(ToolCall(call_id="1", name="look", agent=agent))
    assert not result.is_error, result.text
    assert seen == [["g", "look"], "both", True, ["g", "look"], True]


async def test_a_look_alike_scope_is_rejected() -> None:
    class LookAlike:  # every member of ScopeView, but not one of the registry's scopes
        name = "a"
        parent = None
        chain = ()
        session_key = "k"
        disposed = False

    registry = ToolRegistry()
    registry.scope("a")
    registry.register(tool("g"))
    fake = LookAlike()
    assert isinstance(fake, ScopeView)
    with pytest.raises(RegistrationError, match="not an agent scope"):
        registry.visible(fake)
    with pytest.raises(RegistrationError, match="not an agent scope"):
        registry.mode_for(fake)
    for read in (registry.schemas, registry.prompt, lambda scope: registry.get("g", scope)):
        with pytest.raises(RegistrationError, match="not a live scope"):
            read(fake)
    with pytest.raises(RegistrationError, match="not a live scope"):
        await registry.execute(ToolCall(call_id="1", name="g", agent=fake))


def test_present_as_rules() -> None:
    registry = ToolRegistry()
    agent = registry.scope("a")
    with pytest.raises(RegistrationError, match="ToolRegistry\\(mode="):
        registry.present_as("code")
    undo = agent.present_as("code")
    with pytest.raises(RegistrationError, match="already declared"):
        agent.present_as("both")
    undo()
    agent.present_as("both")
    with pytest.raises(RegistrationError, match="mode must be one of"):
        registry.scope("b").present_as("fancy")  # type: ignore[arg-type]


def test_registry_config_is_validated() -> None:
    with pytest.raises(RegistrationError, match="positive integer"):
        ToolRegistry(max_parallel_sub_calls=0)
    with pytest.raises(RegistrationError, match="positive integer"):
        ToolRegistry(max_parallel_sub_calls=True)
    with pytest.raises(RegistrationError, match="expected one of"):
        ToolRegistry(mode="remote")  # type: ignore[arg-type]


async def test_scoped_hooks_apply_to_that_agent_and_its_children() -> None:
    registry = ToolRegistry()
    registry.register(tool("a"))
    parent = registry.scope("parent")
    child = registry.scope("child", parent=parent)
    parent.guard(lambda e: "parent policy")
    denied = await registry.execute(ToolCall(call_id="1", name="a", agent=child))
    allowed = await registry.execute(ToolCall(call_id="2", name="a"))
    assert denied.is_error and not allowed.is_error
