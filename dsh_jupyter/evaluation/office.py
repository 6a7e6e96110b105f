"""The ``office`` tool world: files, orders, products, people, calendar, tickets,
messages and expenses, in memory: 31 tools over the tables of a :class:`~.world.World`.

The shipped ``office`` task set (``data/office/tasks.json``) names
:func:`office_registry` as its tools. It extends the shop's six tools
(:func:`~.world.world_registry`) with lookups by id (where one call answers a
question, and a program is overhead) and listings that many tasks must combine
(where a program saves round trips)::

    world = World.fresh(load_task_set("office").world)
    registry = office_registry(world)
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias, cast

from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from ..errors import ToolError
from ..registry import ToolRegistry
from .world import Customer, Order, World, world_registry

TicketStatus: TypeAlias = Literal["open", "resolved", "closed"]


class OrderItem(TypedDict):
    id: str
    order_id: str
    sku: str
    quantity: int
    price: float


class Product(TypedDict):
    id: str
    name: str
    category: str
    price: float
    stock: int
    reorder_level: int


class Person(TypedDict):
    id: str
    name: str
    team: str
    email: str
    role: str


class Team(TypedDict):
    id: str
    name: str
    lead: str


class Event(TypedDict):
    id: str
    title: str
    date: str
    start: str
    end: str
    attendees: list[str]
    status: Literal["confirmed", "cancelled"]


class Slot(TypedDict):
    start: str
    end: str


class Ticket(TypedDict):
    id: str
    title: str
    component: str
    status: TicketStatus
    priority: Literal["low", "normal", "high"]
    assignee: str | None
    resolution: str | None


class Message(TypedDict):
    id: str
    to: str
    subject: str
    body: str


class Expense(TypedDict):
    id: str
    person_id: str
    date: str
    amount: float
    currency: str
    category: str


class Match(TypedDict):
    path: str
    line: int
    text: str


class Written(TypedDict):
    path: str
    lines: int


TODAY = "2024-06-14"
DAY_START, DAY_END = "09:00", "17:00"


def office_registry(world: World) -> ToolRegistry:
    """The shop's tools plus 25 more over ``world``'s office tables."""
    registry = world_registry(world)
    files = world.files
    for name in ("order_items", "products", "people", "teams", "events", "tickets",
                 "messages", "expenses", "rates"):
        world.tables.setdefault(name, {})
    tables = world.tables

    def row(table: str, row_id: str, what: str) -> dict[str, Any]:
        found = tables[table].get(row_id)
        if found is None:
            raise ToolError(f"no {what} with id {row_id!r}", code="NOT_FOUND")
        return found

    @registry.tool(is_concurrency_safe=_read_only)
    async def today() -> str:
        """Today's date (YYYY-MM-DD)."""
        return TODAY

    @registry.tool(is_concurrency_safe=_read_only)
    async def search_files(query: str) -> list[Match]:
        """Lines containing `query` (case-sensitive) in every file, by path and line."""
        return [Match(path=path, line=number, text=text.strip())
                for path in sorted(files)
                for number, text in enumerate(files[path].splitlines(), 1) if query in text]

    @registry.tool
    async def write_file(path: str, text: str) -> Written:
        """Create or replace a text file."""
        files[path] = text
        return Written(path=path, lines=len(text.splitlines()))

    @registry.tool(is_concurrency_safe=_read_only)
    async def get_customer(customer_id: str) -> Customer:
        """One customer by id."""
        return cast(Customer, dict(row("customers", customer_id, "customer")))

    @registry.tool(is_concurrency_safe=_read_only)
    async def get_order(order_id: str) -> Order:
        """One order by id."""
        return cast(Order, dict(row("orders", order_id, "order")))

    @registry.tool(is_concurrency_safe=_read_only)
    async def list_order_items(order_id: str) -> list[OrderItem]:
        """The items (product sku, quantity, unit price) of one order."""
        row("orders", order_id, "order")
        return [cast(OrderItem, dict(i)) for i in tables["order_items"].values()
                if i["order_id"] == order_id]

    @registry.tool(is_concurrency_safe=_read_only)
    async def list_products(category: str | None = None) -> list[Product]:
        """Products, by sku; optionally one category's."""
        return [cast(Product, dict(p)) for p in tables["products"].values()
                if category is None or p["category"] == category]

    @registry.tool(is_concurrency_safe=_read_only)
    async def get_product(sku: str) -> Product:
        """One product by sku (its id)."""
        return cast(Product, dict(row("products", sku, "product")))

    @registry.tool
    async def restock(sku: str, quantity: int) -> Product:
        """Add `quantity` units to a product's stock. Returns the product."""
        if quantity <= 0:
            raise ToolError("quantity must be positive", code="INVALID_ARGS")
        product = row("products", sku, "product")
        product["stock"] += quantity
        return cast(Product, dict(product))

    @registry.tool(is_concurrency_safe=_read_only)
    async def find_people(name: str = "", team: str = "") -> list[Person]:
        """Colleagues whose name contains `name` (case-insensitive), optionally only
        one team's (a team id such as `t-platform`)."""
        wanted = name.casefold()
        return [cast(Person, dict(p)) for p in tables["people"].values()
                if wanted in p["name"].casefold() and (not team or p["team"] == team)]

    @registry.tool(is_concurrency_safe=_read_only)
    async def get_person(person_id: str) -> Person:
        """One colleague by id."""
        return cast(Person, dict(row("people", person_id, "person")))

    @registry.tool(is_concurrency_safe=_read_only)
    async def list_teams() -> list[Team]:
        """Every team, with its lead's person id."""
        return [cast(Team, dict(t)) for t in tables["teams"].values()]

    @registry.tool(is_concurrency_safe=_read_only)
    async def list_events(date: str | None = None, attendee: str | None = None) -> list[Event]:
        """Calendar events, by date and start; optionally one day's (YYYY-MM-DD) and/or
        one attendee's (person id). Cancelled events are included."""
        rows = [e for e in tables["events"].values()
                if (date is None or e["date"] == date)
                and (attendee is None or attendee in e["attendees"])]
        return [_event(e) for e in sorted(rows, key=lambda e: (e["date"], e["start"], e["id"]))]

    @registry.tool(is_concurrency_safe=_read_only)
    async def get_event(event_id: str) -> Event:
        """One calendar event by id."""
        return _event(row("events", event_id, "event"))

    @registry.tool
    async def create_event(title: str, date: str, start: str, end: str,
                           attendees: list[str]) -> Event:
        """Book an event; `start` and `end` are HH:MM, attendees person ids."""
        if not (_is_time(start) and _is_time(end) and start < end):
            raise ToolError("start and end must be HH:MM with start before end",
                            code="INVALID_ARGS")
        for person in attendees:
            row("people", person, "person")
        event_id = f"ev-{len(tables['events']) + 1:02d}"
        tables["events"][event_id] = {"id": event_id, "title": title, "date": date,
                                      "start": start, "end": end,
                                      "attendees": list(attendees), "status": "confirmed"}
        return _event(tables["events"][event_id])

    @registry.tool
    async def cancel_event(event_id: str) -> Event:
        """Cancel an event. Returns it."""
        event = row("events", event_id, "event")
        event["status"] = "cancelled"
        return _event(event)

    @registry.tool(is_concurrency_safe=_read_only)
    async def free_slots(date: str, attendees: list[str], minutes: int) -> list[Slot]:
        """Times on `date` between 09:00 and 17:00 when every attendee is free for at
        least `minutes`, as the free gaps (not cut to length)."""
        busy = sorted((e["start"], e["end"]) for e in tables["events"].values()
                      if e["date"] == date and e["status"] == "confirmed"
                      and set(attendees) & set(e["attendees"]))
        slots: list[Slot] = []
        cursor = DAY_START
        for start, end in [*busy, (DAY_END, DAY_END)]:
            if _minutes(start) - _minutes(cursor) >= minutes:
                slots.append(Slot(start=cursor, end=start))
            cursor = max(cursor, end)
        return slots

    @registry.tool(is_concurrency_safe=_read_only)
    async def list_tickets(status: TicketStatus | None = None, component: str | None = None,
                           assignee: str | None = None) -> list[Ticket]:
        """Support tickets by id; optionally filtered by status, component and/or
        assignee (a person id, or "" for unassigned tickets)."""
        return [cast(Ticket, dict(t)) for t in tables["tickets"].values()
                if (status is None or t["status"] == status)
                and (component is None or t["component"] == component)
                and (assignee is None or (t["assignee"] or "") == assignee)]

    @registry.tool(is_concurrency_safe=_read_only)
    async def get_ticket(ticket_id: str) -> Ticket:
        """One ticket by id."""
        return cast(Ticket, dict(row("tickets", ticket_id, "ticket")))

    @registry.tool
    async def assign_ticket(ticket_id: str, person_id: str) -> Ticket:
        """Assign a ticket to a colleague."""
        ticket = row("tickets", ticket_id, "ticket")
        row("people", person_id, "person")
        ticket["assignee"] = person_id
        return cast(Ticket, dict(ticket))

    @registry.tool
    async def close_ticket(ticket_id: str, resolution: str) -> Ticket:
        """Close a ticket with a one-line resolution."""
        ticket = row("tickets", ticket_id, "ticket")
        if ticket["status"] == "closed":
            raise ToolError(f"ticket {ticket_id} is already closed", code="CONFLICT")
        ticket["status"], ticket["resolution"] = "closed", resolution
        return cast(Ticket, dict(ticket))

    @registry.tool
    async def send_message(to: str, subject: str, body: str) -> Message:
        """Send an email to an address. Returns the sent message."""
        if "@" not in to:
            raise ToolError(f"{to!r} is not an email address", code="INVALID_ARGS")
        message_id = f"m-{len(tables['messages']) + 1:03d}"
        tables["messages"][message_id] = {"id": message_id, "to": to, "subject": subject,
                                          "body": body}
        return cast(Message, dict(tables["messages"][message_id]))

    @registry.tool(is_concurrency_safe=_read_only)
    async def list_messages() -> list[Message]:
        """Messages sent so far, oldest first."""
        return [cast(Message, dict(m)) for m in tables["messages"].values()]

    @registry.tool(is_concurrency_safe=_read_only)
    async def list_expenses(person_id: str | None = None,
                            month: str | None = None) -> list[Expense]:
        """Expense claims by date; optionally one colleague's and/or one month's
        (YYYY-MM). Amounts are in the claim's own currency."""
        rows = [x for x in tables["expenses"].values()
                if (person_id is None or x["person_id"] == person_id)
                and (month is None or x["date"].startswith(month))]
        return [cast(Expense, dict(x)) for x in sorted(rows, key=lambda x: (x["date"], x["id"]))]

    @registry.tool(is_concurrency_safe=_read_only)
    async def exchange_rate(currency: str) -> float:
        """US dollars per one unit of `currency` (a three-letter code)."""
        return float(row("rates", currency.upper(), "currency")["usd"])

    return registry


def _read_only(args: object) -> bool:
    return True


def _event(row: dict[str, Any]) -> Event:
    return cast(Event, {**row, "attendees": list(row["attendees"])})


def _is_time(text: str) -> bool:
    hours, colon, minutes = text.partition(":")
    return bool(colon) and len(text) == 5 and hours.isdigit() and minutes.isdigit() \
        and int(hours) < 24 and int(minutes) < 60


def _minutes(text: str) -> int:
    hours, _, minutes = text.partition(":")
    return int(hours) * 60 + int(minutes)
