"""How a registry, its scopes and undo handles show in a notebook."""

from __future__ import annotations

from dsh_jupyter import Deny, ToolRegistry


def registry_with_tools() -> ToolRegistry:
    registry = ToolRegistry(mode="code")

    @registry.tool(is_concurrency_safe=lambda args: True)
    async def read_file(path: str, offset: int = 0) -> str:
        """Read a text file <fast>.

        More detail."""
        return path

    @registry.tool
    async def write_file(path: str, text: str) -> str:
        """Write a file."""
        return path

    return registry


def test_a_registry_renders_as_a_table_of_its_tools() -> None:
    registry = registry_with_tools()
    registry.on_pre_execute(lambda e, d: Deny("no") if e.name == "write_file" else None)
    registry.scope("helper").restrict(deny=["write_file"])
    page = registry._repr_html_()
    assert "<code>read_file(path: string, offset?: integer)</code>" in page
    assert "<code>write_file(path: string, text: string)</code>" in page
    assert "Read a text file &lt;fast&gt;." in page and "More detail" not in page  # escaped
    assert "mode <b>code</b>" in page and "2 tools" in page
    assert "policies: 1 pre-execute" in page and "<code>helper</code>" in page
    assert page.index("read_file(") < page.index("write_file(")
    assert repr(registry) == "<ToolRegistry mode='code' tools=2 scopes=1>"  # text fallback


def test_a_scope_shows_what_it_sees() -> None:
    registry = registry_with_tools()
    scope = registry.scope("reader")
    scope.restrict(deny=["write_file"])
    scope.present_as("native")
    page = scope._repr_html_()
    assert "AgentScope &#x27;reader&#x27;" in page and "mode <b>native</b>" in page
    assert "read_file(" in page and "write_file(" not in page and "1 tool " in page
    scope.dispose()
    assert "disposed" in scope._repr_html_()


def test_undo_handles_say_what_they_undo() -> None:
    registry = ToolRegistry()

    def audit(execution: object, decision: object) -> None:
        return None

    undo = registry.on_pre_execute(audit)
    assert repr(undo) == "<undo: pre-execute hook test_undo_handles_say_what_they_undo." \
                         "<locals>.audit (in the global layer)>"
    scope = registry.scope("s")
    assert repr(scope.present_as("code")) == "<undo: present_as 'code' (scope 's')>"
    assert repr(registry.on_event(print)) == "<undo: event sink print>"
    undo()
    undo()  # again: nothing happens
    assert registry._hooks(None).pre == ()
