"""The shipped office task set and the matrix on its recorded responses: size,
determinism, the deliberate failures, and where each presentation wins."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from dsh_jupyter.agent import ChatModel, ScriptedModel, run_agent
from dsh_jupyter.evaluation import (
    Evaluation,
    Task,
    TaskRecord,
    TaskSet,
    TaskSetError,
    World,
    load_task_set,
    run_checks,
    run_evaluation,
    scripted_model,
)
from dsh_jupyter.evaluation.report import save_matrix_plot
from dsh_jupyter.evaluation.tasks import Mode
from dsh_jupyter.testing import InProcessRuntime

pytestmark = pytest.mark.timeout(120)

PRESENTATIONS: tuple[Mode, ...] = ("native", "code", "both")
# What the recordings hold on purpose: (task, mode) -> outcome of each sample in turn.
FAILURES = {("top-customer", "native"): [False, True, True],
            ("best-seller", "native"): [False, False, True],
            ("restock-low", "native"): [False, True, True],
            ("busiest-day", "code"): [False, True, True],
            ("team-expenses", "both"): [False, True, True]}


@pytest.fixture(scope="module")
def office() -> TaskSet:
    return load_task_set("office")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def matrix(office: TaskSet) -> Evaluation:
    """Every task three times in every presentation (the samples replay in turn).
    Once per module: building 31 tools for each of 216 runs takes ~20 s of CPU."""
    return await run_evaluation(office, modes=PRESENTATIONS, repeats=3, runtime="in-process")


def test_the_default_set_is_the_office_set(office: TaskSet) -> None:
    assert load_task_set().name == office.name == "office"
    assert len(office.tasks) >= 20
    registry = office.tools(World.fresh(office.world))
    assert len(registry.visible()) >= 30
    favours = {t.favours for t in office.tasks}
    assert favours == {"native", "code"}
    for task in office.tasks:
        assert set(PRESENTATIONS) <= set(task.recorded), task.id  # discovery may join
        assert task.checks


@pytest.mark.asyncio(loop_scope="module")
async def test_the_matrix_with_repeats(matrix: Evaluation, office: TaskSet) -> None:
    records = matrix.records
    assert len(records) == len(office.tasks) * 3 * 3
    for record in records:
        expected = FAILURES.get((record.task, record.mode), [True] * 3)[record.repeat]
        assert record.success is expected, (record.task, record.mode, record.repeat)
        assert record.token_source == "estimate" and record.tokens > 0
        assert len(record.step_seconds) == record.steps
    cells = {c.mode: c for c in matrix.summary()}
    assert list(cells) == list(PRESENTATIONS)
    n = len(office.tasks)
    for mode, cell in cells.items():
        wrong = sum(outcome is False for (_, m), runs in FAILURES.items() if m == mode
                    for outcome in runs)
        assert (cell.runs, cell.tasks, cell.k, cell.succeeded) == (3 * n, n, 3, 3 * n - wrong)
        assert cell.ci_low < cell.success_rate < cell.ci_high <= 1.0
        assert cell.pass_at_k == 1.0  # every failing task has a sample that succeeds
        assert cell.pass_at_1 == pytest.approx(cell.success_rate)
    # best-seller native: 1 of 3 samples right, so its pass@2 is 1 - C(2,2)/C(3,2) = 2/3.
    assert cells["native"].pass_at_1 == pytest.approx((n - 1 / 3 - 2 / 3 - 1 / 3) / n)


@pytest.mark.asyncio(loop_scope="module")
async def test_replays_are_deterministic(matrix: Evaluation, office: TaskSet) -> None:
    chosen = ["order-status", "best-seller", "busiest-day", "team-expenses", "book-meeting"]
    again = await run_evaluation(office.select(chosen), modes=PRESENTATIONS, repeats=3,
                                 runtime="in-process")

    def stable(records: Sequence[TaskRecord]) -> list[TaskRecord]:
        return [dataclasses.replace(r, wall_seconds=0.0, model_seconds=0.0, step_seconds=())
                for r in records if r.task in chosen]

    assert stable(again.records) == stable(matrix.records)


@pytest.mark.asyncio(loop_scope="module")
async def test_native_wins_a_lookup_and_code_wins_an_aggregation(matrix: Evaluation) -> None:
    runs = {(r.task, r.mode): r for r in matrix.records if r.repeat == 0}
    # One direct call: the same steps, and a program only adds the SDK to every request.
    native, code = runs[("order-status", "native")], runs[("order-status", "code")]
    assert native.steps == code.steps == 2 and native.success and code.success
    assert native.request_bytes < code.request_bytes and native.tokens < code.tokens
    # Seven calls in three dependent rounds: one program instead of four steps.
    native, code = runs[("notify-attendees", "native")], runs[("notify-attendees", "code")]
    assert (native.steps, code.steps) == (4, 2) and native.success and code.success
    assert code.request_bytes < native.request_bytes and code.tokens < native.tokens
    assert code.tool_result_bytes * 10 < native.tool_result_bytes
    # Both: takes the direct call for a lookup and a program for an aggregation.
    assert runs[("order-status", "both")].sub_calls == 0
    assert runs[("best-seller", "both")].sub_calls > 10


@pytest.mark.parametrize(("task_id", "mode"), [
    (t.id, mode) for mode in ("code", "discovery") for t in load_task_set("office").tasks
    if (t.id, mode) not in FAILURES])
async def test_recorded_code_answers_are_what_the_programs_returned(task_id: str,
                                                                   mode: Mode) -> None:
    """Honest recordings: the answer checks of each code (and discovery) recording that
    succeeds pass against the run_code output the model saw, so the program found the
    facts."""
    office = load_task_set("office")
    task = office.task(task_id)
    world = World.fresh(office.world)
    registry = office.tools(world)
    registry.mode = mode
    registry.code_runtime = InProcessRuntime()
    result = await run_agent(registry, scripted_model(task, mode), task.prompt)
    seen = "\n".join(str(m["content"]) for m in result.messages if m["role"] == "tool")
    answer_checks = [c for c in task.checks if c["kind"].startswith("answer_")]
    outcomes = run_checks(answer_checks, answer=seen, before=world, after=world)
    assert all(o.passed for o in outcomes), outcomes


async def test_discovery_succeeds_and_sends_fewer_bytes_a_step_than_code(
        office: TaskSet) -> None:
    """Discovery on its recordings: every task succeeds, the same way twice; a request
    carries the index (~1.8 KB for 31 tools) instead of the SDK, so each step costs far
    fewer bytes than in code mode, although most runs spend a step looking tools up."""
    first = await run_evaluation(office, modes=("code", "discovery"), runtime="in-process")
    again = await run_evaluation(office, modes="discovery", runtime="in-process")

    def stable(records: Sequence[TaskRecord]) -> list[TaskRecord]:
        return [dataclasses.replace(r, wall_seconds=0.0, model_seconds=0.0, step_seconds=())
                for r in records if r.mode == "discovery"]

    assert stable(first.records) == stable(again.records)
    runs = stable(first.records)
    assert len(runs) == len(office.tasks)
    assert all(r.success and r.tool_errors == 0 and r.sub_calls >= 1 for r in runs)
    # A lookup the index names outright is one program; the rest look up first.
    assert {r.task for r in runs if r.steps == 2} == {
        "order-status", "exchange-rate", "summarise-readme", "ship-one-order", "cancel-event"}
    assert all(r.steps == 3 for r in runs if r.task not in {
        "order-status", "exchange-rate", "summarise-readme", "ship-one-order", "cancel-event"})
    cells = {c.mode: c for c in first.summary()}
    code, discovery = cells["code"], cells["discovery"]
    assert discovery.succeeded == discovery.runs == len(office.tasks)
    assert discovery.steps > code.steps
    # About 4.9 KB a step against 14.4 KB: the 2 KB index against the 31 tools' SDK.
    assert discovery.request_bytes / discovery.steps < code.request_bytes / code.steps / 2
    assert discovery.request_bytes < code.request_bytes


async def test_a_task_set_from_a_module() -> None:
    mine = load_task_set("custom_task_set:TASKS")
    assert load_task_set("custom_task_set:make_tasks") is mine
    replies: dict[str, list[dict[str, Any]]] = {"oslo-sky": [{"tool_calls": [{"name": "forecast",
                                             "arguments": {"city": "oslo"}}]},
                            {"content": "Yes, rain is forecast in Oslo."}],
               "heat-alert": [{"tool_calls": [{"name": "run_code", "arguments": {
                   "code": "for city in ('oslo', 'rome'):\n"
                           "    f = await tools.forecast({'city': city})\n"
                           "    if f['high'] > 30:\n"
                           "        await tools.raise_alert({'city': city, 'text': 'heat'})",
                   "description": "Heat alerts"}}]}, {"content": "Alerted Rome."}]}

    def recorded(task: Task, mode: Mode) -> ChatModel:
        return ScriptedModel(replies[task.id], check_calls=False)

    evaluation = await run_evaluation(mine, modes=["both"], models=recorded, repeats=2,
                                      runtime="in-process")
    assert evaluation.task_set == "weather" and evaluation.all_succeeded
    assert [(r.task, r.repeat, r.sub_calls) for r in evaluation.records] == [
        ("oslo-sky", 0, 0), ("oslo-sky", 1, 0), ("heat-alert", 0, 3), ("heat-alert", 1, 3)]
    with pytest.raises(TaskSetError, match="custom_task_set has no NOPE"):
        load_task_set("custom_task_set:NOPE")
    with pytest.raises(TaskSetError, match="is a WorldData, not a TaskSet"):
        load_task_set("custom_task_set:WORLD")
    with pytest.raises(TaskSetError, match="no task set 'nowhere'"):
        load_task_set("nowhere")


@pytest.mark.asyncio(loop_scope="module")
async def test_the_matrix_plot_is_written(matrix: Evaluation, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = save_matrix_plot(matrix.summary(), tmp_path / "matrix.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_the_shipped_data_is_what_the_generator_writes(tmp_path: Path) -> None:
    """bench/office_tasks.py is the source of the office set: its output is checked in."""
    script = Path(__file__).resolve().parents[3] / "bench" / "office_tasks.py"
    spec = importlib.util.spec_from_file_location("office_tasks", script)
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.main(tmp_path / "office")
    shipped = load_task_set("office").path
    assert shipped is not None
    written = sorted(p.relative_to(tmp_path / "office") for p in (tmp_path / "office").rglob("*")
                     if p.is_file())
    assert written == sorted(p.relative_to(shipped.parent) for p in shipped.parent.rglob("*")
                             if p.is_file())
    for relative in written:
        assert (tmp_path / "office" / relative).read_bytes() == \
            (shipped.parent / relative).read_bytes(), relative
