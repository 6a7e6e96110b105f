"""The display budget and the checks of display messages, one rule each (no kernel)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from dsh_jupyter.kernel import KernelRuntimeConfig
from dsh_jupyter.kernel.run.displays import (
    DISPLAY_OVERHEAD,
    NOTE_METADATA,
    DisplayLog,
    SafeObserver,
    parse_display,
)
from dsh_jupyter.kernel.run.logs import OutputBudget, OutputLog, json_size
from dsh_jupyter.runtime import Display


def content(text: str = "x", **extra: Any) -> dict[str, Any]:
    return {"data": {"text/plain": text, **extra}, "metadata": {}}


@pytest.mark.parametrize("message", [
    {},
    {"data": None},
    {"data": "text/plain"},
    {"data": {}},
    {"data": {"text/plain": 1}},
    {"data": {"text/plain": None}},
    {"data": {"image/png": ["a", "b"]}},
    {"data": {"": "x"}},
    {"data": {"text": "x"}},
    {"data": {"text/plain\n": "x"}},
    {"data": {"text/<b>": "x"}},
    {"data": {"a" * 200 + "/b": "x"}},
    {"data": {f"a/b{i}": "x" for i in range(33)}},
    {"data": {"text/plain": "x"}, "metadata": "m"},
    {"data": {"text/plain": "x"}, "metadata": [1]},
    {"data": {"application/json": float("nan")}},
    {"data": {"text/plain": "x"}, "metadata": {"w": float("inf")}},
])
def test_malformed_display_messages_are_refused(message: dict[str, Any]) -> None:
    assert parse_display(message) is None


def test_well_formed_bundles_are_frozen_as_sent() -> None:
    parsed = parse_display({"data": {"text/plain": "t", "application/json": {"a": [1]},
                                     "application/vnd.x+json": [1, None]},
                            "metadata": {"image/png": {"width": 3}},
                            "transient": {"display_id": "d"}})
    assert parsed is not None
    data, metadata = parsed
    assert data == {"text/plain": "t", "application/json": {"a": [1]},
                    "application/vnd.x+json": [1, None]}
    assert metadata == {"image/png": {"width": 3}}
    with pytest.raises(TypeError):
        data["text/plain"] = "changed"
    assert parse_display({"data": {"text/plain": "t"}}) == ({"text/plain": "t"}, {})


def test_display_text_and_metadata_are_escaped() -> None:
    parsed = parse_display({"data": {"text/plain": "\x1b[31mred\u202e", "text/html": "<p>\x85</p>",
                                     "application/json": {"k\x1b": ["\udcff"]}},
                            "metadata": {"title\u2066": "x\x07"}})
    assert parsed is not None
    data, metadata = parsed
    assert data == {"text/plain": "\\x1b[31mred\\u202e", "text/html": "<p>\\u0085</p>",
                    "application/json": {"k\\x1b": ["\\xff"]}}
    assert metadata == {"title\\u2066": "x\\x07"}


def test_displays_are_placed_and_observed() -> None:
    seen: list[Display] = []
    log = DisplayLog(max_displays=5, max_bytes=1000, on_display=seen.append)
    log.add(content("a"), after_logs=0)
    log.add({"data": "junk"}, after_logs=1)
    log.add(content("b"), after_logs=3)
    assert [(d.data["text/plain"], d.after_logs) for d in log.displays] == [("a", 0), ("b", 3)]
    assert list(log.displays) == seen
    assert (log.dropped, log.malformed) == (0, 1)


def test_over_the_count_one_note_then_nothing() -> None:
    seen: list[Display] = []
    log = DisplayLog(max_displays=2, max_bytes=10_000, on_display=seen.append)
    for index in range(6):
        log.add(content(str(index)), after_logs=index)
    assert [d.data["text/plain"] for d in log.displays[:2]] == ["0", "1"]
    note = log.displays[2]
    assert note.metadata == NOTE_METADATA and note.after_logs == 2
    assert "budget of 2 displays (max_displays)" in str(note.data["text/plain"])
    assert len(log.displays) == 3 and seen == list(log.displays)
    assert log.dropped == 4


def test_over_the_bytes_later_displays_are_dropped_even_small_ones() -> None:
    log = DisplayLog(max_displays=10, max_bytes=100)
    log.add(content("a" * 20), after_logs=0)
    log.add(content("b" * 200), after_logs=0)
    log.add(content("c"), after_logs=0)
    assert [d.data["text/plain"] for d in log.displays[:1]] == ["a" * 20]
    assert "100 B (max_display_bytes)" in str(log.displays[1].data["text/plain"])
    assert log.dropped == 2


def test_no_displays_means_no_note() -> None:
    log = DisplayLog(max_displays=0, max_bytes=100)
    log.add(content(), after_logs=0)
    assert log.displays == () and log.dropped == 1


def test_displays_take_at_most_half_of_the_runtimes_budget() -> None:
    budget = OutputBudget(10_000)
    first = DisplayLog(max_displays=10, max_bytes=10_000, budget=budget)
    first.add(content("a" * 3000), after_logs=0)
    drawn = budget.used
    assert drawn == json_size({"text/plain": "a" * 3000}) + json_size({}) + DISPLAY_OVERHEAD
    second = DisplayLog(max_displays=10, max_bytes=10_000, budget=budget)
    second.add(content("b" * 3000), after_logs=0)  # would pass 5,000 together
    assert budget.used == drawn
    assert "max_buffered_output_bytes" in str(second.displays[0].data["text/plain"])
    # Logs still have the rest of the budget.
    log = OutputLog(100_000, budget)
    log.write("stdout", "x" * 4000 + "\n")
    assert not log.over_limit
    first.release()
    second.release()
    log.release()
    assert budget.used == 0


def test_the_budget_ceiling() -> None:
    budget = OutputBudget(100)
    assert budget.take(40, within=50)
    assert not budget.take(20, within=50)
    assert budget.take(60)
    assert not budget.take(1)


def test_log_entries_are_told_in_order_partial_lines_at_finish() -> None:
    told: list[str] = []
    log = OutputLog(1000, on_entry=told.append)
    log.write("stdout", "a\nb")
    log.write("stderr", "e\n")
    assert told == ["a", "e"] and log.entry_count == 2
    assert log.finish() == ("a", "e", "b")
    assert told == ["a", "e", "b"]


def test_a_failing_observer_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        calls = 0

        def on_log(self, line: str) -> None:
            self.calls += 1
            raise ValueError(line)

        def on_display(self, display: Display) -> None:
            self.calls += 1
            raise ValueError("display")

    broken = Broken()
    safe = SafeObserver(broken)
    with caplog.at_level(logging.ERROR):
        safe.on_log("a")
        safe.on_display(Display(data={"text/plain": "d"}, metadata={}, after_logs=0))
        safe.on_log("b")
    assert broken.calls == 3
    assert len([r for r in caplog.records if "output observer" in r.getMessage()]) == 1


@pytest.mark.parametrize(("field", "value"), [
    ("max_displays", -1), ("max_displays", 1.5), ("max_displays", True),
    ("max_display_bytes", -1), ("max_display_bytes", "8MiB"),
])
def test_display_budget_fields_are_validated(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        KernelRuntimeConfig(**{field: value})  # type: ignore[arg-type]


def test_display_budget_defaults() -> None:
    config = KernelRuntimeConfig()
    assert (config.max_displays, config.max_display_bytes) == (20, 8 * 2**20)
