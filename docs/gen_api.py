"""Write docs/api.md from the public names: ``python docs/gen_api.py``.

Every name in each module's ``__all__`` gets one line: its signature (parameters and
defaults, no annotations) and a one-line summary, from the docstring unless
``SUMMARIES`` says better. A name is documented once, under the first module (in
``MODULES`` order) that exports it. ``tests/unit/test_api_reference.py`` checks that api.md
lists exactly the public names; re-run this script when they change (or when a
signature does).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import typing
from pathlib import Path
from typing import Any

API_MD = Path(__file__).with_name("api.md")

# The top-level package, grouped for reading; every other module in __all__ order.
TOP_GROUPS: dict[str, list[str]] = {
    "Registry and tools": [
        "ToolRegistry", "AgentScope", "define_tool", "default_render", "ToolRunContext",
        "enforce_timeouts",
    ],
    "Calls and results": [
        "ToolCall", "ToolExecution", "ToolResult", "ToolSuccess", "ToolFailure",
        "ToolErrorInfo", "AdditionalContext",
    ],
    "Policies and approvals": ["Allow", "Deny", "Ask", "Accept", "Block", "Approval"],
    "Cancellation": ["AbortController", "AbortSignal"],
    "Session logs": ["JsonlSessionWriter", "read_session", "export_notebook"],
    "Errors": ["DshError", "ToolError"],
}

# Every other module with public names, in page order: a name is documented under the
# first of them that exports it (the model errors under errors, not agent).
MODULES: dict[str, str] = {
    "dsh_jupyter.registry": "Definitions and their typed options, presentation views, schema "
                            "checks, and the rest of the registry (see "
                            "[registry.md](registry.md), [widgets.md](widgets.md)).",
    "dsh_jupyter.codemode": "Code Mode, plugged into the registry core through its seams "
                            "(see [code-mode.md](code-mode.md)).",
    "dsh_jupyter.errors": "Every error, each with a stable `code` (the tree is in the "
                          "module docstring).",
    "dsh_jupyter.events": "Durable session events: their types, and reading a log.",
    "dsh_jupyter.runtime": "The Code Mode runtime contract (see "
                           "[code-mode.md](code-mode.md)).",
    "dsh_jupyter.json_value": "Lossless JSON values.",
    "dsh_jupyter.kernel": "The kernel runtime: Code Mode programs in fresh IPython kernels.",
    "dsh_jupyter.agent": "The agent loop, chat models, messages and responses.",
    "dsh_jupyter.widgets": "Live cards, replays and approvals in a notebook.",
    "dsh_jupyter.mcp": "MCP servers as tools.",
    "dsh_jupyter.sessions": "Sessions as notebooks: a log exported to a runnable notebook "
                            "(see [sessions.md](sessions.md)).",
    "dsh_jupyter.durable": "The journal that lets an approval survive a restart: "
                           "`ToolRegistry(journal=...)` records each run in it and "
                           "`registry.resume` replays from it (see "
                           "[approvals-durable.md](approvals-durable.md)).",
    "dsh_jupyter.evaluation": "Task sets, runs and results of the evaluation "
                              "(see [evaluation.md](evaluation.md)).",
    "dsh_jupyter.loading": "Tools named `MODULE:ATTR` (the CLI's `--tools`, exported "
                           "notebooks' `open_session_registry`).",
}

WHERE_NAMES_LIVE = [
    "### Where names live",
    "",
    "`from dsh_jupyter import ...` gives what the quickstart, the tutorials and the how-tos",
    "import, and the types of the values those return; each subsystem keeps the rest:",
    "",
    "| import from | for |",
    "| --- | --- |",
    "| `dsh_jupyter` | `ToolRegistry`, `define_tool`, `ToolCall`, results, policies, "
    "cancellation, the session log, `DshError` and `ToolError` |",
    "| `dsh_jupyter.registry` | `ToolDefinition` and the typed `define_tool` options, the "
    "presentation views (`GenericCallView`, `SearchResultView`, `DurableResult`, ...), "
    "`compile_schema`, `ApprovalService`, `RegistryChange` |",
    "| `dsh_jupyter.errors` | every error (`RegistrationError`, `UnsupportedSchemaError`, "
    "`CodeRunFailedError`, the model and MCP errors, ...) |",
    "| `dsh_jupyter.events` | event types (`SessionEvent`, `ToolResultEvent`, ...), "
    "`iter_session` |",
    "| `dsh_jupyter.runtime` | the Code Mode runtime contract: `CodeRuntime`, "
    "`CodeRunResult`, `CodeRunFailure`, `BindingError` |",
    "| `dsh_jupyter.json_value` | `JsonValue`, `snapshot_json` |",
    "| `dsh_jupyter.durable` | the journal of durable runs (`ToolRegistry(journal=...)`): "
    "`JournalStore`, `SqliteJournalStore`, its records and `Replay` |",
    "| `dsh_jupyter.kernel`, `.agent`, `.widgets`, `.mcp`, `.evaluation` | the kernel "
    "runtime, the agent loop and models, cards and approvals, `connect_mcp`, the evaluation |",
    "",
    "Changed since 0.1.0: the top level no longer re-exports the views, most errors, the",
    "event types, the runtime contract, or the agent, MCP and widget names (it had 87",
    "names). Those names still resolve from `dsh_jupyter`, with a `DeprecationWarning`",
    "that names their new home; import them from there.",
]

# Names a caller receives but does not construct: shown without a signature.
NOT_CONSTRUCTED = {
    "AbortSignal", "AgentRun", "AgentScope", "ExecutionToken", "McpConnection",
    "ToolDefinition", "ToolExecution", "ToolRunContext",
}

SUMMARIES: dict[str, str] = {
    "Binding": "An async callable taking lossless JSON arguments and resolving to a JSON "
               "value (see `FunctionBindings`).",
    "RunFact": "One fact a runtime reports about how it ran a program "
               "(`CodeRunResult.facts`): str, bool, int or float.",
    "FailureKind": "Why a run failed: exception, timeout, abort, kernel-exit, "
                   "invalid-output, output-limit, call-limit, a cap (session-, memory-, "
                   "process-, workspace-, file-limit), type-check (Code Mode's check "
                   "rejected the program before it ran), or a journaled run that could not "
                   "go on (journal-divergence, -in-doubt, -tools-changed, -unavailable).",
    # registry and tools
    "define_tool": "Build a `ToolDefinition` from a typed function (also as a decorator) or "
                   "from explicit JSON Schemas.",
    "AgentScope": "An agent's view of the registry, made by `registry.scope(name, parent=...)`: "
                  "own tools, `restrict`, `present_as`, hooks, `dispose()`.",
    "ToolDefinition": "A registered tool, built by `define_tool` or `@registry.tool`; "
                      "`registry.get(name)` returns one.",
    "ToolRunContext": "What a tool body receives in a parameter annotated `ToolRunContext`: "
                      "`signal`, `call_id`, `agent`, `defer_context(...)`.",
    "ToolExecution": "The frozen view of one call that every policy stage receives.",
    "ExecutionToken": "Opaque identity of one execution (`execution.token`); pass it as "
                      "`ToolCall(parent=...)` to correlate nested calls.",
    "ToolResult": "Type alias: `ToolSuccess | ToolFailure`, what `registry.execute` returns.",
    "ToolSuccess": "A successful call: `value`, `content` (what the model sees, also as "
                   "`.text`), `meta`, `additional_contexts`.",
    "ToolFailure": "A failed call: `error` (`ToolErrorInfo`), content `Error: <message>`, "
                   "`additional_contexts`.",
    "ToolErrorInfo": "A failure's `message` and stable `code`.",
    # the call lifecycle and Code Mode
    "CallListener": "Protocol: one optional method per stage of a call (`on_call_start`, "
                    "`around_policy`, `on_decision`, `on_approval_request`, `on_approval`, "
                    "`on_guards`, `on_dispatch_start`, `on_trace_attributes`, "
                    "`on_dispatch_end`, `around_post`, `on_post_decision`, `on_call_end`); "
                    "subclass it, pass it to `registry.listen(...)`.",
    "CallRun": "One call through the pipeline, as every listener stage receives it: the "
               "call, its execution view, definition, parent run, timing, result, and "
               "per-listener `state`.",
    "CodeMode": "Code Mode plugged into one registry: the `run_code` transport and prompt "
                "sections the registry core asks for, and the sub-call listener.",
    "SubCallOrdering": "Code Mode's lifecycle listener: orders each program's sub-calls and "
                       "emits their `tool/code-dispatch*` events.",
    # policies
    "Allow": "Pre-execute decision: let the call run.",
    "Deny": "Pre-execute decision: refuse the call (`DENIED`) with `reason`.",
    "Ask": "Pre-execute decision: ask the registry's approval service; denied when none "
           "is attached.",
    "Approval": "An approval service's answer: `approved`, who answered, an optional note, "
                "`for_run` (it also covers the run's later calls of that tool).",
    "ApprovalService": "Protocol: `async request(execution, reason) -> Approval | bool`.",
    # cancellation
    "AbortSignal": "The read side of an `AbortController`: `aborted`, `reason`, "
                   "`add_listener`, `await wait()`, `await run(awaitable)`; "
                   "`AbortSignal.never()`.",
    # code mode
    "CodeRuntime": "Protocol of a Code Mode runtime: `language`, `isolation`, "
                   "`async run(program, bindings, signal) -> CodeRunResult`.",
    "CodeRunResult": "What a run produced: `logs` (one entry per printed line), `value`, "
                     "and `failure` (`None` on success).",
    "CodeRunFailure": "Why a run failed: `kind` (a `FailureKind`: `exception`, `timeout`, "
                      "`abort`, `kernel-exit`, `type-check`, ...) and `message`.",
    # agents
    "ChatModel": "Protocol of a chat model: `name` and "
                 "`async complete(request, *, signal) -> ModelResponse`.",
    "run_agent": "The agent loop as a function: run `task` until the model answers, "
                 "`max_steps` requests, an abort, or a model error.",
    "RequestAccounting": "One model request (one step): bytes of each system-prompt "
                         "section, the tool schemas, the SDK, the results returned and the "
                         "whole body; tokens; attempts and latency.",
    "AgentRun": "The handle `Agent.start` returns: `await` it, `abort(reason)`, `done()`.",
    # mcp
    "McpConnection": "What `connect_mcp` returns; `async with` it. `name`, `tools`, "
                     "`client`, `await refresh()`, `await wait_gone()`.",
    # events
    "SessionEvent": "Type alias: the union of event TypedDicts (`tool/*`, `agent/*`), "
                    "each with a `kind`.",
    "read_session": "Every event of a JSON Lines session log, as a list.",
    "EventSink": "Type alias: `(event) -> None`, what `registry.on_event` takes.",
    "EVENT_KINDS": "Every event `kind`, `tool/*` then `agent/*`.",
    "JsonObject": "Type alias: `dict[str, JsonValue]`, a tool's arguments.",
    # views
    "GenericCallView": "A call shown as a title, optional kind, raw input, content and "
                       "locations.",
    "TerminalCallView": "A shell command: `$ title`, description, working directory.",
    "DiffCallView": "A call that edits files: one unified diff per `FileDiff`.",
    "GenericResultView": "A result shown as its content (with an optional title).",
    "TerminalResultView": "Command output, exit code and signal.",
    "DiffResultView": "The diffs a call made.",
    "SearchFileMatches": "One file's matches in a `SearchResultView`.",
    "SearchMatch": "One matching line: `line` number and `text`.",
    "ReadLine": "One line of a `ReadResultView`, with the file's own line number.",
    "WebResultView": "Web search sources, or a fetch summary.",
    "WebSource": "One web search hit: title, URL, snippet.",
    "WebFetchSummary": "What a web fetch returned: URL, title, status, type, size, summary.",
    "Location": "A path and an optional line a call touches.",
    "JsonValue": "Type alias of lossless JSON: `None | bool | int | float | str | "
                 "list[JsonValue] | dict[str, JsonValue]`.",
    # errors
    "DshError": "Base of every dsh-jupyter error; each has a stable `code`.",
    "RegistrationError": "`INVALID_REGISTRATION`: a bad definition, filter, scope or hook.",
    "UnsupportedSchemaError": "`UNSUPPORTED_SCHEMA`: a schema outside the supported "
                              "subset; `violations` lists each.",
    "ToolArgsError": "`INVALID_ARGS`: arguments that are not lossless JSON or do not match "
                     "the schema.",
    "InvalidToolOutputError": "`INVALID_TOOL_OUTPUT`: a body's value violates its output "
                              "schema.",
    "UnknownToolError": "`UNKNOWN_TOOL`: no visible tool of that name.",
    "ToolDeniedError": "`DENIED` / `BLOCKED`: a pre-execute deny or guard, or a "
                       "post-execute block.",
    "ToolAbortedError": "`ABORTED` / `ABORTED_BEFORE_DISPATCH`: the call's signal aborted.",
    "ToolTimeoutError": "`TOOL_TIMEOUT`: `enforce_timeouts()` fired.",
    "HookError": "`HOOK_FAILED`: a policy hook raised or returned something invalid.",
    "CodeModeError": "`CODE_MODE_UNAVAILABLE`: Code Mode without a usable runtime.",
    "CodeRunFailedError": "`CODE_RUN_FAILED`: a `run_code` program failed.",
    "JournalError": "`JOURNAL_UNREADABLE`, `JOURNAL_BUSY`, `JOURNAL_UNKNOWN_RUN`, "
                    "`JOURNAL_ANSWERED`, `JOURNAL_CONFLICT`, `JOURNAL_NOT_RESUMABLE`, "
                    "`JOURNAL_SCOPE`: a run journal cannot be used, or its run cannot be "
                    "resumed (one line).",
    # widgets: approvals after a restart
    "ApprovalCard": "The Approve / Reject prompt of one pending `Ask` (`run_id`: the "
                    "journaled run it belongs to).",
    "PendingApprovals": "What `show_pending` returns: `runs` (one `PendingRun` per waiting "
                        "run: `card`, `state`, `error`, `result`, `view`), `message`, "
                        "`await refresh()`, `await wait()`.",
    "show_pending": "The approvals waiting in `registry`'s journal, as a widget: a card per "
                    "waiting run whose click resolves and resumes it in this kernel (see "
                    "[widgets.md](widgets.md#approvals-that-survive-a-restart)).",
    # durable
    "Answered": "`Replay.match`: the journal has the call's outcome; the tool is not called.",
    "ApprovalRecord": "An approval a run asked for at `position`; `decision` once answered.",
    "CallOutcome": "What the program saw of a sub-call: its value, or its failure (and the "
                   "contexts it deferred).",
    "CallRecord": "One sub-call at its position: `issued`, `started` or `done`.",
    "CallState": '`"issued" | "started" | "done"`.',
    "Decided": "`Replay.match`: the call asked for an approval that has been answered; run "
               "it with that decision.",
    "JournalStore": "The store's contract (a `Protocol`): `record_run`, `record_call`, "
                    "`mark_started`, `record_call_result`, `mark_pending`, `resolve`, `claim`, "
                    "`finish_run`, `load_run`, `list_pending`.",
    "JournaledRun": "A run as its journal holds it; `open_approval` is the one waiting.",
    "Live": "`Replay.match`: run the call through the pipeline, journaled at `position`.",
    "Match": "`Answered | Decided | Live | Stop`.",
    "PendingApproval": "A run waiting for an answer (`list_pending`).",
    "Replay": "A journaled run consumed as its program makes its calls again: "
              "`match(tool, arguments)`, `finish()`, `unused`; matches by tool, canonical "
              "arguments and occurrence.",
    "RunRecord": "What a run is, fixed when it starts.",
    "RunStatus": '`"running" | "waiting" | "decided" | "done" | "failed"`.',
    "SqliteJournalStore": "The default store: one SQLite file (WAL, one transaction per "
                          "write), opened on first use; `aclose()`; `create=False` opens "
                          "an existing journal only.",
    "Stop": "`Replay.match`: the run must stop with a `journal-*` kind and one line for the "
            "model.",
    "StopKind": '`"journal-divergence" | "journal-in-doubt" | "journal-tools-changed" | '
                '"journal-unavailable"`.',
    "tools_fingerprint": "`sha256:<hex>` of the tools' names, parameter and output schemas "
                         "(not their descriptions).",
    "McpConnectError": "`MCP_CONNECT_FAILED`: an MCP server could not be started or "
                       "reached.",
    "ModelError": "`MODEL_ERROR`: a model request failed; base of the model errors.",
    # dsh_jupyter.kernel
    "KernelRuntime": "The Code Mode runtime: each program in a fresh IPython kernel, "
                     "destroyed afterwards; `async with` it.",
    # dsh_jupyter.agent
    "AGENT_EVENT_KINDS": "The `kind`s of agent events, in the order a run emits them.",
    "AgentEvent": "Type alias: the union of the `agent/*` event TypedDicts.",
    "ChatMessage": "Type alias: a chat-completions message (system, user, assistant or "
                   "tool), as a TypedDict.",
    "DEFAULT_INSTRUCTIONS": "The agent's default system instructions.",
    "ModelConfigError": "`MODEL_CONFIG`: missing or invalid model adapter settings.",
    "ModelHTTPError": "`MODEL_HTTP_ERROR`: a non-retryable status, or retries used up "
                      "(`.status`).",
    "ModelUnavailableError": "`MODEL_UNAVAILABLE`: connection errors or timeouts on every "
                             "attempt.",
    "ModelResponseError": "`MODEL_RESPONSE_INVALID`: the body is not a response of its API "
                          "(`.field` names the first bad field).",
    "ScriptExhaustedError": "`SCRIPT_EXHAUSTED`: a scripted model ran out of responses.",
    "ScriptMismatchError": "`SCRIPT_MISMATCH`: a request did not offer the tools a recorded "
                           "response expects or calls.",
    "StopReason": "Type alias: `'answered' | 'step_limit' | 'aborted' | 'model_error'`.",
    # dsh_jupyter.widgets
    "RunCodeCard": "The card of a `run_code` call: the program, a nested card per sub-call, "
                   "then the output or the failure.",
    "ApprovalHost": "Protocol: `show_approval(call_id, card) -> bool`, a place to show an "
                    "approval prompt (a `LiveView`).",
    "ApprovalPolicy": "Type alias: `'approve' | 'reject' | (execution, reason) -> bool | "
                      "Approval` (sync or async).",
    # dsh_jupyter.mcp
    "UNVALIDATED_NOTE": "The note appended to the description of an MCP tool whose input "
                        "schema has nothing the subset can check.",
    "ConcurrencySafe": "Type alias for `connect_mcp(concurrency_safe=...)`: `False`, `True`, "
                       "`'read-only-hint'` or a function of the MCP tool.",
    # dsh_jupyter.evaluation
    "Check": "Type alias: one of the task checks (`answer_contains`, `answer_matches`, "
             "`rows`, `unchanged`).",
    "ModelFactory": "Protocol: `(task, mode) -> ChatModel`, the model for one run.",
    "ResultFiles": "The paths `write_results` wrote: `results` (JSON Lines) and `summary`.",
    "SHIPPED_TASKS": "Path of the `shop` task file that ships with the package.",
    "SHIPPED_SETS": "Shipped task sets by name (`office`, the default; `shop`): their task files.",
    "ToolWorld": "A task set's tools: `(World) -> ToolRegistry`, called with each run's world.",
    "TaskSet": "A task set: name, description, world, tasks and the tools (`ToolWorld`).",
}

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc):`~?(?:[\w.]*\.)?([\w.]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
_KNOWN_DEFAULTS = {67108864: "64 * 2**20", 16777216: "16 * 2**20", 8388608: "8 * 2**20"}


def summary(name: str, obj: Any) -> str:
    if name in SUMMARIES:
        return SUMMARIES[name]
    doc = inspect.getdoc(obj) if inspect.isclass(obj) or inspect.isroutine(obj) else None
    if not doc or doc.startswith(f"{name}("):  # a dataclass's generated docstring
        raise SystemExit(f"{name}: no docstring to summarise; add it to SUMMARIES")
    paragraph = " ".join(doc.split("\n\n")[0].split())
    sentence = re.split(r"(?<!e\.g\.)(?<!i\.e\.)(?<=\.)\s+(?=[A-Z`])", paragraph,
                        maxsplit=1)[0].rstrip(":;")
    sentence = _LITERAL.sub(r"`\1`", _ROLE.sub(r"`\1`", sentence))
    return sentence if sentence.endswith(".") else sentence + "."


def _default(value: Any) -> str:
    if value is dataclasses._HAS_DEFAULT_FACTORY:  # type: ignore[attr-defined]
        return "..."
    from dsh_jupyter.agent import DEFAULT_INSTRUCTIONS

    if value == DEFAULT_INSTRUCTIONS:
        return "DEFAULT_INSTRUCTIONS"
    if isinstance(value, int) and value in _KNOWN_DEFAULTS:
        return _KNOWN_DEFAULTS[value]
    if inspect.isroutine(value):  # its name, not a repr with an address that changes
        return str(value.__name__)
    return repr(value)


def signature(name: str, obj: Any) -> str:
    """``name(params)`` without annotations; the bare name for values and protocols."""
    is_class = inspect.isclass(obj)
    if not (is_class or inspect.isroutine(obj)) or name in NOT_CONSTRUCTED:
        return name
    if is_class and (getattr(obj, "_is_protocol", False) or typing.is_typeddict(obj)):
        return name
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return f"{name}(message)"
    parts: list[str] = []
    keyword_only = False
    for index, param in enumerate(params):
        if param.kind is param.VAR_POSITIONAL:
            parts.append(f"*{param.name}")
            keyword_only = True
            continue
        if param.kind is param.VAR_KEYWORD:
            parts.append(f"**{param.name}")
            continue
        if param.kind is param.KEYWORD_ONLY and not keyword_only:
            parts.append("*")
            keyword_only = True
        text = param.name
        if param.default is not param.empty:
            text += f"={_default(param.default)}"
        parts.append(text)
        following = params[index + 1] if index + 1 < len(params) else None
        if param.kind is param.POSITIONAL_ONLY and (
                following is None or following.kind is not param.POSITIONAL_ONLY):
            parts.append("/")
    return f"{name}({', '.join(parts)})"


def entry(name: str, obj: Any) -> str:
    return f"- `{signature(name, obj)}` — {summary(name, obj)}"


def render() -> str:
    top = importlib.import_module("dsh_jupyter")
    grouped = [name for names in TOP_GROUPS.values() for name in names]
    missing = sorted(set(top.__all__) - set(grouped))
    extra = sorted(set(grouped) - set(top.__all__))
    if missing or extra or len(grouped) != len(set(grouped)):
        raise SystemExit(f"TOP_GROUPS out of step: missing {missing}, not public {extra}")
    lines = [
        "# API reference",
        "",
        "Every public name, one line each: the signature (parameters and defaults) and what",
        "it is for. Names are documented once, under the first module below that exports",
        "them. The pages linked from [index.md](index.md) explain how the pieces fit.",
        "",
        "This page is generated by `python docs/gen_api.py`; "
        "`tests/unit/test_api_reference.py`",
        "checks that it lists exactly the public names.",
        "",
        *WHERE_NAMES_LIVE,
        "",
        "## `dsh_jupyter`",
    ]
    for group, names in TOP_GROUPS.items():
        lines += ["", f"### {group}", ""]
        lines += [entry(name, getattr(top, name)) for name in names]
    documented = set(top.__all__)
    for module_name, about in MODULES.items():
        module = importlib.import_module(module_name)
        names = [n for n in module.__all__ if n not in documented]
        documented.update(names)
        lines += ["", f"## `{module_name}`", "", about, ""]
        lines += [entry(name, getattr(module, name)) for name in names]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    API_MD.write_text(render(), encoding="utf-8")
    print(f"wrote {API_MD}")
