"""Per-task checks: did the run do the task?

A check is a JSON object with a ``kind``; a task passes when every one of its
checks passes. Answer checks read the model's final answer; state checks compare
the world after the run with the world before it::

    {"kind": "answer_contains", "text": ["559.73"]}             # every string appears
    {"kind": "answer_contains", "text": ["ada"], "ignore_case": true}
    {"kind": "answer_matches", "pattern": "o-1001.*o-1010"}     # re.search, DOTALL
    {"kind": "rows", "table": "orders",                          # fields of given rows
     "rows": {"o-1001": {"status": "cancelled"}}}
    {"kind": "unchanged", "table": "orders", "ignore": ["o-1001"]}  # nothing else moved
    {"kind": "has_rows", "table": "messages",                   # rows the run added,
     "rows": [{"to": "ada@example.com"}], "added": 1}           # whatever their ids

``table`` names any table of the task set's world (:attr:`.World.tables`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NotRequired, TypeAlias

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from ..json_value import JsonValue
from .world import World

TableName: TypeAlias = str  # a table of the world: "customers", "orders", or a set's own
Scalar: TypeAlias = str | int | float | bool | None


@with_config(ConfigDict(extra="forbid"))
class AnswerContains(TypedDict):
    kind: Literal["answer_contains"]
    text: list[str]
    ignore_case: NotRequired[bool]


@with_config(ConfigDict(extra="forbid"))
class AnswerMatches(TypedDict):
    kind: Literal["answer_matches"]
    pattern: str


@with_config(ConfigDict(extra="forbid"))
class RowsHave(TypedDict):
    kind: Literal["rows"]
    table: TableName
    rows: dict[str, dict[str, Scalar]]


@with_config(ConfigDict(extra="forbid"))
class Unchanged(TypedDict):
    kind: Literal["unchanged"]
    table: TableName
    ignore: NotRequired[list[str]]


@with_config(ConfigDict(extra="forbid"))
class HasRows(TypedDict):
    kind: Literal["has_rows"]
    table: TableName
    rows: list[dict[str, Scalar | list[Scalar]]]
    added: NotRequired[int]


Check: TypeAlias = AnswerContains | AnswerMatches | RowsHave | Unchanged | HasRows


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckOutcome:
    """One check's verdict; ``detail`` says what was found (or missing)."""

    kind: str
    passed: bool
    detail: str

    def to_json(self) -> dict[str, JsonValue]:
        return {"kind": self.kind, "passed": self.passed, "detail": self.detail}


def run_checks(checks: Sequence[Check], *, answer: str | None, before: World,
               after: World) -> tuple[CheckOutcome, ...]:
    """Every check's outcome, in order."""
    return tuple(_run(check, answer, before, after) for check in checks)


def _run(check: Check, answer: str | None, before: World, after: World) -> CheckOutcome:
    kind = check["kind"]
    if check["kind"] == "answer_contains" or check["kind"] == "answer_matches":
        if answer is None:
            return CheckOutcome(kind=kind, passed=False, detail="no answer")
        if check["kind"] == "answer_contains":
            return _contains(check, answer)
        return _matches(check, answer)
    if check["kind"] == "rows":
        return _rows(check, after)
    if check["kind"] == "has_rows":
        return _has_rows(check, before, after)
    return _unchanged(check, before, after)


def _has_rows(check: HasRows, before: World, after: World) -> CheckOutcome:
    """Each wanted row matches some row of the table after the run (ids aside, so
    the order a model created them in does not matter); ``added``: exactly that
    many rows are new."""
    rows = list(after.table(check["table"]).values())
    missing = [want for want in check["rows"]
               if not any(all(row.get(k) == v for k, v in want.items()) for row in rows)]
    problems = [f"no {check['table']} row with {want}" for want in missing]
    if "added" in check:
        added = len(after.table(check["table"]).keys() - before.table(check["table"]).keys())
        if added != check["added"]:
            problems.append(f"{added} {check['table']} rows added, expected {check['added']}")
    if problems:
        return CheckOutcome(kind=check["kind"], passed=False, detail="; ".join(problems))
    return CheckOutcome(kind=check["kind"], passed=True,
                        detail=f"{len(check['rows'])} {check['table']} rows found")


def _contains(check: AnswerContains, answer: str) -> CheckOutcome:
    fold = check.get("ignore_case", False)
    haystack = answer.casefold() if fold else answer
    missing = [t for t in check["text"] if (t.casefold() if fold else t) not in haystack]
    if missing:
        return CheckOutcome(kind=check["kind"], passed=False,
                            detail="answer lacks " + ", ".join(map(repr, missing)))
    return CheckOutcome(kind=check["kind"], passed=True,
                        detail="answer has " + ", ".join(map(repr, check["text"])))


def _matches(check: AnswerMatches, answer: str) -> CheckOutcome:
    found = re.search(check["pattern"], answer, re.DOTALL)
    return CheckOutcome(kind=check["kind"], passed=found is not None,
                        detail=f"answer {'matches' if found else 'does not match'} "
                               f"/{check['pattern']}/")


def _rows(check: RowsHave, after: World) -> CheckOutcome:
    table = after.table(check["table"])
    problems: list[str] = []
    for row_id, fields in check["rows"].items():
        row = table.get(row_id)
        if row is None:
            problems.append(f"{check['table']}[{row_id}] is missing")
            continue
        for name, expected in fields.items():
            if row.get(name) != expected:
                problems.append(f"{check['table']}[{row_id}].{name} is {row.get(name)!r}, "
                                f"expected {expected!r}")
    if problems:
        return CheckOutcome(kind=check["kind"], passed=False, detail="; ".join(problems))
    return CheckOutcome(kind=check["kind"], passed=True,
                        detail=f"{len(check['rows'])} {check['table']} rows as expected")


def _unchanged(check: Unchanged, before: World, after: World) -> CheckOutcome:
    ignored = set(check.get("ignore", ()))
    old, new = before.table(check["table"]), after.table(check["table"])
    changed = sorted(row_id for row_id in old.keys() | new.keys()
                     if row_id not in ignored and old.get(row_id) != new.get(row_id))
    if changed:
        return CheckOutcome(kind=check["kind"], passed=False,
                            detail=f"{check['table']} changed: {', '.join(changed)}")
    return CheckOutcome(kind=check["kind"], passed=True,
                        detail=f"other {check['table']} rows unchanged")
