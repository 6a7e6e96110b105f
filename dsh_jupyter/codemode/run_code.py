"""Code Mode: the reserved ``run_code`` transport and how its outcome is rendered.

``run_code {code, description}`` runs a model-written program through the
registry's code runtime; the program's ``await tools.x(args)`` calls re-enter the
pipeline through :class:`~dsh_jupyter.codemode.bridge.DispatchBridge`. Only what
the program prints or returns comes back: the value is ``{logs, result?}`` and
the content is the logs joined by newlines, then the rendered result.

With ``ToolRegistry(run_code_images=True)`` the program's PNG and JPEG displays come
back too: the value gains ``images`` (at most :data:`RUN_CODE_MAX_IMAGES`, the first
ones, each checked to be the image it claims; ``images_omitted`` counts the rest) and
the content gains one image block per image after the text. Off, the value and the
content are exactly as above.

Files the program wrote under ``outputs/`` (``CodeRunResult.files``) add ``files``
to the value and one line each to the content; their bytes go to the result's
``attachments`` and, for small ones, the card (see :mod:`.run_files`). A run that
wrote none has the value and content above, byte for byte.

The content is what the model reads, so it is cut to the registry's
``run_code_max_chars`` (see :mod:`.model_text`): the logs and the rendered result
share the cap, and a part over its share keeps its head and tail around one note line.
A failure's ``Error:`` text is cut the same way (:func:`model_error_message`). The
value, the card's meta and the failure's message stay whole, and so does what a session
log keeps of them.

With ``ToolRegistry(check_programs=...)`` the program is type-checked against the SDK
before any kernel is used (see :mod:`.check`): under ``"error"`` a program with problems
fails as ``type-check`` (no kernel, no sub-call); under ``"warn"`` it runs, and its
problems add ``type_check`` (one line each) to the value and, after a ``Type check``
line, to the content (or to the failure's message, when the run fails).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from .._images import check_image
from .._waiting import wait_uncancelled
from ..durable.replay import Stop, tools_fingerprint
from ..errors import CodeModeError, CodeRunFailedError
from ..json_dump import dump_json
from ..json_value import JsonObject, JsonValue, snapshot_json
from ..registry.definition import OutputCall, ToolDefinition, ToolOutput
from ..registry.execution import ToolRunContext, TraceValue
from ..registry.pipeline import CANCELLED_REASON
from ..registry.presentation import GenericCallView
from ..registry.results import Content, ContentBlock, ToolResult
from ..registry.schema import compile_schema
from ..registry.scope import RESERVED_NAME
from ..runtime import CodeRunFailure, CodeRunResult, Display, RunFile
from .bridge import DispatchBridge
from .check import WARN_HEAD, failure_text, problem_lines
from .journal import Resumption, RunJournal, start_journal
from .model_text import TextLimit, cut_lines, cut_text, share
from .run_files import card_entries, file_entries, file_lines, files_of

if TYPE_CHECKING:
    from ..registry.execution import ToolExecution
    from ._view import CodeModeHost
    from .checker import ProgramCheck, ProgramChecker
    from .discovery import Catalogs
    from .scheduler import SubCallOrdering

NO_OUTPUT = "(run_code completed with no output)"
CAPTURED_OUTPUT = "\nCaptured output:\n"
"""Between a failure's message and the lines the program printed before it."""
RUN_CODE_MAX_IMAGES = 4
"""The most images a run_code result carries to the model (``run_code_images``)."""
MODEL_IMAGE_TYPES = ("image/png", "image/jpeg")

RUN_CODE_DESCRIPTION = (
    "Run a Python program that calls the tools through the `tools` SDK described in the "
    "system prompt. Only what the program prints or returns comes back."
)

RUN_CODE_PARAMETERS: JsonObject = cast(JsonObject, snapshot_json({
    "type": "object",
    "properties": {
        "code": {"type": "string",
                 "description": "The body of an async Python function: top-level `await` "
                                "and `return` work; call tools as `await tools.name({...})`."},
        "description": {"type": "string",
                        "description": "A short summary of what the program does."},
    },
    "required": ["code", "description"],
    "additionalProperties": False,
}))

