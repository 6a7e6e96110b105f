"""``@modelcontextprotocol/server-everything`` from npm, a server nobody here wrote, as
``connect_mcp`` keyword arguments over stdio or streamable HTTP.

Its launcher takes the transport as its first argument (``stdio``, ``streamableHttp``);
over HTTP it serves ``/mcp`` on the port in ``PORT`` and says so on stderr once listening.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from npm_support import npm_bin

PACKAGE, VERSION, EXECUTABLE = ("@modelcontextprotocol/server-everything", "2026.8.31",
                                "mcp-server-everything")
_STARTUP_SECONDS = 60.0


def everything_bin() -> Path:
    return npm_bin(PACKAGE, VERSION, EXECUTABLE)


@contextmanager
def everything(transport: str, log: Path) -> Iterator[dict[str, Any]]:
    """``connect_mcp`` keyword arguments for the server over ``transport``."""
    binary = everything_bin()
    if transport == "stdio":
        yield {"stdio": [str(binary), "stdio"]}
        return
    with socket.socket() as probe:  # a free port; the server binds it a moment later
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with log.open("w+") as errors:
        process = subprocess.Popen([str(binary), "streamableHttp"], stdout=subprocess.DEVNULL,
                                   stderr=errors, env={**os.environ, "PORT": str(port)})
        try:
            deadline = time.monotonic() + _STARTUP_SECONDS
            while f"listening on port {port}" not in log.read_text():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server-everything did not start: {log.read_text()}")
                time.sleep(0.05)
            yield {"url": f"http://127.0.0.1:{port}/mcp"}
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
