"""Each check kind, passing and failing."""

from __future__ import annotations

import pytest

from dsh_jupyter.evaluation import World, WorldData, run_checks
from dsh_jupyter.evaluation.checks import Check
from dsh_jupyter.evaluation.world import Order

pytestmark = pytest.mark.timeout(30)

ORDERS = (Order(id="o-1", customer_id="c-1", date="2023-01-01", status="open", total=5.0),
          Order(id="o-2", customer_id="c-1", date="2024-01-01", status="open", total=7.5))


def worlds() -> tuple[World, World]:
    before = World.fresh(WorldData(orders=ORDERS))
    return before, before.copy()


def verdicts(checks: list[Check], answer: str | None = "The total is $12.50.",
             after_status: dict[str, str] | None = None) -> list[tuple[bool, str]]:
    before, after = worlds()
    for order_id, status in (after_status or {}).items():
        after.orders[order_id]["status"] = status  # type: ignore[typeddict-item]
    return [(o.passed, o.detail) for o in run_checks(checks, answer=answer, before=before,
                                                      after=after)]


def test_answer_contains() -> None:
    assert verdicts([{"kind": "answer_contains", "text": ["12.50", "total"]}]) == [
        (True, "answer has '12.50', 'total'")]
    assert verdicts([{"kind": "answer_contains", "text": ["12.50", "TOTAL", "euro"]}]) == [
        (False, "answer lacks 'TOTAL', 'euro'")]
    assert verdicts([{"kind": "answer_contains", "text": ["TOTAL"], "ignore_case": True}])[0][0]


def test_answer_matches_searches_across_lines() -> None:
    assert verdicts([{"kind": "answer_matches", "pattern": r"12\.50?(?!\d)"}])[0][0]
    assert verdicts([{"kind": "answer_matches", "pattern": r"o-1.*o-2"}],
                    answer="o-1\nthen o-2")[0][0]
    assert verdicts([{"kind": "answer_matches", "pattern": r"^13"}]) == [
        (False, "answer does not match /^13/")]


def test_answer_checks_fail_without_an_answer() -> None:
    assert verdicts([{"kind": "answer_contains", "text": ["x"]},
                     {"kind": "answer_matches", "pattern": "x"}], answer=None) == [
        (False, "no answer"), (False, "no answer")]


def test_rows_compare_fields_after_the_run() -> None:
    check: Check = {"kind": "rows", "table": "orders", "rows": {"o-1": {"status": "cancelled"}}}
    assert verdicts([check], after_status={"o-1": "cancelled"}) == [
        (True, "1 orders rows as expected")]
    assert verdicts([check]) == [
        (False, "orders[o-1].status is 'open', expected 'cancelled'")]
    missing: Check = {"kind": "rows", "table": "orders", "rows": {"o-9": {"status": "open"}}}
    assert verdicts([missing]) == [(False, "orders[o-9] is missing")]


def test_unchanged_ignores_the_rows_the_task_changes() -> None:
    check: Check = {"kind": "unchanged", "table": "orders", "ignore": ["o-1"]}
    assert verdicts([check], after_status={"o-1": "cancelled"}) == [
        (True, "other orders rows unchanged")]
    assert verdicts([check], after_status={"o-1": "cancelled", "o-2": "shipped"}) == [
        (False, "orders changed: o-2")]
    assert verdicts([{"kind": "unchanged", "table": "customers"}])[0][0]
