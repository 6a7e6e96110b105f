"""Running tasks: one task per mode, the shipped set offline, and how failures show."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from evaluation_support import ChatServer, task_file

from dsh_jupyter.agent import AnthropicChatModel, ChatModel, ScriptedModel, run_agent
from dsh_jupyter.evaluation import (
    Task,
    TaskSet,
    World,
    load_task_set,
    progress_line,
    run_checks,
    run_evaluation,
    run_task,
    scripted_model,
    world_registry,
)
from dsh_jupyter.evaluation.runner import _model_row
from dsh_jupyter.evaluation.tasks import Mode
from dsh_jupyter.testing import InProcessRuntime

pytestmark = pytest.mark.timeout(60)

MULTI_CALL = ("longest-module", "find-todos", "open-order-total", "top-customer",
              "cancel-stale-orders")
SINGLE_CALL = ("summarise-readme", "ship-one-order")


def answering(text: str) -> ScriptedModel:
    return ScriptedModel([{"content": text}], name="stub")


async def test_one_task_in_each_mode(shipped: TaskSet) -> None:
    task = shipped.task("open-order-total")
    native = await run_task(task, "native", world=shipped.world,
                            model=scripted_model(task, "native"))
    code = await run_task(task, "code", world=shipped.world, model=scripted_model(task, "code"),
                          runtime=InProcessRuntime())
    assert native.success and code.success
    assert (native.steps, native.tool_calls, native.sub_calls) == (3, 2, 0)
    assert (code.steps, code.tool_calls, code.sub_calls) == (2, 1, 2)
    assert (native.runtime, code.runtime) == (None, "in-process")
    assert native.model == code.model == "scripted"
    assert native.stop == code.stop == "answered" and native.error is None
    assert [c.passed for c in code.checks] == [True]
    assert "559.73" in (code.answer or "")
    assert 0 < code.tool_result_bytes < native.tool_result_bytes
    assert native.tool_errors == code.tool_errors == 0
    assert code.tool_definition_bytes > 0 and native.tool_definition_bytes > 0
    assert native.request_bytes > native.tool_definition_bytes
    assert code.wall_seconds > 0 and code.prompt_tokens is None


async def test_the_shipped_set_succeeds_offline(shipped: TaskSet) -> None:
    seen: list[str] = []
    evaluation = await run_evaluation(shipped, runtime="in-process",
                                      on_record=lambda r: seen.append(f"{r.task}.{r.mode}"))
    assert evaluation.all_succeeded
    assert seen == [f"{t.id}.{m}" for t in shipped.tasks for m in ("native", "code")]
    records = {(r.task, r.mode): r for r in evaluation.records}
    for task in shipped.tasks:
        native, code = records[(task.id, "native")], records[(task.id, "code")]
        assert native.tool_errors == code.tool_errors == 0
        assert code.tool_calls == 1 and code.sub_calls >= 1 and native.sub_calls == 0
        assert code.steps <= native.steps
        if task.id in MULTI_CALL:
            assert code.tool_result_bytes < native.tool_result_bytes / 2, task.id
        else:
            # One call either way: code mode saves nothing and pays for the SDK.
            assert task.id in SINGLE_CALL
            assert code.tool_result_bytes == native.tool_result_bytes
            assert code.steps == native.steps
            assert code.request_bytes > native.request_bytes
    summary = evaluation.summary()
    assert [(s.mode, s.tasks, s.succeeded, s.steps, s.tool_calls, s.sub_calls)
            for s in summary] == [("native", 7, 7, 18, 21, 0), ("code", 7, 7, 14, 7, 21)]
    assert evaluation.parameters["runtime"] == "in-process"
    assert evaluation.parameters["tasks"] == [t.id for t in shipped.tasks]


@pytest.mark.parametrize("task_id", [t.id for t in load_task_set("shop").tasks])
async def test_recorded_code_answers_are_what_the_programs_returned(task_id: str) -> None:
    """The recordings are honest: each answer check also passes against the
    run_code output the model saw, so the program (not the script) found the facts."""
    shipped = load_task_set("shop")
    task = shipped.task(task_id)
    world = World.fresh(shipped.world)
    registry = world_registry(world)
    registry.mode = "code"
    registry.code_runtime = InProcessRuntime()
    result = await run_agent(registry, scripted_model(task, "code"), task.prompt)
    seen = "\n".join(str(m["content"]) for m in result.messages if m["role"] == "tool")
    assert "Error" not in seen
    answer_checks = [c for c in task.checks if c["kind"].startswith("answer_")]
    outcomes = run_checks(answer_checks, answer=seen, before=world, after=world)
    assert all(o.passed for o in outcomes), outcomes


async def test_a_wrong_answer_fails_its_check(shipped: TaskSet) -> None:
    task = shipped.task("open-order-total")
    record = await run_task(task, "native", world=shipped.world, model=answering("About $500."))
    assert not record.success and record.stop == "answered" and record.error is None
    assert record.checks[0].detail == "answer lacks '559.73'"
    assert record.steps == 1 and record.tool_calls == 0 and record.model == "stub"
    assert progress_line(record).endswith("(answer lacks '559.73')")
    assert " FAILED " in progress_line(record)


async def test_the_progress_line_shows_the_whole_model_label(shipped: TaskSet) -> None:
    task = shipped.task("open-order-total")
    record = await run_task(task, "native", world=shipped.world, model=answering("About $500."))
    label = "anthropic:claude-sonnet-4-5-20250929"
    line = progress_line(dataclasses.replace(record, model=label))
    assert f" {label} native " in line, line


async def test_state_checks_catch_a_claim_without_the_update(shipped: TaskSet) -> None:
    task = shipped.task("cancel-stale-orders")
    record = await run_task(task, "native", world=shipped.world,
                            model=answering("Cancelled o-1001, o-1010 and o-1011."))
    assert [c.passed for c in record.checks] == [False, True, True]
    assert record.checks[0].detail.startswith(
        "orders[o-1001].status is 'open', expected 'cancelled'")


async def test_model_errors_are_recorded(shipped: TaskSet) -> None:
    task = shipped.task("find-todos")
    model = ScriptedModel([{"tool_calls": [{"name": "list_files", "arguments": {}}]}])
    record = await run_task(task, "native", world=shipped.world, model=model)
    assert not record.success and record.stop == "model_error"
    assert (record.error or "").startswith("SCRIPT_EXHAUSTED: script 'scripted' has 1 responses")
    assert record.steps == 2 and record.tool_calls == 1


async def test_step_limit_is_a_failure(shipped: TaskSet) -> None:
    task = shipped.task("longest-module")
    record = await run_task(task, "native", world=shipped.world,
                            model=scripted_model(task, "native"), max_steps=2)
    assert not record.success and record.stop == "step_limit"
    assert record.error == "stopped: step_limit" and record.answer is None


async def test_tool_errors_are_counted(shipped: TaskSet) -> None:
    task = shipped.task("ship-one-order")
    program = ("try:\n    await tools.update_order({'order_id': 'o-9', 'status': 'shipped'})\n"
               "except ToolCallError as error:\n    print(error)\n"
               "return await tools.update_order({'order_id': 'o-1020', 'status': 'shipped'})")
    model = ScriptedModel([
        {"tool_calls": [{"name": "run_code", "arguments": {"code": program, "description": "x"}}]},
        {"content": "Done."}])
    record = await run_task(task, "code", world=shipped.world, model=model,
                            runtime=InProcessRuntime())
    assert record.success and record.tool_errors == 1 and record.sub_calls == 2


async def test_responses_can_be_recorded_and_replayed(shipped: TaskSet, tmp_path: Path) -> None:
    task = shipped.task("top-customer")
    first = await run_task(task, "code", world=shipped.world, model=scripted_model(task, "code"),
                           runtime=InProcessRuntime(), record_dir=tmp_path / "recorded")
    replay = ScriptedModel.from_file(tmp_path / "recorded" / "top-customer.code.json")
    again = await run_task(task, "code", world=shipped.world, model=replay,
                           runtime=InProcessRuntime())
    assert again.success and again.answer == first.answer
    assert (again.steps, again.sub_calls, again.tool_result_bytes) == (
        first.steps, first.sub_calls, first.tool_result_bytes)


async def test_a_factory_can_run_mode_both(tmp_path: Path) -> None:
    task_set = load_task_set(task_file(tmp_path, [{"id": "t", "prompt": "Say hi.", "checks": [
        {"kind": "answer_contains", "text": ["hi"]}]}]))
    models: list[ScriptedModel] = []

    def factory(task: Task, mode: Mode) -> ChatModel:
        models.append(ScriptedModel([{"content": "hi"}], name=f"{task.id}.{mode}"))
        return models[-1]

    runtime = InProcessRuntime()
    evaluation = await run_evaluation(task_set, modes="both", model=factory, runtime=runtime)
    # A factory is one row of the matrix, labelled by its name whatever its models are called.
    assert evaluation.all_succeeded and evaluation.records[0].model == "factory"
    assert "run_code" in models[0].requests[0].tool_names
    assert "read_file" in models[0].requests[0].tool_names
    assert evaluation.parameters["models"] == ["factory"]
    assert evaluation.parameters["runtime"] == "in-process"
    assert evaluation.records[0].runtime == "in-process"


async def test_bad_choices_are_refused(shipped: TaskSet) -> None:
    bare = dataclasses.replace(shipped, tasks=tuple(
        dataclasses.replace(t, recorded={}) if t.id == "find-todos" else t
        for t in shipped.tasks))
    with pytest.raises(ValueError, match="these have none: find-todos \\(native\\)"):
        await run_evaluation(bare, modes=["native"])
    with pytest.raises(ValueError, match="modes is empty"):
        await run_evaluation(shipped, modes=[])
    with pytest.raises(ValueError, match="unknown modes \\['fast'\\]"):
        await run_evaluation(shipped, modes=["fast"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="modes repeat"):
        await run_evaluation(shipped, modes=["code", "code"])
    with pytest.raises(ValueError, match="model must be 'scripted', 'openai', 'anthropic'"):
        await run_evaluation(shipped, models="gpt")
    with pytest.raises(ValueError, match="models repeat"):
        await run_evaluation(shipped, models=["scripted", "scripted"])
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        await run_evaluation(shipped, repeats=0)
    with pytest.raises(ValueError, match="runtime must be 'kernel', 'in-process'"):
        await run_evaluation(shipped, runtime="docker")  # type: ignore[arg-type]


def test_anthropic_model_from_the_environment(shipped: TaskSet,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_MODEL", "claude-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    row = _model_row("anthropic", shipped, ["native"])
    model = row.make(shipped.task("ship-one-order"), "native", 0)
    assert isinstance(model, AnthropicChatModel) and model.name == "claude-test"
    assert row.label == "anthropic:claude-test"
    named = _model_row("anthropic:claude-other", shipped, ["native"])
    assert named.make(shipped.task("ship-one-order"), "native", 0).name == "claude-other"


async def test_openai_model_from_the_environment(shipped: TaskSet, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    update = ("update_order", {"order_id": "o-1020", "status": "shipped"})
    replies: list[dict[str, Any]] = [{"calls": [update]}, {"content": "o-1020 is shipped."}]
    with ChatServer(replies) as server:
        monkeypatch.setenv("DSH_MODEL", "test-model")
        monkeypatch.setenv("DSH_MODEL_BASE_URL", server.base_url)
        monkeypatch.setenv("DSH_API_KEY", "sk-test")
        evaluation = await run_evaluation(shipped.select(["ship-one-order"]), modes=["native"],
                                          model="openai", record_dir=tmp_path)
    [record] = evaluation.records
    assert record.success and record.model == "openai:test-model"
    assert (record.prompt_tokens, record.completion_tokens) == (200, 20)
    assert (record.tokens, record.token_source) == (220, "server")
    assert len(record.step_seconds) == 2 and record.seconds_per_step > 0
    assert server.requests[0]["model"] == "test-model"
    assert evaluation.parameters["models"] == ["openai:test-model"]
    replay = ScriptedModel.from_file(tmp_path / "ship-one-order.native.json")
    again = await run_task(shipped.task("ship-one-order"), "native", world=shipped.world,
                           model=replay)
    assert again.success and again.answer == "o-1020 is shipped."


async def test_two_models_are_two_rows_with_their_own_recordings(tmp_path: Path) -> None:
    task_set = load_task_set(task_file(tmp_path, [{"id": "t", "prompt": "Say hi.", "checks": [
        {"kind": "answer_contains", "text": ["hi"]}]}]))

    def polite(task: Task, mode: Mode) -> ChatModel:
        return ScriptedModel([{"content": "hi there"}])

    def rude(task: Task, mode: Mode) -> ChatModel:
        return ScriptedModel([{"content": "go away"}])

    evaluation = await run_evaluation(task_set, modes=["native"], models=[polite, rude],
                                      repeats=2, runtime="in-process",
                                      record_dir=tmp_path / "recorded")
    assert [(r.model, r.repeat, r.success) for r in evaluation.records] == [
        ("polite", 0, True), ("polite", 1, True), ("rude", 0, False), ("rude", 1, False)]
    assert [(c.cell, c.succeeded, c.runs, c.pass_at_k) for c in evaluation.summary()] == [
        ("polite/native", 2, 2, 1.0), ("rude/native", 0, 2, 0.0)]
    assert sorted(str(p.relative_to(tmp_path / "recorded"))
                  for p in (tmp_path / "recorded").rglob("*.json")) == [
        "polite/t.native.1.json", "polite/t.native.json", "rude/t.native.1.json",
        "rude/t.native.json"]
