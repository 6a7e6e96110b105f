"""Loading and validating task files, and the shipped task set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from evaluation_support import script_file, task_file

from dsh_jupyter.evaluation import (
    SHIPPED_TASKS,
    TaskSet,
    TaskSetError,
    load_task_set,
    progress_line,
    run_evaluation,
)

pytestmark = pytest.mark.timeout(30)


def test_the_shipped_set_has_recordings_for_every_mode(shipped: TaskSet) -> None:
    assert shipped.name == "shop" and shipped.path == SHIPPED_TASKS
    assert 5 <= len(shipped.tasks) <= 8
    for task in shipped.tasks:
        assert {"native", "code", "both", "discovery"} <= set(task.recorded), task.id
        assert all(path.is_file() for paths in task.recorded.values() for path in paths)
        assert task.checks
    assert len(shipped.world.orders) == 30 and len(shipped.world.customers) == 6
    assert "src/shop/report.py" in shipped.world.files


def test_select_keeps_the_order_given(shipped: TaskSet) -> None:
    chosen = shipped.select(["ship-one-order", "find-todos"])
    assert [t.id for t in chosen.tasks] == ["ship-one-order", "find-todos"]
    with pytest.raises(KeyError, match="no task 'nope' in 'shop'; tasks: summarise-readme"):
        shipped.task("nope")


def test_a_minimal_file_defaults_to_the_demo_files(tmp_path: Path) -> None:
    path = task_file(tmp_path, [{"id": "t", "prompt": "p", "checks": [
        {"kind": "answer_contains", "text": ["x"]}]}])
    loaded = load_task_set(path)
    assert loaded.world.files == {"a.txt": "alpha beta"}
    assert loaded.tasks[0].recorded == {}
    body = path.read_text().replace('"files": {"a.txt": "alpha beta"}, ', "")
    path.write_text(body)
    assert "src/util.py" in load_task_set(path).world.files


def test_recorded_scripts_resolve_next_to_the_file(tmp_path: Path) -> None:
    name = script_file(tmp_path, "t.code.json", [{"content": "x"}])
    path = task_file(tmp_path, [{"id": "t", "prompt": "p", "recorded": {"code": name},
                                 "checks": [{"kind": "answer_contains", "text": ["x"]}]}])
    assert load_task_set(path).tasks[0].recorded == {"code": ((tmp_path / name).resolve(),)}


@pytest.mark.parametrize(("task", "message"), [
    ({"id": "t", "prompt": "p", "checks": [{"kind": "nope"}]},
     "tasks.0.checks.0: Input tag 'nope' found using 'kind' does not match"),
    ({"id": "t", "prompt": "p", "checks": [{"kind": "answer_contains", "text": "x"}]},
     "tasks.0.checks.0.answer_contains.text: Input should be a valid list"),
    ({"id": "t", "prompt": "p", "checks": [{"kind": "rows", "table": "users", "rows": {}}]},
     "task 't': no table 'users' in the world; tables: customers, orders"),
    ({"id": "t", "prompt": "p", "checks": [], "extra": 1},
     "tasks.0.extra: Extra inputs are not permitted"),
    ({"id": "t", "prompt": "p", "checks": []}, "task 't' has no checks"),
    ({"id": "T 1", "prompt": "p", "checks": [{"kind": "answer_contains", "text": ["x"]}]},
     "task id 'T 1' must be lowercase"),
    ({"id": "t", "prompt": "p", "checks": [{"kind": "answer_matches", "pattern": "("}]},
     "bad pattern '\\('"),
    ({"id": "t", "prompt": "p", "recorded": {"code": "missing.json"},
      "checks": [{"kind": "answer_contains", "text": ["x"]}]},
     "recorded code responses 'missing.json' not found"),
    ({"id": "t", "prompt": "p", "recorded": {"fast": "x.json"},
      "checks": [{"kind": "answer_contains", "text": ["x"]}]},
     "recorded.fast.\\[key\\]: Input should be 'native', 'code', 'both' or 'discovery'"),
])
def test_bad_tasks_are_explained(tmp_path: Path, task: dict[str, Any], message: str) -> None:
    with pytest.raises(TaskSetError, match=message):
        load_task_set(task_file(tmp_path, [task]))


def test_file_level_problems(tmp_path: Path) -> None:
    good = {"id": "t", "prompt": "p", "checks": [{"kind": "answer_contains", "text": ["x"]}]}
    with pytest.raises(TaskSetError, match="appears twice"):
        load_task_set(task_file(tmp_path, [good, good]))
    with pytest.raises(TaskSetError, match="no tasks"):
        load_task_set(task_file(tmp_path, []))
    with pytest.raises(TaskSetError, match="format: Input should be 'dsh-jupyter-tasks/1'"):
        load_task_set(task_file(tmp_path, [good], format="v2"))
    with pytest.raises(TaskSetError, match="cannot read task file"):
        load_task_set(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(TaskSetError, match="is not JSON"):
        load_task_set(tmp_path / "bad.json")
    row = {"id": "o-1", "customer_id": "c", "date": "d", "status": "open", "total": 1}
    with pytest.raises(TaskSetError, match="orders has duplicate ids"):
        load_task_set(task_file(tmp_path, [good], world={"database": {"orders": [row, row]}}))
    with pytest.raises(TaskSetError, match="status: Input should be 'open', 'shipped'"):
        load_task_set(task_file(tmp_path, [good], world={"database": {"orders": [
            {**row, "status": "lost"}]}}))


async def test_the_shipped_discovery_recordings_replay(shipped: TaskSet) -> None:
    """Under discovery a request offers only run_code (search and describe are methods
    on ``tools``, not tools): the recordings expect exactly that, and every task
    succeeds."""
    evaluation = await run_evaluation(shipped, modes="discovery", runtime="in-process")
    assert evaluation.all_succeeded, [progress_line(r) for r in evaluation.records]
    assert all(r.sub_calls >= 1 for r in evaluation.records)
    for task in shipped.tasks:
        script = json.loads(task.recorded["discovery"][0].read_text(encoding="utf-8"))
        assert all(entry["expect_tools"] == ["run_code"] for entry in script
                   if "tool_calls" in entry), task.id
