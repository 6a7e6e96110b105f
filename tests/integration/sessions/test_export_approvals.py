"""An exported session whose program asked for approvals, run again.

The session is recorded with tools that ask before counting words (a module written next
to the notebook, as a user's own tools would be): the user approved one count and
rejected another. Its export says who answers the approvals now (the ``approvals``
papermill parameter): headless without opting in, the call is denied with one line
saying how to opt in; with ``-p approvals replay`` the recorded answers are given again,
to the same calls only. (In a notebook, ``"ask"`` shows the approval card:
``tests/integration/widgets/test_export_browser.py`` clicks it in JupyterLab.)
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import papermill
import pytest

from dsh_jupyter import Approval, Ask, JsonlSessionWriter, ToolCall, ToolRegistry, export_notebook
from dsh_jupyter.errors import RegistrationError
from dsh_jupyter.kernel import KernelRuntime
from dsh_jupyter.registry import ToolExecution
from dsh_jupyter.sessions import open_session_registry
from dsh_jupyter.sessions.approvals import OPT_IN, ReplayedApprovals

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]

TOOLS = "asking_tools:registry"
TOOLS_MODULE = '''\
from dsh_jupyter import Ask
from dsh_jupyter.demo.tools import sample_registry


def registry():
    tools = sample_registry()
    tools.mode = "code"
    tools.on_pre_execute(lambda execution, decision: Ask("counting is costly")
                         if execution.name == "word_count" else None)
    return tools
'''
PROGRAM = '''\
n = await tools.word_count({"text": "a b c"})
print("counted", n)
try:
    await tools.word_count({"text": "two words"})
except ToolCallError as error:
    print("refused:", error.message)
return n'''


class User:
    """Approves counting ``a b c`` (with a note), rejects anything else."""

    async def request(self, execution: ToolExecution, reason: str | None) -> Approval:
        if execution.arguments == {"text": "a b c"}:
            return Approval(approved=True, note="fine, it is short")
        return Approval(approved=False, note="not that one")


def asking_tools(folder: Path) -> Any:
    (folder / "asking_tools.py").write_text(TOOLS_MODULE)
    spec = importlib.util.spec_from_file_location("asking_tools", folder / "asking_tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def record(folder: Path) -> None:
    registry: ToolRegistry = asking_tools(folder).registry()
    registry.approval = User()
    async with KernelRuntime() as runtime:
        registry.code_runtime = runtime
        with JsonlSessionWriter(folder / "session.jsonl") as writer:
            undo = registry.on_event(writer)
            result = await registry.execute(ToolCall(call_id="p1", name="run_code", arguments={
                "code": PROGRAM, "description": "Count the words"}))
            undo()
    assert not result.is_error, result.text


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("approvals")
    asyncio.run(record(folder))
    return folder


def card(notebook: Path) -> str:
    ran: Any = nbformat.read(notebook, as_version=4)  # type: ignore[no-untyped-call]
    program = next(cell for cell in ran.cells if cell.source.startswith("%%run_code"))
    (result,) = [o for o in program.outputs if o.output_type == "execute_result"]
    return str(result.data["text/plain"])


def run(folder: Path, name: str, **parameters: Any) -> str:
    papermill.execute_notebook(str(folder / "session.ipynb"), str(folder / name),
                               kernel_name="python3", progress_bar=False, cwd=str(folder),
                               parameters=parameters)
    return card(folder / name)


def test_the_export_says_who_answers_the_approvals(folder: Path) -> None:
    nb = export_notebook(folder / "session.jsonl", folder / "session.ipynb", tools=TOOLS)
    assert nb.metadata["dsh_jupyter"]["approvals"] == "ask"
    parameters = next(cell for cell in nb.cells if "parameters" in cell.metadata.get("tags", ()))
    assert parameters.source.endswith("\napprovals = 'ask'")
    setup = next(cell for cell in nb.cells if "dsh-setup" in cell.metadata.get("tags", ()))
    assert nb.cells.index(parameters) + 1 == nb.cells.index(setup)  # papermill injects between
    assert ("RECORDED_APPROVALS = [\n"
            "    {'tool': 'word_count', 'arguments': {'text': 'a b c'}, 'approved': True, "
            "'answered_by': 'user', 'note': 'fine, it is short'},\n"
            "    {'tool': 'word_count', 'arguments': {'text': 'two words'}, 'approved': False, "
            "'answered_by': 'user', 'note': 'not that one'},\n]\n") in setup.source
    assert ("open_session_registry('asking_tools:registry', mode='code', approvals=approvals,\n"
            "    recorded_approvals=RECORDED_APPROVALS))") in setup.source
    assert "-p approvals replay" in nb.cells[nb.cells.index(setup) - 2].source  # the note
    bare = export_notebook(folder / "session.jsonl", None, tools=TOOLS, values=False)
    assert "{'tool': 'word_count', 'approved': True, 'answered_by': 'user'}," in "".join(
        cell.source for cell in bare.cells)
    done = subprocess.run([sys.executable, "-m", "dsh_jupyter.cli", "export",
                           str(folder / "session.jsonl"), "-o", str(folder / "replay.ipynb"),
                           "--tools", TOOLS, "--approvals", "replay"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    replay: Any = nbformat.read(folder / "replay.ipynb", as_version=4)  # type: ignore[no-untyped-call]
    assert "\napprovals = 'replay'" in "".join(cell.source for cell in replay.cells)
    with pytest.raises(ValueError, match="approvals must be 'ask', 'replay' or 'deny'"):
        export_notebook(folder / "session.jsonl", None, tools=TOOLS, approvals="yes")


def test_headless_without_opting_in_the_call_is_denied_saying_how(folder: Path) -> None:
    export_notebook(folder / "session.jsonl", folder / "session.ipynb", tools=TOOLS)
    text = run(folder, "asked.ipynb")
    assert text.startswith("[error: CODE_RUN_FAILED] Count the words — run_code"), text
    assert '[error: DENIED] word_count — text="a b c"' in text
    [line] = [line.strip() for line in text.splitlines()
              if line.strip().startswith("ToolCallError:")]
    assert line == (
        "ToolCallError: counting is costly (rejected by policy \"approvals='ask'\": "
        f"no widget front end; {OPT_IN})"), line


def test_headless_replay_when_opted_in_gives_the_recorded_answers(folder: Path) -> None:
    export_notebook(folder / "session.jsonl", folder / "session.ipynb", tools=TOOLS)
    text = run(folder, "replayed.ipynb", approvals="replay")
    assert text.startswith("[ok] Count the words — run_code"), text
    assert "counted 3" in text
    assert ("refused: counting is costly (rejected by the recorded session: user rejected "
            "it: not that one)") in text
    assert text.rstrip().endswith("result:\n    3")


async def test_replayed_answers_go_to_the_same_calls_only() -> None:
    registry = ToolRegistry(approval=ReplayedApprovals([
                                {"tool": "rm", "arguments": {"path": "a"}, "approved": True,
                                 "answered_by": "user"},
                                {"tool": "rm", "approved": False, "answered_by": "user",
                                 "note": "no"}]))

    @registry.tool
    async def rm(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    registry.on_pre_execute(lambda execution, decision: Ask("deleting"))
    results = [await registry.execute(ToolCall(call_id=f"c{n}", name="rm",
                                               arguments={"path": path}))
               for n, path in enumerate(("b", "a", "a"))]
    # "b" takes the answer recorded without arguments (values left out), "a" its own; the
    # second "a" was not asked in the recording.
    assert [r.is_error for r in results] == [True, False, True]
    assert results[0].text.endswith("(rejected by the recorded session: user rejected it: no)")
    assert results[2].text.endswith("(rejected by the recorded session: it has no answer for "
                                    "this rm call (not asked then, or with other arguments))")
    with pytest.raises(RegistrationError, match="a recorded approval is"):
        ReplayedApprovals([{"tool": "rm"}])


async def test_ask_outside_a_notebook_denies_saying_how_to_opt_in() -> None:
    async with open_session_registry("dsh_jupyter.demo.tools:sample_registry", mode="both",
                                     approvals="ask") as registry:
        registry.on_pre_execute(lambda execution, decision: Ask("counting is costly"))
        result = await registry.execute(ToolCall(call_id="c1", name="word_count",
                                                 arguments={"text": "a"}))
        assert result.text == ("Error: counting is costly (rejected by policy "
                               f"\"approvals='ask'\": no IPython kernel; {OPT_IN})")
    assert registry.approval is None  # undone with the block
    with pytest.raises(RegistrationError, match="approvals must be"):
        async with open_session_registry("dsh_jupyter.demo.tools:sample_registry",
                                         approvals="always"):  # type: ignore[arg-type]
            pass