RUN_CODE_OUTPUT: JsonObject = cast(JsonObject, snapshot_json({
    "type": "object",
    "properties": {
        "logs": {"type": "array", "items": {"type": "string"}},
        "result": {},
        # Only with run_code_images=True (at most RUN_CODE_MAX_IMAGES; the subset of JSON
        # Schema that tool schemas use has no value constraints):
        "images": {"type": "array", "items": {
            "type": "object",
            "properties": {"mime_type": {"enum": list(MODEL_IMAGE_TYPES)},
                           "data": {"type": "string"}},
            "required": ["mime_type", "data"],
            "additionalProperties": False,
        }},
        "images_omitted": {"type": "integer"},
        # Files the program wrote under outputs/ (only when it wrote some):
        "files": {"type": "array", "items": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "size": {"type": "integer"},
                           "mime_type": {"type": "string"},
                           "not_collected": {"type": "string"}},
            "required": ["name", "size", "mime_type"],
            "additionalProperties": False,
        }},
        "files_omitted": {"type": "integer"},
        # Under check_programs="warn", what the check found (only when it found something):
        "type_check": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["logs"],
    "additionalProperties": False,
}))


def render_result_value(value: JsonValue) -> str:
    """Strings raw; other JSON pretty-printed (2-space indent, containers nested five
    or more levels deep compact); ``null`` explicit."""
    if isinstance(value, str):
        return value
    return dump_json(value, indent=2, compact_depth=5)


def _never() -> bool:
    return False


def _no_limit() -> TextLimit | None:
    return None


_RENDERED = object()
"""The key of what :meth:`RunCodeOutput.render_for` keeps in a call's state."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCodeOutput(ToolOutput):
    """run_code's output declaration. The content and the card's meta both show the
    rendered result, and rendering a large one takes seconds: :meth:`render_for` keeps
    the text in the call's state next to the value it rendered, and :meth:`meta_for`
    takes it when handed that very value (a post-execute hook that replaced the value
    gets a fresh rendering). The card's files are the value's, with the bytes of the
    collected ones from the call's attachments. ``render`` and ``presentation_meta``
    (without the call) render afresh and show no files' bytes."""

    render_result: Callable[[JsonValue], str] = render_result_value
    stateful: Callable[[], bool] = _never
    limit: Callable[[], TextLimit | None] = _no_limit
    """The model cap of the content, read at each rendering (``None``: none)."""

    def render_for(self, call: OutputCall, value: JsonValue) -> Content:
        assert isinstance(value, dict)
        rendered = self.render_result(value["result"]) if "result" in value else None
        call.state[_RENDERED] = (value, rendered)
        return run_code_content(value, rendered, self.limit())

    def meta_for(self, call: OutputCall, value: JsonValue) -> JsonValue:
        kept = call.state.pop(_RENDERED, None)
        rendered = kept[1] if kept is not None and kept[0] is value else None
        return run_code_meta(value, rendered, call.attachments,
                             render_result=self.render_result, stateful=self.stateful)


def run_code_meta(value: JsonValue, rendered: str | None, attachments: Sequence[RunFile], *,
                  render_result: Callable[[JsonValue], str] = render_result_value,
                  stateful: Callable[[], bool] = _never) -> JsonValue:
    """The card's meta of a run's value: the logs and the rendered result (``rendered``,
    else rendered here) kept apart, the files (with the bytes of those in
    ``attachments``), and whether the runtime is stateful."""
    assert isinstance(value, dict)
    logs = value.get("logs")
    meta: dict[str, JsonValue] = {"logs": list(logs) if isinstance(logs, list) else []}
    if "result" in value:
        meta["result"] = rendered if rendered is not None else render_result(value["result"])
    files = files_of(value, attachments)
    if files:
        meta["files"] = card_entries(files)
    if stateful():  # the log says so: an export re-runs it in one session too
        meta["stateful"] = True
    type_check = value.get("type_check")
    if isinstance(type_check, list) and type_check:
        meta["type_check"] = list(type_check)
    return meta


