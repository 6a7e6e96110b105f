"""Rich outputs on real kernels: display(), _repr_html_/_repr_png_, matplotlib figures,
the display budget, hostile display messages, and output observers told live."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest
from kernel_support import RuntimeFactory, run

from dsh_jupyter.abort import AbortController
from dsh_jupyter.kernel import KernelRuntime
from dsh_jupyter.kernel.inkernel.messages import MAX_MESSAGE_BYTES
from dsh_jupyter.kernel.inkernel.outputs import MAX_DISPLAY_BYTES
from dsh_jupyter.kernel.run.displays import NOTE_METADATA
from dsh_jupyter.runtime import Display, FunctionBindings, RunRequest

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90)]

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAADUlEQVR4nGP4z8AARAAI/gH/"
                       "xp559wAAAABJRU5ErkJggg==")  # 2x1 pixels

# A display_data message of the program cell, sent as the kernel would, with any content:
# what a hostile program can put on iopub without IPython's display machinery.
RAW_DISPLAY = """\
def raw_display(content):
    pub = get_ipython().display_pub
    pub.session.send(pub.pub_socket, "display_data", content, parent=pub.parent_header,
                     ident=pub.topic)
"""


class Observer(FunctionBindings):
    """Bindings that record the output they are told, and when."""

    def __init__(self, *, fail: bool = False) -> None:
        super().__init__({})
        self.fail = fail
        self.seen: list[tuple[str, object, float]] = []
        self.closed_at: float | None = None
        self.displayed = asyncio.Event()

    def on_log(self, line: str) -> None:
        self.seen.append(("log", line, time.monotonic()))
        if self.fail:
            raise RuntimeError("observer broke")

    def on_display(self, display: Display) -> None:
        self.seen.append(("display", display, time.monotonic()))
        self.displayed.set()
        if self.fail:
            raise RuntimeError("observer broke")

    def close(self, reason: str) -> None:
        self.closed_at = time.monotonic()
        super().close(reason)


def kinds(displays: tuple[Display, ...]) -> list[list[str]]:
    return [sorted(d.data) for d in displays]


async def test_repr_html_and_repr_png_in_order_with_logs(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    program = f"""\
class Table:
    def _repr_html_(self):
        return "<table><tr><td>1</td></tr></table>"
class Picture:
    def _repr_png_(self):
        return {PNG!r}
    def __repr__(self):
        return "<Picture>"
print("one")
display(Table())
print("two")
print("three")
display(Picture())
return "done"
"""
    result = await run(runtime, program)
    assert result.failure is None, result.failure
    assert result.logs == ("one", "two", "three")
    assert result.value == "done"
    table, picture = result.displays
    assert table.data["text/html"] == "<table><tr><td>1</td></tr></table>"
    assert table.after_logs == 1
    assert picture.data["text/plain"] == "<Picture>"
    assert base64.b64decode(str(picture.data["image/png"])) == PNG
    assert picture.after_logs == 3
    assert result.displays_dropped == 0


async def test_a_plot_without_show_arrives_before_the_run_settles(
        runtime: KernelRuntime) -> None:
    program = """\
import matplotlib.pyplot as plt
print("plotting")
plt.plot([1, 2, 3])
print("plotted")
return "ok"
"""
    result = await run(runtime, program)
    assert result.failure is None, result.failure
    assert result.logs == ("plotting", "plotted")
    (figure,) = result.displays
    assert str(figure.data["text/plain"]).startswith("<Figure size")
    assert base64.b64decode(str(figure.data["image/png"])).startswith(b"\x89PNG")
    assert figure.after_logs == 2  # shown when the program ended, as a notebook does


async def test_show_and_display_of_a_figure_mid_program(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    program = """\
import matplotlib.pyplot as plt
plt.plot([1, 2])
plt.show()                   # shown now, and closed
print("after show")
fig, ax = plt.subplots()
ax.bar([1, 2], [3, 4])
display(fig)                 # shown now; still open, so shown again at the end
plt.close(fig)
print("closed")
"""
    result = await run(runtime, program)
    assert result.failure is None, result.failure
    assert result.logs == ("after show", "closed")
    assert [d.after_logs for d in result.displays] == [0, 1]
    assert all("image/png" in d.data for d in result.displays)


async def test_a_failing_program_still_shows_its_figures(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    result = await run(runtime, "import matplotlib.pyplot as plt\nplt.plot([1])\n1 / 0")
    assert result.failure is not None and result.failure.kind == "exception"
    assert kinds(result.displays) == [["image/png", "text/plain"]]


async def test_updates_and_clear_output_are_ignored(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    program = """\
from IPython.display import clear_output
handle = display({"text/plain": "first"}, raw=True, display_id=True)
handle.update({"text/plain": "second"}, raw=True)
clear_output()
print("kept")
"""
    result = await run(runtime, program)
    assert result.failure is None, result.failure
    assert [d.data for d in result.displays] == [{"text/plain": "first"}]
    assert result.logs == ("kept",)


async def test_over_the_display_count_a_note_and_every_log_line(
        make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(max_displays=3)
    program = """\
for i in range(8):
    print(f"line {i}")
    display({"text/plain": f"display {i}"}, raw=True)
