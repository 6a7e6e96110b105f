"""``dsh-jupyter eval`` argument handling (no notebook runs here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_jupyter.cli import main
from dsh_jupyter.evaluation.command import (
    UsageError,
    _Prefixed,
    check_names,
    default_notebook,
    describe,
    load_param_sets,
    parameter_sets,
    parse_value,
    plan_runs,
    run_notebook,
)
from dsh_jupyter.json_value import JsonValue

pytestmark = pytest.mark.timeout(60)
NAMES = {"modes", "task_set", "task_file", "tasks", "models", "model", "repeats", "runtime",
         "pool_size", "max_steps", "output_dir", "label"}


def test_values_are_json_else_text() -> None:
    assert parse_value("5") == 5
    assert parse_value("null") is None
    assert parse_value('["code"]') == ["code"]
    assert parse_value("openai") == "openai"
    assert parse_value("in-process") == "in-process"


def test_param_files_json_and_yaml(tmp_path: Path) -> None:
    (tmp_path / "one.json").write_text('{"model": "openai"}')
    assert load_param_sets(tmp_path / "one.json") == [{"model": "openai"}]
    (tmp_path / "many.yaml").write_text("- label: a\n  modes: [code]\n- label: b\n")
    assert load_param_sets(tmp_path / "many.yaml") == [
        {"label": "a", "modes": ["code"]}, {"label": "b"}]
    for name, text, message in [("bad.json", "{", "is not JSON"),
                                ("bad.yaml", "a: [", "is not YAML"),
                                ("list.json", "[1]", "expected a parameter object"),
                                ("empty.json", "[]", "expected a parameter object"),
                                ("date.yaml", "when: 2024-01-01", "\"when\" is a date")]:
        (tmp_path / name).write_text(text)
        with pytest.raises(UsageError, match=message):
            load_param_sets(tmp_path / name)
    with pytest.raises(UsageError, match="cannot read"):
        load_param_sets(tmp_path / "absent.json")


def test_a_sets_own_values_win() -> None:
    shared: dict[str, JsonValue] = {"modes": ["code"], "model": "openai"}
    assert parameter_sets(shared, None) == [shared]
    assert parameter_sets(shared, [{"model": "scripted"}, {}]) == [
        {"modes": ["code"], "model": "scripted"}, {"modes": ["code"], "model": "openai"}]


def test_names_are_checked_against_the_notebook() -> None:
    check_names([{"modes": ["code"], "label": "x"}], NAMES)
    with pytest.raises(UsageError, match="no parameter 'mode'; it has: label, max_steps"):
        check_names([{"mode": "code"}], NAMES)
    with pytest.raises(UsageError, match="output_dir is set by dsh-jupyter eval"):
        check_names([{"output_dir": "x"}], NAMES)


def test_plans_one_folder_per_set(tmp_path: Path) -> None:
    [(label, parameters, directory)] = plan_runs([{"modes": ["code"]}], tmp_path / "out")
    assert (label, directory) == ("", tmp_path / "out")
    assert parameters == {"modes": ["code"], "output_dir": str(tmp_path / "out")}
    plan = plan_runs([{"label": "fast"}, {}], tmp_path)
    assert [(label, directory) for label, _, directory in plan] == [
        ("fast", tmp_path / "fast"), ("run-2", tmp_path / "run-2")]
    with pytest.raises(UsageError, match="two parameter sets are labelled 'a'"):
        plan_runs([{"label": "a"}, {"label": "a"}], tmp_path)
    with pytest.raises(UsageError, match=r"label '\.\./x' cannot name a folder"):
        plan_runs([{"label": "../x"}, {}], tmp_path)


def test_prefixed_output_marks_every_line() -> None:
    lines: list[str] = []

    class Sink:
        def write(self, text: str) -> int:
            lines.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    stream = _Prefixed(Sink(), "[a] ")
    stream.write("one\ntw")
    stream.write("o\nthree\n")
    assert "".join(lines) == "[a] one\n[a] two\n[a] three\n"


def test_the_notebook_ships_with_the_source_tree() -> None:
    notebook = json.loads(default_notebook().read_text())
    tagged = [c for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1
    assert all(not c.get("outputs") for c in notebook["cells"] if c["cell_type"] == "code")
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "-p", "modes", "code", "-p", "colour", "red",
                 "-o", str(tmp_path)]) == 2
    assert "the notebook has no parameter 'colour'" in capsys.readouterr().err
    assert main(["eval", "--notebook", str(tmp_path / "none.ipynb")]) == 2
    assert "notebook" in capsys.readouterr().err and not list(tmp_path.iterdir())
    with pytest.raises(SystemExit):
        main(["eval", "--modes", "fast"])


class FakePapermill:
    """Stands in for the papermill module: records the call, writes nothing."""

    class PapermillExecutionError(Exception):
        def __init__(self, exec_count: int, ename: str, evalue: str) -> None:
            super().__init__(evalue)
            self.exec_count, self.ename, self.evalue = exec_count, ename, evalue

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[dict[str, Any]] = []

    def execute_notebook(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error


def test_the_notebook_has_the_documented_parameters() -> None:
    notebook = json.loads(default_notebook().read_text())
    [cell] = [c for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assigned = {line.split(" = ")[0] for line in cell["source"] if " = " in line}
    assert assigned == NAMES


CELL = {"model": "scripted", "mode": "code", "runs": 6, "succeeded": 5, "success_rate": 5 / 6,
        "ci_low": 0.4365, "ci_high": 0.9699, "k": 3, "pass_at_1": 0.833, "pass_at_k": 1.0,
        "steps": 12, "tool_calls": 6, "sub_calls": 9, "tool_result_bytes": 1234,
        "request_bytes": 56789, "tokens": 14000, "token_source": "estimate",
        "seconds_per_step": 0.5}


class WritingPapermill(FakePapermill):
    """A papermill whose notebook 'runs' by writing a summary with one cell."""

    def inspect_notebook(self, path: str) -> dict[str, Any]:
        return dict.fromkeys(NAMES)

    def execute_notebook(self, *args: Any, **kwargs: Any) -> None:
        super().execute_notebook(*args, **kwargs)
        Path(kwargs["parameters"]["output_dir"], "summary.json").write_text(json.dumps(
            {"all_succeeded": False, "cells": [CELL]}))


def test_flags_set_parameters_and_cells_are_summarised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake = WritingPapermill()
    monkeypatch.setattr("dsh_jupyter.evaluation.command._import_papermill", lambda: fake)
    argv = ["eval", "--tasks", "mypkg.tasks:TASKS", "--only", "a", "b", "--presentations",
            "native", "code", "--models", "scripted", "openai:m", "--repeats", "3",
            "-o", str(tmp_path), "-q"]
    assert main(argv) == 0
    assert fake.calls[0]["parameters"] == {
        "task_set": "mypkg.tasks:TASKS", "tasks": ["a", "b"], "modes": ["native", "code"],
        "models": ["scripted", "openai:m"], "repeats": 3, "output_dir": str(tmp_path)}
    printed = capsys.readouterr().out
    assert ("scripted/code: 5/6 succeeded (83%, 95% CI 44%-97%), pass@1 0.83, pass@3 1.00, "
            "12 steps, 6 tool calls, 9 sub-calls, 1,234 result bytes, 56,789 request bytes, "
            "14,000 tokens (estimated), 0.50 s/step") in printed
    # --require-success: every run; --min-success: every cell's rate.
    assert main([*argv, "--require-success"]) == 1
    assert main([*argv, "--min-success", "0.8"]) == 0
    assert main([*argv, "--min-success", "0.9"]) == 1
    assert "scripted/code: success rate 83% is below --min-success 90%" in \
        capsys.readouterr().out
    assert main([*argv, "--min-success", "2"]) == 2
    assert main([*argv, "--repeats", "0"]) == 2


def test_a_notebook_that_writes_no_results_failed(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text('{"all_succeeded": true, "modes": {}}')
    fake = FakePapermill()
    run = run_notebook(fake, default_notebook(), {"label": "x"}, tmp_path, cell_timeout=5.0)
    assert not run.ok and run.error == "the notebook wrote no summary.json"
    assert not (tmp_path / "summary.json").exists()
    assert fake.calls[0]["parameters"] == {"label": "x"}
    assert fake.calls[0]["execution_timeout"] == 5.0 and fake.calls[0]["stdout_file"] is None
    assert fake.calls[0]["extra_arguments"] == ["--IPKernelApp.log_level=CRITICAL"]
    assert describe(run) == ["FAILED: the notebook wrote no summary.json",
                             f"see {tmp_path / 'evaluation.ipynb'}"]


def test_failures_are_reported_not_raised(tmp_path: Path) -> None:
    cell = FakePapermill.PapermillExecutionError(4, "KeyError", "'nope'")
    run = run_notebook(FakePapermill(cell), default_notebook(), {}, tmp_path)
    assert run.error == "cell 4 raised KeyError: 'nope'"
    run = run_notebook(FakePapermill(RuntimeError("Kernel died")), default_notebook(), {},
                       tmp_path)
    assert run.error == "RuntimeError: Kernel died"
    assert run.to_json()["all_succeeded"] is None and run.to_json()["ok"] is False


def test_without_papermill_one_line_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "papermill", None)  # import papermill fails
    assert main(["eval", "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "dsh-jupyter eval: papermill is not installed: pip install 'dsh-jupyter[eval]'\n")