def run_code_content(value: JsonObject, rendered: str | None,
                     limit: TextLimit | None = None) -> Content:
    """The content of a run's value: the logs, the rendered result (``rendered``, else
    rendered here), cut to ``limit`` together (:func:`model_parts`); the images' note and
    the files' lines, then the images."""
    if "result" in value and rendered is None:
        rendered = render_result_value(value["result"])
    logs, shown = model_parts(cast(list[str], value.get("logs") or []), rendered, limit)
    parts = list(logs)
    if shown is not None:
        parts.append(shown)
    images = cast(list[dict[str, str]], value.get("images") or [])
    omitted = value.get("images_omitted")
    if omitted:
        parts.append(f"({omitted} more image{'s' if omitted != 1 else ''} not attached: "
                     f"at most {RUN_CODE_MAX_IMAGES} per run)")
    parts += file_lines(value)
    type_check = cast(list[str], value.get("type_check") or [])
    if type_check:
        parts += [WARN_HEAD, *type_check]
    text = "\n".join(parts)
    if not text and images:
        text = (f"(run_code completed with no text output; {len(images)} "
                f"image{'s' if len(images) != 1 else ''} attached)")
    blocks: list[ContentBlock] = [{"type": "text", "text": text if text else NO_OUTPUT}]
    blocks += [{"type": "image", "data": image["data"], "mime_type": image["mime_type"]}
               for image in images]
    return tuple(blocks)


def model_parts(logs: list[str], rendered: str | None,
                limit: TextLimit | None) -> tuple[list[str], str | None]:
    """What the model reads of a run's logs and rendered result (``None``: no result)
    under ``limit``: the very objects given when they fit together (or there is no
    limit); else each part over its share (:func:`~.model_text.share`: the result first)
    cut to its head and tail around a note line, the logs as lines."""
    if limit is None:
        return logs, rendered
    between = 1 if logs and rendered is not None else 0
    logs_size = sum(map(len, logs)) + max(len(logs) - 1, 0)
    result_room, logs_room = share(len(rendered) if rendered is not None else 0, logs_size,
                                   between, limit.max_chars)
    if rendered is not None:
        rendered = cut_text(rendered, result_room, "the result", limit)
    return cut_lines(logs, logs_room, "the output", limit), rendered


def model_value(value: JsonValue, rendered: str | None,
                limit: TextLimit | None) -> JsonValue:
    """A run's value as the model may read it (what a served ``run_code`` sends as
    ``structuredContent``): ``value`` itself when its logs and result fit ``limit``
    (``rendered`` is its rendered result, if known); else a copy whose ``logs`` are the
    lines the content shows (the note among them) and whose ``result``, when that was cut
    too, is the text the content shows of it."""
    if limit is None or not isinstance(value, dict):
        return value
    logs = cast(list[str], value.get("logs") or [])
    if "result" in value and rendered is None:
        rendered = render_result_value(value["result"])
    shown_logs, shown = model_parts(logs, rendered, limit)
    if shown_logs is logs and shown is rendered:
        return value
    cut = dict(value)
    cut["logs"] = cast(list[JsonValue], shown_logs)
    if shown is not rendered:
        cut["result"] = shown
    return cut


def model_error_message(message: str, code: str | None, limit: TextLimit | None) -> str:
    """A failed run's message as the model reads it after ``Error: ``: whole when it fits;
    else for ``CODE_RUN_FAILED`` the error first and the output it captured the rest
    (:func:`~.model_text.share`), each cut to its head and tail; any other message cut as
    one text."""
    if limit is None:
        return message
    room = limit.max_chars - len(_ERROR)
    if len(message) <= room:
        return message
    error, found, captured = message.partition(CAPTURED_OUTPUT)
    if not found or code != CodeRunFailedError.default_code:
        return cut_text(message, room, "the error", limit)
    error_room, captured_room = share(len(error), len(captured), len(CAPTURED_OUTPUT), room)
    return (cut_text(error, error_room, "the error", limit) + CAPTURED_OUTPUT
            + cut_text(captured, captured_room, "the output", limit))


_ERROR = "Error: "
"""What a failure's content puts before its message (``results.failure``)."""


