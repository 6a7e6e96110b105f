"""A user's own task set, in a module: its tools, its world and its tasks
(``load_task_set("custom_task_set:TASKS")`` in the tests)."""

from __future__ import annotations

from typing_extensions import TypedDict

from dsh_jupyter import ToolRegistry
from dsh_jupyter.evaluation import Task, TaskSet, World, WorldData


class Forecast(TypedDict):
    id: str
    sky: str
    high: int


def weather_tools(world: World) -> ToolRegistry:
    """Two tools over the world's ``forecasts`` and ``alerts`` tables."""
    registry = ToolRegistry()
    forecasts, alerts = world.table("forecasts"), world.table("alerts")

    @registry.tool
    async def forecast(city: str) -> Forecast:
        """Tomorrow's forecast for a city (lowercase name)."""
        row = forecasts[city]
        return Forecast(id=row["id"], sky=row["sky"], high=row["high"])

    @registry.tool
    async def raise_alert(city: str, text: str) -> str:
        """Publish a weather alert for a city."""
        alert_id = f"a-{len(alerts) + 1}"
        alerts[alert_id] = {"id": alert_id, "city": city, "text": text}
        return alert_id

    return registry


WORLD = WorldData(tables={"forecasts": ({"id": "oslo", "sky": "rain", "high": 14},
                                        {"id": "rome", "sky": "sun", "high": 31}),
                          "alerts": ()})
TASKS = TaskSet(
    name="weather", description="Two tasks over a forecast service.", world=WORLD,
    tools=weather_tools, tasks=(
        Task(id="oslo-sky", prompt="Will it rain in Oslo tomorrow?", favours="native",
             checks=({"kind": "answer_contains", "text": ["rain"], "ignore_case": True},)),
        Task(id="heat-alert", prompt="Raise a heat alert for every city above 30 degrees.",
             favours="code",
             checks=({"kind": "has_rows", "table": "alerts", "rows": [{"city": "rome"}],
                      "added": 1},))))


def make_tasks() -> TaskSet:
    """The same set from a function (``custom_task_set:make_tasks``)."""
    return TASKS
