"""Write the ``office`` task set: its world, 24 tasks and their recorded responses.

    python bench/office_tasks.py          # rewrites dsh_jupyter/evaluation/data/office/

No model was reachable when these were made, so the recordings are written by hand,
here: what a capable model plausibly sends in each presentation mode. Native
scripts batch independent calls into one step; code scripts write one program
(two when the first fails); ``both`` scripts take whichever path suits the task
(a direct call for a lookup, a program for many calls); ``discovery`` scripts
(the prompt holds an index, not the SDK) mostly spend a first program on
``tools.search``/``tools.describe`` and then run the code script's working program,
or call a tool the index names outright when its arguments are obvious. Answers are computed from
the same data the tools serve, so a replayed answer is what the calls returned.
A few recordings are deliberately wrong (``FAILURES``), as real runs are: an
arithmetic slip, a missed row, a program that counted cancelled meetings; tasks
with a failure carry three samples, replayed in turn by ``repeats``, so pass@k
differs from pass@1. ``tests/integration/evaluation/test_eval_office.py`` holds the outcome
of every recording, so an edit here that changes one shows up there.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "dsh_jupyter" / "evaluation" / "data"
OUT = DATA / "office"
SHOP = json.loads((DATA / "tasks.json").read_text(encoding="utf-8"))

Calls = list[tuple[str, dict[str, Any]]]
PRESENTATIONS = ("native", "code", "both", "discovery")

# --- the world ------------------------------------------------------------------------

CUSTOMERS: list[dict[str, Any]] = SHOP["world"]["database"]["customers"]
ORDERS: list[dict[str, Any]] = SHOP["world"]["database"]["orders"]
FILES: dict[str, str] = SHOP["world"]["files"]

PEOPLE = [
    ("p-01", "Radia Perlman", "t-platform", "lead"),
    ("p-02", "John Backus", "t-platform", "engineer"),
    ("p-03", "Hedy Lamarr", "t-research", "lead"),
    ("p-04", "Dennis Ritchie", "t-research", "engineer"),
    ("p-05", "Frances Allen", "t-billing", "lead"),
    ("p-06", "Ken Thompson", "t-billing", "engineer"),
    ("p-07", "Margaret Hamilton", "t-platform", "engineer"),
    ("p-08", "Donald Knuth", "t-research", "engineer"),
    ("p-09", "Shafi Goldwasser", "t-billing", "analyst"),
    ("p-10", "Leslie Lamport", "t-platform", "engineer")]
PEOPLE_ROWS: list[dict[str, Any]] = [{"id": i, "name": n, "team": t, "role": r,
                "email": n.lower().replace(" ", ".") + "@example.com"} for i, n, t, r in PEOPLE]
TEAMS: list[dict[str, Any]] = [{"id": "t-platform", "name": "Platform", "lead": "p-01"},
         {"id": "t-research", "name": "Research", "lead": "p-03"},
         {"id": "t-billing", "name": "Billing", "lead": "p-05"}]
PRODUCTS = [
    ("sku-101", "USB-C cable 1 m", "cables", 9.5, 140, 50),
    ("sku-102", "USB-C cable 2 m", "cables", 12.0, 35, 50),
    ("sku-103", "HDMI cable", "cables", 14.25, 60, 40),
    ("sku-104", "Ethernet cable 5 m", "cables", 11.0, 12, 30),
    ("sku-105", "Screwdriver set", "tools", 24.9, 22, 10),
    ("sku-106", "Soldering iron", "tools", 39.0, 4, 8),
    ("sku-107", "Multimeter", "tools", 54.75, 18, 6),
    ("sku-108", "Cable ties (100)", "tools", 4.2, 300, 100),
    ("sku-109", "A4 paper (500)", "paper", 6.8, 80, 40),
    ("sku-110", "Sticky notes", "paper", 3.1, 15, 25),
    ("sku-111", "Notebook A5", "paper", 5.6, 70, 30),
    ("sku-112", "Label printer tape", "paper", 17.4, 9, 12)]
PRODUCT_ROWS: list[dict[str, Any]] = [
    {"id": s, "name": n, "category": c, "price": p, "stock": st, "reorder_level": r}
    for s, n, c, p, st, r in PRODUCTS]


def order_items() -> list[dict[str, Any]]:
    rng = random.Random(21)
    rows: list[dict[str, Any]] = []
    for order in ORDERS:
        for sku in sorted(rng.sample([p[0] for p in PRODUCTS], rng.randint(1, 3))):
            price = next(p[3] for p in PRODUCTS if p[0] == sku)
            rows.append({"id": f"i-{len(rows) + 1:03d}", "order_id": order["id"], "sku": sku,
                         "quantity": rng.randint(1, 6), "price": price})
    return rows


ITEMS = order_items()

EVENTS_SPEC = [
    ("Standup", "2024-06-17", "09:00", "09:15", ["p-01", "p-02", "p-07", "p-10"], "confirmed"),
    ("Roadmap", "2024-06-17", "10:00", "12:00", ["p-01", "p-03", "p-05"], "confirmed"),
    ("Billing sync", "2024-06-17", "14:00", "15:00", ["p-05", "p-06", "p-09"], "confirmed"),
    ("Standup", "2024-06-18", "09:00", "09:15", ["p-01", "p-02", "p-07", "p-10"], "confirmed"),
    ("Release review", "2024-06-18", "11:00", "12:30", ["p-01", "p-04", "p-07"], "confirmed"),
    ("1:1 Radia / John", "2024-06-18", "13:00", "13:30", ["p-01", "p-02"], "confirmed"),
    ("Incident retro", "2024-06-18", "14:00", "15:30", ["p-02", "p-06", "p-10"], "confirmed"),
    ("Standup", "2024-06-19", "09:00", "09:15", ["p-01", "p-02", "p-07", "p-10"], "confirmed"),
    ("Offsite planning", "2024-06-19", "10:00", "16:00", ["p-03", "p-04", "p-08"], "cancelled"),
    ("Paper reading", "2024-06-19", "15:00", "16:00", ["p-03", "p-08"], "confirmed"),
    ("Standup", "2024-06-20", "09:00", "09:15", ["p-01", "p-02", "p-07", "p-10"], "confirmed"),
    ("Quarterly planning", "2024-06-20", "10:00", "13:00", ["p-01", "p-03", "p-05", "p-09"],
     "confirmed"),
    ("Design review", "2024-06-20", "14:00", "15:00", ["p-02", "p-04"], "confirmed"),
    ("Standup", "2024-06-21", "09:00", "09:15", ["p-01", "p-02", "p-07", "p-10"], "confirmed"),
    ("Demo day", "2024-06-21", "13:00", "15:00", ["p-01", "p-02", "p-03", "p-04", "p-05"],
     "confirmed"),
    ("Budget review", "2024-06-14", "15:00", "16:00", ["p-05", "p-09"], "confirmed")]
EVENTS: list[dict[str, Any]] = [
    {"id": f"ev-{n:02d}", "title": t, "date": d, "start": s, "end": e, "attendees": a,
     "status": st} for n, (t, d, s, e, a, st) in enumerate(EVENTS_SPEC, start=1)]

TICKETS_SPEC = [
    ("Invoice PDF has wrong VAT", "billing", "open", "high", None),
    ("Refund stuck in pending", "billing", "open", "normal", "p-06"),
    ("Search ignores accents", "search", "resolved", "normal", "p-04"),
    ("Login loop on Safari", "platform", "open", "high", "p-02"),
    ("Duplicate charge emails", "billing", "open", "normal", None),
    ("Slow order export", "platform", "resolved", "low", "p-10"),
    ("Currency rounding in report", "billing", "open", "low", None),
    ("Typo on pricing page", "platform", "closed", "low", "p-07"),
    ("Search results paging", "search", "open", "normal", "p-08"),
    ("Dunning emails sent twice", "billing", "resolved", "high", "p-09"),
    ("API rate limit too strict", "platform", "open", "normal", None),
    ("Tax id validation", "billing", "open", "normal", None),
    ("Index rebuild fails", "search", "resolved", "high", "p-04"),
    ("Dark mode contrast", "platform", "open", "low", "p-07")]
TICKETS: list[dict[str, Any]] = [
    {"id": f"t-{n:02d}", "title": t, "component": c, "status": s, "priority": p,
     "assignee": a, "resolution": None}
    for n, (t, c, s, p, a) in enumerate(TICKETS_SPEC, start=1)]

EXPENSES_SPEC = [
    ("p-05", "2024-05-03", 120.0, "EUR", "travel"), ("p-06", "2024-05-07", 45.5, "USD", "meals"),
    ("p-09", "2024-05-09", 310.0, "GBP", "training"), ("p-01", "2024-05-10", 80.0, "USD", "meals"),
    ("p-05", "2024-05-14", 64.2, "EUR", "meals"), ("p-02", "2024-05-15", 199.0, "USD", "hardware"),
    ("p-06", "2024-05-21", 890.0, "EUR", "travel"), ("p-03", "2024-05-22", 42.0, "CHF", "meals"),
    ("p-09", "2024-05-28", 23.9, "GBP", "meals"), ("p-05", "2024-06-02", 150.0, "EUR", "travel"),
    ("p-06", "2024-06-04", 38.0, "USD", "meals"), ("p-04", "2024-05-30", 260.0, "EUR", "travel"),
    ("p-09", "2024-06-06", 75.0, "GBP", "meals"), ("p-08", "2024-05-12", 120.0, "USD", "books")]
EXPENSES: list[dict[str, Any]] = [
    {"id": f"x-{n:02d}", "person_id": p, "date": d, "amount": a, "currency": c, "category": k}
    for n, (p, d, a, c, k) in enumerate(EXPENSES_SPEC, start=1)]
RATES: list[dict[str, Any]] = [{"id": "USD", "usd": 1.0}, {"id": "EUR", "usd": 1.08},
                               {"id": "GBP", "usd": 1.27}, {"id": "CHF", "usd": 1.12}]


def world() -> dict[str, Any]:
    return {"files": FILES, "database": {
        "customers": CUSTOMERS, "orders": ORDERS, "order_items": ITEMS,
        "products": PRODUCT_ROWS, "people": PEOPLE_ROWS, "teams": TEAMS, "events": EVENTS,
        "tickets": TICKETS, "messages": [], "expenses": EXPENSES, "rates": RATES}}


# --- helpers for scripts --------------------------------------------------------------

def native(*steps: Calls, answer: str) -> list[dict[str, Any]]:
    """One entry per step of calls (independent calls batched), then the answer."""
    return [*({"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}
              for calls in steps), {"content": answer}]


def code(*programs: tuple[str, str], answer: str) -> list[dict[str, Any]]:
    """One ``run_code`` step per (description, program), then the answer."""
    return [*({"tool_calls": [{"name": "run_code",
                               "arguments": {"code": program.strip(), "description": what}}]}
              for what, program in programs), {"content": answer}]


def money(x: float) -> str:
    return f"{x:,.2f}"


def amount(x: float) -> str:
    """A pattern for ``x`` however a model writes it: 1534.59, 1,534.59; 104.5, 104.50;
    2737, 2737.0, 2,737.00."""
    whole, cents = f"{x:.2f}".split(".")
    digits = re.sub(r"(\d)(?=(\d{3})+$)", r"\1,?", whole)
    if cents == "00":
        tail = r"(\.00?)?"
    elif cents.endswith("0"):
        tail = rf"\.{cents[0]}0?"
    else:
        tail = rf"\.{cents}"
    return rf"(?<![\d.]){digits}{tail}(?![\d])"


def amounts(*values: float) -> list[dict[str, Any]]:
    return [{"kind": "answer_matches", "pattern": amount(v)} for v in values]


def customer(cid: str) -> dict[str, Any]:
    return next(c for c in CUSTOMERS if c["id"] == cid)


def person(pid: str) -> dict[str, Any]:
    return next(p for p in PEOPLE_ROWS if p["id"] == pid)


def order(oid: str) -> dict[str, Any]:
    return next(o for o in ORDERS if o["id"] == oid)


def product(sku: str) -> dict[str, Any]:
    return next(p for p in PRODUCT_ROWS if p["id"] == sku)


# --- the tasks --------------------------------------------------------------------------
# Each returns (prompt, checks, favours, native script, code script); favours is
# "native" (a lookup: a program is overhead) or "code" (many calls or aggregation)
# and picks the path the `both` recording takes.

Task = tuple[str, list[dict[str, Any]], str, list[dict[str, Any]], list[dict[str, Any]]]
TASKS: dict[str, Callable[[], Task]] = {}


def task(fn: Callable[[], Task]) -> Callable[[], Task]:
    TASKS[fn.__name__.replace("_", "-")] = fn
    return fn


@task
def order_status() -> Task:
    o = order("o-1017")
    answer = f"Order o-1017 is **{o['status']}**; it was worth ${money(o['total'])}."
    return ("What is the status of order o-1017, and what is it worth?",
            [{"kind": "answer_contains", "text": [o["status"]]}, *amounts(o["total"])], "native",
            native([("get_order", {"order_id": "o-1017"})], answer=answer),
            code(("Look up order o-1017",
                  'return await tools.get_order({"order_id": "o-1017"})'), answer=answer))


@task
def product_price() -> Task:
    p = product("sku-107")
    answer = f"The {p['name']} (sku-107) costs ${money(p['price'])}; {p['stock']} are in stock."
    checks = [*amounts(p["price"]), {"kind": "answer_matches", "pattern": rf"\b{p['stock']}\b"}]
    # Code mode guesses a field name first, reads the error, and fixes the program.
    return ("How much does product sku-107 cost, and how many are in stock?", checks, "native",
            native([("get_product", {"sku": "sku-107"})], answer=answer),
            code(("Price and stock of sku-107",
                  'p = await tools.get_product({"sku": "sku-107"})\n'
                  'return {"price": p["unit_price"], "stock": p["stock"]}'),
                 ("Price and stock of sku-107",
                  'p = await tools.get_product({"sku": "sku-107"})\n'
                  'return {"name": p["name"], "price": p["price"], "stock": p["stock"]}'),
                 answer=answer))


@task
def person_email() -> Task:
    p = person("p-03")
    answer = f"Hedy Lamarr's email address is {p['email']}."
    return ("What is Hedy Lamarr's email address?",
            [{"kind": "answer_contains", "text": [p["email"]]}], "native",
            native([("find_people", {"name": "Hedy Lamarr"})], answer=answer),
            code(("Find Hedy Lamarr",
                  'people = await tools.find_people({"name": "Hedy Lamarr"})\n'
                  'return [p["email"] for p in people]'), answer=answer))


@task
def exchange_rate() -> Task:
    answer = "One euro is worth **1.08 US dollars**."
    return ("How many US dollars is one euro worth?",
            [{"kind": "answer_matches", "pattern": r"1\.08\b"}], "native",
            native([("exchange_rate", {"currency": "EUR"})], answer=answer),
            code(("EUR to USD", 'return await tools.exchange_rate({"currency": "EUR"})'),
                 answer=answer))


@task
def summarise_readme() -> Task:
    answer = ("`shop` is a small order-tracking service for customers and orders, with a "
              "monthly report (`python -m shop.report 2024-05`).")
    return ("What is this project? Summarise its README in one or two sentences.",
            [{"kind": "answer_contains", "text": ["order-tracking"], "ignore_case": True}],
            "native", native([("read_file", {"path": "README.md"})], answer=answer),
            code(("Read the README", 'return await tools.read_file({"path": "README.md"})'),
                 answer=answer))


@task
def find_todos() -> Task:
    found = [(path, n, line.strip()) for path in sorted(FILES)
             for n, line in enumerate(FILES[path].splitlines(), 1) if "TODO" in line]
    answer = "\n".join(f"- `{p}:{n}` {t.lstrip('# ')}" for p, n, t in found)
    return ("Find every TODO comment in the project. Give the file, the line number and the "
            "text of each.",
            [{"kind": "answer_contains", "text": [f"{p}:{n}" for p, n, _ in found]}], "native",
            native([("search_files", {"query": "TODO"})], answer=answer),
            code(("Find TODO lines",
                  'hits = await tools.search_files({"query": "TODO"})\n'
                  'return [f"{h[\'path\']}:{h[\'line\']} {h[\'text\']}" for h in hits]'),
                 answer=answer))


@task
def ship_one_order() -> Task:
    return ("Order o-1020 has left the warehouse: mark it as shipped.",
            [{"kind": "rows", "table": "orders", "rows": {"o-1020": {"status": "shipped"}}},
             {"kind": "unchanged", "table": "orders", "ignore": ["o-1020"]}], "native",
            native([("update_order", {"order_id": "o-1020", "status": "shipped"})],
                   answer="Done: order o-1020 is now marked as shipped."),
            code(("Mark o-1020 shipped",
                  'return await tools.update_order({"order_id": "o-1020", "status": "shipped"})'),
                 answer="Done: order o-1020 is now marked as shipped."))


@task
def cancel_event() -> Task:
    return ("Please cancel calendar event ev-12; it is not happening.",
            [{"kind": "rows", "table": "events", "rows": {"ev-12": {"status": "cancelled"}}},
             {"kind": "unchanged", "table": "events", "ignore": ["ev-12"]}], "native",
            native([("cancel_event", {"event_id": "ev-12"})],
                   answer="Cancelled ev-12 (Quarterly planning, 2024-06-20 10:00-13:00)."),
            code(("Cancel ev-12", 'return await tools.cancel_event({"event_id": "ev-12"})'),
                 answer="Cancelled ev-12 (Quarterly planning, 2024-06-20 10:00-13:00)."))


@task
def ticket_owner() -> Task:
    t = next(t for t in TICKETS if t["id"] == "t-04")
    p = person(t["assignee"])
    answer = f"Ticket t-04 ({t['title']}) is assigned to {p['name']} ({p['email']})."
    return ("Who is ticket t-04 assigned to? Give their name and email.",
            [{"kind": "answer_contains", "text": [p["name"], p["email"]]}], "native",
            native([("get_ticket", {"ticket_id": "t-04"})],
                   [("get_person", {"person_id": p["id"]})], answer=answer),
            code(("Owner of t-04",
                  't = await tools.get_ticket({"ticket_id": "t-04"})\n'
                  'p = await tools.get_person({"person_id": t["assignee"]})\n'
                  'return {"ticket": t["title"], "name": p["name"], "email": p["email"]}'),
                 answer=answer))


@task
def order_country() -> Task:
    c = customer(order("o-1012")["customer_id"])
    answer = f"Order o-1012 was placed by {c['name']}, who is in {c['country']}."
    return ("Which country is the customer of order o-1012 in? Give the country code.",
            [{"kind": "answer_contains", "text": [c["country"], c["name"]]}], "native",
            native([("get_order", {"order_id": "o-1012"})],
                   [("get_customer", {"customer_id": c["id"]})], answer=answer),
            code(("Country of o-1012's customer",
                  'o = await tools.get_order({"order_id": "o-1012"})\n'
                  'c = await tools.get_customer({"customer_id": o["customer_id"]})\n'
                  'return {"customer": c["name"], "country": c["country"]}'), answer=answer))


@task
def open_order_total() -> Task:
    rows = [o for o in ORDERS if o["customer_id"] == "c-01" and o["status"] == "open"]
    total = round(sum(o["total"] for o in rows), 2)
    answer = (f"Ada Lovelace has {len(rows)} open orders ({', '.join(o['id'] for o in rows)}) "
              f"worth **${money(total)}** in total.")
    return ("What is the total value of Ada Lovelace's open orders?",
            amounts(total), "code",
            native([("find_customers", {"name": "Ada Lovelace"})],
                   [("list_orders", {"customer_id": "c-01", "status": "open"})], answer=answer),
            code(("Total of Ada Lovelace's open orders",
                  'customers = await tools.find_customers({"name": "Ada Lovelace"})\n'
                  'orders = await tools.list_orders({"customer_id": customers[0]["id"], '
                  '"status": "open"})\n'
                  'return {"orders": [o["id"] for o in orders], '
                  '"total": round(sum(o["total"] for o in orders), 2)}'), answer=answer))


def spent_by_customer() -> dict[str, float]:
    spent: dict[str, float] = defaultdict(float)
    for o in ORDERS:
        if o["status"] == "shipped":
            spent[o["customer_id"]] += o["total"]
    return {k: round(v, 2) for k, v in spent.items()}


@task
def top_customer() -> Task:
    spent = spent_by_customer()
    best = max(spent, key=lambda k: spent[k])
    name = customer(best)["name"]
    answer = f"{name} spent the most on shipped orders: **${money(spent[best])}**."
    return ("Which customer has spent the most on shipped orders, and how much?",
            [{"kind": "answer_contains", "text": [name]}, *amounts(spent[best])], "code",
            native([("list_orders", {"status": "shipped"}), ("find_customers", {})],
                   answer=answer),
            code(("Shipped spend per customer",
                  'orders = await tools.list_orders({"status": "shipped"})\n'
                  'names = {c["id"]: c["name"] for c in await tools.find_customers({})}\n'
                  'spent = {}\n'
                  'for o in orders:\n'
                  '    spent[o["customer_id"]] = spent.get(o["customer_id"], 0) + o["total"]\n'
                  'ranked = sorted(spent.items(), key=lambda kv: -kv[1])\n'
                  'return [[names[c], round(v, 2)] for c, v in ranked[:3]]'), answer=answer))


@task
def revenue_by_country() -> Task:
    by_country: dict[str, float] = defaultdict(float)
    for cid, v in spent_by_customer().items():
        by_country[customer(cid)["country"]] += v
    lines = [f"- {c}: ${money(v)}" for c, v in sorted(by_country.items(), key=lambda kv: -kv[1])]
    answer = "Shipped revenue by customer country:\n" + "\n".join(lines)
    return ("What is the revenue from shipped orders per customer country?",
            amounts(*by_country.values()), "code",
            native([("find_customers", {}), ("list_orders", {"status": "shipped"})],
                   answer=answer),
            code(("Shipped revenue per country",
                  'country = {c["id"]: c["country"] for c in await tools.find_customers({})}\n'
                  'revenue = {}\n'
                  'for o in await tools.list_orders({"status": "shipped"}):\n'
                  '    key = country[o["customer_id"]]\n'
                  '    revenue[key] = revenue.get(key, 0) + o["total"]\n'
                  'return {k: round(v, 2) for k, v in revenue.items()}'), answer=answer))


@task
def cancel_stale_orders() -> Task:
    stale = [o["id"] for o in ORDERS if o["status"] == "open" and o["date"] < "2024-01-01"]
    answer = f"Cancelled {len(stale)} orders placed before 2024: {', '.join(stale)}."
    return ("Cancel every order that is still open and was placed before 2024-01-01, then "
            "tell me which ones you cancelled.",
            [{"kind": "rows", "table": "orders",
              "rows": {i: {"status": "cancelled"} for i in stale}},
             {"kind": "unchanged", "table": "orders", "ignore": stale},
             {"kind": "answer_contains", "text": stale}], "code",
            native([("list_orders", {"status": "open"})],
                   [("update_order", {"order_id": i, "status": "cancelled"}) for i in stale],
                   answer=answer),
            code(("Cancel open orders from before 2024",
                  'cancelled = []\n'
                  'for o in await tools.list_orders({"status": "open"}):\n'
                  '    if o["date"] < "2024-01-01":\n'
                  '        await tools.update_order({"order_id": o["id"], '
                  '"status": "cancelled"})\n'
                  '        cancelled.append(o["id"])\n'
                  'return cancelled'), answer=answer))


def low_stock() -> list[dict[str, Any]]:
    return [p for p in PRODUCT_ROWS if p["stock"] < p["reorder_level"]]


@task
def restock_low() -> Task:
    low = low_stock()
    adds = {p["id"]: 2 * p["reorder_level"] - p["stock"] for p in low}
    answer = "Restocked:\n" + "\n".join(
        f"- {p['id']} {p['name']}: +{adds[p['id']]} to {2 * p['reorder_level']}" for p in low)
    return ("Restock every product whose stock is below its reorder level, up to twice its "
            "reorder level. Tell me what you ordered.",
            [{"kind": "rows", "table": "products",
              "rows": {p["id"]: {"stock": 2 * p["reorder_level"]} for p in low}},
             {"kind": "unchanged", "table": "products", "ignore": [p["id"] for p in low]}],
            "code",
            native([("list_products", {})],
                   [("restock", {"sku": sku, "quantity": q}) for sku, q in adds.items()],
                   answer=answer),
            code(("Restock products below their reorder level",
                  'ordered = {}\n'
                  'for p in await tools.list_products({}):\n'
                  '    if p["stock"] < p["reorder_level"]:\n'
                  '        quantity = 2 * p["reorder_level"] - p["stock"]\n'
                  '        await tools.restock({"sku": p["id"], "quantity": quantity})\n'
                  '        ordered[p["id"]] = quantity\n'
                  'return ordered'), answer=answer))


def units_sold() -> Counter[str]:
    shipped = {o["id"] for o in ORDERS if o["status"] == "shipped"}
    units: Counter[str] = Counter()
    for item in ITEMS:
        if item["order_id"] in shipped:
            units[item["sku"]] += item["quantity"]
    return units


@task
def best_seller() -> Task:
    units = units_sold()
    sku, n = units.most_common(1)[0]
    answer = f"The best seller in shipped orders is {sku} ({product(sku)['name']}): {n} units."
    shipped = [o["id"] for o in ORDERS if o["status"] == "shipped"]
    return ("Which product sold the most units across all shipped orders, and how many?",
            [{"kind": "answer_contains", "text": [sku]},
             {"kind": "answer_matches", "pattern": rf"\b{n}\b"}], "code",
            native([("list_orders", {"status": "shipped"})],
                   [("list_order_items", {"order_id": i}) for i in shipped],
                   [("get_product", {"sku": sku})], answer=answer),
            code(("Units sold per product in shipped orders",
                  'units = {}\n'
                  'for o in await tools.list_orders({"status": "shipped"}):\n'
                  '    for item in await tools.list_order_items({"order_id": o["id"]}):\n'
                  '        units[item["sku"]] = units.get(item["sku"], 0) + item["quantity"]\n'
                  'sku = max(units, key=units.get)\n'
                  'product = await tools.get_product({"sku": sku})\n'
                  'return {"sku": sku, "name": product["name"], "units": units[sku]}'),
                 answer=answer))


def meeting_hours(include_cancelled: bool = False) -> dict[str, float]:
    hours: dict[str, float] = defaultdict(float)
    for e in EVENTS:
        if "2024-06-17" <= e["date"] <= "2024-06-21" and (
                include_cancelled or e["status"] == "confirmed"):
            h1, m1 = map(int, e["start"].split(":"))
            h2, m2 = map(int, e["end"].split(":"))
            hours[e["date"]] += (h2 * 60 + m2 - h1 * 60 - m1) / 60
    return hours


BUSIEST_PROGRAM = (
    'hours = {}\n'
    'for e in await tools.list_events({}):\n'
    '    if "2024-06-17" <= e["date"] <= "2024-06-21"{filter}:\n'
    '        h1, m1 = map(int, e["start"].split(":"))\n'
    '        h2, m2 = map(int, e["end"].split(":"))\n'
    '        hours[e["date"]] = hours.get(e["date"], 0) + (h2 * 60 + m2 - h1 * 60 - m1) / 60\n'
    'day = max(hours, key=hours.get)\n'
    'return {"day": day, "hours": hours[day], "all": hours}')


@task
def busiest_day() -> Task:
    hours = meeting_hours()
    day = max(hours, key=lambda d: hours[d])
    answer = (f"{day} is the busiest: {hours[day]:g} hours of meetings (summed over "
              "confirmed events).")
    return ("Which day of the week of 2024-06-17 (Monday to Friday) has the most hours of "
            "confirmed meetings, and how many hours?",
            [{"kind": "answer_contains", "text": [day]},
             {"kind": "answer_matches", "pattern": amount(hours[day])}], "code",
            native([("list_events", {"date": d}) for d in sorted(hours)], answer=answer),
            code(("Meeting hours per day, 17-21 June",
                  BUSIEST_PROGRAM.replace("{filter}", ' and e["status"] == "confirmed"')),
                 answer=answer))


def team_expenses_usd(team: str, month: str) -> tuple[float, list[str]]:
    members = [p["id"] for p in PEOPLE_ROWS if p["team"] == team]
    rate = {r["id"]: r["usd"] for r in RATES}
    rows = [x for x in EXPENSES if x["person_id"] in members and x["date"].startswith(month)]
    return round(sum(x["amount"] * rate[x["currency"]] for x in rows), 2), members


@task
def team_expenses() -> Task:
    total, members = team_expenses_usd("t-billing", "2024-05")
    currencies = sorted({x["currency"] for x in EXPENSES
                         if x["person_id"] in members and x["date"].startswith("2024-05")})
    answer = (f"The billing team claimed **${money(total)}** in May 2024 "
              f"(converted from {', '.join(currencies)} at today's rates).")
    return ("How much did the billing team (t-billing) claim in expenses in May 2024, in US "
            "dollars?",
            amounts(total), "code",
            native([("find_people", {"team": "t-billing"}),
                    ("list_expenses", {"month": "2024-05"})],
                   [("exchange_rate", {"currency": c}) for c in currencies], answer=answer),
            code(("Billing team's May expenses in USD",
                  'members = {p["id"] for p in await tools.find_people({"team": "t-billing"})}\n'
                  'claims = [x for x in await tools.list_expenses({"month": "2024-05"})\n'
                  '          if x["person_id"] in members]\n'
                  'rates = {}\n'
                  'for currency in sorted({x["currency"] for x in claims}):\n'
                  '    rates[currency] = await tools.exchange_rate({"currency": currency})\n'
                  'total = sum(x["amount"] * rates[x["currency"]] for x in claims)\n'
                  'return {"claims": len(claims), "rates": rates, "usd": round(total, 2)}'),
                 answer=answer))


@task
def close_resolved() -> Task:
    resolved = [t["id"] for t in TICKETS if t["status"] == "resolved"]
    answer = f"Closed {len(resolved)} resolved tickets: {', '.join(resolved)}."
    return ("Close every ticket that is marked resolved, with the resolution \"Verified "
            "fixed\".",
            [{"kind": "rows", "table": "tickets",
              "rows": {i: {"status": "closed", "resolution": "Verified fixed"}
                       for i in resolved}},
             {"kind": "unchanged", "table": "tickets", "ignore": resolved}], "code",
            native([("list_tickets", {"status": "resolved"})],
                   [("close_ticket", {"ticket_id": i, "resolution": "Verified fixed"})
                    for i in resolved], answer=answer),
            code(("Close resolved tickets",
                  'closed = []\n'
                  'for t in await tools.list_tickets({"status": "resolved"}):\n'
                  '    await tools.close_ticket({"ticket_id": t["id"], '
                  '"resolution": "Verified fixed"})\n'
                  '    closed.append(t["id"])\n'
                  'return closed'), answer=answer))


@task
def assign_billing() -> Task:
    lead = next(t["lead"] for t in TEAMS if t["id"] == "t-billing")
    todo = [t["id"] for t in TICKETS if t["component"] == "billing" and t["status"] == "open"
            and t["assignee"] is None]
    answer = (f"Assigned {len(todo)} unassigned open billing tickets ({', '.join(todo)}) to "
              f"{person(lead)['name']}, the billing lead.")
    return ("Assign every open, unassigned billing ticket to the billing team's lead.",
            [{"kind": "rows", "table": "tickets", "rows": {i: {"assignee": lead} for i in todo}},
             {"kind": "unchanged", "table": "tickets", "ignore": todo}], "code",
            native([("list_teams", {}),
                    ("list_tickets", {"status": "open", "component": "billing", "assignee": ""})],
                   [("assign_ticket", {"ticket_id": i, "person_id": lead}) for i in todo],
                   answer=answer),
            code(("Assign unassigned billing tickets to the billing lead",
                  'teams = await tools.list_teams({})\n'
                  'lead = next(t["lead"] for t in teams if t["id"] == "t-billing")\n'
                  'tickets = await tools.list_tickets({"status": "open", "component": "billing",'
                  ' "assignee": ""})\n'
                  'for t in tickets:\n'
                  '    await tools.assign_ticket({"ticket_id": t["id"], "person_id": lead})\n'
                  'return {"lead": lead, "assigned": [t["id"] for t in tickets]}'),
                 answer=answer))


@task
def notify_attendees() -> Task:
    event = next(e for e in EVENTS if e["title"] == "Release review")
    emails = [person(p)["email"] for p in event["attendees"]]
    subject, body = "Release review moved", "The release review on 2024-06-18 moves to 15:00."
    answer = f"Emailed {len(emails)} attendees: {', '.join(emails)}."
    return ("The Release review on 2024-06-18 moves to 15:00. Email every attendee "
            f"(subject \"{subject}\") to tell them.",
            [{"kind": "has_rows", "table": "messages",
              "rows": [{"to": e, "subject": subject} for e in emails], "added": len(emails)}],
            "code",
            native([("list_events", {"date": "2024-06-18"})],
                   [("get_person", {"person_id": p}) for p in event["attendees"]],
                   [("send_message", {"to": e, "subject": subject, "body": body})
                    for e in emails], answer=answer),
            code(("Email the Release review's attendees",
                  'events = await tools.list_events({"date": "2024-06-18"})\n'
                  'event = next(e for e in events if e["title"] == "Release review")\n'
                  'sent = []\n'
                  'for pid in event["attendees"]:\n'
                  '    person = await tools.get_person({"person_id": pid})\n'
                  f'    await tools.send_message({{"to": person["email"], "subject": {subject!r},'
                  f' "body": {body!r}}})\n'
                  '    sent.append(person["email"])\n'
                  'return sent'), answer=answer))


@task
def book_meeting() -> Task:
    attendees = ["p-01", "p-02"]
    busy = sorted((e["start"], e["end"]) for e in EVENTS if e["date"] == "2024-06-18"
                  and e["status"] == "confirmed" and set(attendees) & set(e["attendees"]))
    start = "09:00"
    for s, e in busy:
        if int(s[:2]) * 60 + int(s[3:]) - (int(start[:2]) * 60 + int(start[3:])) >= 60:
            break
        start = max(start, e)
    end = f"{int(start[:2]) + 1:02d}:{start[3:]}"
    answer = f"Booked \"Design sync\" on 2024-06-18 from {start} to {end} for Radia and John."
    wanted = {"title": "Design sync", "date": "2024-06-18", "start": start, "end": end,
              "attendees": attendees}
    return ("Book a 60-minute \"Design sync\" with Radia Perlman and John Backus on 2024-06-18 "
            "at the earliest time they are both free.",
            [{"kind": "has_rows", "table": "events", "rows": [wanted], "added": 1},
             {"kind": "answer_contains", "text": [start]}], "code",
            native([("find_people", {"name": "Radia"}), ("find_people", {"name": "John Backus"})],
                   [("free_slots", {"date": "2024-06-18", "attendees": attendees,
                                    "minutes": 60})],
                   [("create_event", wanted)], answer=answer),
            # The first program guesses the tool takes a duration; the call is refused
            # (no `end`), and the second program computes the end time.
            code(("Book the first free hour",
                  'ids = [(await tools.find_people({"name": n}))[0]["id"]\n'
                  '       for n in ("Radia Perlman", "John Backus")]\n'
                  'slots = await tools.free_slots({"date": "2024-06-18", "attendees": ids, '
                  '"minutes": 60})\n'
                  'return await tools.create_event({"title": "Design sync", "date": "2024-06-18",'
                  ' "start": slots[0]["start"], "minutes": 60, "attendees": ids})'),
                 ("Book the first free hour, with an end time",
                  'ids = [(await tools.find_people({"name": n}))[0]["id"]\n'
                  '       for n in ("Radia Perlman", "John Backus")]\n'
                  'slots = await tools.free_slots({"date": "2024-06-18", "attendees": ids, '
                  '"minutes": 60})\n'
                  'start = slots[0]["start"]\n'
                  'hour = int(start.split(":")[0]) + 1\n'
                  'end = f"{hour:02d}:{start.split(\':\')[1]}"\n'
                  'return await tools.create_event({"title": "Design sync", "date": "2024-06-18",'
                  ' "start": start, "end": end, "attendees": ids})'),
                 answer=answer))


@task
def longest_module() -> Task:
    paths = [p for p in sorted(FILES) if p.startswith("src/") and p.endswith(".py")]
    lines = {p: len(FILES[p].splitlines()) for p in paths}
    best = max(lines, key=lambda p: lines[p])
    answer = f"`{best}` is the longest Python file under src/, with {lines[best]} lines."
    return ("Which Python file under src/ has the most lines, and how many lines does it have?",
            [{"kind": "answer_contains", "text": [best]},
             {"kind": "answer_matches", "pattern": rf"\b{lines[best]}\b"}], "code",
            native([("list_files", {"pattern": "src/*.py"})],
                   [("read_file", {"path": p}) for p in paths], answer=answer),
            code(("Line counts of src/ Python files",
                  'counts = {}\n'
                  'for path in await tools.list_files({"pattern": "src/*.py"}):\n'
                  '    counts[path] = len((await tools.read_file({"path": path})).splitlines())\n'
                  'path = max(counts, key=counts.get)\n'
                  'return {"path": path, "lines": counts[path]}'), answer=answer))


@task
def stock_value() -> Task:
    value = {c: round(sum(p["price"] * p["stock"] for p in PRODUCT_ROWS if p["category"] == c), 2)
             for c in ("cables", "tools", "paper")}
    answer = "Stock value by category:\n" + "\n".join(
        f"- {c}: ${money(v)}" for c, v in value.items())
    return ("What is our stock worth per product category (price times units in stock)?",
            amounts(*value.values()), "code",
            native([("list_products", {})], answer=answer),
            code(("Stock value per category",
                  'value = {}\n'
                  'for p in await tools.list_products({}):\n'
                  '    value[p["category"]] = value.get(p["category"], 0) + '
                  'p["price"] * p["stock"]\n'
                  'return {k: round(v, 2) for k, v in value.items()}'), answer=answer))


# --- discovery: what each task looks up before its program -----------------------------
# (search query or None, tools to describe). Empty: the index names the tool and its
# arguments are obvious, so the one program calls it outright. Otherwise a first program
# prints what it found; the second is the code script's last (working) program: with
# the types in hand, the guesses that code mode's first programs got wrong are not made.

DISCOVERY: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "order-status": (None, ()),
    "product-price": (None, ("get_product",)),
    "person-email": (None, ("find_people",)),
    "exchange-rate": (None, ()),
    "summarise-readme": (None, ()),
    "find-todos": ("search lines in files", ("search_files",)),
    "ship-one-order": (None, ()),
    "cancel-event": (None, ()),
    "ticket-owner": (None, ("get_ticket", "get_person")),
    "order-country": (None, ("get_order", "get_customer")),
    "open-order-total": ("customer orders", ("find_customers", "list_orders")),
    "top-customer": (None, ("list_orders", "find_customers")),
    "revenue-by-country": (None, ("find_customers", "list_orders")),
    "cancel-stale-orders": (None, ("list_orders", "update_order")),
    "restock-low": ("product stock reorder", ("list_products", "restock")),
    "best-seller": (None, ("list_orders", "list_order_items", "get_product")),
    "busiest-day": ("calendar events", ("list_events",)),
    "team-expenses": ("expenses team currency", ("find_people", "list_expenses",
                                                 "exchange_rate")),
    "close-resolved": ("ticket", ("list_tickets", "close_ticket")),
    "assign-billing": ("team lead ticket", ("list_teams", "list_tickets", "assign_ticket")),
    "notify-attendees": ("send email", ("list_events", "get_person", "send_message")),
    "book-meeting": ("free time book meeting", ("find_people", "free_slots",
                                                "create_event")),
    "longest-module": (None, ("list_files", "read_file")),
    "stock-value": (None, ("list_products",)),
}


def discovery(name: str, code_script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``name``'s discovery script: its lookups (:data:`DISCOVERY`), then the working
    program of ``code_script`` and its answer."""
    query, described = DISCOVERY[name]
    *_, working, answer = code_script
    lines = [f"print(await tools.search({query!r}))"] if query else []
    if len(described) == 1:
        lines.append(f"print(await tools.describe({described[0]!r}))")
    elif described:
        lines += [f"for name in {described!r}:", "    print(await tools.describe(name))"]
    if not lines:
        return [working, answer]
    what = "Find and type " + ", ".join(described) if described else f"Search {query!r}"
    look = {"tool_calls": [{"name": "run_code",
                            "arguments": {"code": "\n".join(lines), "description": what}}]}
    return [look, working, answer]


