"""Policies by tool name (``serve-mcp --policy FILE``): the order rules are matched in, the
hook that only tightens, and one clear line for every malformed file."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_jupyter import Deny, ToolCall, ToolRegistry
from dsh_jupyter.registry.execution import ToolExecution
from dsh_jupyter.registry.name_rules import NameRules, PolicyFileError, read_name_rules
from dsh_jupyter.registry.policy import PreDecision
from dsh_jupyter.testing import InProcessRuntime


def test_deny_then_ask_then_allow_then_the_default() -> None:
    rules = NameRules(deny=("git_reset",), ask=("git_*",), allow=("git_status",),
                      default="deny")
    assert rules.action("git_reset") == ("deny", "git_reset")
    assert rules.action("git_status") == ("ask", "git_*")  # ask is matched before allow
    assert rules.action("git_log") == ("ask", "git_*")
    assert rules.action("read_file") == ("deny", None)  # the default
    assert NameRules(allow=("read_*",), default="ask").action("read_file") == ("allow", "read_*")


def test_patterns_are_case_sensitive_fnmatch() -> None:
    rules = NameRules(deny=("write_?", "[ab]*"))
    assert rules.action("write_1")[0] == "deny"
    assert rules.action("write_12")[0] == "allow"
    assert rules.action("beta")[0] == "deny"
    assert rules.action("Beta")[0] == "allow"


def test_unmatched_patterns_are_reported() -> None:
    rules = NameRules(deny=("git_rset", "git_reset"), ask=("write_*",))
    assert rules.unmatched(["git_reset", "git_log"]) == [("deny", "git_rset"),
                                                         ("ask", "write_*")]


async def test_the_hook_denies_asks_and_never_loosens() -> None:
    registry = ToolRegistry()
    ran: list[str] = []

    @registry.tool
    async def delete() -> str:
        """Delete."""
        ran.append("delete")
        return "deleted"

    @registry.tool
    async def write() -> str:
        """Write."""
        ran.append("write")
        return "written"

    @registry.tool
    async def read() -> str:
        """Read."""
        ran.append("read")
        return "read"

    @registry.tool
    async def guarded() -> str:
        """Guarded by the registry's own hook."""
        ran.append("guarded")
        return "guarded"

    def own(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
        return Deny("not this one") if execution.name == "guarded" else None

    registry.on_pre_execute(own)
    rules = NameRules(deny=("delete",), ask=("write", "guarded"), allow=("guarded",))
    registry.on_pre_execute(rules.hook())
    asked: dict[str, str | None] = {}

    class Answer:
        async def request(self, execution: ToolExecution, reason: str | None) -> bool:
            asked[execution.name] = reason
            return True

    registry.approval = Answer()

    async def call(name: str) -> object:
        result = await registry.execute(ToolCall(call_id=name, name=name, arguments={}))
        return result.error.message if result.error else result.value

    assert await call("delete") == "delete is denied by the policy (deny 'delete')"
    assert await call("write") == "written"
    assert asked == {"write": "the policy asks before write (ask 'write')"}
    assert await call("read") == "read"  # the default: allow
    assert await call("guarded") == "not this one"  # ask does not weaken an earlier deny
    assert ran == ["write", "read"]


async def test_run_code_is_not_judged_its_calls_are() -> None:
    registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())

    @registry.tool
    async def read() -> str:
        """Read."""
        return "read"

    registry.on_pre_execute(NameRules(default="deny").hook())
    result = await registry.execute(ToolCall(call_id="c1", name="run_code", arguments={
        "description": "try", "code": """
try:
    await tools.read({})
except ToolCallError as error:
    return error.message
"""}))
    assert result.value == {"logs": [],
                            "result": "read is denied by the policy (default 'deny')"}


@pytest.mark.parametrize(("name", "text", "message"), [
    ("p.toml", 'deny = ["a"]\nask = ["b"]\nallow = ["c"]\ndefault = "ask"\n', None),
    ("p.json", '{"deny": ["a"], "ask": ["b"], "allow": ["c"], "default": "ask"}', None),
    ("p.yaml", "deny: [a]", "expected a .toml or a .json file"),
    ("p.toml", 'deny = ["a"', "not valid TOML: "),
    ("p.json", '{"deny": ', "not valid JSON: "),
    ("p.json", '["a"]', "expected a table of rules (deny, ask, allow, default), got a list"),
    ("p.toml", 'denny = ["a"]', "unknown key 'denny' (expected deny, ask, allow, default)"),
    ("p.toml", 'deny = "a"', "deny must be a list of tool-name patterns, e.g. "
                             "deny = [\"git_*\", \"write_file\"]; got the string 'a'"),
    ("p.json", '{"ask": ["ok", 3]}', "ask must list tool-name patterns (non-empty strings)"),
    ("p.toml", 'allow = [""]', "allow must list tool-name patterns (non-empty strings)"),
    ("p.toml", 'default = "maybe"', "default must be \"allow\", \"ask\" or \"deny\", "
                                    "got 'maybe'"),
])
def test_policy_files(tmp_path: Path, name: str, text: str, message: str | None) -> None:
    path = tmp_path / name
    path.write_text(text)
    if message is None:
        assert read_name_rules(path) == NameRules(deny=("a",), ask=("b",), allow=("c",),
                                                  default="ask")
        return
    with pytest.raises(PolicyFileError) as raised:
        read_name_rules(path)
    assert str(raised.value).startswith(f"policy file {path}: ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError, match=r"policy file .*nope\.toml: cannot be read: "
                                              r"No such file or directory$"):
        read_name_rules(tmp_path / "nope.toml")
