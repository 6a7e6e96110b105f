"""The model cap of run_code results on a real kernel, through ``registry.execute``: a
10 MB print reaches the model as at most ``run_code_max_chars`` characters (its head, one
note line, its tail), while the value, the card and the session log keep every line; a
small output is what it was without a cap; a long value, and a failure after a long
print, are cut the same way. The pure cutting is tested in
tests/unit/codemode/test_model_text.py."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from kernel_support import RuntimeFactory

from dsh_jupyter import ToolCall, ToolRegistry
from dsh_jupyter.codemode.model_text import DEFAULT_RUN_CODE_MAX_CHARS
from dsh_jupyter.codemode.run_code import CAPTURED_OUTPUT
from dsh_jupyter.events import SessionEvent
from dsh_jupyter.extension import RunCodeOutcome
from dsh_jupyter.registry.results import ToolFailure, ToolResult, ToolSuccess
from dsh_jupyter.widgets import RunCodeCard, replay
from dsh_jupyter.widgets.presenting import durable_from_event

pytestmark = [pytest.mark.timeout(120), pytest.mark.kernel]

# 10,000 lines of 1,000 characters: 10 MB, each line starting with its number.
TEN_MB = "for i in range(10_000):\n    print(f'{i:05d}' + 'x' * 995)"
LINES = [f"{i:05d}" + "x" * 995 for i in range(10_000)]
NOTE = re.compile(r"\[… ([\d,]+) characters \(([\d,]+) lines\) of the (output|result) cut "
                  r"here: you see at most 50,000 of a run; print a slice or a summary to see "
                  r"more, or write it to a file under outputs/ …\]")


async def execute(registry: ToolRegistry, code: str, call_id: str = "c1") -> ToolResult:
    return await registry.execute(ToolCall(call_id=call_id, name="run_code", arguments={
        "code": code, "description": "Print a lot"}))


async def test_a_ten_megabyte_print_gives_the_model_the_cap_and_the_card_everything(
        make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    registry = ToolRegistry(mode="code", code_runtime=runtime)
    events: list[SessionEvent] = []
    registry.on_event(events.append)
    result = await execute(registry, TEN_MB + "\nreturn 'done'")
    assert isinstance(result, ToolSuccess), result
    value: Any = result.value
    assert value == {"logs": LINES, "result": "done"}  # the value: every line
    # The model: at most the default cap, the head, one note line, the tail, the result.
    text = result.text
    assert len(text) <= DEFAULT_RUN_CODE_MAX_CHARS == 50_000
    assert text.startswith(LINES[0] + "\n" + LINES[1] + "\n")
    assert text.endswith(LINES[-2] + "\n" + LINES[-1] + "\ndone")
    [note] = NOTE.findall(text)
    removed, lines, part = note
    assert part == "output" and int(lines.replace(",", "")) > 9_900
    head, _, tail = text.partition("\n" + NOTE.search(text)[0] + "\n")  # type: ignore[index]
    assert int(removed.replace(",", "")) == len("\n".join(LINES)) - len(head) - len(
        tail.removesuffix("\ndone"))
    # The session log: the cut content, and the card's meta with every line.
    [logged] = [e for e in events if e["kind"] == "tool/result"]
    assert logged["content"] == [{"type": "text", "text": text}]
    meta: Any = json.loads(json.dumps(logged["meta"]))
    assert meta == {"logs": LINES, "result": "done"}
    # The card, live or replayed from the log, shows every line.
    card = RunCodeCard(arguments={"code": TEN_MB, "description": "Print a lot"})
    card.finish(durable_from_event(logged))
    blocks = {getattr(b, "label", None): getattr(b, "text", None)
              for b in card.document().blocks}
    assert blocks["logs"] == "\n".join(LINES) and blocks["result"] == "done"
    [replayed] = [c for c in replay(events).cards if isinstance(c, RunCodeCard)]
    assert replayed.durable is not None and replayed.durable.presentation_meta == meta
    # %%run_code's outcome gives every line too.
    outcome = RunCodeOutcome(result=result, program=TEN_MB, description="Print a lot")
    assert outcome.logs == LINES


async def test_a_small_output_is_what_it_was_without_a_cap(
        make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    program = "print('héllo 😀')\nprint('x' * 40_000)\nreturn {'rows': list(range(100))}"
    capped = await execute(ToolRegistry(mode="code", code_runtime=runtime), program)
    uncapped = await execute(ToolRegistry(mode="code", code_runtime=runtime,
                                          run_code_max_chars=None), program)
    assert isinstance(capped, ToolSuccess) and isinstance(uncapped, ToolSuccess)
    assert capped.content == uncapped.content
    assert capped.text.encode() == uncapped.text.encode()
    assert capped.value == uncapped.value and capped.meta == uncapped.meta


async def test_a_long_value_and_a_long_failure_are_cut_too(
        make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    registry = ToolRegistry(mode="code", code_runtime=runtime)
    events: list[SessionEvent] = []
    registry.on_event(events.append)
    valued = await execute(registry, "print('rows:')\nreturn [[i, i * i] for i in range(50_000)]")
    assert isinstance(valued, ToolSuccess)
    assert len(valued.text) <= 50_000 and valued.text.startswith("rows:\n[\n  [\n    0,")
    assert valued.text.endswith("[\n    49999,\n    2499900001\n  ]\n]")
    assert [m[2] for m in NOTE.findall(valued.text)] == ["result"]
    value: Any = valued.value
    assert len(value["result"]) == 50_000

    failed = await execute(registry, TEN_MB + "\nraise ValueError('row 10000 is missing')",
                           call_id="c2")
    assert isinstance(failed, ToolFailure) and failed.error.code == "CODE_RUN_FAILED"
    text = failed.text
    assert len(text) <= 50_000 and text.startswith("Error: code run failed (exception): ")
    assert f"ValueError: row 10000 is missing{CAPTURED_OUTPUT}{LINES[0]}\n" in text
    assert text.endswith(LINES[-1]) and [m[2] for m in NOTE.findall(text)] == ["output"]
    # The message, for the card and the log, keeps every line.
    assert failed.error.message.endswith(CAPTURED_OUTPUT + "\n".join(LINES))
    logged = [e for e in events if e["kind"] == "tool/result"][-1]
    assert logged["content"] == [{"type": "text", "text": text}]
    assert logged["error"]["message"] == failed.error.message
    assert RunCodeOutcome(result=failed, program="", description="").logs == LINES