# --- deliberate failures: (task, mode) -> samples; sample 0 is what repeats=1 replays ---

def failures(scripts: dict[str, dict[str, list[dict[str, Any]]]]
             ) -> dict[tuple[str, str], list[list[dict[str, Any]]]]:
    def with_answer(script: list[dict[str, Any]], answer: str) -> list[dict[str, Any]]:
        return [*script[:-1], {"content": answer}]

    spent = spent_by_customer()
    best = max(spent, key=lambda k: spent[k])
    slip = round(spent[best] - 100, 2)  # a carried digit lost adding 5 totals in its head
    wrong_top = with_answer(scripts["top-customer"]["native"],
                            f"{customer(best)['name']} spent the most on shipped orders: "
                            f"**${money(slip)}**.")
    # Reads a third of the orders' items, then answers as if it had read them all.
    shipped = [o["id"] for o in ORDERS if o["status"] == "shipped"]
    seen = set(shipped[:5])
    partial: Counter[str] = Counter()
    for item in ITEMS:
        if item["order_id"] in seen:
            partial[item["sku"]] += item["quantity"]
    sku, n = partial.most_common(1)[0]
    lazy_seller = native([("list_orders", {"status": "shipped"})],
                         [("list_order_items", {"order_id": i}) for i in shipped[:5]],
                         answer=f"Judging by the orders' items, the best seller is {sku} "
                                f"({product(sku)['name']}) with {n} units.")
    # Restocks every low product but the last one in the list.
    low = low_stock()
    missed = native([("list_products", {})],
                    [("restock", {"sku": p["id"], "quantity": 2 * p["reorder_level"] - p["stock"]})
                     for p in low[:-1]],
                    answer="Restocked " + ", ".join(p["id"] for p in low[:-1]) + ".")
    # Counts the cancelled offsite too.
    with_cancelled = meeting_hours(include_cancelled=True)
    day = max(with_cancelled, key=lambda d: with_cancelled[d])
    wrong_busy = code(("Meeting hours per day, 17-21 June",
                       BUSIEST_PROGRAM.replace("{filter}", "")),
                      answer=f"{day} is the busiest: {with_cancelled[day]:g} hours of meetings.")
    # Divides by the rate instead of multiplying.
    _, members = team_expenses_usd("t-billing", "2024-05")
    rate = {r["id"]: r["usd"] for r in RATES}
    inverted = round(sum(x["amount"] / rate[x["currency"]] for x in EXPENSES
                         if x["person_id"] in members and x["date"].startswith("2024-05")), 2)
    wrong_fx = with_answer(scripts["team-expenses"]["native"],
                           f"The billing team claimed about **${money(inverted)}** in May 2024.")
    return {
        ("top-customer", "native"): [wrong_top, scripts["top-customer"]["native"],
                                     scripts["top-customer"]["native"]],
        ("best-seller", "native"): [lazy_seller, lazy_seller, scripts["best-seller"]["native"]],
        ("restock-low", "native"): [missed, scripts["restock-low"]["native"],
                                    scripts["restock-low"]["native"]],
        ("busiest-day", "code"): [wrong_busy, scripts["busiest-day"]["code"],
                                  scripts["busiest-day"]["code"]],
        ("team-expenses", "both"): [wrong_fx, scripts["team-expenses"]["both"],
                                    scripts["team-expenses"]["both"]],
    }


