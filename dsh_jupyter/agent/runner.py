"""The notebook edge: an :class:`Agent` holds the settings; run it three ways.

::

    agent = Agent(registry, model, max_steps=10)
    result = await agent.run("Summarise notes.txt")     # a notebook cell awaits at top level

    handle = agent.start("Summarise notes.txt")         # returns at once; the run goes on
    handle.abort("changed my mind")                      # in the background on this loop
    result = await handle

    result = agent.run_sync("Summarise notes.txt")      # plain scripts only (no running loop)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Generator, Sequence
from typing import Any

from ..abort import AbortController, AbortSignal
from ..registry import AgentScope, ToolRegistry
from .loop import DEFAULT_INSTRUCTIONS, AgentResult, run_agent
from .model import ChatMessage, ChatModel


class Agent:
    """A registry, a model and the loop's settings (see :func:`run_agent`)."""

    def __init__(self, registry: ToolRegistry, model: ChatModel, *,
                 scope: AgentScope | None = None, instructions: str = DEFAULT_INSTRUCTIONS,
                 max_steps: int = 20, max_parallel: int = 10) -> None:
        self.registry = registry
        self.model = model
        self.scope = scope
        self.instructions = instructions
        self.max_steps = max_steps
        self.max_parallel = max_parallel

    def __repr__(self) -> str:
        scope = f" scope={self.scope.name!r}" if self.scope is not None else ""
        return f"<Agent model={self.model.name!r}{scope} max_steps={self.max_steps}>"

    async def run(self, task: str, *, signal: AbortSignal | None = None,
                  history: Sequence[ChatMessage] = (), run_id: str | None = None) -> AgentResult:
        """Run ``task`` to completion on the current event loop."""
        return await run_agent(self.registry, self.model, task, scope=self.scope,
                               instructions=self.instructions, max_steps=self.max_steps,
                               max_parallel=self.max_parallel, signal=signal, history=history,
                               run_id=run_id)

    def start(self, task: str, *, signal: AbortSignal | None = None,
              history: Sequence[ChatMessage] = (), run_id: str | None = None) -> AgentRun:
        """Start ``task`` as a task on the running loop and return its handle at once.
        Keep the handle: it owns the task. Needs a running loop (a notebook has one)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("Agent.start needs a running event loop (a notebook cell or "
                               "a coroutine); in a plain script use Agent.run_sync") from None
        controller = AbortController()
        if signal is not None:
            signal.add_listener(controller.abort)
        run_id = run_id or uuid.uuid4().hex[:12]
        task_ = loop.create_task(self.run(task, signal=controller.signal, history=history,
                                          run_id=run_id), name=f"agent run {run_id}")
        return AgentRun(run_id=run_id, task=task_, controller=controller)

    def run_sync(self, task: str, *, history: Sequence[ChatMessage] = (),
                 run_id: str | None = None) -> AgentResult:
        """Run ``task`` on a fresh event loop; refuses inside a running one."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(task, history=history, run_id=run_id))
        raise RuntimeError(
            "Agent.run_sync cannot run inside a running event loop (a notebook runs one): "
            "use `result = await agent.run(...)` there, or `handle = agent.start(...)` to "
            "run in the background")


class AgentRun:
    """A run started by :meth:`Agent.start`: ``await`` it for the result."""

    def __init__(self, *, run_id: str, task: asyncio.Task[AgentResult],
                 controller: AbortController) -> None:
        self.run_id = run_id
        self._task = task
        self._controller = controller

    def __repr__(self) -> str:
        state = "done" if self._task.done() else "running"
        return f"<AgentRun {self.run_id} {state}>"

    def abort(self, reason: str = "stopped by the user") -> None:
        """Ask the run to stop: the model request and running tools see the signal;
        the run ends with ``stop == "aborted"``."""
        self._controller.abort(reason)

    def done(self) -> bool:
        return self._task.done()

    def result(self) -> AgentResult:
        """The result of a finished run (``asyncio.InvalidStateError`` before)."""
        return self._task.result()

    def __await__(self) -> Generator[Any, None, AgentResult]:
        return self._task.__await__()
