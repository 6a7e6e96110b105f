"""Errors of the agent loop and its model adapters, each with a stable ``code``.

A model failure ends a run: the loop reports it as ``AgentResult.error`` with
``stop == "model_error"`` rather than raising, so an evaluation over many tasks
keeps the partial transcript and accounting of a failed run::

    DshError
    ├── ModelConfigError          MODEL_CONFIG            missing or invalid adapter settings
    └── ModelError                MODEL_ERROR             a model request failed
        ├── ModelHTTPError        MODEL_HTTP_ERROR        a non-retryable status, or retries
        │                                                 exhausted on a retryable one
        ├── ModelUnavailableError MODEL_UNAVAILABLE       connection errors or timeouts after
        │                                                 every retry
        ├── ModelResponseError    MODEL_RESPONSE_INVALID  the body is not a response of its API
        │                                                 (names the field and what came)
        ├── ScriptExhaustedError  SCRIPT_EXHAUSTED        a scripted model ran out of responses
        └── ScriptMismatchError   SCRIPT_MISMATCH         a recorded response expects other tools

``ModelConfigError`` is raised (it is misuse); the others are raised by adapters
and caught by the loop.
"""

from __future__ import annotations

from ..errors import (
    ModelConfigError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelUnavailableError,
    ScriptExhaustedError,
    ScriptMismatchError,
)

__all__ = [
    "ModelConfigError",
    "ModelError",
    "ModelHTTPError",
    "ModelResponseError",
    "ModelUnavailableError",
    "ScriptExhaustedError",
    "ScriptMismatchError",
]
