"""Protocol rules without a kernel: message parsing, the bridge, output counting, config."""

from __future__ import annotations

import ast
import asyncio
import json
import math
from pathlib import Path

import pytest

from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel import KernelRuntimeConfig, inject, protocol
from dsh_jupyter.kernel.inkernel import _loader, messages, program, runner, values
from dsh_jupyter.kernel.inkernel.messages import HostMessage
from dsh_jupyter.kernel.inkernel.shortcuts import RUN_MARK
from dsh_jupyter.kernel.protocol import Malformed, parse_kernel_message
from dsh_jupyter.kernel.run.call_server import CallServer
from dsh_jupyter.kernel.run.logs import OutputLog
from dsh_jupyter.kernel.run.workspace import Workspace
from dsh_jupyter.kernel.transport.carrier import CarrierListener, MessageTooLarge
from dsh_jupyter.runtime import BindingError, FunctionBindings

pytestmark = pytest.mark.timeout(10)


def test_kernel_and_host_agree_on_names() -> None:
    module = repr(inject.MODULE_NAME)
    assert module in inject.program_cell([], "", 1)
    assert module in inject.setup_cell(None, preloaded=True)
    setup = inject.setup_cell(("path", "token"), preloaded=False)
    assert module in setup and repr(program.SOURCE_FILENAME) in setup
    assert repr(inject.loader_source()) in setup
    for _, source in inject.inkernel_sources():
        assert repr(source) in setup
    # One definition of each message for both ends: the host parses into the kernel's.
    for name in ("CallMessage", "DoneErrorMessage", "FramedCallMessage", "ResultOkMessage"):
        assert vars(protocol)[name] is vars(messages)[name]


def test_the_loader_loads_every_module_after_those_it_imports() -> None:
    """The setup cell and the fork server load the package in ``_loader.MODULES`` order:
    each module's relative imports must name modules already loaded, and every module of
    the package (but the loader itself) must be loaded."""
    directory = Path(_loader.__file__).parent
    files = {path.stem for path in directory.glob("*.py")} - {"_loader"}
    assert set(_loader.MODULES) == files
    loaded: set[str] = set()
    for name, source in _loader.sources():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module in loaded, (name, node.module)
        loaded.add(name)


@pytest.mark.parametrize("data", [
    None, "junk", 3, [1], {}, {"kind": "nope"}, {"kind": "call"},
    {"kind": "call", "id": 5, "name": "a", "args": {}},
    {"kind": "call", "id": "", "name": "a", "args": {}},
    {"kind": "call", "id": "x" * 65, "name": "a", "args": {}},
    {"kind": "done"}, {"kind": "done", "ok": False, "error": "weird"},
])
def test_malformed_without_an_id(data: object) -> None:
    parsed = parse_kernel_message(data)
    assert isinstance(parsed, Malformed) and parsed.call_id is None


def test_malformed_with_an_id_can_be_answered() -> None:
    parsed = parse_kernel_message({"kind": "call", "id": "7", "name": "a"})
    assert isinstance(parsed, Malformed) and parsed.call_id == "7"


def test_valid_messages() -> None:
    assert parse_kernel_message({"kind": "call", "id": "1", "name": "a", "args": [1]}) == {
        "kind": "call", "id": "1", "name": "a", "args": [1]}
    assert parse_kernel_message({"kind": "done", "ok": True}) == {
        "kind": "done", "ok": True, "value": None}
    assert parse_kernel_message({"kind": "done", "ok": False, "error": "exception",
                                 "message": "boom"}) == {
        "kind": "done", "ok": False, "error": "exception", "message": "boom"}


class FakeKernel:
    def __init__(self) -> None:
        self.sent: list[HostMessage] = []

    def send(self, message: HostMessage) -> None:
        self.sent.append(message)

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)


