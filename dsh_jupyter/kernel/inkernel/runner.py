"""One kernel's runtime: :func:`start` opens the tools comm (and connects to the socket
carrier the setup cell names); :meth:`Runtime.execute` runs each program and ends it with one
``done`` message."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import sys
from collections.abc import Mapping
from typing import Any

from .call_client import CallClient, Send, ToolCallError
from .messages import PROTOCOL, TARGET_NAME, DoneErrorMessage, DoneOkMessage, HelloMessage
from .outputs import (
    guard_display_size,
    patch_flush,
    patch_write,
    show_open_figures,
    unlimit_iopub,
)
from .program import compile_program, format_exception
from .shortcuts import answer_calls_directly, run_cells_directly
from .tools import Tools
from .values import clip, compact_json, json_problem

MIN_IPYKERNEL = (7, 4)


class Runtime:
    """Per-kernel state: the comm, its call client, and :meth:`execute` for the one program (in a
    stateful session, for each program in turn).

    ``output`` (the host's in-process test runtime only) is a ``(stdout, stderr)`` pair
    the program's ``print`` writes to instead of the kernel's streams."""

    def __init__(self, send: Send,
                 output: tuple[Any, Any] | None = None) -> None:
        self.client = CallClient(send)
        self._output = output
        self._kept: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self._guarded = False

    async def execute(self, names: list[str], source: str, max_output_bytes: int,
                  helpers: Mapping[str, str] | None = None, *, keep: bool = False,
                  signatures: Mapping[str, str] | None = None) -> None:
        """Run ``source`` with ``tools`` for ``names`` (and ``helpers``, ``{method:
        binding}``); always ends with one ``done`` message. With ``keep`` (a stateful
        session: this kernel serves several runs) the program's top-level names live in
        one namespace shared by every ``keep`` run (see :func:`compile_program`); each run
        still gets its own ``tools``. ``signatures`` (``{binding: argument dict}``) say how
        to call a tool to a program that called it wrongly."""
        tools = Tools(self.client, names, helpers, signatures)
        if self._output is None:
            patch_write(sys.stdout)
            patch_write(sys.stderr)
            if not self._guarded:
                self._guarded = True
                guard_display_size()
        try:
            code = compile_program(source, keep=keep)
            namespace: dict[str, Any] = self._kept if keep else {
                "__name__": "__main__", "__builtins__": builtins}
            namespace.update(tools=tools, ToolCallError=ToolCallError, asyncio=asyncio)
            if self._output is not None:
                namespace["print"] = self._print
            exec(code, namespace)
            program = namespace.pop("<module>")
            value = await program()
        except BaseException as error:  # the program's failure is data, whatever it is
            self._finish({
                "kind": "done", "ok": False, "error": "exception",
                "message": clip(format_exception(error)),
            })
            return
        problem = json_problem(value)
        text = ""
        if problem is None:
            try:
                text = compact_json(value)
            except (ValueError, RecursionError, MemoryError) as error:
                problem = f"it cannot be encoded ({type(error).__name__}: {error})"
        size = len(text.encode("utf-8", "surrogatepass"))
        if problem is not None:
            self._finish({
                "kind": "done", "ok": False, "error": "invalid-output",
                "message": f"the program's return value is not lossless JSON: {problem}",
            })
            return
        if size > max_output_bytes:
            self._finish({
                "kind": "done", "ok": False, "error": "output-limit",
                "message": f"the return value is {size} bytes of JSON, over the {max_output_bytes}"
                " byte output limit",
            })
            return
        self._finish({"kind": "done", "ok": True, "value": value}, text)

    def _print(self, *values: object, file: Any = None, **options: Any) -> None:
        assert self._output is not None
        builtins.print(*values, file=self._output[0] if file is None else file, **options)

    def _finish(self, message: DoneOkMessage | DoneErrorMessage, text: str | None = None) -> None:
        if self._output is None:
            show_open_figures()
        # Flush first: stream messages then precede "done" on iopub.
        for stream in (sys.stdout, sys.stderr, *(self._output or ())):
            with contextlib.suppress(Exception):
                stream.flush()
        self.client.done(message, text)


def ipykernel_problem(version: str | None, where: str = "") -> str | None:
    """Why ipykernel ``version`` (``None``: not installed) cannot run programs, or ``None``
    when it can. ``where`` says whose ipykernel it is (``" in the kernel"``). The host
    checks its own with this function too."""
    minimum = ".".join(map(str, MIN_IPYKERNEL))
    if version is None:
        return f"needs ipykernel >= {minimum}{where}: it is not installed"
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts >= MIN_IPYKERNEL:
        return None
    return (f"needs ipykernel >= {minimum}{where} (found {version}): older versions do not "
            "deliver comm replies to a cell that awaits them")


def check_ipykernel() -> None:
    """Fail clearly on an ipykernel that cannot deliver comm replies to an awaiting cell."""
    module = sys.modules.get("ipykernel")
    version = getattr(module, "__version__", None) if module is not None else None
    if not isinstance(version, str):
        return  # not ipykernel: the kernel is trusted to deliver comm messages mid-cell
    problem = ipykernel_problem(version, " in the kernel")
    if problem is not None:
        raise RuntimeError(problem)


def start(carrier: tuple[str, str] | None = None) -> Runtime:
    """Open the comm to the host (its ``comm_open`` tells the host which comm to trust)
    and, when the setup cell names one, connect to the host's socket carrier."""
    check_ipykernel()
    from comm import create_comm

    patch_flush(sys.stdout)
    patch_flush(sys.stderr)
    unlimit_iopub()
    hello: HelloMessage = {"kind": "hello", "protocol": PROTOCOL}
    comm = create_comm(target_name=TARGET_NAME, data=hello)
    runtime = Runtime(lambda data: comm.send(dict(data)))
    comm.on_msg(runtime.client.on_msg)
    kernel = _kernel()
    if kernel is not None:
        run_cells_directly(kernel)
        answer_calls_directly(kernel, comm.comm_id, lambda data: runtime.client.receive(data))
    if carrier is not None:
        runtime.client.use_carrier(*carrier)
    return runtime


def _kernel() -> Any:
    """The ipykernel kernel this code runs in, if any (IPython is not imported here)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None)