def model_failure(result: ToolResult, limit: TextLimit | None) -> Content | None:
    """run_code's ``finalize_content``: a failure whose ``Error: <message>`` is over
    ``limit`` gets the cut one (:func:`model_error_message`); anything else is kept
    (``None``). The failure's message itself stays whole, for its card and the log."""
    error = result.error
    if limit is None or error is None:
        return None
    whole = _ERROR + error.message
    if len(whole) <= limit.max_chars or result.content != ({"type": "text", "text": whole},):
        return None  # within the cap, or content that a hook wrote
    return ({"type": "text", "text": _ERROR + model_error_message(error.message, error.code,
                                                                      limit)},)


def run_code_limit(registry: CodeModeHost) -> TextLimit | None:
    """The cap of ``registry``'s run_code results now: its ``run_code_max_chars``, and
    whether its runtime collects ``outputs/`` files (for the note's advice)."""
    max_chars = registry.run_code_max_chars
    if max_chars is None:
        return None
    runtime = registry.code_runtime
    return TextLimit(max_chars, outputs=runtime is not None and runtime.info.files)


def failure_message(result: CodeRunResult, type_check: Sequence[str] = ()) -> str:
    """``code run failed (<kind>): <message>``, then a ``warn`` check's lines, then the
    lines the program printed."""
    assert result.failure is not None
    message = f"code run failed ({result.failure.kind}): {result.failure.message}"
    if type_check:
        message += "\n" + "\n".join([WARN_HEAD, *type_check])
    if result.logs:
        message += CAPTURED_OUTPUT + "\n".join(result.logs)
    return message


def present_run_code(args: JsonValue) -> GenericCallView:
    args_dict = args if isinstance(args, dict) else {}
    description = args_dict.get("description")
    code = args_dict.get("code")
    return GenericCallView(title=str(description) if description else "Run code",
                           kind="execute", raw_input=code if isinstance(code, str) else None)


@dataclass(frozen=True, slots=True)
class CodeModeParts:
    """What a registry's run_code works with: ``ordering`` orders its programs'
    sub-calls (registered on the registry), under discovery their helpers read
    ``catalogs``, ``checker`` checks them first when ``registry.check_programs`` says so,
    and ``resumptions`` holds the runs ``registry.resume`` took up, by run_code call id."""

    ordering: SubCallOrdering
    catalogs: Catalogs
    checker: ProgramChecker
    resumptions: dict[str, Resumption]


def run_code_definition(registry: CodeModeHost, parts: CodeModeParts) -> ToolDefinition:
    """The transport tool, bound to ``registry`` (built once per registry by
    :class:`~dsh_jupyter.codemode.mode.CodeMode`) and its ``parts``."""

    async def run_code(args: Any, ctx: ToolRunContext) -> JsonValue:
        return await _run_program(registry, parts, str(args["code"]), ctx)

    def parse(args: JsonObject) -> JsonObject:
        description = args.get("description")
        if isinstance(description, str) and not description.strip():
            from ..errors import ToolArgsError

            raise ToolArgsError('"description" must not be blank: say what the program does',
                                ['"description" must not be blank'])
        return args

    def finalize(_execution: ToolExecution, result: ToolResult) -> Content | None:
        return model_failure(result, run_code_limit(registry))

    return ToolDefinition(
        name=RESERVED_NAME, description=RUN_CODE_DESCRIPTION, parameters=RUN_CODE_PARAMETERS,
        output=run_code_output(stateful=lambda: _stateful(registry),
                               limit=lambda: run_code_limit(registry)),
        execute=run_code, validator=compile_schema(RUN_CODE_PARAMETERS), parse_args=parse,
        output_validator=compile_schema(RUN_CODE_OUTPUT), present_call=present_run_code,
        finalize_content=finalize)


def run_code_output(*, render_result: Callable[[JsonValue], str] = render_result_value,
                    stateful: Callable[[], bool] = _never,
                    limit: Callable[[], TextLimit | None] = _no_limit) -> RunCodeOutput:
    """run_code's output declaration: ``render_result`` renders a program's result,
    ``stateful`` says whether the registry's runtime is stateful (for the card's meta),
    ``limit`` the model cap of the content (none by default; a registry's run_code has
    its ``run_code_max_chars``)."""

    def render(_args: JsonValue, value: JsonValue) -> Content:
        assert isinstance(value, dict)
        return run_code_content(value, render_result(value["result"]) if "result" in value
                                else None, limit())

    def meta(_args: JsonValue, value: JsonValue) -> JsonValue:
        return run_code_meta(value, None, (), render_result=render_result, stateful=stateful)

    return RunCodeOutput(schema=RUN_CODE_OUTPUT, render=render, presentation_meta=meta,
                         render_result=render_result, stateful=stateful, limit=limit)