print("end")
"""
    result = await run(runtime, program)
    assert result.failure is None, result.failure
    assert result.logs == (*(f"line {i}" for i in range(8)), "end")
    assert [d.data["text/plain"] for d in result.displays[:3]] == [
        "display 0", "display 1", "display 2"]
    note = result.displays[3]
    assert note.metadata == NOTE_METADATA and note.after_logs == 4
    assert "later displays of the program are not shown" in str(note.data["text/plain"])
    assert "max_displays" in str(note.data["text/plain"])
    assert len(result.displays) == 4
    assert result.displays_dropped == 5


async def test_over_the_display_bytes_a_note_and_every_log_line(
        make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(max_display_bytes=100_000)
    program = """\
display({"text/plain": "small"}, raw=True)
print("a")
display({"text/plain": "x" * 200_000}, raw=True)
print("b")
display({"text/plain": "small again"}, raw=True)
print("c")
"""
    result = await run(runtime, program)
    assert result.failure is None, result.failure
    assert result.logs == ("a", "b", "c")
    assert [d.data["text/plain"] for d in result.displays[:1]] == ["small"]
    assert "max_display_bytes" in str(result.displays[1].data["text/plain"])
    assert result.displays_dropped == 2


async def test_a_display_too_big_for_one_message_is_a_note_not_a_failure(
        make_runtime: RuntimeFactory) -> None:
    assert MAX_DISPLAY_BYTES < MAX_MESSAGE_BYTES
    runtime = await make_runtime(max_display_bytes=64 * 2**20)
    program = """\
print("before")
display({"text/plain": "x" * 3_000_000}, raw=True)
print("after")
"""
    result = await run(runtime, program)
    assert result.failure is None, result.failure
    assert result.logs == ("before", "after")
    (note,) = result.displays
    assert "was not sent" in str(note.data["text/plain"])


async def test_hostile_display_messages_are_dropped(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    program = RAW_DISPLAY + """\
raw_display({"data": "not a bundle", "metadata": {}})
raw_display({"data": {}, "metadata": {}})
raw_display({"data": {"text/plain": ["not", "a", "string"]}})
raw_display({"data": {"no slash": "x"}})
raw_display({"data": {"text/plain": "ok"}, "metadata": ["not", "an", "object"]})
raw_display({"data": {f"a/b{i}": "x" for i in range(100)}})
raw_display({"metadata": {}})
nested = []
for _ in range(600):  # deeper than the host takes (500), within what json encodes
    nested = [nested]
raw_display({"data": {"application/json": nested}})
raw_display({"data": {"text/plain": "kept", "application/vnd.custom+json": {"k": [1, 2]}},
             "metadata": {"isolated": True}})
print("still running")
return 1
"""
    result = await run(runtime, program)
    assert result.failure is None, result.failure
    assert result.value == 1
    assert result.logs == ("still running",)
    (kept,) = result.displays
    assert kept.data == {"text/plain": "kept", "application/vnd.custom+json": {"k": [1, 2]}}
    assert kept.metadata == {"isolated": True}
    assert result.displays_dropped == 0  # junk is no display: not counted


async def test_observers_are_told_as_output_arrives(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    observer = Observer()
    program = """\
import asyncio
print("first")
display({"text/plain": "shown"}, raw=True)
print("partial", end="")
await asyncio.sleep(1.0)
"""
    started = time.monotonic()
    result = await runtime.run(RunRequest(program, observer, observer=observer))
    ended = time.monotonic()
    assert result.failure is None, result.failure
    assert [(kind, item if kind == "log" else None) for kind, item, _ in observer.seen] == [
        ("log", "first"), ("display", None), ("log", "partial")]
    first, shown, partial = (at for _, _, at in observer.seen)
    # The line and the display were told while the program slept, not when it ended...
    assert shown - started < ended - started - 0.5
    assert first <= shown
    # ... and the last partial line before the bindings were closed.
    assert observer.closed_at is not None and partial <= observer.closed_at
    assert observer.seen[1][1] == result.displays[0]


async def test_a_failing_observer_never_breaks_the_run(
        make_runtime: RuntimeFactory, caplog: pytest.LogCaptureFixture) -> None:
    runtime = await make_runtime()
    observer = Observer(fail=True)
    program = 'print("a")\ndisplay({"text/plain": "d"}, raw=True)\nprint("b")\nreturn 2'
    result = await runtime.run(RunRequest(program, observer, observer=observer))
    assert result.failure is None and result.value == 2
    assert result.logs == ("a", "b") and len(result.displays) == 1
    assert len(observer.seen) == 3  # still told everything
    failures = [r for r in caplog.records if "output observer" in r.getMessage()]
    assert len(failures) == 1  # logged once per run


async def test_kernels_find_matplotlibs_font_list_in_their_home(
        make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    await asyncio.sleep(0)  # entered: the font list is seeded (or being built)
    program = """\
import os
cache = os.path.expanduser("~/.cache/matplotlib")
return sorted(os.listdir(cache)) if os.path.isdir(cache) else []
"""
    result = await run(runtime, program)
    assert result.failure is None, result.failure
    assert isinstance(result.value, list)
    assert any(str(name).startswith("fontlist-v") for name in result.value), result.value


async def test_an_aborted_run_keeps_what_it_displayed(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    controller = AbortController()
    observer = Observer()
    program = """\
import asyncio
print("working")
display({"text/plain": "progress"}, raw=True)
await asyncio.sleep(30)
"""
    running = asyncio.ensure_future(
        runtime.run(RunRequest(program, observer, controller.signal, observer=observer)))
    await asyncio.wait_for(observer.displayed.wait(), 30)
    controller.abort("stop")
    result = await running
    assert result.failure is not None and result.failure.kind == "abort"
    assert result.logs == ("working",)
    assert [d.data for d in result.displays] == [{"text/plain": "progress"}]