async def test_bridge_answers_and_drops() -> None:
    kernel = FakeKernel()
    gate = asyncio.Event()

    async def echo(args: JsonValue) -> JsonValue:
        return {"echo": args}

    async def held(args: JsonValue) -> JsonValue:
        await gate.wait()
        return "released"

    async def denied(args: JsonValue) -> JsonValue:
        raise BindingError("nope")

    bridge = CallServer(FunctionBindings({"echo": echo, "held": held, "denied": denied}),
                        kernel.send, max_pending_calls=4, max_call_bytes=100,
                        max_value_bytes=1 << 20)
    bridge.receive({"kind": "call", "id": "1", "name": "echo", "args": {"a": 1}}, 10)
    bridge.receive({"kind": "call", "id": "2", "name": "held", "args": {}}, 10)
    bridge.receive({"kind": "call", "id": "2", "name": "held", "args": {}}, 10)  # duplicate
    bridge.receive({"kind": "call", "id": "3", "name": "missing", "args": {}}, 10)
    bridge.receive({"kind": "call", "id": "4", "name": "echo", "args": {}}, 1000)  # too big
    bridge.receive({"kind": "call", "id": "5", "name": "echo", "args": math.nan}, 10)
    bridge.receive({"kind": "call", "id": "6", "name": "denied", "args": {}}, 10)
    bridge.receive("junk", 4)
    await kernel.settle()
    by_id = {m["id"]: m for m in kernel.sent}
    assert by_id["1"] == {"kind": "result", "id": "1", "ok": True, "value": {"echo": {"a": 1}}}
    assert "2" not in by_id and bridge.in_flight == 1
    assert "no tool named 'missing'" in by_id["3"]["message"]  # type: ignore[typeddict-item]
    assert "over the 100 byte limit" in by_id["4"]["message"]  # type: ignore[typeddict-item]
    assert "not lossless JSON" in by_id["5"]["message"]  # type: ignore[typeddict-item]
    assert by_id["6"] == {"kind": "result", "id": "6", "ok": False, "message": "nope"}
    assert bridge.dropped == 2
    bridge.stop("the run ended")
    assert bridge.receive({"kind": "call", "id": "9", "name": "echo", "args": {}}, 1) is None
    gate.set()
    await bridge.drain()
    assert bridge.in_flight == 0
    assert "2" not in {m["id"] for m in kernel.sent}  # no replies after stop


async def test_bridge_limits_calls_in_flight() -> None:
    kernel = FakeKernel()
    gate = asyncio.Event()

    async def held(args: JsonValue) -> JsonValue:
        await gate.wait()
        return None

    bridge = CallServer(FunctionBindings({"held": held}), kernel.send, max_pending_calls=2,
                        max_call_bytes=100, max_value_bytes=1 << 20)
    for call_id in "abc":
        bridge.receive({"kind": "call", "id": call_id, "name": "held", "args": {}}, 1)
    await kernel.settle()
    assert [m["id"] for m in kernel.sent] == ["c"]
    assert "too many calls" in kernel.sent[0]["message"]  # type: ignore[typeddict-item]
    gate.set()
    await kernel.settle()
    await bridge.drain()


async def test_stop_closes_the_bindings_once_for_calls_in_flight() -> None:
    """The end of the run is part of the seam: stop() closes the bindings (once), so a
    call that waits for the end of its run stops; drain() then returns."""
    kernel = FakeKernel()
    observed: list[bool] = []
    closes: list[str] = []

    class Watching(FunctionBindings):
        def close(self, reason: str) -> None:
            closes.append(reason)
            super().close(reason)

    async def watcher(args: JsonValue) -> JsonValue:
        await bindings.signal.wait()
        observed.append(bindings.signal.aborted)
        return None

    bindings = Watching({"watch": watcher})
    bridge = CallServer(bindings, kernel.send, max_pending_calls=5, max_call_bytes=100,
                        max_value_bytes=1 << 20)
    bridge.receive({"kind": "call", "id": "1", "name": "watch", "args": {}}, 1)
    await kernel.settle()
    bridge.stop("the run ended")
    bridge.stop("again")
    await bridge.drain()
    assert observed == [True] and closes == ["the run ended"]
    assert kernel.sent == []


def _size(entries: list[str]) -> int:
    """The seed's payload: the serialized log array, brackets and commas included."""
    return len(json.dumps(entries, ensure_ascii=False, separators=(",", ":")).encode())


def test_output_log_lines_and_exact_budget() -> None:
    log = OutputLog(max_bytes=_size(["ab", "cdé", "x"]))
    log.write("stdout", "a")
    log.write("stderr", "x")
    log.write("stdout", "b\ncdé\n")
    assert not log.over_limit
    assert log.finish() == ("ab", "cdé", "x")
    assert log.used_bytes == _size(["ab", "cdé", "x"])


def test_output_log_keeps_what_fits() -> None:
    log = OutputLog(max_bytes=_size(["one", "two"]) + 3)
    log.write("stdout", "one\ntwo\nthree\nfour\n")
    assert log.over_limit
    assert log.finish() == ("one", "two")


def test_output_log_charges_partial_lines_as_they_arrive() -> None:
    log = OutputLog(max_bytes=100)
    for _ in range(20):
        log.write("stdout", "x" * 10)
    assert log.over_limit
    assert log.finish() == ()


def test_output_log_value() -> None:
    log = OutputLog(max_bytes=10)
    assert log.add_value({"a": 1})  # [] and {"a":1}: 2 + 7 bytes
    assert not log.add_value("long")


