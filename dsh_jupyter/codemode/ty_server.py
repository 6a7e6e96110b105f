"""``ty server``, kept running to type-check programs: a small language-server client.

Code Mode checks a program before it runs (``ToolRegistry(check_programs=...)``, see
:mod:`.check`). Starting a checker costs more than checking one program does, so the
registry keeps one ``ty server`` (Astral's type checker, in the ``check`` extra) and
asks it over the Language Server Protocol: open the program as a document, pull its
diagnostics, close it. The process starts with the first check and ends with
:meth:`TyServer.close` (or, should nobody close it, when this process ends: the server
exits when its input closes).

Everything here is synchronous and meant for one worker thread (the check keeps the event
loop free by running it there); each call waits at most ``timeout`` seconds for the
server, then kills it: the next call starts a new one.

The server works in a private directory holding a ``ty.toml`` (the rules the check uses),
an empty Python environment (so third-party imports stay unresolved: the kernel's
packages are not the host's to judge) and the SDK modules the documents import.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TY_INSTALL = "pip install 'dsh-jupyter[check]'"

TY_CONFIG = """\
[environment]
python = "{environment}"
python-version = "{version}"

[rules]
# A module the host lacks may be the kernel's: unresolved imports are Any, never an error.
import-not-found = "ignore"
# `tools.x(...)` left unawaited never runs: as much an error as a wrong argument.
unused-awaitable = "error"
"""


class TyServerError(Exception):
    """The server failed (would not start, died, timed out, answered nonsense)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnostic:
    """One diagnostic of a document, as the server sent it. ``line`` and ``column`` are
    0-based; ``column`` counts UTF-8 bytes, as :mod:`ast` does. ``severity`` is LSP's (1
    error, 2 warning, 3 information, 4 hint); ``code`` the rule's name (``""`` if none)."""

    line: int
    column: int
    severity: int
    code: str
    message: str


def find_ty() -> str | None:
    """The ``ty`` executable: the one the ``ty`` package installed, else ``ty`` on PATH."""
    try:
        from ty import find_ty_bin
    except ImportError:
        return shutil.which("ty")
    try:
        return find_ty_bin()
    except FileNotFoundError:
        return shutil.which("ty")


def prepare_workspace(directory: Path) -> None:
    """Make ``directory`` a place to check programs in: its ``ty.toml`` (:data:`TY_CONFIG`,
    for this Python's version) and the empty environment it names."""
    environment = directory / "environment"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    (environment / "lib" / f"python{version}" / "site-packages").mkdir(parents=True)
    (environment / "pyvenv.cfg").write_text(
        f"home = {Path(sys.executable).parent}\nversion = {version}\n"
        "include-system-site-packages = false\n", encoding="utf-8")
    (directory / "ty.toml").write_text(
        TY_CONFIG.format(environment=environment, version=version), encoding="utf-8")