def _stateful(registry: CodeModeHost) -> bool:
    runtime = registry.code_runtime
    return runtime is not None and runtime.info.stateful


async def _run_program(registry: CodeModeHost, parts: CodeModeParts, program: str,
                       ctx: ToolRunContext) -> JsonValue:
    runtime = registry.code_runtime
    if runtime is None:
        raise CodeModeError("run_code needs a code runtime: `async with KernelRuntime() as "
                            "runtime:` (from dsh_jupyter.kernel), then set "
                            "registry.code_runtime = runtime")
    names = sorted(n for n in registry.visible(ctx.agent) if n != RESERVED_NAME)
    discovery = registry.mode_for(ctx.agent) == "discovery"
    checking = registry.check_programs
    check: ProgramCheck | None = None
    if checking != "off":  # before any kernel: a rejected program costs none
        check = await parts.checker.check(program, ctx.agent, discovery=discovery,
                                          stateful=runtime.info.stateful)
        if checking == "error" and check.problems:
            if ctx.traced:
                ctx.set_trace_attributes(_check_facts(check, failed=True))
            raise CodeRunFailedError(failure_message(CodeRunResult(failure=CodeRunFailure(
                kind="type-check", message=failure_text(check.problems)))))
    notes = problem_lines(check.problems) if check is not None else []
    journal = await _journal(registry, parts, program, names, ctx)
    bridge = DispatchBridge(registry, ctx, names, parts.ordering,
                            catalog=parts.catalogs(ctx.agent) if discovery else None,
                            journal=journal)
    run = asyncio.ensure_future(runtime.run(bridge.request(program)))
    try:
        result = await asyncio.shield(run)
    except asyncio.CancelledError:
        # Our task was cancelled (Kernel > Interrupt, an agent stopped): stop the program
        # as an abort, so its result keeps what it printed. The cancellation is not lost:
        # the pipeline sees the task's request and re-raises once this failure is published.
        bridge.stop(CANCELLED_REASON)
        await wait_uncancelled((run,))
        result = run.result()
    finally:
        # Settle even when our own task is cancelled: no sub-call may outlive the run.
        await _settle(bridge)
    if journal is not None:
        result = _journal_failure(journal, result)
    if ctx.traced:
        facts = _run_facts(registry, result, bridge.started_calls)
        if check is not None:
            facts.update(_check_facts(check, failed=False))
        if journal is not None:
            facts["dsh.run_code.journal_run"] = journal.run_id
            facts["dsh.run_code.replayed"] = journal.replayed
        ctx.set_trace_attributes(facts)
    if result.failure is not None:
        # Also an abort: 000 lets cancellation replace only a success with ABORTED, and the
        # failure keeps the lines the program printed before it was stopped.
        message = failure_message(result, notes)
        if journal is not None:
            await journal.finish(True, {"failure": result.failure.kind, "message": message})
        raise CodeRunFailedError(message)
    value = _run_value(registry, result, notes, ctx)
    if journal is not None:
        await journal.finish(False, value)
    return value


async def _journal(registry: CodeModeHost, parts: CodeModeParts, program: str,
                   names: Sequence[str], ctx: ToolRunContext) -> RunJournal | None:
    """The run's journal when the registry keeps one (a resumed run's is the one
    ``registry.resume`` took up); a run that may not start fails here, before any kernel."""
    store = registry.journal
    resumption = parts.resumptions.pop(ctx.call_id, None)
    if store is None:
        return None
    visible = registry.visible(ctx.agent)
    started = await start_journal(
        store, resumption, program=program,
        fingerprint=tools_fingerprint(visible[name] for name in names),
        call_id=ctx.call_id, scope=ctx.agent.session_key if ctx.agent is not None else None,
        scope_name=ctx.agent.name if ctx.agent is not None else None,
        approval=lambda: registry.approval)
    if isinstance(started, Stop):
        raise CodeRunFailedError(failure_message(CodeRunResult(
            failure=CodeRunFailure(kind=started.kind, message=started.message))))
    return started


