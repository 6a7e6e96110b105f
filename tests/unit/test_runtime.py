"""The runtime seam as data: a RunRequest in, a CodeRunResult out, RuntimeInfo for what a
runtime supports; runtimes written before it adapted once, at the registry's edge."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

import pytest

from dsh_jupyter import ToolCall, ToolRegistry, ToolSuccess
from dsh_jupyter.abort import AbortSignal
from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig, StatefulConfig
from dsh_jupyter.runtime import (
    Bindings,
    CodeRunResult,
    Display,
    FunctionBindings,
    RunRequest,
    RuntimeInfo,
    as_code_runtime,
)
from dsh_jupyter.testing import InProcessRuntime


async def add(args: JsonValue) -> JsonValue:
    assert isinstance(args, dict)
    a, b = args["a"], args["b"]
    assert isinstance(a, int) and isinstance(b, int)
    return a + b


def test_a_request_says_which_field_is_wrong() -> None:
    bindings = FunctionBindings({"add": add})
    with pytest.raises(TypeError, match=r"RunRequest\.program must be a str"):
        RunRequest(b"return 1", bindings)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"RunRequest\.signal must be an AbortSignal"):
        RunRequest("return 1", bindings, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"RunRequest\.session must be a non-empty string"):
        RunRequest("return 1", bindings, session="")
    with pytest.raises(ValueError, match=r"helpers maps 'search' to 'tools\.search', which "
                                         r"is not one of the bindings' names"):
        RunRequest("return 1", bindings, helpers={"search": "tools.search"})
    with pytest.raises(ValueError, match="signatures gives 'sub'"):
        RunRequest("return 1", bindings, signatures={"sub": "{...}"})
    request = RunRequest("return 1", bindings)
    assert request.signal.reason is None and request.session is None
    assert (request.signatures, request.helpers, request.observer) == ({}, {}, None)


class Faced:
    """Bindings written before RunRequest: session, signatures, helpers and output as
    optional faces of the bindings object."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.closed: list[str] = []

    @property
    def names(self) -> Collection[str]:
        return ("add", "tools.search")

    @property
    def session_key(self) -> str:
        return "conversation-1"

    @property
    def signatures(self) -> Mapping[str, str]:
        return {"add": '{"a": int, "b": int}', "unknown": "{}"}

    @property
    def helpers(self) -> Mapping[str, str]:
        return {"search": "tools.search"}

    async def call(self, name: str, args: JsonValue) -> JsonValue:
        return await add(args)

    def close(self, reason: str) -> None:
        self.closed.append(reason)

    def on_log(self, line: str) -> None:
        self.lines.append(line)

    def on_display(self, display: Display) -> None:
        pass


def test_from_bindings_reads_the_faces_of_older_bindings_in_one_place() -> None:
    faced = Faced()
    request = RunRequest.from_bindings("return 1", faced)
    assert request.session == "conversation-1"
    assert request.signatures == {"add": '{"a": int, "b": int}'}  # names it lacks left out
    assert request.helpers == {"search": "tools.search"}
    assert request.observer is faced
    plain = RunRequest.from_bindings("return 1", FunctionBindings({"add": add}, session="s"))
    assert (plain.session, plain.observer, plain.signatures) == ("s", None, {})


async def test_the_in_process_runtime_runs_a_request_with_its_fields() -> None:
    faced = Faced()
    program = """
print("adding")
try:
    await tools.add(1, 2)
except TypeError as error:
    print(error)
return await tools.add({"a": 1, "b": 2})
"""
    result = await InProcessRuntime().run(RunRequest(
        program, FunctionBindings({"add": add}), signatures={"add": '{"a": int, "b": int}'},
        observer=faced))
    assert result.failure is None and result.value == 3
    assert faced.lines == list(result.logs) == [
        "adding", 'tools.add takes one dict of arguments: await tools.add({"a": int, "b": int})']


@pytest.mark.parametrize("runtime", [InProcessRuntime(), KernelRuntime()],
                         ids=["in-process", "kernel"])
