"""Streamed responses on the SDKs' typed streams: what goes wrong mid-stream, as our errors.

Each adapter iterates its SDK's stream of typed events and folds them with the SDK's
own helper where it has one (``ChatCompletionStreamState``, ``MessageStream``; a
Responses stream ends with the whole response), passing each piece of text on as it
comes. The body at the end is the one the API would have sent without streaming,
checked by the same parser, so ``raw`` still records what ``dump_script`` writes.

:class:`StreamReader` numbers the events (``events[3]``) and reads the stream:

- data that is not JSON, or an event the SDK cannot fold, is ``ModelResponseError``
  naming the event;
- a connection lost mid-way is ``ModelUnavailableError``, not retried, since part of
  the answer was already shown;
- the error an SDK raises for an error event becomes ``error``, for the API's parser to
  report;
- a server that answers a streamed request with plain JSON is read as such.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from ..errors import ModelResponseError, ModelUnavailableError
from ..wire import Parser
from ._http import json_body

if TYPE_CHECKING:
    import httpx2

_Event = TypeVar("_Event")
TextSink = Callable[[str], None]


class StreamReader:
    """Reads one streamed ``response`` of ``sdk`` (the client package).

    ``helpers`` are the types of the events an SDK helper adds after the event
    they come from (``text`` after a ``content_block_delta``); they are not counted.
    """

    def __init__(self, response: httpx2.Response, *, sdk: ModuleType, attempts: int,
                 kind: str, what: str, helpers: frozenset[str] = frozenset()) -> None:
        self.response = response
        self.parser = Parser(attempts, kind)
        self.count = 0
        """The events read (helpers aside)."""
        self.error: object = None
        """What an error event said, if one came: ``{"message": ...}`` or its text."""
        self._sdk = sdk
        self._what = what
        self._helpers = helpers

    async def plain_body(self) -> object | None:
        """The JSON body of a response that is not an event stream, else ``None``."""
        if self.response.headers.get("content-type", "").startswith("text/event-stream"):
            return None
        await self.response.aread()
        return json_body(self.response, attempts=self.parser.attempts, kind=self.parser.kind)

    async def read(self, stream: AsyncIterable[_Event],
                   handle: Callable[[str, _Event], str | None], on_text: TextSink | None) -> None:
        """Pass each event of ``stream`` to ``handle`` with its position; the text
        ``handle`` returns goes to ``on_text`` (whose own errors are not the stream's)."""
        async with contextlib.aclosing(self._handled(stream, handle)) as texts:
            async for text in texts:
                if text and on_text is not None:
                    on_text(text)

    async def _handled(self, stream: AsyncIterable[_Event],
                       handle: Callable[[str, _Event], str | None]
                       ) -> AsyncGenerator[str | None, None]:
        at = "events[0]"  # the event being read or handled
        try:
            async for event in stream:
                helper = getattr(event, "type", None) in self._helpers
                if helper:
                    at = f"events[{self.count - 1}]"
                text = handle(at, event)
                self.count += not helper
                at = f"events[{self.count}]"
                yield text
        except json.JSONDecodeError as exc:
            self.parser.fail(at, "expected JSON data", exc.doc)
        except self._sdk.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise ModelUnavailableError(
                f"{self._what} failed after {self.count} streamed events: "
                f"{type(cause).__name__}: {str(cause) or 'no detail'}",
                attempts=self.parser.attempts) from None
        except self._sdk.APIError as exc:
            body = exc.body
            self.error = body.get("error", body) if isinstance(body, dict) else body
        except (AttributeError, IndexError, KeyError, RuntimeError, TypeError, ValueError) as exc:
            raise ModelResponseError(
                at, f"the {self._sdk.__name__} package could not fold the event: "
                f"{type(exc).__name__}: {exc}", attempts=self.parser.attempts,
                kind=self.parser.kind) from None
