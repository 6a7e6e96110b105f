"""Sessions as notebooks: a real recorded session exported, validated, re-run.

The session is recorded once per module the way a user gets one: a scripted model drives
the agent loop over the sample registry in ``both`` mode with a real ``KernelRuntime``
(native calls, one failing; a program that works; a program that fails after a
sub-call was denied; a native call approved). The exported notebook is checked cell by
cell, then executed with papermill in a real kernel, its programs running again in fresh
kernels, and an evaluation run's log goes through ``nbval --nbval-lax``.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import papermill
import pytest

from dsh_jupyter import Approval, Ask, JsonlSessionWriter, ToolCall, export_notebook, read_session
from dsh_jupyter.agent import ScriptedModel, run_agent
from dsh_jupyter.demo.tools import sample_registry
from dsh_jupyter.evaluation import load_task_set, run_evaluation
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig, StatefulConfig
from dsh_jupyter.registry import ToolExecution
from dsh_jupyter.registry.policy import PreDecision
from dsh_jupyter.widgets import replay

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]

SAMPLE = "dsh_jupyter.demo.tools:sample_registry"
TASK = "How many Python files are in src?"
WORKS = ('names = await tools.list_files({"pattern": "src/*.py"})\n'
         'print(f"{len(names)} files")\n'
         "return names")
FAILS = ('words = await tools.word_count({"text": "two words"})\n'
         "print(words)\n"
         'raise ValueError("no summary yet")')
SCRIPT: list[dict[str, Any]] = [
    {"content": "Let me look around first.", "tool_calls": [
        {"name": "list_files", "arguments": {"pattern": "*.md"}},
        {"name": "read_file", "arguments": {"path": "missing.py"}}]},
    {"tool_calls": [{"name": "run_code",
                     "arguments": {"code": WORKS, "description": "List the sources"}}]},
    {"content": "Now the README.", "tool_calls": [
        {"name": "run_code", "arguments": {"code": FAILS, "description": "Count | words"}}]},
    {"tool_calls": [{"name": "word_count", "arguments": {"text": "a b c"}}]},
    {"content": "There are 2 Python files in src."},
]


class Approver:
    """Approves counting ``a b c`` (with a note), denies anything else."""

    async def request(self, execution: ToolExecution, reason: str | None) -> Approval:
        if execution.arguments == {"text": "a b c"}:
            return Approval(approved=True, note="fine, it is short")
        return Approval(approved=False, note="not that one")


def ask_before_counting(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
    return Ask("counting is costly") if execution.name == "word_count" else None


async def record(path: Path) -> None:
    registry = sample_registry()
    registry.mode = "both"
    registry.approval = Approver()
    registry.on_pre_execute(ask_before_counting)
    with JsonlSessionWriter(path) as writer:
        registry.on_event(writer)
        async with KernelRuntime() as runtime:
            registry.code_runtime = runtime
            result = await run_agent(registry, ScriptedModel(SCRIPT), TASK)
    assert result.stop == "answered", result


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("session") / "session.jsonl"
    asyncio.run(record(path))
    return path


def sources(nb: Any) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source) for cell in nb.cells]


def test_cells_follow_the_session(session: Path, tmp_path: Path) -> None:
    out = tmp_path / "session.ipynb"
    nb = export_notebook(session, out, tools=SAMPLE)
    assert nbformat.read(out, as_version=4) == nb
    nbformat.validate(nb)
    assert nb.nbformat == 4
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.metadata["dsh_jupyter"] == {
        "format": "dsh-jupyter-export/1", "source": str(session), "tools": SAMPLE,
        "values": True, "approvals": "ask", "runs": [nb.metadata["dsh_jupyter"]["runs"][0]],
        "programs": 2}
    cells = sources(nb)
    kinds = [kind for kind, _ in cells]
    assert kinds == ["markdown", "markdown", "code",  # title, setup (says who answers)
                     "code",                          # approvals = 'ask' (a program asked)
                     "markdown",                      # step 1: native calls
                     "markdown", "code",              # step 2: a program
                     "markdown", "code",              # step 3: the failing program
                     "markdown", "markdown",          # step 4: approved call; step 5: answer
                     "markdown", "code"]              # run end; teardown
    title = cells[0][1]
    assert title.startswith(f"# Session: {TASK}\n")
    assert "model `scripted`" in title and "mode `both`" in title
    assert "log `session.jsonl`" in title and str(session.parent) not in title
    assert "5 model turns, 3 native calls, 2 programs" in title
    assert "The session's programs asked for approvals." in cells[1][1]
    assert cells[2][1].endswith("\napprovals = 'ask'")
    assert nb.cells[2].metadata["tags"] == ["parameters"]
    cells = cells[:2] + cells[3:]  # the rest as before the session asked for approvals
    setup = cells[2][1]
    assert setup.startswith("%load_ext dsh_jupyter\n")
    assert f"open_session_registry({SAMPLE!r}, mode='both', approvals=approvals," in setup
    assert ("RECORDED_APPROVALS = [\n    {'tool': 'word_count', 'arguments': {'text': "
            "'two words'}, 'approved': False, 'answered_by': 'user', 'note': 'not that one'},"
            "\n]\n") in setup  # the sub-call's; the native call is not run again
    step1 = cells[3][1]
    assert step1.startswith("### Step 1\n\nLet me look around first.\n")
    assert '| `list_files` | `{"pattern": "*.md"}` | ok | `[ "README.md" ]` |  |' in step1
    assert ('| `read_file` | `{"path": "missing.py"}` | error NOT_FOUND | '
            "no such file: missing.py |  |") in step1
    assert cells[4][1] == "### Step 2\n\nThe model ran 1 program."
    assert cells[5][1] == f"%%run_code --description 'List the sources'\n{WORKS}"
    step3 = cells[6][1]
    assert step3.startswith("### Step 3\n\nNow the README.")
    assert ("Approvals in *Count \\| words*: `word_count` asked (counting is costly), "
            "denied by user: not that one") in step3
    assert cells[7][1] == f"%%run_code --description 'Count | words'\n{FAILS}"
    assert ("| `word_count` | `{\"text\": \"a b c\"}` | ok | `3` | asked (counting is costly), "
            "approved by user: fine, it is short |") in cells[8][1]
    assert cells[9][1] == "### Step 5\n\nThere are 2 Python files in src."
    assert cells[10][1] == "**Run ended:** answered after 5 steps (5 tool calls, 2 sub-calls)."
    assert cells[11][1].startswith("await resources.aclose()")
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == [1, 2, 3, 4, 5]


def test_program_cells_hold_the_recorded_card(session: Path) -> None:
    nb = export_notebook(session, None, tools=SAMPLE)
    works, fails = [cell for cell in nb.cells if cell.source.startswith("%%run_code")]
    events = read_session(session)
    for cell, outcome in ((works, "ok"), (fails, "error CODE_RUN_FAILED")):
        call_id = cell.metadata["dsh_jupyter"]["call_id"]
        assert cell.metadata["dsh_jupyter"]["outcome"] == outcome
        (output,) = cell.outputs
        assert output.output_type == "execute_result" and output.execution_count is not None
        mine = [e for e in events if e.get("call_id") == call_id
                or e.get("root_call_id") == call_id]
        card = replay(mine)._repr_mimebundle_(include=("text/plain", "text/html"))
        assert output.data == {"text/plain": card["text/plain"], "text/html": card["text/html"]}
        text = output.data["text/plain"]
        assert call_id not in text and not re.search(r"\d\.\d+ ?s\b", text), text
    assert works.outputs[0].data["text/plain"].startswith("[ok] List the sources — run_code")
    assert '"src/app.py"' in works.outputs[0].data["text/plain"]
    failed = fails.outputs[0].data["text/plain"]
    assert failed.startswith("[error: CODE_RUN_FAILED] Count | words — run_code")
    assert "[error: DENIED] word_count" in failed


def test_the_same_log_gives_the_same_bytes(session: Path, tmp_path: Path) -> None:
    export_notebook(session, tmp_path / "a.ipynb", tools=SAMPLE)
    export_notebook(read_session(session), tmp_path / "b.ipynb", tools=SAMPLE)
    a = json.loads((tmp_path / "a.ipynb").read_text())
    b = json.loads((tmp_path / "b.ipynb").read_text())
    assert a["metadata"]["dsh_jupyter"].pop("source") == str(session)
    assert b["metadata"]["dsh_jupyter"].pop("source") is None  # events, not a file
    assert "log `session.jsonl`" in a["cells"][0]["source"][2]  # only a file has a name
    assert a["cells"][1:] == b["cells"][1:] and a["metadata"] == b["metadata"]
    export_notebook(session, tmp_path / "c.ipynb", tools=SAMPLE)
    assert (tmp_path / "a.ipynb").read_bytes() == (tmp_path / "c.ipynb").read_bytes()


def test_no_values_drops_arguments_results_and_outputs(session: Path) -> None:
    nb = export_notebook(session, None, tools=SAMPLE, values=False)
    nbformat.validate(nb)
    assert nb.metadata["dsh_jupyter"]["values"] is False
    text = "\n".join(cell.source for cell in nb.cells)
    for value in ("missing.py", "*.md", "README.md\"", "a b c", "fine, it is short",
                  "not that one", "no such file"):
        assert value not in text, value
    assert "| `read_file` | `{path}` | error NOT_FOUND |" in text
    assert "--no-values" in nb.cells[0].source
    programs = [cell for cell in nb.cells if cell.source.startswith("%%run_code")]
    assert [cell.source.split("\n", 1)[1] for cell in programs] == [WORKS, FAILS]
    assert all(cell.outputs == [] for cell in nb.cells if cell.cell_type == "code")


def test_rerun_with_papermill_gives_the_recorded_outputs(session: Path, tmp_path: Path) -> None:
    export_notebook(session, tmp_path / "session.ipynb", tools=SAMPLE)
    papermill.execute_notebook(str(tmp_path / "session.ipynb"), str(tmp_path / "ran.ipynb"),
                               kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    recorded = nbformat.read(tmp_path / "session.ipynb", as_version=4)
    ran = nbformat.read(tmp_path / "ran.ipynb", as_version=4)

    def card(nb: Any, number: int) -> str:
        cells = [cell for cell in nb.cells if cell.source.startswith("%%run_code")]
        results = [o for o in cells[number].outputs if o.output_type == "execute_result"]
        assert len(results) == 1, cells[number].outputs
        return str(results[0].data["text/plain"])

    # The listing is deterministic: the program runs from the cell byte for byte, so the
    # re-run's card is the recorded one.
    assert card(ran, 0) == card(recorded, 0)
    # The failing program fails again; without the recording's approval policy its
    # sub-call now runs, so it fails later, at its own raise (a cell value, not an error).
    again = card(ran, 1)
    assert again.startswith("[error: CODE_RUN_FAILED] Count | words — run_code")
    assert "ValueError: no summary yet" in again and "[ok] word_count" in again
    assert all(o.output_type != "error" for cell in ran.cells if cell.cell_type == "code"
               for o in cell.outputs)



async def test_a_stateful_scoped_session_runs_again_in_one_session(tmp_path: Path) -> None:
    """Programs that used what an earlier one defined (a stateful runtime), in a scope:
    the log says the runtime was stateful, the export opens the tools with a stateful
    runtime and makes the scope, and the re-run's cards are the recorded ones."""
    registry = sample_registry()
    registry.mode = "code"
    analyst = registry.scope("analyst")
    programs = ['names = await tools.list_files({"pattern": "src/*"})\nprint(len(names))',
                "return sorted(names)"]
    config = KernelRuntimeConfig(stateful=StatefulConfig())
    async with KernelRuntime(config) as runtime:
        registry.code_runtime = runtime
        with JsonlSessionWriter(tmp_path / "stateful.jsonl") as writer:
            undo = registry.on_event(writer)
            for number, code in enumerate(programs, 1):
                result = await registry.execute(ToolCall(
                    call_id=f"s{number}", name="run_code", agent=analyst,
                    arguments={"code": code, "description": f"step {number}"}))
                assert not result.is_error, result.text
            undo()
    nb = export_notebook(tmp_path / "stateful.jsonl", tmp_path / "stateful.ipynb",
                         tools=SAMPLE)
    setup = next(cell.source for cell in nb.cells if "open_session_registry(" in cell.source)
    assert "scopes=['analyst'], stateful=True" in setup
    papermill.execute_notebook(str(tmp_path / "stateful.ipynb"), str(tmp_path / "ran.ipynb"),
                               kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    ran = nbformat.read(tmp_path / "ran.ipynb", as_version=4)

    def cards(notebook: Any) -> list[str]:
        return [str(output.data["text/plain"]) for cell in notebook.cells
                if cell.source.startswith("%%run_code") for output in cell.outputs
                if output.output_type == "execute_result"]

    assert cards(ran) == cards(nb) and len(cards(nb)) == 2
    assert '"src/app.py"' in cards(ran)[1]  # program 2 used program 1's names
    # A stateless session's export stays as it was: no stateful runtime is asked for.
    events: list[Any] = read_session(tmp_path / "stateful.jsonl")
    for event in events:
        if event["kind"] == "tool/result":
            event["meta"].pop("stateful")
    bare = export_notebook(events, None, tools=SAMPLE)
    assert "stateful=True" not in "\n".join(cell.source for cell in bare.cells)


def test_without_tools_the_setup_cell_says_what_to_fill_in(session: Path,
                                                           tmp_path: Path) -> None:
    nb = export_notebook(session, tmp_path / "bare.ipynb")
    assert nb.metadata["dsh_jupyter"]["tools"] is None
    assert "--tools MODULE:ATTR" in nb.cells[1].source
    assert not any(cell.source.startswith("await resources.aclose()") for cell in nb.cells)
    with pytest.raises(papermill.PapermillExecutionError) as failed:
        papermill.execute_notebook(str(tmp_path / "bare.ipynb"), str(tmp_path / "ran.ipynb"),
                                   kernel_name="python3", progress_bar=False)
    assert failed.value.ename == "RuntimeError"
    assert "does not name its tools" in failed.value.evalue
    assert failed.value.exec_count == 1


def test_a_shipped_evaluation_run_passes_nbval(tmp_path: Path) -> None:
    task_set = load_task_set("office").select(["busiest-day", "order-status"])
    sessions = tmp_path / "sessions"
    evaluation = asyncio.run(run_evaluation(task_set, modes=["native", "code"],
                                            session_dir=sessions))
    assert [(r.task, r.mode, r.success) for r in evaluation.records] == [
        ("busiest-day", "native", True), ("busiest-day", "code", False),
        ("order-status", "native", True), ("order-status", "code", True)]
    assert sorted(p.name for p in sessions.iterdir()) == [
        "busiest-day.code.0.jsonl", "busiest-day.native.0.jsonl",
        "order-status.code.0.jsonl", "order-status.native.0.jsonl"]
    log = sessions / "busiest-day.code.0.jsonl"
    assert read_session(log)[0] == {**read_session(log)[0], "kind": "agent/run-start",
                                    "run_id": "busiest-day.code.0"}
    notebooks = []
    for name in ("busiest-day.code", "order-status.native"):
        notebook = tmp_path / f"{name}.ipynb"
        export_notebook(sessions / f"{name}.0.jsonl", notebook,
                        tools="dsh_jupyter.evaluation.fresh:office")
        notebooks.append(str(notebook))
    programs = [c for c in nbformat.read(notebooks[0], as_version=4).cells
                if c.source.startswith("%%run_code")]
    assert len(programs) == 1 and programs[0].outputs
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env",
         "-p", "no:cacheprovider", "-q", *notebooks],
        cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-10_000:] + run.stderr[-3_000:]
    assert " passed" in run.stdout


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsh_jupyter.cli", "export", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_command_end_to_end(session: Path, tmp_path: Path) -> None:
    done = cli(str(session), "-o", "out.ipynb", "--tools", SAMPLE, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "wrote out.ipynb: 13 cells, 2 programs\n"
    nb = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert nb == export_notebook(session, None, tools=SAMPLE)
    done = cli(str(session), "-o", "bare.ipynb", "--no-values", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    bare = nbformat.read(tmp_path / "bare.ipynb", as_version=4)
    assert bare.metadata["dsh_jupyter"]["values"] is False
    assert bare.metadata["dsh_jupyter"]["tools"] is None


@pytest.mark.parametrize(("content", "message"), [
    ("", "session.jsonl is empty: a session log has one JSON event per line"),
    ("\n\n", "session.jsonl is empty"),
    ('{"kind": "tool/call"\n', "session.jsonl:1: not a JSON line"),
    ('{"hello": 1}\n[1, 2]\n', "session.jsonl is not a session log: none of its 2 lines is a "
                               "dsh-jupyter event"),
])
def test_a_log_that_is_not_a_session_is_one_clear_line(tmp_path: Path, content: str,
                                                       message: str) -> None:
    log = tmp_path / "session.jsonl"
    log.write_text(content)
    done = cli(str(log), "-o", "out.ipynb", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("dsh-jupyter export: ") and message in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "out.ipynb").exists()
    with pytest.raises(ValueError, match=re.escape(message)):
        export_notebook(log, None)


def test_bad_arguments_are_one_clear_line(session: Path, tmp_path: Path) -> None:
    cases = [
        ((str(tmp_path / "nope.jsonl"), "-o", "out.ipynb"), "no session log at"),
        ((str(tmp_path), "-o", "out.ipynb"), "is a directory, not a session log"),
        ((str(session), "-o", "out.ipynb", "--tools", "not a spec"),
         "tools must be MODULE:ATTR"),
        ((str(session), "-o", "out.txt"), "-o names a notebook (.ipynb)"),
    ]
    for args, message in cases:
        done = cli(*args, cwd=tmp_path)
        assert done.returncode == 2, args
        assert message in done.stderr and done.stderr.count("\n") == 1, done.stderr
    with pytest.raises(ValueError, match="no events to export"):
        export_notebook([], None)


def test_scopes_descriptions_and_calls_outside_a_run() -> None:
    """Logs without agent events (``%%run_code`` cells, ``registry.execute``), in a
    scope, with a description the magic line must quote; a log of two runs."""
    from dsh_jupyter._magic_line import split_line
    from dsh_jupyter.extension import _parser

    description = "It's a \"quoted\"\ndescription"
    program = "return 1"
    events: list[Any] = [
        {"kind": "tool/call", "call_id": "cell-1", "name": "run_code", "agent": "researcher",
         "arguments": {"code": program, "description": description}, "time": 1.0},
        {"kind": "tool/result", "call_id": "cell-1", "name": "run_code", "agent": "researcher",
         "arguments": {"code": program, "description": description}, "is_error": False,
         "content": [{"type": "text", "text": "1"}], "meta": {"logs": [], "result": "1"},
         "started": 1.0, "ended": 2.0},
        {"kind": "tool/call", "call_id": "x", "name": "greet", "agent": None,
         "arguments": {"name": "a|b"}, "time": 3.0},
        {"kind": "tool/result", "call_id": "x", "name": "greet", "agent": None,
         "arguments": {"name": "a|b"}, "is_error": True, "error": {"message": "no",
                                                                   "code": "DENIED"},
         "content": [{"type": "text", "text": "Error: no"}], "started": 3.0, "ended": 3.5},
    ]
    nb = export_notebook(events, None)
    cells = sources(nb)
    assert cells[0][1].startswith("# Session\n\nrecorded 1970-01-01 00:00 UTC.")
    assert cells[3][0] == "code"  # a program outside an agent run needs no heading
    magic, body = cells[3][1].split("\n", 1)
    # The description as recorded, its newline too (on the magic's one line, as $'...').
    assert magic == ("%%run_code --description $'It\\'s a \"quoted\"\\ndescription' "
                     "--scope researcher")
    options = _parser("%%run_code").parse_args(split_line(magic.removeprefix("%%run_code")))
    assert (options.description, options.scope, body) == (description, "researcher", program)
    assert cells[4][1] == ("### Calls\n\n| tool | arguments | outcome | result | approval |\n"
                           "|---|---|---|---|---|\n"
                           '| `greet` | <code>{"name": "a\\|b"}</code> | denied | no |  |')
    runs: list[Any] = []
    for run_id in ("one", "two"):
        runs += [{"kind": "agent/run-start", "run_id": run_id, "agent": None, "mode": "code",
                  "model": "m", "task": f"task {run_id}", "max_steps": 3, "time": 5.0},
                 {"kind": "agent/run-end", "run_id": run_id, "stop": "step_limit", "steps": 3,
                  "tool_calls": 0, "sub_calls": 0, "wall_seconds": 1.0, "answer": None,
                  "error": {"message": "too\nmany", "code": "STEP_LIMIT"}, "time": 6.0}]
    two = sources(export_notebook(runs, None, tools="pkg.tools:registry"))
    assert two[0][1].startswith("# Session of 2 runs\n")
    assert "mode='code'" in two[2][1]
    assert [text for kind, text in two[3:-1]] == [
        "## Run `one`: task one",
        "**Run ended:** step_limit after 3 steps (0 tool calls, 0 sub-calls). STEP_LIMIT: too many",
        "## Run `two`: task two",
        "**Run ended:** step_limit after 3 steps (0 tool calls, 0 sub-calls). STEP_LIMIT: too many"]


async def test_a_bad_tools_spec_is_one_clear_line() -> None:
    from dsh_jupyter.errors import RegistrationError
    from dsh_jupyter.sessions import open_session_registry

    with pytest.raises(RegistrationError) as raised:
        async with open_session_registry("no_such_module:registry"):
            pass
    assert str(raised.value) == ("cannot open the session's tools: cannot load "
                                 "'no_such_module:registry': No module named 'no_such_module'")
    with pytest.raises(RegistrationError, match="is a dict, not a ToolRegistry"):
        async with open_session_registry("dsh_jupyter.demo.tools:SAMPLE_FILES"):
            pass


def test_fresh_task_set_tools_start_from_the_starting_world() -> None:
    from dsh_jupyter.evaluation import fresh

    office, again, shop = fresh.office(), fresh.office(), fresh.shop()
    assert len(office.schemas()) == 31 and len(shop.schemas()) == 6
    assert office.mode == "native" and office.code_runtime is None
    assert office is not again
