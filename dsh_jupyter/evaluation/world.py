"""The world an evaluation task runs against: files and a tiny order database.

Each run gets its own :class:`World`, a copy of the task set's :class:`WorldData`,
so a task that writes cannot leak into the next one, and checks can compare the
state after the run with the state before it. :func:`world_registry` offers the
built-in sample file tools (:mod:`dsh_jupyter.demo.tools`) plus three database
tools::

    world = World.fresh(task_set.world)
    registry = world_registry(world)   # list_files, read_file, word_count,
                                       # find_customers, list_orders, update_order
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, get_args

from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from ..demo.tools import sample_registry
from ..errors import ToolError
from ..registry import ToolRegistry

OrderStatus: TypeAlias = Literal["open", "shipped", "cancelled"]
ORDER_STATUSES: tuple[str, ...] = get_args(OrderStatus)
TABLES = ("customers", "orders")


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
    """A task set's starting state (read-only; runs work on a :class:`World`)."""

    files: Mapping[str, str] = field(default_factory=dict)
    customers: tuple[Customer, ...] = ()
    orders: tuple[Order, ...] = ()


@dataclass(slots=True, kw_only=True)
class World:
    """The mutable state of one run: files by path, customers and orders by id."""

    files: dict[str, str]
    customers: dict[str, Customer]
    orders: dict[str, Order]

    @classmethod
    def fresh(cls, data: WorldData) -> World:
        return cls(files=dict(data.files),
                   customers={c["id"]: Customer(**c) for c in data.customers},
                   orders={o["id"]: Order(**o) for o in data.orders})

    def copy(self) -> World:
        return World(files=dict(self.files),
                     customers={k: Customer(**v) for k, v in self.customers.items()},
                     orders={k: Order(**v) for k, v in self.orders.items()})

    def table(self, name: str) -> Mapping[str, Mapping[str, object]]:
        """Rows of ``customers`` or ``orders`` by id (for checks)."""
        if name == "customers":
            return self.customers
        if name == "orders":
            return self.orders
        raise KeyError(f"no table {name!r}; tables: {', '.join(TABLES)}")


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
