"""Code Mode above the runtime seam, with the in-process runtime (no kernel): modes, prompt
assembly, collapse, run_code's arguments, result rendering and images to the model.

The rules that must hold on a real kernel too (scheduling, failures, aborts, the ``tools``
namespace) run on both runtimes in tests/kernel/test_code_mode_runtimes.py."""

from __future__ import annotations

import base64
from collections.abc import Collection
from typing import Any

import pytest
from code_mode_support import code_registry, echo, run

from dsh_jupyter import AbortController, ToolCall, ToolRegistry, define_tool
from dsh_jupyter.codemode.run_code import (
    RUN_CODE_MAX_IMAGES,
    model_images,
    render_result_value,
    run_code_output,
)
from dsh_jupyter.errors import CodeModeError, RegistrationError
from dsh_jupyter.json_value import JsonValue, snapshot_json
from dsh_jupyter.kernel import InProcessRuntime
from dsh_jupyter.runtime import CodeRunResult, Display, RunFile, RunRequest, RuntimeInfo

# --- modes and prompt assembly --------------------------------------------------------


def test_mode_contributions_and_sections() -> None:
    native = ToolRegistry(code_runtime=InProcessRuntime())
    native.register(echo())
    prompt = native.prompt()
    assert [t["name"] for t in prompt.tools] == ["echo"] and prompt.sections == ()

    code = code_registry()
    code.register(echo())
    prompt = code.prompt()
    assert [t["name"] for t in prompt.tools] == ["run_code"]
    assert [(s.id, s.order) for s in prompt.sections] == [("tools:code-only", 99),
                                                           ("tools:sdk", 150)]
    rule = prompt.section("tools:code-only")
    assert rule is not None and "Only `run_code`" in rule.text
    sdk = prompt.section("tools:sdk")
    assert sdk is not None and "async def echo(self, args: EchoArgs) -> str" in sdk.text
    parameters = prompt.tools[0]["parameters"]
    assert isinstance(parameters, dict) and parameters["required"] == ["code", "description"]

    both = code_registry(mode="both")
    both.register(echo())
    prompt = both.prompt()
    assert [t["name"] for t in prompt.tools] == ["echo", "run_code"]
    rule = prompt.section("tools:code-only")
    assert rule is not None and rule.text == ""
    assert [s["name"] for s in both.schemas()] == ["echo"]  # the catalog is unchanged


def test_present_as_nearest_declaration_wins() -> None:
    registry = ToolRegistry(code_runtime=InProcessRuntime())
    registry.register(echo())
    parent = registry.scope("parent")
    child = registry.scope("child", parent=parent)
    parent.present_as("code")
    assert registry.mode_for(child) == "code"
    child.present_as("both")
    assert registry.mode_for(child) == "both"
    assert registry.mode_for(None) == "native"
    assert [t["name"] for t in registry.prompt(child).tools] == ["echo", "run_code"]


def test_code_mode_without_runtime_fails_loudly() -> None:
    registry = ToolRegistry(mode="code")
    with pytest.raises(CodeModeError, match="needs a code runtime"):
        registry.prompt()

    class Lisp(InProcessRuntime):
        info = RuntimeInfo(language="lisp", isolation="in-process")

    registry = ToolRegistry(mode="code", code_runtime=Lisp())
    with pytest.raises(CodeModeError, match="no SDK renderer"):
        registry.prompt()


def test_sdk_section_is_deterministic() -> None:
    first, second = code_registry(), code_registry()
    tools = [echo(), define_tool(name="zeta", parameters={"type": "object"},
                                 output={"schema": {"type": "string"},
                                         "render": lambda a, v: str(v)},
                                 execute=lambda a, c: "")]
    for t in tools:
        first.register(t)
    for t in reversed(tools):
        second.register(t)
    assert first.prompt().system_text == second.prompt().system_text


# --- collapse ------------------------------------------------------------------------------


