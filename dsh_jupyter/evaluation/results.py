"""Result records, per-mode summaries, and the files they are written to.

An evaluation writes two files into its output directory:

- ``results.jsonl``: one :class:`TaskRecord` per task and mode, one JSON object a line;
- ``summary.json``: the parameters, one :class:`ModeSummary` per mode, and whether
  every task succeeded (``format`` is ``"dsh-jupyter-evaluation/1"``).
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ..json_value import JsonValue
from .checks import CheckOutcome

RESULTS_FORMAT = "dsh-jupyter-evaluation/1"
RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"


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

    def to_json(self) -> dict[str, JsonValue]:
        body: dict[str, JsonValue] = {f.name: getattr(self, f.name) for f in fields(self)}
        body["checks"] = [c.to_json() for c in self.checks]
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> TaskRecord:
        values = dict(body)
        values["checks"] = tuple(CheckOutcome(**c) for c in values.get("checks", ()))
        return cls(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeSummary:
    """Totals over every task run in one mode."""

    mode: str
    tasks: int
    succeeded: int
    steps: int
    tool_calls: int
    sub_calls: int
    tool_errors: int
    tool_result_bytes: int
    request_bytes: int
    wall_seconds: float

    @property
    def success_rate(self) -> float:
        return self.succeeded / self.tasks if self.tasks else 0.0

    def to_json(self) -> dict[str, JsonValue]:
        body: dict[str, JsonValue] = dict(asdict(self))
        body["success_rate"] = self.success_rate
        return body


def summarise(records: Iterable[TaskRecord]) -> dict[str, ModeSummary]:
    """One summary per mode, in the order the modes first appear."""
    by_mode: dict[str, list[TaskRecord]] = {}
    for record in records:
        by_mode.setdefault(record.mode, []).append(record)
    return {mode: ModeSummary(
        mode=mode, tasks=len(rows), succeeded=sum(r.success for r in rows),
        steps=sum(r.steps for r in rows), tool_calls=sum(r.tool_calls for r in rows),
        sub_calls=sum(r.sub_calls for r in rows), tool_errors=sum(r.tool_errors for r in rows),
        tool_result_bytes=sum(r.tool_result_bytes for r in rows),
        request_bytes=sum(r.request_bytes for r in rows),
        wall_seconds=sum(r.wall_seconds for r in rows)) for mode, rows in by_mode.items()}


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

    def summary(self) -> dict[str, ModeSummary]:
        return summarise(self.records)

    def summary_json(self) -> dict[str, JsonValue]:
        try:
            ours = version("dsh-jupyter")
        except PackageNotFoundError:
            ours = "unknown"
        return {"format": RESULTS_FORMAT, "task_set": self.task_set,
                "parameters": dict(self.parameters), "started": self.started,
                "wall_seconds": self.wall_seconds, "records": len(self.records),
                "all_succeeded": self.all_succeeded,
                "modes": {mode: s.to_json() for mode, s in self.summary().items()},
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
