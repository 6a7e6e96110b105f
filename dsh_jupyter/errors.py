"""Every error dsh-jupyter raises or reports, with a stable ``code``.

Tool failures are *values* (:class:`~dsh_jupyter.ToolFailure`); the exceptions
below are raised only for programmer misuse (a bad definition, a bad filter) or
used inside the pipeline to carry a code to the failure it becomes::

    DshError                      code
    ├── RegistrationError         INVALID_REGISTRATION   bad definition, filter, scope or hook
    ├── UnsupportedSchemaError    UNSUPPORTED_SCHEMA     schema outside the supported subset
    ├── ToolArgsError             INVALID_ARGS           arguments that are not lossless JSON or
    │                                                    do not match the parameter schema
    ├── InvalidToolOutputError    INVALID_TOOL_OUTPUT    a body's value violates its output schema
    ├── UnknownToolError          UNKNOWN_TOOL           no visible tool of that name
    ├── ToolDeniedError           DENIED / BLOCKED       pre-execute deny or guard / post block
    ├── ToolAbortedError          ABORTED / ABORTED_BEFORE_DISPATCH
    ├── ToolTimeoutError          TOOL_TIMEOUT           the opt-in timeout wrapper fired
    ├── HookError                 HOOK_FAILED            a policy hook raised
    ├── CodeModeError             CODE_MODE_UNAVAILABLE  code mode without a usable runtime
    ├── CodeRunFailedError        CODE_RUN_FAILED        a run_code program failed
    ├── McpConnectError           MCP_CONNECT_FAILED     an MCP server could not be reached
    ├── JournalError              JOURNAL_UNREADABLE     a run journal (docs/approvals-durable.md)
    │                             JOURNAL_BUSY           cannot be opened or stays locked, has
    │                             JOURNAL_UNKNOWN_RUN    no such run, its approval was answered
    │                             JOURNAL_ANSWERED       already, refuses a write its run's state
    │                             JOURNAL_CONFLICT       forbids (a second start), or the run
    │                             JOURNAL_NOT_RESUMABLE  has no answered approval to resume,
    │                             JOURNAL_SCOPE          or its agent scope is not there
    ├── ModelConfigError          MODEL_CONFIG           missing or invalid model adapter settings
    └── ModelError                MODEL_ERROR            a model request failed
        ├── ModelHTTPError        MODEL_HTTP_ERROR       non-retryable status, or retries exhausted
        ├── ModelUnavailableError MODEL_UNAVAILABLE      connection errors or timeouts, every retry
        ├── ModelResponseError    MODEL_RESPONSE_INVALID not a response of its API (names the field)
        ├── ScriptExhaustedError  SCRIPT_EXHAUSTED       a scripted model ran out of responses
        └── ScriptMismatchError   SCRIPT_MISMATCH        a recorded response expects other tools

MCP tool failures are results with code ``MCP_ERROR`` (the server reported an
error) or ``MCP_SERVER_GONE`` (the server died). A tool body may raise
:class:`ToolError` (or any ``DshError``) to choose the code of its failure; any
other exception becomes a failure without a code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

__all__ = [
    "CodeModeError",
    "CodeRunFailedError",
    "DshError",
    "DshWarning",
    "HookError",
    "InvalidToolOutputError",
    "JournalError",
    "McpConnectError",
    "ModelConfigError",
    "ModelError",
    "ModelHTTPError",
    "ModelResponseError",
    "ModelUnavailableError",
    "RegistrationError",
    "ScriptExhaustedError",
    "ScriptMismatchError",
    "ToolAbortedError",
    "ToolArgsError",
    "ToolDeniedError",
    "ToolError",
    "ToolTimeoutError",
    "UnknownToolError",
    "UnsupportedSchemaError",
]


class DshWarning(UserWarning):
    """Warnings issued by dsh-jupyter (tests turn them into errors)."""


class DshError(Exception):
    """Base class: every error has a stable, machine-readable ``code``."""

    default_code: ClassVar[str] = "DSH_ERROR"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code


class ToolError(DshError):
    """Raise from a tool body to fail with your own message and code."""

    default_code = "TOOL_ERROR"


class RegistrationError(DshError):
    default_code = "INVALID_REGISTRATION"


class UnsupportedSchemaError(DshError):
    """A schema uses constructs outside the supported subset; ``violations`` lists each."""

    default_code = "UNSUPPORTED_SCHEMA"

    def __init__(self, what: str, violations: Sequence[str]) -> None:
        self.violations = tuple(violations)
        shown = "\n".join(f"  - {v}" for v in self.violations[:20])
        more = len(self.violations) - 20
        if more > 0:
            shown += f"\n  ... and {more} more"
        super().__init__(f"{what} is outside the supported JSON Schema subset:\n{shown}")


class ToolArgsError(DshError):
    default_code = "INVALID_ARGS"

    def __init__(self, message: str, violations: Sequence[str] = ()) -> None:
        self.violations = tuple(violations)
        super().__init__(message)


class InvalidToolOutputError(DshError):
    default_code = "INVALID_TOOL_OUTPUT"


class UnknownToolError(DshError):
    default_code = "UNKNOWN_TOOL"


class ToolDeniedError(DshError):
    default_code = "DENIED"


class ToolAbortedError(DshError):
    default_code = "ABORTED"


class ToolTimeoutError(DshError):
    default_code = "TOOL_TIMEOUT"


class HookError(DshError):
    default_code = "HOOK_FAILED"


class CodeModeError(DshError):
    default_code = "CODE_MODE_UNAVAILABLE"


class CodeRunFailedError(DshError):
    default_code = "CODE_RUN_FAILED"


class ModelConfigError(DshError):
    default_code = "MODEL_CONFIG"


class ModelError(DshError):
    """A model request failed. ``attempts`` is how many HTTP requests were made."""

    default_code = "MODEL_ERROR"

    def __init__(self, message: str, *, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts


class ModelHTTPError(ModelError):
    default_code = "MODEL_HTTP_ERROR"

    def __init__(self, message: str, *, status: int, attempts: int = 1) -> None:
        super().__init__(message, attempts=attempts)
        self.status = status


class ModelUnavailableError(ModelError):
    default_code = "MODEL_UNAVAILABLE"


class ModelResponseError(ModelError):
    """The response does not have the shape of its API (``kind``: ``chat-completions``,
    ``Responses API``, ``Messages API``): ``field`` is the path of the first offending field
    (``""`` for the body itself)."""

    default_code = "MODEL_RESPONSE_INVALID"

    def __init__(self, field: str, problem: str, *, attempts: int = 1,
                 kind: str = "chat-completions") -> None:
        where = field or "the response body"
        super().__init__(f"malformed {kind} response: {where}: {problem}",
                         attempts=attempts)
        self.field = field
        self.problem = problem


class ScriptExhaustedError(ModelError):
    default_code = "SCRIPT_EXHAUSTED"


class ScriptMismatchError(ModelError):
    default_code = "SCRIPT_MISMATCH"


class McpConnectError(DshError):
    """The MCP server could not be reached, did not answer, or has gone away."""

    default_code = "MCP_CONNECT_FAILED"


class JournalError(DshError):
    """A run journal (:mod:`dsh_jupyter.durable`) cannot be used: the file is unreadable or
    not a journal (``JOURNAL_UNREADABLE``) or stays locked by another writer
    (``JOURNAL_BUSY``), it has no such run (``JOURNAL_UNKNOWN_RUN``), the approval was
    answered already (``JOURNAL_ANSWERED``), the run's state forbids the write (a call
    started twice, a second open approval: ``JOURNAL_CONFLICT``), or the run cannot be
    resumed (``JOURNAL_NOT_RESUMABLE``: it ended, or its approval is not answered;
    ``JOURNAL_SCOPE``: it was made in an agent scope that is not live here, or in another
    scope than the one given). One line."""

    default_code = "JOURNAL_UNREADABLE"