def _journal_failure(journal: RunJournal, result: CodeRunResult) -> CodeRunResult:
    """The run's result once its journal has its say: a run the journal stopped fails with
    the journal's kind (whatever the program did after), and a resumed run whose program
    ended without making the call it paused on again diverged."""
    stop = journal.stopped
    if stop is None and journal.replay is not None and result.failure is None:
        stop = journal.replay.finish()
    if stop is None:
        return result
    return replace(result, failure=CodeRunFailure(kind=stop.kind, message=stop.message))


def _run_value(registry: CodeModeHost, result: CodeRunResult, notes: Sequence[str],
               ctx: ToolRunContext) -> JsonObject:
    """A successful run's value (and its files attached to the call)."""
    value: dict[str, JsonValue] = {"logs": list(result.logs)}
    if result.value is not None:
        value["result"] = result.value
    if registry.run_code_images:
        images = model_images(result.displays)
        if images:
            value["images"] = list(images[:RUN_CODE_MAX_IMAGES])
        if len(images) > RUN_CODE_MAX_IMAGES:
            value["images_omitted"] = len(images) - RUN_CODE_MAX_IMAGES
    if result.files or result.files_omitted:
        value["files"] = file_entries(result)
        if result.files_omitted:
            value["files_omitted"] = result.files_omitted
        for file in result.files:
            if file.data is not None:
                ctx.attach(file)
    if notes:
        value["type_check"] = list(notes)
    return value


async def _settle(bridge: DispatchBridge) -> None:
    """Await the run's settlement; a cancellation meanwhile stops the sub-calls still
    running (a program that ended leaving one in flight) and is re-raised once they
    have settled."""
    settling = asyncio.ensure_future(bridge.settle())
    cancelled = False
    while not settling.done():
        try:
            await asyncio.wait({settling})
        except asyncio.CancelledError:
            cancelled = True
            bridge.stop(CANCELLED_REASON)
    if cancelled:
        raise asyncio.CancelledError


def _run_facts(registry: CodeModeHost, result: CodeRunResult,
               sub_calls: int) -> dict[str, TraceValue]:
    """The run's span attributes: what the runtime reports (``dsh.kernel.*``,
    ``dsh.budget.*``), and what the run did."""
    facts: dict[str, TraceValue] = {f"dsh.{key}": value for key, value in result.facts.items()}
    facts["dsh.budget.max_parallel_sub_calls"] = registry.max_parallel_sub_calls
    facts["dsh.run_code.sub_calls"] = sub_calls
    facts["dsh.run_code.log_lines"] = len(result.logs)
    facts["dsh.run_code.displays"] = len(result.displays) + result.displays_dropped
    if result.failure is not None:
        facts["dsh.run_code.failure"] = result.failure.kind
    return facts


def _check_facts(check: ProgramCheck, *, failed: bool) -> dict[str, TraceValue]:
    """The check's span attributes: what it found and how long the run waited for it;
    a rejected program also gets the run's failure facts (it made no sub-call)."""
    facts: dict[str, TraceValue] = {
        "dsh.run_code.type_check": ("unchecked" if check.unchecked is not None
                                    else "problems" if check.problems else "passed"),
        "dsh.run_code.type_check_problems": len(check.problems),
        "dsh.run_code.type_check_ms": round(check.seconds * 1000, 2),
    }
    if failed:
        facts["dsh.run_code.failure"] = "type-check"
        facts["dsh.run_code.sub_calls"] = 0
    return facts


def model_images(displays: tuple[Display, ...]) -> list[JsonValue]:
    """``{"mime_type", "data"}`` of each display showing a PNG or JPEG image that is what it
    claims (checked base64), in order; a display with both gives its PNG."""
    images: list[JsonValue] = []
    for display in displays:
        for mime in MODEL_IMAGE_TYPES:
            checked = check_image(mime, display.data.get(mime))
            if checked is not None:
                images.append({"mime_type": mime, "data": checked.data})
                break
    return images