async def test_code_mode_collapses_direct_calls_before_policy() -> None:
    registry = code_registry()
    registry.register(echo())
    seen: list[str] = []
    registry.on_pre_execute(lambda e, d: seen.append(e.name))
    result = await registry.execute(ToolCall(call_id="c1", name="echo",
                                             arguments={"text": "x"}))
    assert result.error is not None and result.error.code == "UNKNOWN_TOOL"
    assert "only `run_code` is callable directly" in result.error.message
    assert "call `echo` from inside a `run_code` program" in result.error.message
    assert seen == []
    # SDK sub-calls carry a parent token and are exempt
    ok = await run(registry, "return await tools.echo({'text': 'via sdk'})")
    assert not ok.is_error and ok.value == {"logs": [], "result": "via sdk"}
    assert seen == ["run_code", "echo"]


async def test_both_mode_executes_native_calls() -> None:
    registry = code_registry(mode="both")
    registry.register(echo())
    result = await registry.execute(ToolCall(call_id="c1", name="echo",
                                             arguments={"text": "x"}))
    assert result.value == "x"


async def test_run_code_is_unknown_under_native() -> None:
    registry = ToolRegistry(code_runtime=InProcessRuntime())
    result = await run(registry, "return 1")
    assert result.error is not None and result.error.code == "UNKNOWN_TOOL"


@pytest.mark.parametrize("arguments", [{"code": "return 1"}, {"code": "return 1",
                                                                  "description": "  "},
                                        {"code": 1, "description": "d"}])
async def test_run_code_arguments_are_validated(arguments: dict[str, Any]) -> None:
    registry = code_registry()
    result = await registry.execute(ToolCall(call_id="c", name="run_code", arguments=arguments))
    assert result.error is not None and result.error.code == "INVALID_ARGS"


def test_run_code_call_card() -> None:
    registry = code_registry()
    definition = registry.get("run_code")
    assert definition is not None and definition.present_call is not None
    view = definition.present_call({"code": "print(1)", "description": "Print one"})
    assert view is not None and view.title == "Print one"
    assert view.kind == "execute" and view.raw_input == "print(1)"  # type: ignore[union-attr]


# --- results ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "text"),
    [
        ("print('a'); print('b'); return 'raw string'", "a\nb\nraw string"),
        ("return {'k': [1, 2]}", '{\n  "k": [\n    1,\n    2\n  ]\n}'),
        ("return {'a': {'b': {'c': {'d': {'e': {'f': 1}}}}}}",
         '{\n  "a": {\n    "b": {\n      "c": {\n        "d": {\n          "e": {"f": 1}\n'
         '        }\n      }\n    }\n  }\n}'),
        ("x = 1", "(run_code completed with no output)"),
        ("print('partial', end='')", "partial"),
    ],
)
async def test_result_rendering(code: str, text: str) -> None:
    result = await run(code_registry(), code)
    assert not result.is_error, result
    assert result.text == text


class RenderedCall:
    """What an output declaration sees of a call (``OutputCall``), for one call."""

    def __init__(self) -> None:
        self.arguments: dict[str, JsonValue] = {}
        self.attachments: list[RunFile] = []
        self.state: dict[object, Any] = {}


async def test_result_is_rendered_once_for_content_and_meta() -> None:
    calls: list[JsonValue] = []

    def render(value: JsonValue) -> str:
        calls.append(value)
        return render_result_value(value)

    output = run_code_output(render_result=render)
    value = snapshot_json({"logs": ["a"], "result": {"k": [1, 2]}})
    call = RenderedCall()
    content = output.render_for(call, value)
    meta = output.meta_for(call, value)
    assert len(calls) == 1
    assert content == ({"type": "text", "text": 'a\n{\n  "k": [\n    1,\n    2\n  ]\n}'},)
    assert meta == {"logs": ["a"], "result": '{\n  "k": [\n    1,\n    2\n  ]\n}'}
    assert call.state == {}  # taken: the call holds the value no longer
    # An equal value that is not the one just rendered (a replaced value) renders again,
    # and so does the meta of another call.
    output.render_for(call, value)
    assert output.meta_for(call, snapshot_json({"logs": [], "result": {"k": [1, 2]}}))
    assert output.meta_for(RenderedCall(), value)
    assert len(calls) == 4


@pytest.mark.parametrize("code", ["return [{'i': i, 'sq': [i, i * i]} for i in range(3000)]",
                                  "return {'k': [1, 2]}"])
