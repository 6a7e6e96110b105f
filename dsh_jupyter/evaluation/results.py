"""Result records, per-cell summaries, and the files they are written to.

An evaluation runs a matrix: every model x presentation mode is a *cell*, and
every task runs ``repeats`` times in each. It writes two files:

- ``results.jsonl``: one :class:`TaskRecord` per run, one JSON object a line;
- ``summary.json``: the parameters, one :class:`CellSummary` per cell (success
  rate with its 95 % Wilson interval, pass@1 and pass@k, tokens, bytes, latency),
  and whether every run succeeded (``format`` is ``"dsh-jupyter-evaluation/2"``).
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal, TypeAlias

from ..json_value import JsonValue
from .checks import CheckOutcome
from .stats import mean_pass_at_k, wilson_interval

RESULTS_FORMAT = "dsh-jupyter-evaluation/2"
RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
TokenSource: TypeAlias = Literal["server", "estimate"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord:
    """One task run in one mode.

    ``success`` means the model answered (``stop == "answered"``) and every check
    passed. ``steps`` are model requests; ``tool_calls`` the calls the model made
    (``run_code`` counts as one); ``sub_calls`` the tool calls programs made;
    ``tool_errors`` failed calls and sub-calls. Bytes, from the run's accounting:
    ``tool_result_bytes`` tool output returned to the model, ``context_bytes``
    additional contexts, ``tool_definition_bytes`` the tool schemas plus SDK of
    the first request, ``request_bytes`` every request body summed (what the
    model read, counting the growing transcript each time).

    ``repeat`` numbers the runs of one task in one cell from 0. ``tokens`` is
    prompt plus completion tokens: the server's counts when it reported them
    for every request (``token_source == "server"``), else an estimate from the
    bytes sent and received (``"estimate"``, see
    :func:`~dsh_jupyter.agent.accounting.estimate_tokens`). ``step_seconds`` is
    each step's model latency.
    """

    task: str
    mode: str
    model: str
    runtime: str | None
    success: bool
    stop: str
    answer: str | None
    error: str | None
    checks: tuple[CheckOutcome, ...]
    steps: int
    tool_calls: int
    sub_calls: int
    tool_errors: int
    tool_result_bytes: int
    context_bytes: int
    tool_definition_bytes: int
    request_bytes: int
    wall_seconds: float
    model_seconds: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    repeat: int = 0
    tokens: int = 0
    token_source: TokenSource = "estimate"
    step_seconds: tuple[float, ...] = ()

    @property
    def seconds_per_step(self) -> float:
        """Mean model latency per step."""
        return sum(self.step_seconds) / len(self.step_seconds) if self.step_seconds else 0.0

    def to_json(self) -> dict[str, JsonValue]:
        body: dict[str, JsonValue] = {f.name: getattr(self, f.name) for f in fields(self)}
        body["checks"] = [c.to_json() for c in self.checks]
        body["step_seconds"] = list(self.step_seconds)
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> TaskRecord:
        values = dict(body)
        values["checks"] = tuple(CheckOutcome(**c) for c in values.get("checks", ()))
        values["step_seconds"] = tuple(values.get("step_seconds", ()))
        return cls(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class CellSummary:
    """Every run of one model in one presentation mode.

    ``runs`` = ``tasks`` x repeats; ``success_rate`` is ``succeeded / runs`` with its
    95 % Wilson interval ``ci_low``..``ci_high``; ``pass_at_1`` and ``pass_at_k``
    (``k``: the fewest runs any task had) are averaged over tasks (:mod:`.stats`).
    Counts and bytes are totals; ``tokens`` too, labelled ``token_source``
    (``"server"``, ``"estimate"``, or ``"mixed"`` when only some runs had server
    counts); ``seconds_per_step`` is the mean model latency of a step.
    """

    model: str
    mode: str
    runs: int
    tasks: int
    succeeded: int
    ci_low: float
    ci_high: float
    k: int
    pass_at_1: float
    pass_at_k: float
    steps: int
    tool_calls: int
    sub_calls: int
    tool_errors: int
    tool_result_bytes: int
    request_bytes: int
    tokens: int
    token_source: str
    seconds_per_step: float
    wall_seconds: float

    @property
    def cell(self) -> str:
        return f"{self.model}/{self.mode}"

    @property
    def success_rate(self) -> float:
        return self.succeeded / self.runs if self.runs else 0.0

    @property
    def tokens_per_run(self) -> float:
        return self.tokens / self.runs if self.runs else 0.0

    def to_json(self) -> dict[str, JsonValue]:
        body: dict[str, JsonValue] = dict(asdict(self))
        body["success_rate"] = self.success_rate
        body["tokens_per_run"] = self.tokens_per_run
        return body


def summarise(records: Iterable[TaskRecord]) -> list[CellSummary]:
    """One summary per (model, mode) cell, in the order the cells first appear."""
    by_cell: dict[tuple[str, str], list[TaskRecord]] = {}
    for record in records:
        by_cell.setdefault((record.model, record.mode), []).append(record)
    return [_cell_summary(model, mode, rows) for (model, mode), rows in by_cell.items()]


def _cell_summary(model: str, mode: str, rows: Sequence[TaskRecord]) -> CellSummary:
    per_task: dict[str, list[bool]] = {}
    for r in rows:
        per_task.setdefault(r.task, []).append(r.success)
    counts = [(len(runs), sum(runs)) for runs in per_task.values()]
    k = min(n for n, _ in counts)
    succeeded = sum(r.success for r in rows)
    low, high = wilson_interval(succeeded, len(rows))
    sources = {r.token_source for r in rows}
    steps = [s for r in rows for s in r.step_seconds]
    return CellSummary(
        model=model, mode=mode, runs=len(rows), tasks=len(per_task), succeeded=succeeded,
        ci_low=low, ci_high=high, k=k, pass_at_1=mean_pass_at_k(counts, 1),
        pass_at_k=mean_pass_at_k(counts, k),
        steps=sum(r.steps for r in rows), tool_calls=sum(r.tool_calls for r in rows),
        sub_calls=sum(r.sub_calls for r in rows), tool_errors=sum(r.tool_errors for r in rows),
        tool_result_bytes=sum(r.tool_result_bytes for r in rows),
        request_bytes=sum(r.request_bytes for r in rows), tokens=sum(r.tokens for r in rows),
        token_source=sources.pop() if len(sources) == 1 else "mixed",
        seconds_per_step=sum(steps) / len(steps) if steps else 0.0,
        wall_seconds=sum(r.wall_seconds for r in rows))


@dataclass(frozen=True, slots=True, kw_only=True)
class Evaluation:
    """A finished evaluation: what was asked (``parameters``) and one record per
    task and mode, in run order."""

    task_set: str
    parameters: Mapping[str, JsonValue]
    records: tuple[TaskRecord, ...]
    started: str
    wall_seconds: float

    @property
    def all_succeeded(self) -> bool:
        return bool(self.records) and all(r.success for r in self.records)

    def summary(self) -> list[CellSummary]:
        return summarise(self.records)

    def summary_json(self) -> dict[str, JsonValue]:
        try:
            ours = version("dsh-jupyter")
        except PackageNotFoundError:
            ours = "unknown"
        return {"format": RESULTS_FORMAT, "task_set": self.task_set,
                "parameters": dict(self.parameters), "started": self.started,
                "wall_seconds": self.wall_seconds, "records": len(self.records),
                "succeeded": sum(r.success for r in self.records),
                "all_succeeded": self.all_succeeded,
                "cells": [cell.to_json() for cell in self.summary()],
                "versions": {"dsh-jupyter": ours, "python": platform.python_version()}}


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultFiles:
    results: Path
    summary: Path


def write_results(evaluation: Evaluation, directory: str | Path) -> ResultFiles:
    """Write ``results.jsonl`` and ``summary.json`` into ``directory`` (created)."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    files = ResultFiles(results=folder / RESULTS_FILE, summary=folder / SUMMARY_FILE)
    lines = (json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in evaluation.records)
    files.results.write_text("".join(lines), encoding="utf-8")
    files.summary.write_text(json.dumps(evaluation.summary_json(), ensure_ascii=False,
                                        indent=2) + "\n", encoding="utf-8")
    return files


def read_records(directory: str | Path) -> list[TaskRecord]:
    """The records of ``results.jsonl`` in ``directory``."""
    text = (Path(directory) / RESULTS_FILE).read_text(encoding="utf-8")
    return [TaskRecord.from_json(json.loads(line)) for line in text.splitlines() if line.strip()]


def read_summary(directory: str | Path) -> dict[str, Any]:
    """``summary.json`` in ``directory``, as JSON."""
    body: dict[str, Any] = json.loads((Path(directory) / SUMMARY_FILE).read_text("utf-8"))
    return body


def records_by_key(records: Sequence[TaskRecord]) -> dict[tuple[str, str], TaskRecord]:
    """``{(task, mode): record}``."""
    return {(r.task, r.mode): r for r in records}