async def test_run_takes_a_request_and_says_how_to_make_one(runtime: InProcessRuntime |
                                                              KernelRuntime) -> None:
    with pytest.raises(TypeError, match=r"run takes a RunRequest, not str: "
                                        r"runtime.run\(RunRequest\(program, bindings, signal\)\)"):
        await runtime.run("return 1")  # type: ignore[arg-type]


def test_a_kernel_runtime_says_what_it_supports_before_it_starts(tmp_path: Path) -> None:
    assert KernelRuntime().info == RuntimeInfo(language="python", isolation="kernel",
                                               files=True)
    data = tmp_path
    (data / "a.csv").write_text("x\n")
    (data / "refs").mkdir()
    info = KernelRuntime(KernelRuntimeConfig(
        stateful=StatefulConfig(), inputs={"a.csv": data / "a.csv", "refs": data / "refs"})).info
    assert (info.stateful, info.inputs, info.remote) == (True, ("a.csv", "refs/"), False)


class OldRuntime:
    """A runtime written before RunRequest and RuntimeInfo."""

    language = "python"
    isolation = "in-process"
    stateful = True

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, dict[str, str]]] = []

    async def run(self, program: str, bindings: Bindings, signal: AbortSignal
                  ) -> CodeRunResult:
        session = getattr(bindings, "session_key", None)
        signatures = dict(getattr(bindings, "signatures", {}))
        self.seen.append((program, session, signatures))
        value = await bindings.call("add", {"a": 2, "b": 3})
        bindings.close("done")
        return CodeRunResult(value=value)


async def test_a_runtime_written_before_the_request_is_adapted_with_a_warning() -> None:
    old = OldRuntime()
    with pytest.warns(DeprecationWarning, match="OldRuntime is a code runtime written before "
                                                "dsh-jupyter 0.2: give it an `info` property"):
        registry = ToolRegistry(mode="code", code_runtime=old)  # type: ignore[arg-type]
    assert registry.code_runtime is not None and registry.code_runtime.info == RuntimeInfo(
        isolation="in-process", stateful=True)

    @registry.tool
    async def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

    result = await registry.execute(ToolCall(call_id="c1", name="run_code", arguments={
        "code": "return await tools.add({'a': 2, 'b': 3})", "description": "add"}))
    assert isinstance(result, ToolSuccess) and result.value == {"logs": [], "result": 5}
    ((program, session, signatures),) = old.seen
    assert program == "return await tools.add({'a': 2, 'b': 3})"
    assert session == registry.session_key  # the request's fields, as the faces it reads
    assert signatures == {"add": '{"a": int, "b": int}'}


def test_something_that_is_no_runtime_says_what_one_needs() -> None:
    with pytest.raises(TypeError, match=r"a code runtime needs an `info` property \(a "
                                        r"RuntimeInfo\) and `async def run\(self, request: "
                                        r"RunRequest\) -> CodeRunResult`; str has neither"):
        ToolRegistry(mode="code", code_runtime="kernel")  # type: ignore[arg-type]
    runtime = InProcessRuntime()
    assert as_code_runtime(runtime) is runtime


def test_a_small_result_is_escaped_on_the_loop_and_a_large_one_in_a_thread() -> None:
    """The kernel runtime's rule for where a result's value is escaped (see
    ``kernel/run/runtime._small``): items and characters both count."""
    from dsh_jupyter.kernel.run.runtime import (
        SMALL_VALUE_CHARACTERS,
        SMALL_VALUE_NODES,
        _small,
    )

    assert _small({"rows": list(range(SMALL_VALUE_NODES - 1))})
    assert not _small({"rows": list(range(SMALL_VALUE_NODES + 1))})
    assert _small(["x" * (SMALL_VALUE_CHARACTERS - 1)])
    assert not _small(["x" * (SMALL_VALUE_CHARACTERS + 1)])
    assert not _small({"k" * (SMALL_VALUE_CHARACTERS + 1): 1})  # keys are text too
    assert not _small([[[["x" * 40_000]]], {"a": "y" * 40_000}])  # summed across the value
