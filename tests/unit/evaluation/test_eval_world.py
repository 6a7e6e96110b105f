"""The evaluation world's tools, and that every run gets its own copy."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_jupyter import ToolCall
from dsh_jupyter.evaluation import TaskSet, World, world_registry

pytestmark = pytest.mark.timeout(30)


async def call(world: World, tool: str, /, **arguments: object) -> Any:
    """The tool's value, or its error code."""
    result = await world_registry(world).execute(
        ToolCall(call_id="t1", name=tool, arguments=dict(arguments)))
    return result.error.code if result.error is not None else result.value


async def test_database_tools(shipped: TaskSet) -> None:
    world = World.fresh(shipped.world)
    assert await call(world, "find_customers", name="ada") == [
        {"id": "c-01", "name": "Ada Lovelace", "country": "GB"}]
    assert len(await call(world, "find_customers", country="US")) == 3
    orders = await call(world, "list_orders", customer_id="c-01", status="open")
    assert [o["id"] for o in orders] == ["o-1025", "o-1029"]
    everything = await call(world, "list_orders")
    dates = [o["date"] for o in everything]
    assert len(dates) == 30 and dates == sorted(dates)
    updated = await call(world, "update_order", order_id="o-1001", status="cancelled")
    assert updated == {**world.orders["o-1001"], "status": "cancelled"}
    assert await call(world, "update_order", order_id="o-9", status="open") == "NOT_FOUND"
    assert await call(world, "update_order", order_id="o-1", status="lost") == "INVALID_ARGS"


async def test_file_tools_come_from_the_demo(shipped: TaskSet) -> None:
    world = World.fresh(shipped.world)
    names = sorted(world_registry(world).visible())
    assert names == ["find_customers", "list_files", "list_orders", "read_file",
                     "update_order", "word_count"]
    assert await call(world, "list_files", pattern="tests/*") == ["tests/test_orders.py"]


async def test_runs_do_not_share_state(shipped: TaskSet) -> None:
    first = World.fresh(shipped.world)
    await call(first, "update_order", order_id="o-1001", status="cancelled")
    assert World.fresh(shipped.world).orders["o-1001"]["status"] == "open"
    copy = first.copy()
    copy.orders["o-1001"]["status"] = "open"
    assert first.orders["o-1001"]["status"] == "cancelled"
    assert shipped.world.orders[0]["status"] == "open"