@pytest.mark.parametrize(("limit", "fits"), [(14, True), (13, False)])
def test_the_cap_counts_the_serialized_log_array_exactly(limit: int, fits: bool) -> None:
    """000: maxOutputBytes covers the serialized log array plus the value: printing `ab`
    and `cd` and returning "x" is ["ab","cd"] (11 bytes) + "x" (3) = 14."""
    log = OutputLog(max_bytes=limit)
    log.write("stdout", "ab\ncd\n")
    assert log.add_value("x") is fits
    assert log.finish() == ("ab", "cd")


def test_json_problem_in_kernel() -> None:
    problem = values.json_problem
    assert problem({"a": [1, 2.5, "x", None, True]}) is None
    assert "set" in (problem({"a": {1}}) or "")
    assert "at a" in (problem({"a": {1}}) or "")
    assert "tuple" in (problem((1, 2)) or "")
    assert "-0.0" in (problem(-0.0) or "")
    assert "nan" in (problem(float("nan")) or "")
    assert "key of type int" in (problem({1: 2}) or "")
    cycle: list[object] = []
    cycle.append(cycle)
    assert "cycle" in (problem(cycle) or "")
    shared = [1]
    assert problem([shared, shared]) is None
    deep: list[object] = []
    for _ in range(values.MAX_DEPTH - 1):
        deep = [deep]
    assert problem(deep) is None  # MAX_DEPTH arrays
    assert "nested more than 500 levels deep (at [0][0]" in (problem([deep]) or "")
    for _ in range(50_000):
        deep = [deep]
    assert "nested more than 500 levels deep" in (problem({"a": deep}) or "")


def test_config_validation() -> None:
    assert KernelRuntimeConfig().compute_seconds == 60.0
    assert KernelRuntimeConfig().max_output_bytes == 64 * 1024 * 1024
    with pytest.raises(ValueError):
        KernelRuntimeConfig(wall_seconds=0)
    with pytest.raises(ValueError):
        KernelRuntimeConfig(max_output_bytes=-1)
    with pytest.raises(ValueError):
        KernelRuntimeConfig(launcher="spawn")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        KernelRuntimeConfig(launcher="fork", kernel_name="python3")
    with pytest.raises(ValueError):
        KernelRuntimeConfig(env_allow="PATH")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        KernelRuntimeConfig(pool_size=True)
    config = KernelRuntimeConfig(extra_env={"A": "1"})
    with pytest.raises(TypeError):
        config.extra_env["B"] = "2"  # type: ignore[index]


def test_program_cell_is_one_line() -> None:
    """The run mark (see ``inkernel/shortcuts``), then one line: the program's text (with
    its line breaks, magics) is a string literal in it, never lines of the cell."""
    cell = inject.program_cell(["b", "a"], "print('x')\n%magic\nreturn 1?", 10)
    mark, line = cell.split("\n", 1)
    assert mark + "\n" == RUN_MARK
    assert "\n" not in line and line.startswith("await ")
    assert "['a', 'b']" in line


def test_program_cell_passes_helpers_keep_and_signatures() -> None:
    cell = inject.program_cell(["a"], "return 1", 10, {"search": "tools.search"}, keep=True,
                               signatures={"a": '{"x": Literal["\\n"]}'})
    call = ast.parse(cell).body[0].value.value  # type: ignore[attr-defined]
    assert [ast.literal_eval(arg) for arg in call.args] == [
        ["a"], "return 1", 10, {"search": "tools.search"}]
    assert {k.arg: ast.literal_eval(k.value) for k in call.keywords} == {
        "keep": True, "signatures": {"a": '{"x": Literal["\\n"]}'}}


@pytest.mark.parametrize(("version", "ok"), [
    ("7.4.0", True), ("7.10.1", True), ("8.0.0a1", True), ("7.3.9", False), ("6.31.0", False),
    ("7", False),
])
def test_one_ipykernel_version_check(version: str, ok: bool) -> None:
    problem = runner.ipykernel_problem(version, " in the kernel")
    assert (problem is None) == ok
    if problem is not None:
        assert problem.startswith(f"needs ipykernel >= 7.4 in the kernel (found {version})")
    assert runner.ipykernel_problem(None) == "needs ipykernel >= 7.4: it is not installed"


async def _connect_and_send(path: str, lines: list[bytes]) -> asyncio.StreamWriter:
    _, writer = await asyncio.open_unix_connection(path)
    for line in lines:
        writer.write(line)
    await writer.drain()
    return writer


