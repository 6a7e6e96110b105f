"""The results files: one JSON line per task and mode, and a summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh_jupyter.evaluation import (
    Evaluation,
    TaskSet,
    read_records,
    read_summary,
    run_evaluation,
    summarise,
    write_results,
)
from dsh_jupyter.evaluation.results import RESULTS_FORMAT

pytestmark = pytest.mark.timeout(60)

RECORD_KEYS = {"task", "mode", "model", "runtime", "success", "stop", "answer", "error",
               "checks", "steps", "tool_calls", "sub_calls", "tool_errors",
               "tool_result_bytes", "context_bytes", "tool_definition_bytes", "request_bytes",
               "wall_seconds", "model_seconds", "prompt_tokens", "completion_tokens", "repeat",
               "tokens", "token_source", "step_seconds"}


@pytest.fixture
async def evaluation(shipped: TaskSet) -> Evaluation:
    chosen = shipped.select(["find-todos", "ship-one-order"])
    return await run_evaluation(chosen, runtime="in-process", label="unit")


async def test_results_jsonl_has_one_record_per_task_and_mode(evaluation: Evaluation,
                                                              tmp_path: Path) -> None:
    files = write_results(evaluation, tmp_path / "out")
    lines = files.results.read_text().splitlines()
    assert len(lines) == 4
    first = json.loads(lines[0])
    assert set(first) == RECORD_KEYS
    assert (first["task"], first["mode"], first["success"]) == ("find-todos", "native", True)
    assert first["checks"] == [{"kind": "answer_contains", "passed": True,
                                "detail": first["checks"][0]["detail"]}]
    assert read_records(tmp_path / "out") == list(evaluation.records)


async def test_summary_json(evaluation: Evaluation, tmp_path: Path) -> None:
    write_results(evaluation, tmp_path)
    summary = read_summary(tmp_path)
    assert summary["format"] == RESULTS_FORMAT and summary["task_set"] == "shop"
    assert summary["records"] == 4 and summary["all_succeeded"] is True
    assert summary["parameters"] == {
        "modes": ["native", "code"], "task_file": str(evaluation.parameters["task_file"]),
        "task_set": "shop", "tasks": ["find-todos", "ship-one-order"], "models": ["scripted"],
        "repeats": 1, "runtime": "in-process", "pool_size": 1, "max_steps": 12,
        "label": "unit"}
    assert [(c["model"], c["mode"]) for c in summary["cells"]] == [
        ("scripted", "native"), ("scripted", "code")]
    code = summary["cells"][1]
    assert (code["tasks"], code["runs"], code["succeeded"], code["success_rate"]) == (2, 2, 2, 1.0)
    assert (code["steps"], code["tool_calls"], code["sub_calls"]) == (4, 2, 7)
    assert (code["k"], code["pass_at_1"], code["pass_at_k"]) == (1, 1.0, 1.0)
    assert code["ci_low"] == pytest.approx(0.3424, abs=1e-4) and code["ci_high"] == 1.0
    assert code["token_source"] == "estimate" and code["tokens"] > 0
    assert summary["succeeded"] == 4
    assert set(summary["versions"]) == {"dsh-jupyter", "python"}
    assert summary["started"].endswith("+00:00") and summary["wall_seconds"] > 0


def test_summarise_totals_per_mode(evaluation: Evaluation) -> None:
    summary = summarise(evaluation.records)
    native = summary[0]
    rows = [r for r in evaluation.records if r.mode == "native"]
    assert native.tool_result_bytes == sum(r.tool_result_bytes for r in rows)
    assert native.request_bytes == sum(r.request_bytes for r in rows)
    assert summarise([]) == []


def test_an_empty_evaluation_has_not_succeeded() -> None:
    empty = Evaluation(task_set="x", parameters={}, records=(), started="", wall_seconds=0.0)
    assert not empty.all_succeeded
