"""npm packages for tests against real peers (MCP servers and clients published on npm).

``npm_bin("@modelcontextprotocol/server-everything", "2026.8.31", "mcp-server-everything")``
installs the package once into a cache directory (``DSH_TEST_NPM_CACHE``, default
``~/.cache/dsh-jupyter-tests/npm``) and returns the path of its executable. Without
Node/npm the calling test is skipped with a reason, unless ``DSH_REQUIRE_NODE=1`` (CI
sets it), which makes a missing Node a failure. Versions are pinned, so a test sees the
same peer on every machine.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REQUIRE = "DSH_REQUIRE_NODE"

INSPECTOR = ("@modelcontextprotocol/inspector", "2.12.0", "mcp-inspector")
"""The MCP Inspector, whose CLI is ``mcp-inspector --cli`` (the 1.x ``inspector-cli``
package says it is deprecated): ``npm_bin(*INSPECTOR)``."""


def npm_cache() -> Path:
    default = Path.home() / ".cache" / "dsh-jupyter-tests" / "npm"
    return Path(os.environ.get("DSH_TEST_NPM_CACHE", default))


def npm_bin(package: str, version: str, executable: str) -> Path:
    """The installed ``executable`` of ``package@version`` (installed now if needed)."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        message = (f"{package} needs Node.js and npm (apt-get install nodejs npm); "
                   f"set {REQUIRE}=1 to make this a failure")
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(message)
        pytest.skip(message)
    prefix = npm_cache() / f"{package.replace('/', '+')}@{version}"
    binary = prefix / "node_modules" / ".bin" / executable
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:  # pytest-xdist or two checkouts at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            done = subprocess.run(
                [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                 "--loglevel=error", f"{package}@{version}"],
                capture_output=True, text=True, timeout=300, check=False)
            if done.returncode != 0 or not binary.exists():
                pytest.fail(f"npm install {package}@{version} failed "
                            f"(exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return binary