async def test_socket_carrier_needs_the_token(tmp_path: Path) -> None:
    listener = await CarrierListener.open(Workspace(tmp_path), max_message_bytes=1000,
                                          max_buffered_bytes=1 << 20, seconds=0.5)
    assert listener is not None and listener.path == str(tmp_path / "tools.sock")
    writer = await _connect_and_send(listener.path, [b"wrong-token\n"])
    assert await listener.accept() is None
    assert not (tmp_path / "tools.sock").exists()
    writer.close()


async def test_socket_carrier_lines(tmp_path: Path) -> None:
    listener = await CarrierListener.open(Workspace(tmp_path), max_message_bytes=3000,
                                          max_buffered_bytes=1 << 20, seconds=5)
    assert listener is not None
    lines = [listener.token.encode() + b"\n", b'{"kind": "call"}\n', b"NaN\n",
             b"[" * 2500 + b"\n", b"x" * 4000 + b"\n"]
    writer = await _connect_and_send(listener.path, lines)
    carrier = await listener.accept()
    assert carrier is not None
    assert not (tmp_path / "tools.sock").exists()  # one connection, then no listener
    assert await carrier.receive() == ({"kind": "call"}, 17)
    assert await carrier.receive() == (None, 4)  # NaN is not JSON
    assert await carrier.receive() == (None, 2501)  # too deep for the decoder
    with pytest.raises(MessageTooLarge):
        await carrier.receive()
    carrier.close()
    writer.close()


def test_public_names() -> None:
    import dsh_jupyter.kernel as kernel

    assert kernel.__all__ == sorted(kernel.__all__)
    for name in kernel.__all__:
        assert hasattr(kernel, name)


def test_memory_cap_below_a_kernels_footprint_is_rejected() -> None:
    import pytest

    from dsh_jupyter.kernel import KernelRuntimeConfig

    with pytest.raises(ValueError, match="kills it at start"):
        KernelRuntimeConfig(memory_bytes=256 * 1024 * 1024)
    assert KernelRuntimeConfig(memory_bytes=1024**3).memory_bytes == 1024**3


def test_output_logs_share_the_runtime_budget() -> None:
    from dsh_jupyter.kernel.run.logs import ENTRY_OVERHEAD, OutputBudget

    budget = OutputBudget(1000)
    first, second = OutputLog(10_000, budget), OutputLog(10_000, budget)
    first.write("stdout", "a" * 500 + "\n")
    assert budget.used == 502 + ENTRY_OVERHEAD
    second.write("stdout", "b" * 500 + "\n")  # would pass the budget: refused
    assert second.over_limit and second.over_budget
    assert "runtime's 1000 byte budget" in second.limit_message()
    second.release()
    first.write("stdout", "c" * 300)  # a partial line is charged as it arrives
    assert budget.used == 502 + ENTRY_OVERHEAD + 303  # its quotes and comma too
    first.write("stdout", "c" * 300)
    assert first.over_budget  # the budget binds a log alone too, below its own cap
    first.release()
    assert budget.used == 0


def test_json_size_counts_escapes_without_encoding() -> None:
    from dsh_jupyter.kernel.run.logs import json_size

    for text in ["", "plain", 'quote " and \\ backslash', "tab\tnew\nline\x01\x1f\x7f",
                 "é", "日本", "\ud800"]:
        expected = len(json.dumps(text, ensure_ascii=False, separators=(",", ":"))
                       .encode("utf-8", "surrogatepass"))
        assert json_size(text) == expected, text


def test_output_log_escapes_each_entry_before_it_is_charged() -> None:
    """What is charged, told live and kept is the escaped line; \\r\\n ends a line."""
    seen: list[str] = []
    escaped = ["\\x1b[1mred\\u202e", "crlf", "10%\\r100%"]
    log = OutputLog(max_bytes=_size(escaped), on_entry=seen.append)
    log.write("stdout", "\x1b[1mred\u202e\ncrlf\r\n10%\r100%")
    assert log.finish() == tuple(escaped) == tuple(seen)
    assert log.used_bytes == _size(escaped) and not log.over_limit


def test_text_that_is_not_utf8_is_decoded_not_dropped() -> None:
    """ipykernel sends a printed file name's undecodable bytes raw (surrogateescape): the
    host decodes them the same way (the result escapes them) instead of dropping the
    message."""
    from dsh_jupyter.kernel.transport.wire import WireCodec

    codec = WireCodec(b"key")
    _, frames = codec.encode("stream", {"name": "stdout", "text": "name \udcff\n"})
    assert b"name \xff" in frames[-1]  # raw, as ipykernel's packer sends it
    incoming = codec.decode(frames)
    assert incoming is not None and incoming.content["text"] == "name \udcff\n"
