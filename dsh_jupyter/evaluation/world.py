"""The world an evaluation task runs against: files and tables of rows.

Each run gets its own :class:`World`, a copy of the task set's :class:`WorldData`,
so a task that writes cannot leak into the next one, and checks can compare the
state after the run with the state before it. A *tool world* is any function
``(World) -> ToolRegistry`` (:data:`ToolWorld`); a task set names the one its
tasks use. :func:`world_registry`, the ``shop`` set's, offers the built-in
sample file tools (:mod:`dsh_jupyter.demo.tools`) plus three database tools::

    world = World.fresh(task_set.world)
    registry = world_registry(world)   # list_files, read_file, word_count,
                                       # find_customers, list_orders, update_order

A table is rows by ``id``; ``customers`` and ``orders`` are the shop's, and a
task set may bring any others (``World.tables``).
"""

from __future__ import annotations

import copy as _copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, cast, get_args

from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from ..demo.tools import sample_registry
from ..errors import ToolError
from ..registry import ToolRegistry

OrderStatus: TypeAlias = Literal["open", "shipped", "cancelled"]
ORDER_STATUSES: tuple[str, ...] = get_args(OrderStatus)
TABLES = ("customers", "orders")
Row: TypeAlias = Mapping[str, Any]


class Customer(TypedDict):
    id: str
    name: str
    country: str


class Order(TypedDict):
    id: str
    customer_id: str
    date: str
    status: OrderStatus
    total: float


@dataclass(frozen=True, slots=True, kw_only=True)
class WorldData:
    """A task set's starting state (read-only; runs work on a :class:`World`).
    ``tables`` holds further tables by name, each a sequence of rows with an ``id``."""

    files: Mapping[str, str] = field(default_factory=dict)
    customers: tuple[Customer, ...] = ()
    orders: tuple[Order, ...] = ()
    tables: Mapping[str, Sequence[Row]] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class World:
    """The mutable state of one run: files by path, and tables of rows by id."""

    files: dict[str, str]
    tables: dict[str, dict[str, dict[str, Any]]]

    @classmethod
    def fresh(cls, data: WorldData) -> World:
        tables = {name: {str(row["id"]): _copy.deepcopy(dict(row)) for row in rows}
                  for name, rows in data.tables.items()}
        tables["customers"] = {c["id"]: dict(c) for c in data.customers}
        tables["orders"] = {o["id"]: dict(o) for o in data.orders}
        return cls(files=dict(data.files), tables=tables)

    def copy(self) -> World:
        return World(files=dict(self.files), tables=_copy.deepcopy(self.tables))

    @property
    def customers(self) -> dict[str, Customer]:
        return cast(dict[str, Customer], self.tables["customers"])

    @property
    def orders(self) -> dict[str, Order]:
        return cast(dict[str, Order], self.tables["orders"])

    def table(self, name: str) -> dict[str, dict[str, Any]]:
        """Rows of table ``name`` by id (for tools and checks)."""
        try:
            return self.tables[name]
        except KeyError:
            raise KeyError(f"no table {name!r}; tables: {', '.join(sorted(self.tables))}"
                           ) from None


ToolWorld: TypeAlias = Callable[[World], ToolRegistry]
"""Builds the registry one run works with, its tools bound to that run's :class:`World`."""


def world_registry(world: World) -> ToolRegistry:
    """A native-mode registry over ``world``; set ``mode`` and ``code_runtime`` to taste."""
    registry = sample_registry(world.files)
    customers = world.customers
    orders = world.orders

    @registry.tool(is_concurrency_safe=lambda args: True)
    async def find_customers(name: str = "", country: str = "") -> list[Customer]:
        """Customers whose name contains `name` (case-insensitive) and, if given, whose
        two-letter country code is `country`. With no arguments: every customer."""
        wanted = name.casefold()
        return [Customer(**c) for c in customers.values()
                if wanted in c["name"].casefold() and (not country or c["country"] == country)]

    @registry.tool(is_concurrency_safe=lambda args: True)
    async def list_orders(customer_id: str | None = None,
                          status: OrderStatus | None = None) -> list[Order]:
        """Orders, oldest first; optionally only one customer's, and/or one status."""
        rows = [o for o in orders.values()
                if (customer_id is None or o["customer_id"] == customer_id)
                and (status is None or o["status"] == status)]
        return [Order(**o) for o in sorted(rows, key=lambda o: (o["date"], o["id"]))]

    @registry.tool
    async def update_order(order_id: str, status: OrderStatus) -> Order:
        """Set an order's status. Returns the updated order."""
        order = orders.get(order_id)
        if order is None:
            raise ToolError(f"no order with id {order_id!r}", code="NOT_FOUND")
        order["status"] = status
        return Order(**order)

    return registry
