"""Fixtures for MCP tests: the test server over stdio, or over streamable HTTP on 127.0.0.1.

The SDK is optional: without it, the test modules skip themselves (``importorskip``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_support import SERVER


class HttpServer:
    """The test server as a child process serving streamable HTTP; ``url`` is its endpoint."""

    def __init__(self, log: Path) -> None:
        self._log = log.open("w")
        self.process = subprocess.Popen([sys.executable, str(SERVER), "--http"],
                                        stdout=subprocess.PIPE, stderr=self._log, text=True)
        assert self.process.stdout is not None
        port = self.process.stdout.readline().strip()
        if not port.isdigit():
            self.stop()
            raise RuntimeError(f"the HTTP test server did not start: see {log}")
        self.url = f"http://127.0.0.1:{port}/mcp"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path / "http-server.log")
    yield server
    server.stop()


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """``connect_mcp`` keyword arguments for the test server over each transport."""
    if request.param == "stdio":
        yield {"stdio": [sys.executable, str(SERVER)]}
        return
    server = HttpServer(tmp_path / "http-server.log")
    yield {"url": server.url}
    server.stop()
