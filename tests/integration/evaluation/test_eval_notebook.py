"""The evaluation notebook, run for real: papermill, a notebook kernel, and fresh
kernels for the run_code programs. CI runs this; it takes ~10-20 s."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_jupyter.cli import main
from dsh_jupyter.evaluation import load_task_set, read_records, read_summary

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]


def test_dsh_jupyter_eval_runs_the_notebook(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The default run, as CI makes it: the office set in three presentations."""
    out = tmp_path / "results"
    assert main(["eval", "-o", str(out), "--min-success", "0.8", "--cell-timeout", "90"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"find-todos +scripted +code +ok", printed)  # per-run progress lines
    assert re.search(r"top-customer +scripted +native +FAILED", printed)
    assert "scripted/code: 23/24 succeeded (96%, 95% CI 80%-99%), pass@1 0.96, " in printed

    tasks = [t.id for t in load_task_set().tasks]
    records = read_records(out)
    modes = ("native", "code", "both")
    assert [(r.task, r.mode) for r in records] == [(t, m) for t in tasks for m in modes]
    failed = {(r.task, r.mode) for r in records if not r.success}
    assert failed == {("top-customer", "native"), ("best-seller", "native"),
                      ("restock-low", "native"), ("busiest-day", "code"),
                      ("team-expenses", "both")}
    for record in records:
        assert record.stop == "answered" and record.error is None
        assert record.model == "scripted" and record.token_source == "estimate"
        assert 2 <= record.steps <= 4 and record.tool_calls >= 1
        assert 0 < record.tool_result_bytes < record.request_bytes
        assert 0 < record.wall_seconds < 30
        if record.mode == "code":
            assert record.runtime == "kernel" and record.sub_calls >= 1
        elif record.mode == "native":
            assert record.runtime is None and record.sub_calls == 0

    summary = read_summary(out)
    assert summary["all_succeeded"] is False and summary["records"] == 3 * len(tasks)
    assert summary["parameters"]["runtime"] == "kernel"
    native, code, both = summary["cells"]
    assert (native["mode"], code["mode"], both["mode"]) == modes
    assert code["steps"] < native["steps"] and code["tool_calls"] < native["tool_calls"]
    assert code["tool_result_bytes"] * 5 < native["tool_result_bytes"]

    executed = json.loads((out / "evaluation.ipynb").read_text())
    outputs = [o for c in executed["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2
    assert (out / "plot.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "matrix.png").read_bytes()[:4] == b"\x89PNG"
    # Every run's session log, for dsh-jupyter export
    # (tests/integration/sessions/test_export.py runs one).
    logs = sorted(p.name for p in (out / "sessions").iterdir())
    assert logs == sorted(f"{r.task}.{r.mode}.0.jsonl" for r in records)
    first = json.loads((out / "sessions" / logs[0]).read_text().splitlines()[0])
    assert first["kind"] == "agent/run-start" and first["run_id"] == logs[0][:-len(".jsonl")]


def test_several_parameter_sets_and_a_failing_one(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    sets = tmp_path / "sets.json"
    sets.write_text(json.dumps([
        {"label": "quick", "runtime": "in-process", "tasks": ["ship-one-order"]},
        {"label": "broken", "tasks": ["no-such-task"]}]))
    out = tmp_path / "out"
    assert main(["eval", "--modes", "code", "--param-file", str(sets), "-o", str(out)]) == 1
    printed = capsys.readouterr().out
    assert re.search(r"\[quick\] ship-one-order +scripted +code +ok", printed)
    assert "[broken] FAILED: cell" in printed and "no task 'no-such-task'" in printed
    runs = json.loads((out / "runs.json").read_text())
    assert [(r["label"], r["ok"], r["all_succeeded"]) for r in runs] == [
        ("quick", True, True), ("broken", False, None)]
    assert [(r.task, r.mode, r.runtime) for r in read_records(out / "quick")] == [
        ("ship-one-order", "code", "in-process")]
    assert (out / "broken" / "evaluation.ipynb").is_file()


def test_quiet_prints_only_the_summary(tmp_path: Path) -> None:
    """-q from a shell: the summary lines, and nothing on stderr (the notebook kernel's
    "running over TCP without encryption" warning included)."""
    done = subprocess.run(
        [sys.executable, "-m", "dsh_jupyter.cli", "eval", "-q", "--tasks", "shop", "--only",
         "find-todos", "--modes", "code", "-p", "runtime", "in-process", "-o", str(tmp_path)],
        capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    assert done.stdout.splitlines() == [
        f"running evaluation.ipynb -> {tmp_path}", done.stdout.splitlines()[1],
        f"results in {tmp_path}"]
    assert done.stdout.splitlines()[1].startswith("scripted/code: 1/1 succeeded")