class TyServer:
    """One ``ty server`` process and its private directory (see the module docstring)."""

    def __init__(self, executable: str, *, timeout: float = 10.0) -> None:
        self.executable = executable
        self.timeout = timeout
        self.starts = 0
        """How many processes this has started (the first check starts one)."""
        self._process: subprocess.Popen[bytes] | None = None
        self._directory: Path | None = None
        self._modules: set[str] = set()
        self._buffer = b""
        self._next_id = 0
        self._documents = 0
        self._utf8 = False

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def diagnostics(self, modules: Mapping[str, str], document: str) -> list[Diagnostic]:
        """The diagnostics of ``document``, which may import ``modules`` (``{name: text}``,
        written once each: a name must always stand for the same text)."""
        try:
            if not self.running:
                self._start()
            return self._check(modules, document)
        except (OSError, ValueError, TyServerError) as error:
            self.close(graceful=False)  # it failed once: no second wait for it
            if isinstance(error, TyServerError):
                raise
            raise TyServerError(f"the ty server failed: {error}") from None

    def close(self, *, graceful: bool = True) -> None:
        """Stop the server (asked, and killed if it has not exited within 2 s; at once
        without ``graceful``) and remove its directory."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None and not graceful:
                process.kill()
            elif process.poll() is None:
                with contextlib.suppress(OSError):
                    self._send({"jsonrpc": "2.0", "id": 0, "method": "shutdown"}, process)
                    self._send({"jsonrpc": "2.0", "method": "exit"}, process)
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):  # what is left to flush goes nowhere
                        stream.close()
            try:
                process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
        self._modules.clear()
        self._buffer = b""

    # The session --------------------------------------------------------------------
    def _start(self) -> None:
        self.close()
        directory = Path(tempfile.mkdtemp(prefix="dsh-jupyter-check-"))
        self._directory = directory
        prepare_workspace(directory)
        self._process = subprocess.Popen(
            [self.executable, "server"], cwd=directory, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        self.starts += 1
        deadline = time.monotonic() + self.timeout
        result = self._request("initialize", {
            "processId": os.getpid(), "rootUri": directory.as_uri(),
            "workspaceFolders": [{"uri": directory.as_uri(), "name": "check"}],
            "capabilities": {"general": {"positionEncodings": ["utf-8", "utf-16"]},
                             "textDocument": {"diagnostic": {"dynamicRegistration": False}}},
        }, deadline)
        capabilities = result.get("capabilities") if isinstance(result, dict) else None
        self._utf8 = isinstance(capabilities, dict) and (
            capabilities.get("positionEncoding") == "utf-8")
        self._notify("initialized", {})

    def _check(self, modules: Mapping[str, str], document: str) -> list[Diagnostic]:
        assert self._directory is not None
        for name, text in modules.items():
            if name not in self._modules:
                (self._directory / f"{name}.py").write_text(text, encoding="utf-8")
                self._modules.add(name)
        self._documents += 1
        uri = (self._directory / f"program_{self._documents}.py").as_uri()
        self._notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": document}})
        try:
            report = self._request("textDocument/diagnostic", {"textDocument": {"uri": uri}},
                                   time.monotonic() + self.timeout)
        finally:
            self._notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        items = report.get("items") if isinstance(report, dict) else None
        if not isinstance(items, list):
            raise TyServerError(f"the ty server answered a diagnostic request with {report!r}")
        lines = document.split("\n")
        return [self._diagnostic(item, lines) for item in items if isinstance(item, dict)]

    def _diagnostic(self, item: dict[str, Any], lines: list[str]) -> Diagnostic:
        start = item.get("range", {}).get("start", {})
        line, column = int(start.get("line", 0)), int(start.get("character", 0))
        if not self._utf8 and 0 <= line < len(lines):  # UTF-16 code units to UTF-8 bytes
            text = lines[line].encode("utf-16-le")[: 2 * column].decode("utf-16-le", "replace")
            column = len(text.encode())
        code = item.get("code")
        return Diagnostic(line=line, column=column, severity=int(item.get("severity", 1)),
                          code=str(code) if code is not None else "",
                          message=str(item.get("message", "")))

    # JSON-RPC over the pipes -----------------------------------------------------------
    def _request(self, method: str, params: object, deadline: float) -> Any:
        self._next_id += 1
        ident = self._next_id
        self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        while True:
            message = self._receive(deadline)
            if "method" in message:
                if "id" in message:  # the server asks something: we support nothing
                    self._send({"jsonrpc": "2.0", "id": message["id"], "result": None})
                continue
            if message.get("id") == ident:
                if "error" in message:
                    raise TyServerError(f"the ty server refused {method}: "
                                        f"{message['error'].get('message')}")
                return message.get("result")

    def _notify(self, method: str, params: object) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def _send(self, message: object, process: subprocess.Popen[bytes] | None = None) -> None:
        process = process or self._process
        assert process is not None and process.stdin is not None
        body = json.dumps(message).encode()
        process.stdin.write(b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
        process.stdin.flush()

    def _receive(self, deadline: float) -> dict[str, Any]:
        """The next message, waiting until ``deadline`` at most."""
        assert self._process is not None and self._process.stdout is not None
        stream = self._process.stdout.fileno()
        while True:
            message = self._take()
            if message is not None:
                return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TyServerError(f"the ty server did not answer within {self.timeout:g} s")
            ready, _, _ = select.select([stream], [], [], remaining)
            if ready:
                chunk = os.read(stream, 1 << 16)
                if not chunk:
                    raise TyServerError(f"the ty server exited (status "
                                        f"{self._process.wait()})")
                self._buffer += chunk

    def _take(self) -> dict[str, Any] | None:
        head, separator, rest = self._buffer.partition(b"\r\n\r\n")
        if not separator:
            return None
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), None)
        if length is None:
            raise TyServerError("the ty server sent a message without Content-Length")
        if len(rest) < length:
            return None
        self._buffer = rest[length:]
        message = json.loads(rest[:length])
        if not isinstance(message, dict):
            raise TyServerError("the ty server sent a message that is not an object")
        return message
