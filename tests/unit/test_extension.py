"""The IPython extension, in a real (in-process) IPython shell."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from dsh_jupyter.extension import RunCodeOutcome


@pytest.fixture
def shell() -> Iterator[Any]:
    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext dsh_jupyter")
    yield ip
    ip.run_cell("%unload_ext dsh_jupyter")
    ip.user_ns.clear()  # not reset(): its gc.collect() took ~0.4 s per test
    InteractiveShell.clear_instance()


SETUP = """
from dsh_jupyter import ToolRegistry
from dsh_jupyter.testing import InProcessRuntime
registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())

@registry.tool
async def double(x: int) -> int:
    "Double a number."
    return 2 * x
"""


async def run(shell: Any, cell: str) -> Any:
    return await shell.run_cell_async(cell, transformed_cell=shell.transform_cell(cell))


async def test_run_code_cell_magic(shell: Any) -> None:
    assert (await run(shell, SETUP)).success
    cell = ("%%run_code --out outcome --description 'Double twice'\n"
            "a = await tools.double({'x': 2})\nprint('a =', a)\n"
            "return await tools.double({'x': a})\n")
    result = await run(shell, cell)
    assert result.success, result.error_in_exec
    outcome = shell.user_ns["outcome"]
    assert isinstance(outcome, RunCodeOutcome)
    assert outcome.value == 8 and outcome.logs == ["a = 4"]
    assert result.result is outcome


async def test_run_code_magic_reports_a_missing_registry(shell: Any) -> None:
    cell = "%%run_code\nreturn 1\n"
    result = await run(shell, cell)
    assert not result.success
    assert isinstance(result.error_in_exec, UsageError)  # IPython shows one line
    assert "no ToolRegistry" in str(result.error_in_exec)


async def test_several_registries_suggest_only_those_that_run_code(shell: Any) -> None:
    assert (await run(shell, SETUP)).success
    assert (await run(shell, "plain = ToolRegistry()\n"
                             "idle = ToolRegistry(mode='code')")).success  # no runtime
    result = await run(shell, "%%run_code\nreturn 1\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert str(result.error_in_exec) == ("%%run_code: several registries (idle, plain, "
                                         "registry); name one: %%run_code registry")
    for name, problem in (("plain", "needs Code Mode"), ("idle", "no code runtime")):
        named = await run(shell, f"%%run_code {name}\nreturn 1\n")
        assert isinstance(named.error_in_exec, UsageError)
        assert problem in str(named.error_in_exec)
    # %dsh_sdk shows any registry's SDK, so its hint names them all.
    sdk = await run(shell, "%dsh_sdk")
    assert str(sdk.error_in_exec).endswith(
        "name one: %dsh_sdk idle or %dsh_sdk plain or %dsh_sdk registry")


async def test_an_unknown_option_is_a_usage_error_not_an_exit(shell: Any) -> None:
    assert (await run(shell, SETUP)).success
    result = await run(shell, "%%run_code --bogus\nreturn 1\n")
    assert isinstance(result.error_in_exec, UsageError)  # not SystemExit
    assert str(result.error_in_exec) == (
        "%%run_code: unrecognized arguments: --bogus; usage: %%run_code [REGISTRY] "
        "[--scope NAME] [--description TEXT] [--out VAR] [--skip REASON]")


async def test_dsh_sdk_line_magic(shell: Any) -> None:
    assert (await run(shell, SETUP)).success
    from dsh_jupyter.extension import sdk_text

    text = sdk_text(shell.user_ns, "registry")
    assert "async def double(self, args: DoubleArgs) -> int:" in text
    assert shell.run_cell("%dsh_sdk").success
    from dsh_jupyter.extension import sdk_bundle

    bundle = sdk_bundle(shell.user_ns, "registry")
    assert bundle["text/plain"] == text
    assert bundle["text/html"].startswith("<details open")  # framed, foldable
    assert "## Writing code for run_code" in bundle["text/html"]  # shown as text, not a heading
    assert "-&gt; int" in bundle["text/html"]  # escaped


async def test_dsh_approvals_line_magic_shows_the_registrys_journal(
        shell: Any, tmp_path: Path) -> None:
    from dsh_jupyter.widgets import PendingApprovals
    from dsh_jupyter.widgets.pending import NO_JOURNAL, NONE_WAITING

    missing = await run(shell, "%dsh_approvals")
    assert isinstance(missing.error_in_exec, UsageError)
    assert "%dsh_approvals: no ToolRegistry" in str(missing.error_in_exec)
    assert (await run(shell, SETUP)).success
    shown = await run(shell, "%dsh_approvals")  # the cell's value: the widget
    assert isinstance(shown.result, PendingApprovals)
    await shown.result.wait()
    assert shown.result.message == NO_JOURNAL
    shell.user_ns["path"] = str(tmp_path / "journal.sqlite")
    cell = ("journaled = ToolRegistry(mode='code', code_runtime=InProcessRuntime(), "
            "journal=path)\npending = %dsh_approvals journaled\nawait pending.wait()")
    assert (await run(shell, cell)).success
    pending = shell.user_ns["pending"]
    assert pending.registry is shell.user_ns["journaled"] and pending.message == NONE_WAITING
    for line, message in (("", "several registries (journaled, registry); name one: "
                               "%dsh_approvals journaled or %dsh_approvals registry"),
                          ("--scope", "unrecognized arguments: --scope; usage: "
                                        "%dsh_approvals [REGISTRY]")):
        wrong = await run(shell, f"%dsh_approvals {line}")
        assert isinstance(wrong.error_in_exec, UsageError)
        assert str(wrong.error_in_exec) == f"%dsh_approvals: {message}"
    await shell.user_ns["journaled"].aclose()


async def test_run_code_outcome_displays_the_card(shell: Any) -> None:
    assert (await run(shell, SETUP)).success
    cell = ("%%run_code --out shown --description 'Show <b>card</b>'\n"
            "return await tools.double({'x': 5})\n")
    assert (await run(shell, cell)).success
    bundle = shell.user_ns["shown"]._repr_mimebundle_()
    text = bundle["text/plain"]
    assert text.startswith("[ok] Show <b>card</b> — run_code")
    assert "[ok] double — x=5" in text and text.endswith("10")
    assert "<b>card</b>" not in bundle["text/html"]  # escaped


async def test_a_wrong_tool_call_in_a_cell_shows_how_to_call_it(shell: Any) -> None:
    assert (await run(shell, SETUP)).success
    cell = "%%run_code --out wrong --description Wrong\nreturn await tools.double(2)\n"
    assert (await run(shell, cell)).success  # the program failed, the cell did not
    outcome = shell.user_ns["wrong"]
    line = ('TypeError: tools.double takes one dict of arguments: '
            'await tools.double({"x": int})')
    assert outcome.result.error.message.endswith(f"\n{line}")
    assert line in outcome._repr_mimebundle_()["text/plain"]  # the card shows it


async def test_dsh_sdk_shows_the_value_types_of_dicts(shell: Any) -> None:
    cell = ("from dsh_jupyter import ToolRegistry\nplain = ToolRegistry()\n\n@plain.tool\n"
            "async def scale(prices: dict[str, float], rates: dict[str, dict[str, int]]"
            ") -> dict[str, float]:\n    'Scale prices.'\n    return prices\n")
    assert (await run(shell, cell)).success
    from dsh_jupyter.extension import sdk_text

    text = sdk_text(shell.user_ns, "")
    assert "    prices: dict[str, float]\n    rates: dict[str, dict[str, int]]\n" in text
    assert "async def scale(self, args: ScaleArgs) -> dict[str, float]:" in text


async def test_skip_runs_nothing_and_says_why(shell: Any,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert (await run(shell, SETUP)).success
    assert (await run(shell, "seen = []\nundo = registry.on_event(seen.append)")).success
    cell = ("%%run_code --out skipped --skip $'stopped by the user after 5.0 s\\nin the "
            "recorded session'\nwhile True:\n    await tools.double({'x': 1})\n")
    result = await run(shell, cell)
    assert result.success and result.result is None, result.error_in_exec
    assert shell.user_ns["skipped"] is None and shell.user_ns["seen"] == []  # nothing ran
    assert capsys.readouterr().out == (
        "skipped: stopped by the user after 5.0 s\nin the recorded session (remove --skip "
        "from the first line to run it)\n")