def main(out: Path = OUT) -> None:
    """Write the task file and the recordings into ``out`` (emptied first)."""
    if out.exists():
        shutil.rmtree(out)
    (out / "recorded").mkdir(parents=True)
    entries = []
    scripts: dict[str, dict[str, list[dict[str, Any]]]] = {}
    made = {name: make() for name, make in TASKS.items()}
    for name, (_, _, favours, native_script, code_script) in made.items():
        both = native_script if favours == "native" else code_script
        scripts[name] = {"native": native_script, "code": code_script, "both": both,
                         "discovery": discovery(name, code_script)}
    overrides = failures(scripts)
    for name, (prompt, checks, favours, _, _) in made.items():
        recorded: dict[str, Any] = {}
        for mode in PRESENTATIONS:
            samples = overrides.get((name, mode), [scripts[name][mode]])
            files = []
            for number, script in enumerate(samples):
                file = f"recorded/{name}.{mode}{'' if number == 0 else f'.{number}'}.json"
                (out / file).write_text(json.dumps(script, indent=1, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
                files.append(file)
            recorded[mode] = files[0] if len(files) == 1 else files
        entries.append({"id": name, "prompt": prompt, "favours": favours, "checks": checks,
                        "recorded": recorded})
    body = {"format": "dsh-jupyter-tasks/1", "name": "office",
            "description": "24 tasks over 31 tools (files, orders, products, people, calendar, "
                           "tickets, messages, expenses): lookups where one call answers, and "
                           "aggregations and bulk updates where a program saves round trips. "
                           "Hand-written recordings for native, code, both and discovery, a "
                           "few wrong.",
            "tools": "dsh_jupyter.evaluation.office:office_registry",
            "world": world(), "tasks": entries}
    (out / "tasks.json").write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n",
                                    encoding="utf-8")
    print(f"wrote {len(entries)} tasks to {out}")


if __name__ == "__main__":
    main()
