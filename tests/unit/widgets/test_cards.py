"""From render intents to cards: every call and result view, the fallbacks, the
escaping of tool-derived text, and the mime bundle papermill and nbval keep."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from widget_support import PAYLOAD, failed, ok, walk, widget_html

from dsh_jupyter import ToolSuccess, define_tool
from dsh_jupyter.registry import (
    DiffCallView,
    DiffResultView,
    DurableResult,
    FileDiff,
    GenericCallView,
    GenericResultView,
    Location,
    ReadLine,
    ReadResultView,
    SearchFileMatches,
    SearchMatch,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    WebFetchSummary,
    WebResultView,
    WebSource,
)
from dsh_jupyter.widgets import RunCodeCard, ToolCard, tool_card

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def plain(card: Any) -> str:
    return str(card._repr_mimebundle_()["text/plain"])


def test_terminal_call_and_result() -> None:
    card = ToolCard(name="bash", call=TerminalCallView(title="make test", cwd="/src",
                                                       description="Run the tests"))
    assert plain(card) == ("[running] make test — bash\n    $ make test\n  Run the tests\n"
                           "  cwd: /src")
    card.finish(ok("2 failed"), TerminalResultView(output="2 failed", exit_code=2,
                                                   signal="SIGTERM"), duration=0.5)
    assert plain(card).splitlines()[-4:] == [
        "  cwd: /src", "    2 failed", "  exit code: 2", "  signal: SIGTERM"]


def test_diff_call_and_result() -> None:
    diffs = (FileDiff(path="a.py", old_text="x = 1\n", new_text="x = 2\n"),
             FileDiff(path="new.py", old_text=None, new_text="print()\n"))
    card = ToolCard(name="edit", call=DiffCallView(title="Edit two files", diffs=diffs,
                                                   locations=(Location(path="a.py", line=1),)))
    card.finish(ok(), DiffResultView(title="Applied", diffs=diffs[:1]))
    text = plain(card)
    assert "  a.py:\n      --- a/a.py\n      +++ b/a.py\n      @@ -1 +1 @@\n      -x = 1\n" \
           "      +x = 2" in text
    assert "  new.py (new file):\n      --- /dev/null\n      +++ b/new.py" in text
    assert "  - a.py:1" in text and "  Applied:\n    a.py:" in text
    html = card._repr_mimebundle_()["text/html"]
    assert "#A00000" in html  # removed lines highlighted as a diff


@pytest.mark.parametrize(("view", "summary"), [
    (SearchResultView(shape="matches", truncated=True, total=7, files=(
        SearchFileMatches(path="a.py", matches=(SearchMatch(line=3, text="x"),
                                                SearchMatch(line=9, text="y"))),)),
     "showing 2 of 7 matches"),
    (SearchResultView(shape="matches", truncated=False, total=1, files=(
        SearchFileMatches(path="a.py", matches=(SearchMatch(line=3, text="x"),)),)), "1 match"),
    (SearchResultView(shape="paths", truncated=True, total=5, paths=("a", "b")),
     "showing 2 of 5 paths"),
    (SearchResultView(shape="paths", truncated=False, total=0), "no paths"),
    (SearchResultView(shape="matches", truncated=False, total=0), "no matches"),
])
def test_search_says_when_it_is_truncated(view: SearchResultView, summary: str) -> None:
    card = ToolCard(name="grep", call=GenericCallView(title="grep"))
    card.finish(ok("ignored content"), view)
    lines = plain(card).splitlines()
    assert lines[1] == f"  {summary}"
    assert "ignored content" not in plain(card)  # a search card carries no result text


def test_search_matches_are_grouped_by_file() -> None:
    card = ToolCard(name="grep", call=GenericCallView(title="grep"))
    card.finish(ok(), SearchResultView(shape="matches", truncated=False, total=3, files=(
        SearchFileMatches(path="a.py", matches=(SearchMatch(line=3, text="x"),
                                                SearchMatch(line=12, text="y"))),
        SearchFileMatches(path="b.py", matches=(SearchMatch(line=1, text="z"),)))))
    assert plain(card).splitlines()[2:] == [
        "  a.py (2 matches):", "       3 | x", "      12 | y", "  b.py (1 match):", "      1 | z"]


def test_read_is_numbered_from_its_offset_and_highlighted() -> None:
    card = ToolCard(name="read", call=GenericCallView(title="Read a.py", kind="read"))
    card.finish(ok(), ReadResultView(path="a.py", offset=40, total_lines=99, lang="python",
                                     lines=(ReadLine(number=40, text="def f():"),
                                            ReadLine(number=41, text="    return 1"))))
    assert plain(card).splitlines()[1:] == [
        "  path: a.py", "  lines 40 to 41 of 99", "    40 | def f():", "    41 |     return 1"]
    html = card._repr_mimebundle_()["text/html"]
    assert '<span style="color: #008000; font-weight: bold">def</span>' in html


def test_read_past_the_end_keeps_the_offset() -> None:
    card = ToolCard(name="read", call=GenericCallView(title="Read a.py"))
    card.finish(ok(), ReadResultView(path="a.py", offset=500, total_lines=120, lines=()))
    assert plain(card).splitlines()[-1] == "  no lines from line 500 (the file has 120 lines)"


def test_web_search_and_fetch() -> None:
    search = ToolCard(name="web", call=GenericCallView(title="search"))
    search.finish(ok(), WebResultView(kind="search", sources=(
        WebSource(title="Docs", url="https://docs.example/", snippet="About"),)))
    assert plain(search).splitlines()[1:] == [
        "  1 source", "  - Docs <https://docs.example/>", "    About"]
    fetch = ToolCard(name="fetch", call=GenericCallView(title="fetch"))
    fetch.finish(ok(), WebResultView(kind="fetch", fetch=WebFetchSummary(
        url="https://e.example/", title="E", status=404, content_type="text/html", bytes=10,
        summary="Not found")))
    assert plain(fetch).splitlines()[1:] == [
        "  - E <https://e.example/>", "  status: 404", "  type: text/html", "  size: 10 bytes",
        "  Not found"]


def test_generic_call_and_result() -> None:
    card = ToolCard(name="t", call=GenericCallView(title="t", raw_input='{"a": 1}',
                                                   content="context"))
    card.finish(ok("out"), GenericResultView(title="Result", content="shown"))
    assert plain(card) == ('[ok] t\n  input:\n    {"a": 1}\n    context\n  Result:\n'
                           "      shown")


def test_fallback_without_presenter_and_for_errors() -> None:
    card = ToolCard(name="t", call=GenericCallView(title="t"))
    card.finish(ok(""))
    assert plain(card) == "[ok] t\n  (no output)"
    card.finish(failed("disk full\nsecond line", "TOOL_ERROR"))
    assert plain(card) == "[error: TOOL_ERROR] t\n  error:\n    disk full\n    second line"
    card.finish(failed("no code", None))
    assert plain(card).splitlines()[0] == "[error] t"


def test_fallback_draws_image_blocks_between_the_text() -> None:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(32)).decode()
    card = ToolCard(name="t", call=GenericCallView(title="t"))
    card.finish(DurableResult(is_error=False, content=(
        {"type": "text", "text": "before"},
        {"type": "image", "data": png, "mime_type": "image/png"},
        {"type": "image", "data": "bm90IGEgcG5n", "mime_type": "image/png"},
        {"type": "text", "text": "after"})))
    assert plain(card) == ("[ok] t\n    before\n  [image/png, 40 B]\n"
                           "  [an image that could not be read (image/png)]\n    after")
    assert f'src="data:image/png;base64,{png}"' in card._repr_mimebundle_()["text/html"]


ALL_VIEWS: list[tuple[Any, Any]] = [
    (TerminalCallView(title=PAYLOAD, description=PAYLOAD, cwd=PAYLOAD),
     TerminalResultView(title=PAYLOAD, output=PAYLOAD, signal=PAYLOAD)),
    (DiffCallView(title=PAYLOAD, diffs=(FileDiff(path=PAYLOAD, old_text=PAYLOAD,
                                                 new_text=PAYLOAD + "!"),),
                  locations=(Location(path=PAYLOAD),)),
     DiffResultView(title=PAYLOAD, diffs=(FileDiff(path=PAYLOAD, old_text=None,
                                                   new_text=PAYLOAD),))),
    (GenericCallView(title=PAYLOAD, kind=PAYLOAD, raw_input=PAYLOAD, content=PAYLOAD),
     SearchResultView(shape="matches", title=PAYLOAD, truncated=True, total=9, files=(
         SearchFileMatches(path=PAYLOAD, matches=(SearchMatch(line=1, text=PAYLOAD),)),))),
    (GenericCallView(title=PAYLOAD),
     SearchResultView(shape="paths", truncated=False, total=1, paths=(PAYLOAD,))),
    (GenericCallView(title=PAYLOAD),
     ReadResultView(path=PAYLOAD, offset=1, total_lines=1, lang="html", title=PAYLOAD,
                    lines=(ReadLine(number=1, text=PAYLOAD),))),
    (GenericCallView(title=PAYLOAD),
     WebResultView(kind="search", title=PAYLOAD, sources=(
         WebSource(title=PAYLOAD, url=PAYLOAD, snippet=PAYLOAD),))),
    (GenericCallView(title=PAYLOAD),
     WebResultView(kind="fetch", fetch=WebFetchSummary(url=PAYLOAD, title=PAYLOAD,
                                                       content_type=PAYLOAD, summary=PAYLOAD))),
    (GenericCallView(title=PAYLOAD), GenericResultView(title=PAYLOAD, content=PAYLOAD)),
    (GenericCallView(title=PAYLOAD), None),
]


@pytest.mark.parametrize(("call", "result"), ALL_VIEWS)
@pytest.mark.parametrize("error", [False, True])
def test_tool_text_never_becomes_markup(call: Any, result: Any, error: bool) -> None:
    card = ToolCard(name=PAYLOAD, call=call)
    card.finish(failed(PAYLOAD, PAYLOAD) if error else ok(PAYLOAD), result)
    bundle = card._repr_mimebundle_()
    assert PAYLOAD in bundle["text/plain"]
    for text in (bundle["text/html"], widget_html(card.widget)):
        assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    fenced = bundle["text/markdown"].split("```")
    assert all("<img" not in part for part in fenced[::2])


def test_mimebundle_has_every_fallback_and_the_widget() -> None:
    card = ToolCard(name="t", call=GenericCallView(title="t"))
    bundle = card._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", "text/markdown", WIDGET_MIME}
    assert bundle[WIDGET_MIME]["model_id"] == card.widget.model_id
    assert set(card._repr_mimebundle_(include=["text/plain"])) == {"text/plain"}
    assert WIDGET_MIME not in card._repr_mimebundle_(exclude=[WIDGET_MIME])
    assert str(card) == "[running] t"


def test_the_widget_updates_in_place() -> None:
    card = ToolCard(name="t", call=GenericCallView(title="t"))
    widget = card.widget
    assert "running" in widget_html(widget)
    card.finish(ok("done"), duration=0.25)
    assert card.widget is widget
    html = widget_html(widget)
    assert "dsh-status-ok" in html and "250 ms" in html and "done" in html
    assert "250 ms" not in card._repr_mimebundle_()["text/html"]


# --- presenters ---------------------------------------------------------------------


def read_tool(**presenters: Any) -> Any:
    return define_tool(name="read", parameters={"type": "object"},
                       output={"schema": {"type": "string"}, "render": lambda a, v: "content"},
                       execute=lambda a, c: "secret canonical value", **presenters)


def test_tool_card_uses_the_definitions_presenters() -> None:
    definition = read_tool(
        present_call=lambda args: TerminalCallView(title=f"cat {args['path']}"),
        present_result=lambda args, durable: TerminalResultView(
            output=f"{len(durable.content)} block", exit_code=0))
    result = ToolSuccess(value="secret canonical value",
                         content=({"type": "text", "text": "content"},))
    card = tool_card("read", {"path": "a"}, definition=definition, result=result)
    text = plain(card)
    assert text.startswith("[ok] cat a — read") and "1 block" in text
    assert "secret" not in text  # only the durable part of a result reaches a card


def test_failing_or_odd_presenters_fall_back_to_generic() -> None:
    def boom(*_: Any) -> Any:
        raise KeyError("old log arguments")

    for definition in (read_tool(present_call=boom, present_result=boom),
                       read_tool(present_call=lambda a: "not a view",
                                 present_result=lambda a, d: 42), None):
        card = tool_card("read", {"path": "a"}, definition=definition, result=ok("content"))
        assert plain(card) == '[ok] read\n  input:\n    {\n      "path": "a"\n    }\n' \
                              "    content"


# --- run_code -----------------------------------------------------------------------


PROGRAM = "x = await tools.a({})\nprint(x)\nreturn x"


def test_run_code_card_title_program_and_outcome() -> None:
    card = tool_card("run_code", {"code": PROGRAM, "description": "Add things"})
    assert isinstance(card, RunCodeCard)
    sub = card.start_call("r:code:1", "a", {"n": 1})
    assert plain(card) == ("[running] Add things — run_code\n  program (3 lines):\n"
                           "    x = await tools.a({})\n    print(x)\n    return x\n"
                           "  tool calls (1):\n    [queued] a — n=1")
    sub.dispatched(1.0)  # its policy let it through: it runs
    assert plain(card).endswith("  tool calls (1):\n    [running] a — n=1")
    sub.finish(failed("boom", "DENIED"), duration=0.1)
    card.finish(ok("1\n1"))
    assert plain(card).splitlines()[-5:] == [
        "    [error: DENIED] a — n=1", "      boom", "  output:", "    1", "    1"]
    html = widget_html(card.widget)
    assert "<details class=\"dsh-details\" open>" in html and "100 ms" in html


def test_sub_calls_queued_behind_an_approval_say_so_and_count_only_their_run() -> None:
    card = tool_card("run_code", {"code": PROGRAM, "description": "Load"})
    assert isinstance(card, RunCodeCard)
    first = card.start_call("r:code:1", "read_csv", {"path": "a.csv"})
    card.approval_asked("r:code:1", True)
    second = card.start_call("r:code:2", "stats", {})
    third = card.start_call("r:code:3", "stats", {})
    lines = plain(card).splitlines()[-3:]
    assert lines == ["    [waiting: approval] read_csv — path=\"a.csv\"",
                     "    [queued: waiting for approval of read_csv] stats",
                     "    [queued: waiting for approval of read_csv] stats"]
    assert card.origin("r:code:2") == "from the program 'Load' · call 2 of 3 so far"
    card.approval_asked("r:code:1", False)
    first.dispatched(2.0)
    assert plain(card).splitlines()[-3:] == [
        "    [running] read_csv — path=\"a.csv\"", "    [queued] stats", "    [queued] stats"]
    second.dispatched(2.5)
    second.finish(ok("1"), duration=0.2, waited=1.4)
    third.finish(failed("the run settled", "ABORTED"), duration=0.0)
    header = widget_html(card.widget)
    assert "200 ms" in header and "(waited 1.4 s)" in header


def test_a_long_program_folds_its_sub_calls_into_one_row_that_counts_them() -> None:
    card = tool_card("run_code", {"code": PROGRAM, "description": "Many"})
    assert isinstance(card, RunCodeCard)
    widget = card.widget
    subs = [card.start_call(f"r:code:{n}", "read", {"n": n}) for n in range(1, 135)]
    more = next(b for b in _buttons(widget) if "dsh-more" in b._dom_classes)
    folded = next(w for w in walk(widget) if "dsh-calls-more" in getattr(w, "_dom_classes", ()))
    assert more.description == "… and 124 more (124 queued)"  # counted live
    for n, sub in enumerate(subs, start=1):
        sub.dispatched(float(n))
        if n == 12:
            assert more.description == "… and 124 more (1 ok, 1 running, 122 queued)"
        sub.finish(failed("no", "NOT_FOUND") if n % 30 == 0 else ok(str(n)), duration=0.1)
    card.finish(ok("done"))

    # Text fallbacks (what nbval compares): ten rows, then one line that counts the rest.
    lines = plain(card).splitlines()
    rows = lines.index("  tool calls (134):")
    assert lines[rows + 1] == "    [ok] read — n=1" and lines[rows + 10] == "    [ok] read — n=10"
    assert lines[rows + 11] == "    … and 124 more (120 ok, 4 failed)"
    assert "n=11" not in plain(card) and len(lines) < 30
    bundle = card._repr_mimebundle_()
    assert "*… and 124 more \\(120 ok, 4 failed\\)*" in bundle["text/markdown"]
    html = bundle["text/html"]  # a disclosure that opens on the other 124
    fold = html.index('<details class="dsh-fold">')
    assert "… and 124 more (120 ok, 4 failed)</summary>" in html[fold:]
    assert html.index("n=10") < fold < html.index("n=11") < html.index("n=134")

    # The widget: ten cards, a row that unfolds the others on a click, and folds them again.
    assert len(card._calls_box.children) == 10 and len(folded.children) == 124
    assert more.layout.display is None and folded.layout.display == "none"
    assert more.description == "… and 124 more (120 ok, 4 failed)"
    more.click()
    assert folded.layout.display is None and card.unfolded
    assert more.description == "hide the last 124 (120 ok, 4 failed)"
    assert "n=11" not in plain(card)  # the fallbacks fold whatever the widget shows
    more.click()
    assert folded.layout.display == "none"


def test_a_folded_sub_call_that_asks_for_approval_unfolds_the_card() -> None:
    card = tool_card("run_code", {"code": PROGRAM, "description": "Many"})
    assert isinstance(card, RunCodeCard)
    widget = card.widget
    for n in range(1, 11):
        card.start_call(f"r:code:{n}", "read", {"n": n}).finish(ok(), duration=0.1)
    more = next(b for b in _buttons(widget) if "dsh-more" in b._dom_classes)
    assert more.layout.display == "none"  # ten calls: nothing to fold
    card.start_call("r:code:11", "delete", {"n": 11})
    assert (more.layout.display, card.unfolded) == (None, False)
    card.approval_asked("r:code:11", True)
    assert card.unfolded  # its Approve / Reject buttons must be in view
    assert more.description == "hide the last 1 (1 waiting)"


def test_live_output_streams_logs_and_displays_in_order_then_the_result() -> None:
    stops: list[str] = []
    card = RunCodeCard(arguments={"code": "print(1)", "description": "d"},
                       stop=lambda: stops.append("stop"))
    widget = card.widget
    card.add_output(["one", "two"])
    card.add_output([], {"data": {"text/plain": "<Figure 1>"}, "metadata": {}})
    card.add_output(["three"])
    text = plain(card)
    assert text.index("one\n    two") < text.index("<Figure 1>") < text.index("three")
    assert "three" in widget_html(widget)  # the widget streams too
    # One widget per display, drawn once: the lines after it update a widget of their own.
    logs_before, figure, logs_after = card._live.children
    drawn = figure.value
    card.add_output(["four"])
    assert figure.value == drawn and "four" in logs_after.value and "four" not in drawn
    assert "&lt;Figure 1&gt;" in drawn and "one" in logs_before.value
    card.add_output([f"line {n}" for n in range(400)])
    assert "… 204 earlier lines" in plain(card) and "line 399" in plain(card)
    assert "… 202 earlier lines" in logs_after.value  # "three", "four" and 200 lines
    button = next(b for b in _buttons(widget) if "dsh-stop" in b._dom_classes)
    assert button.layout.display == "flex"
    button.click()
    button.click()  # once is enough: the second click is ignored while it stops
    assert stops == ["stop"]
    card.finish(failed("code run failed (abort): stopped by the user\nCaptured output:\n"
                       "one\ntwo\nthree", "CODE_RUN_FAILED"), duration=2.04)
    text = plain(card)
    assert text.startswith("[stopped] d — run_code")
    assert "Stopped by the user after 2.0 s." in text
    assert text.index("two") < text.index("<Figure 1>") < text.index("three")
    assert "line 399" not in text  # the live lines gave way to the result's logs
    assert button.layout.display == "none"


def test_a_cancelled_run_says_why_it_stopped() -> None:
    card = tool_card("run_code", {"code": "x", "description": "d"}, result=failed(
        "code run failed (abort): the call was cancelled", "CODE_RUN_FAILED"), duration=1.0)
    assert isinstance(card, RunCodeCard)
    assert "Stopped (the call was cancelled) after 1.0 s." in plain(card)
    card.finish_stopped("the user")
    assert "Stopped by the user after 1.0 s." in plain(card)


def _buttons(widget: Any) -> list[Any]:
    found = []
    for child in getattr(widget, "children", ()):
        if type(child).__name__ == "Button":
            found.append(child)
        found += _buttons(child)
    return found


def test_run_code_card_with_logs_and_result_meta() -> None:
    card = tool_card("run_code", {"code": "return 1", "description": "d"},
                     result=ok("a\n1", meta={"logs": ["a"], "result": "1"}))
    assert plain(card).splitlines()[-4:] == ["  logs:", "    a", "  result:", "    1"]


def test_run_code_card_shows_a_warn_checks_problems_and_a_rejected_program() -> None:
    problem = "line 2: Unknown key \"line\" for TypedDict `ReadFileOutput` [invalid-typed-dict-key]"
    card = tool_card("run_code", {"code": "return 1", "description": "d"},
                     result=ok("1", meta={"logs": [], "result": "1", "type_check": [problem]}))
    assert plain(card).splitlines()[-4:] == ["  result:", "    1", "  type check:",
                                             f"    {problem}"]
    rejected = tool_card("run_code", {"code": "x", "description": "d"}, result=failed(
        "code run failed (type-check): the program was not run: checked against the tools' "
        f"SDK, it has 1 problem (fix and run it again)\n{problem}", "CODE_RUN_FAILED"))
    assert plain(rejected).splitlines()[3:6] == [
        "  failure: type-check", "  message:",
        "    the program was not run: checked against the tools' SDK, it has 1 problem (fix "
        "and run it again)"]


def test_run_code_failure_shows_kind_message_and_logs() -> None:
    message = ("code run failed (exception): Traceback:\n  ValueError: bad\n"
               "Captured output:\nbefore the crash")
    card = tool_card("run_code", {"code": "raise ValueError('bad')", "description": "d"},
                     result=failed(message, "CODE_RUN_FAILED"))
    assert plain(card).splitlines()[3:] == [
        "  failure: exception", "  message:", "    Traceback:", "      ValueError: bad",
        "  logs:", "    before the crash"]
    denied = tool_card("run_code", {"code": "", "description": " "},
                       result=failed("needs approval", "DENIED"))
    assert plain(denied).splitlines()[0] == "[error: DENIED] Run code — run_code"
    assert plain(denied).splitlines()[-1] == "    needs approval"


def test_long_programs_start_collapsed() -> None:
    card = tool_card("run_code", {"code": "\n".join(["pass"] * 30), "description": "d"})
    assert "<details class=\"dsh-details\">" in widget_html(card.widget)
