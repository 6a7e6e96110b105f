"""The model cap of run_code results (``ToolRegistry(run_code_max_chars=...)``), above the
runtime seam: the pure cutting (head, tail, note; line breaks, surrogates, exact
boundaries), how logs and value share the cap, the validation of the setting, and the
pipeline with the in-process runtime (content cut, value, meta and session log whole).

A 10 MB print on a real kernel, its card and serve-mcp are in
tests/kernel/test_model_cap.py and tests/integration/mcp/test_serve_stdio.py."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from code_mode_support import code_registry, run
from hypothesis import given, settings
from hypothesis import strategies as st
from property_support import examples

from dsh_jupyter import ToolRegistry
from dsh_jupyter.codemode.model_text import (
    DEFAULT_RUN_CODE_MAX_CHARS,
    MIN_RUN_CODE_MAX_CHARS,
    TextLimit,
    check_max_chars,
    cut_lines,
    cut_text,
    share,
)
from dsh_jupyter.codemode.run_code import (
    CAPTURED_OUTPUT,
    model_error_message,
    model_parts,
    model_value,
    render_result_value,
)
from dsh_jupyter.errors import RegistrationError
from dsh_jupyter.events import SessionEvent
from dsh_jupyter.registry.results import ToolFailure, ToolSuccess
from dsh_jupyter.widgets.presenting import durable_from_event
from dsh_jupyter.widgets.run_code import RunCodeCard

LIMIT = TextLimit(DEFAULT_RUN_CODE_MAX_CHARS)
NOTE = re.compile(r"\[… ([\d,]+) characters \(([\d,]+) lines?\) of (the [a-z]+) cut here: you "
                  r"see at most ([\d,]+) of a run; print a slice or a summary to see "
                  r"more(, or write it to a file under outputs/)? …\]")


def split(text: str) -> tuple[str, re.Match[str], str]:
    """The head, the note and the tail of a cut text (exactly one note in it)."""
    notes = list(NOTE.finditer(text))
    assert len(notes) == 1, text[:300]
    found = notes[0]
    assert text[found.start() - 1] == "\n" and text[found.end()] == "\n"  # a line of its own
    return text[:found.start() - 1], found, text[found.end() + 1:]


def number(text: str) -> int:
    return int(text.replace(",", ""))


# --- cut_text --------------------------------------------------------------------------


def test_text_within_the_cap_is_the_same_object() -> None:
    text = "x" * 1000
    assert cut_text(text, 1000, "the output", LIMIT) is text
    assert cut_text("", 1000, "the output", LIMIT) == ""


def test_one_character_over_is_cut_to_the_cap() -> None:
    text = "y" * 1001
    cut = cut_text(text, 1000, "the output", LIMIT)
    assert len(cut) <= 1000
    head, note, tail = split(cut)
    assert text.startswith(head) and text.endswith(tail)
    assert number(note[1]) == len(text) - len(head) - len(tail)
    assert note[2] == "1" and note[3] == "the output" and note[4] == "50,000"


def test_ten_megabytes_on_one_line_keep_a_60_40_head_and_tail() -> None:
    text = "".join(f"{i:09d}," for i in range(1_000_000))  # 10 MB, no line break
    cut = cut_text(text, 50_000, "the output", TextLimit(50_000, outputs=True))
    assert len(cut) <= 50_000 and cut.count("\n") == 2
    head, note, tail = split(cut)
    assert text.startswith(head) and text.endswith(tail)
    assert head.startswith("000000000,000000001,") and tail.endswith("000999999,")
    assert number(note[1]) == len(text) - len(head) - len(tail) > 9_900_000
    assert note[2] == "1" and note[5] == ", or write it to a file under outputs/"
    assert 0.55 < len(head) / (len(head) + len(tail)) < 0.65
    assert len(cut) > 49_000  # the room is used


def test_cuts_fall_on_line_breaks_when_one_is_near() -> None:
    lines = [f"line {i}" for i in range(100_000)]
    text = "\n".join(lines)
    head, note, tail = split(cut_text(text, 50_000, "the output", LIMIT))
    head_lines, tail_lines = head.split("\n"), tail.split("\n")
    # Whole lines only: the head is the first lines, the tail the last ones.
    assert head_lines == lines[:len(head_lines)] and tail_lines == lines[-len(tail_lines):]
    hidden = len(lines) - len(head_lines) - len(tail_lines)
    assert number(note[2]) == hidden
    # The line breaks either side of the hidden lines are the note's own.
    assert number(note[1]) == len(text) - len(head) - len(tail)


def test_a_line_break_far_from_the_cut_is_not_used() -> None:
    text = "a\n" + "b" * 100_000 + "\nc"
    head, note, tail = split(cut_text(text, 10_000, "the output", LIMIT))
    assert head.startswith("a\nbbb") and tail.endswith("bbb\nc")
    assert note[2] == "1"  # the one line with characters cut: "a" and "c" are whole


def test_a_surrogate_pair_is_never_split() -> None:
    # A str can hold a surrogate pair as two code points; half of one cannot be encoded.
    pair = "\ud83d\ude00"
    for offset in range(4):
        text = "z" * offset + pair * 20_000
        cut = cut_text(text, 10_001, "the result", LIMIT)
        head, _note, tail = split(cut)
        for part in (head, tail):
            part.encode("utf-16", "surrogatepass").decode("utf-16")  # only whole pairs
            assert not part or not "\udc00" <= part[0] <= "\udfff"
            assert not part or not "\ud800" <= part[-1] <= "\udbff"


def test_non_ascii_text_is_counted_in_characters() -> None:
    text = "é😀中" * 30_000  # 90,000 characters, 270,000 UTF-8 bytes
    cut = cut_text(text, 20_000, "the output", LIMIT)
    assert len(cut) <= 20_000
    head, note, tail = split(cut)
    assert text.startswith(head) and text.endswith(tail)
    assert number(note[1]) == 90_000 - len(head) - len(tail)
    cut.encode("utf-8")  # nothing lone, nothing broken


def test_the_note_is_one_line_without_paths() -> None:
    cut = cut_text("\n".join(["/tmp/dsh-run-1/x"] * 10_000), 5_000, "the output",
                   TextLimit(5_000, outputs=True))
    _head, note, _tail = split(cut)
    assert "\n" not in note[0] and "/tmp" not in note[0] and len(note[0]) < 250


def test_the_smallest_share_holds_the_widest_note() -> None:
    # The logs' floor under the smallest cap, and as many characters and lines as the
    # transport cap lets a run print (64 MiB of line breaks).
    floor = share(10**9, 10**9, 1, MIN_RUN_CODE_MAX_CHARS)[1]
    cut = cut_text("\n" * 64 * 2**20, floor, "the output",
                   TextLimit(MIN_RUN_CODE_MAX_CHARS, outputs=True))
    assert len(cut) <= floor
    split(cut)


@settings(max_examples=examples(300), deadline=None)
@given(text=st.text(alphabet=st.sampled_from("ab\n é😀\ud83d\ude00"), max_size=3_000),
       max_chars=st.integers(min_value=250, max_value=3_000))
def test_any_text_fits_its_room_and_keeps_its_ends(text: str, max_chars: int) -> None:
    cut = cut_text(text, max_chars, "the output", LIMIT)
    if len(text) <= max_chars:
        assert cut == text
        return
    assert len(cut) <= max_chars
    head, note, tail = split(cut)
    assert text.startswith(head) and text.endswith(tail)
    assert number(note[1]) == len(text) - len(head) - len(tail) > 0


def test_cut_lines_gives_the_lines_of_the_cut_text() -> None:
    lines = [f"row {i}" for i in range(20_000)]
    small = lines[:10]
    assert cut_lines(small, 1_000, "the output", LIMIT) is small
    cut = cut_lines(lines, 10_000, "the output", LIMIT)
    assert "\n".join(cut) == cut_text("\n".join(lines), 10_000, "the output", LIMIT)
    assert sum(1 for line in cut if NOTE.fullmatch(line)) == 1


# --- sharing the cap -------------------------------------------------------------------


def test_share_puts_the_value_first_and_keeps_a_quarter_for_the_logs() -> None:
    assert share(100, 200, 1, 1_000) == (100, 200)  # both fit: whole
    assert share(100, 5_000, 1, 1_000) == (100, 899)  # a small value, long logs
    assert share(5_000, 100, 1, 1_000) == (899, 100)  # a long value, short logs
    assert share(5_000, 5_000, 1, 1_000) == (750, 249)  # both long: logs keep a quarter
    assert share(5_000, 0, 0, 1_000) == (1_000, 0)  # the value alone
    assert share(0, 5_000, 0, 1_000) == (0, 1_000)  # logs alone
    assert share(600, 600, 1, 1_000) == (600, 399)


def test_model_parts_within_the_cap_are_the_very_objects() -> None:
    logs, rendered = ["a", "b"], "result"
    shown_logs, shown = model_parts(logs, rendered, LIMIT)
    assert shown_logs is logs and shown is rendered
    assert model_parts(logs, rendered, None) == (logs, rendered)


def test_model_parts_cut_each_part_to_its_share() -> None:
    limit = TextLimit(10_000)
    logs = [f"log {i}" for i in range(10_000)]
    rendered = "r" * 30_000
    shown_logs, shown = model_parts(logs, rendered, limit)
    assert shown is not None
    text = "\n".join([*shown_logs, shown])
    assert len(text) <= 10_000
    assert len(shown) <= 7_500 and len("\n".join(shown_logs)) <= 2_499
    assert sum(1 for line in text.split("\n") if NOTE.fullmatch(line)) == 2


def test_model_value_cuts_what_the_content_cuts() -> None:
    value: dict[str, Any] = {"logs": ["x" * 100_000], "result": {"k": list(range(20_000))}}
    rendered = render_result_value(value["result"])
    cut: Any = model_value(value, rendered, LIMIT)
    assert isinstance(cut, dict) and cut is not value
    assert isinstance(cut["result"], str) and cut["result"].startswith('{\n  "k": [')
    assert len("\n".join([*cut["logs"], cut["result"]])) <= 50_000
    small: dict[str, Any] = {"logs": ["hi"], "result": {"k": 1}}
    assert model_value(small, None, LIMIT) is small
    # Only the logs over: the value keeps its result as JSON.
    logs_only = model_value({"logs": ["x" * 100_000], "result": 3}, "3", LIMIT)
    assert isinstance(logs_only, dict) and logs_only["result"] == 3
    assert model_value(value, rendered, None) is value


def test_model_error_message_keeps_the_error_before_the_captured_output() -> None:
    error = "code run failed (exception): Traceback ...\nValueError: bad"
    message = error + CAPTURED_OUTPUT + "\n".join(f"line {i}" for i in range(100_000))
    cut = model_error_message(message, "CODE_RUN_FAILED", LIMIT)
    assert len("Error: " + cut) <= 50_000
    assert cut.startswith(error + CAPTURED_OUTPUT + "line 0\nline 1\n")
    assert cut.endswith("line 99999") and "of the output cut here" in cut
    assert model_error_message("short", "CODE_RUN_FAILED", LIMIT) == "short"
    other = model_error_message("e" * 60_000, "TOOL_ERROR", LIMIT)
    assert len(other) <= 50_000 - len("Error: ") and "of the error cut here" in other


# --- the setting -----------------------------------------------------------------------


def test_the_default_cap_and_no_cap() -> None:
    assert ToolRegistry().run_code_max_chars == DEFAULT_RUN_CODE_MAX_CHARS == 50_000
    registry = ToolRegistry(run_code_max_chars=None)
    assert registry.run_code_max_chars is None
    registry.run_code_max_chars = MIN_RUN_CODE_MAX_CHARS
    assert registry.run_code_max_chars == 1_000


@pytest.mark.parametrize(("bad", "said"), [
    (0, "run_code_max_chars=0 would leave the model nothing to read: pass None to send"),
    (-5, "run_code_max_chars=-5 would leave the model nothing to read"),
    (999, "run_code_max_chars=999 is below 1,000"),
    (True, "must be a number of characters (an int, at least 1,000) or None for no cap, "
           "got True"),
    (50_000.0, "got 50000.0"),
    ("50000", "got '50000'"),
])
def test_a_bad_cap_is_refused_saying_what_to_pass(bad: Any, said: str) -> None:
    with pytest.raises(RegistrationError, match=re.escape(said)):
        ToolRegistry(run_code_max_chars=bad)
    registry = ToolRegistry()
    with pytest.raises(RegistrationError, match=re.escape(said)):
        registry.run_code_max_chars = bad
    assert registry.run_code_max_chars == 50_000  # unchanged
    with pytest.raises(RegistrationError):
        check_max_chars(bad)


# --- through the pipeline (in-process runtime) -----------------------------------------

BIG_PRINT = "for i in range(200_000):\n    print(f'line {i}')"


async def test_a_small_output_is_untouched() -> None:
    capped, uncapped = code_registry(), code_registry(run_code_max_chars=None)
    program = "print('a')\nprint('é😀')\nreturn {'k': [1, 2], 's': 'x' * 1000}"
    first, second = await run(capped, program), await run(uncapped, program)
    assert isinstance(first, ToolSuccess) and isinstance(second, ToolSuccess)
    assert first.content == second.content and first.value == second.value
    assert first.meta == second.meta


async def test_long_logs_reach_the_model_cut_and_the_log_whole() -> None:
    registry = code_registry()
    events: list[SessionEvent] = []
    registry.on_event(events.append)
    result = await run(registry, BIG_PRINT + "\nreturn 'done'")
    assert isinstance(result, ToolSuccess)
    lines = [f"line {i}" for i in range(200_000)]
    assert result.value == {"logs": lines, "result": "done"}  # the value: whole
    text = result.text
    assert len(text) <= 50_000 and text.startswith("line 0\nline 1\n")
    assert text.endswith("line 199999\ndone")  # the result whole, after the tail
    _head, note, _tail = split(text)
    assert note[3] == "the output" and note[5] is None  # in-process: no outputs/ files
    # The card's meta and the session log keep every line.
    assert result.meta == {"logs": lines, "result": "done"}
    [logged] = [e for e in events if e["kind"] == "tool/result"]
    assert logged["content"] == [{"type": "text", "text": text}]
    assert json.loads(json.dumps(logged["meta"]))["logs"] == lines
    card = RunCodeCard(arguments={"code": BIG_PRINT, "description": "print"})
    card.finish(durable_from_event(logged))
    shown = {getattr(b, "label", None): getattr(b, "text", None) for b in card.document().blocks}
    assert shown["logs"] == "\n".join(lines) and shown["result"] == "done"


async def test_a_long_value_alone_is_cut_and_small_logs_stay_whole() -> None:
    result = await run(code_registry(),
                       "print('computing')\nreturn [{'row': i} for i in range(20_000)]")
    assert isinstance(result, ToolSuccess)
    text = result.text
    assert len(text) <= 50_000 and text.startswith('computing\n[\n  {\n    "row": 0\n  },')
    assert text.endswith('{\n    "row": 19999\n  }\n]')
    _head, note, _tail = split(text)
    assert note[3] == "the result"
    meta: Any = result.meta
    assert len(meta["result"]) > 400_000


async def test_logs_and_value_share_the_cap() -> None:
    registry = code_registry(run_code_max_chars=20_000)
    result = await run(registry, BIG_PRINT + "\nreturn 'v' * 100_000")
    assert isinstance(result, ToolSuccess)
    text = result.text
    assert len(text) <= 20_000
    notes = [m[3] for m in NOTE.finditer(text)]
    assert notes == ["the output", "the result"]
    logs_part, _, result_part = text.partition("\nvvv")
    # The value first: three quarters of the room; the logs keep the last quarter.
    assert 4_000 < len(logs_part) < 5_000 and 14_000 < len(result_part) < 15_100


async def test_the_cap_follows_the_setting() -> None:
    registry = code_registry()
    registry.run_code_max_chars = None
    whole = await run(registry, BIG_PRINT)
    assert len(whole.text) > 1_000_000
    registry.run_code_max_chars = 2_000
    assert len((await run(registry, BIG_PRINT)).text) <= 2_000


async def test_a_failed_run_reaches_the_model_cut_and_the_log_whole() -> None:
    registry = code_registry()
    events: list[SessionEvent] = []
    registry.on_event(events.append)
    result = await run(registry, BIG_PRINT + "\nraise ValueError('bad row')")
    assert isinstance(result, ToolFailure) and result.error.code == "CODE_RUN_FAILED"
    text = result.text
    assert len(text) <= 50_000
    assert text.startswith("Error: code run failed (exception): ")
    assert "ValueError: bad row" + CAPTURED_OUTPUT + "line 0\nline 1\n" in text
    assert text.endswith("line 199999") and "of the output cut here" in text
    # The message (the card's, the log's) keeps every line.
    assert result.error.message.endswith(CAPTURED_OUTPUT.join(
        ["", "\n".join(f"line {i}" for i in range(200_000))]))
    [logged] = [e for e in events if e["kind"] == "tool/result"]
    assert logged["content"] == [{"type": "text", "text": text}]
    assert logged["error"]["message"] == result.error.message