async def test_run_code_meta_shares_the_content_rendering(code: str) -> None:
    # Uncapped: the 3000 rows render to more than the model's default 50,000 characters.
    result = await run(code_registry(run_code_max_chars=None), code)
    assert not result.is_error, result
    text = result.content[0]["text"]
    assert text == render_result_value(result.value["result"])
    # Rendered once: the meta holds the very string the content holds.
    assert result.meta == {"logs": [], "result": text} and result.meta["result"] is text


# --- aborts and wrong calls -------------------------------------------------------------


async def test_pre_aborted_run_code_never_starts_the_runtime() -> None:
    runtime = InProcessRuntime()
    registry = ToolRegistry(mode="code", code_runtime=runtime)
    controller = AbortController()
    controller.abort("no")
    result = await run(registry, "return 1", signal=controller.signal)
    assert result.error is not None and result.error.code == "ABORTED_BEFORE_DISPATCH"
    assert runtime.runs == 0


async def test_a_wrong_call_under_discovery_points_at_describe() -> None:
    registry = code_registry(mode="discovery")
    registry.register(echo())
    result = await run(registry, "try:\n    await tools.echo('hi')\n"
                                 "except TypeError as error:\n    return str(error)")
    assert result.value["result"] == ('tools.echo takes one dict of arguments: await '
                                      'tools.echo({...}); tools.describe("echo") shows its '
                                      'fields')


# --- images to the model (run_code_images) ---------------------------------------------

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAADUlEQVR4nGP4z8AARAAI/gH/xp559wAAAABJ"
       "RU5ErkJggg==")
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 16).decode()


def shown(data: dict[str, JsonValue]) -> Display:
    return Display(data=data, metadata={}, after_logs=0)


class Displaying:
    """A code runtime whose every run prints ``logs`` and shows ``displays`` (the
    registry's side of images, without a kernel)."""

    info = RuntimeInfo(isolation="in-process")

    def __init__(self, logs: Collection[str], displays: Collection[Display]) -> None:
        self.result = CodeRunResult(logs=tuple(logs), displays=tuple(displays))

    async def run(self, request: RunRequest) -> CodeRunResult:
        request.bindings.close("done")
        return self.result


def test_run_code_images_must_be_a_bool() -> None:
    with pytest.raises(RegistrationError, match="run_code_images"):
        ToolRegistry(run_code_images=1)  # type: ignore[arg-type]


async def test_without_the_option_no_image_reaches_the_model() -> None:
    runtime = Displaying(["a"], [shown({"image/png": PNG, "text/plain": "p"})])
    result = await run(code_registry(runtime), "pass")
    assert result.value == {"logs": ["a"]}
    assert result.content == ({"type": "text", "text": "a"},)


async def test_images_follow_the_text_first_four_only() -> None:
    displays = [shown({"text/html": "<b>no image</b>", "text/plain": "h"}),
                shown({"image/png": "not base64!", "text/plain": "fake"}),
                shown({"image/gif": "R0lGODlh", "text/plain": "gif: not sent"}),
                *(shown({"image/png": PNG, "text/plain": str(i)}) for i in range(4)),
                shown({"image/jpeg": JPEG, "text/plain": "fifth"}),
                shown({"image/png": PNG, "text/plain": "sixth"})]
    result = await run(code_registry(Displaying(["a"], displays), run_code_images=True), "x")
    assert not result.is_error, result
    assert result.value == {"logs": ["a"], "images_omitted": 2,
                            "images": [{"mime_type": "image/png", "data": PNG}] * 4}
    text, *images = result.content
    assert text == {"type": "text", "text": f"a\n(2 more images not attached: at most "
                    f"{RUN_CODE_MAX_IMAGES} per run)"}
    assert images == [{"type": "image", "data": PNG, "mime_type": "image/png"}] * 4


async def test_images_without_text_say_so() -> None:
    runtime = Displaying([], [shown({"image/jpeg": JPEG, "image/png": "x"})])
    result = await run(code_registry(runtime, run_code_images=True), "x")
    assert result.content == (
        {"type": "text", "text": "(run_code completed with no text output; 1 image attached)"},
        {"type": "image", "data": JPEG, "mime_type": "image/jpeg"})
    assert model_images((shown({"image/png": PNG, "image/jpeg": JPEG}),)) == [
        {"mime_type": "image/png", "data": PNG}]
