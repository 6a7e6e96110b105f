"""A throwaway JupyterLab server for browser tests.

It listens on 127.0.0.1 without a token, with its own config, data, runtime and
IPython directories (nothing from ~/.jupyter leaks in), serves ``root`` and is
stopped by its PID, process group included (the kernels it started too). It runs on
this interpreter, or on ``python`` (another venv's, e.g. :func:`lab_only_venv`'s),
whose own kernel its notebooks then run on.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("DSH_CHROMIUM", "/usr/bin/chromium")
"""Debian's chromium (never a downloaded browser); ``DSH_CHROMIUM`` names another."""
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def browser_missing(*modules: str) -> str | None:
    """Why a browser test cannot run here (no chromium, one of ``modules`` not installed),
    or ``None``: the reason its ``skipif`` gives."""
    if not Path(CHROMIUM).exists():
        return f"no chromium at {CHROMIUM} (apt-get install -y chromium)"
    for module in modules:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install {' '.join(modules)})"
    return None


@dataclass(frozen=True)
class LabServer:
    url: str
    root: Path
    log: Path


def browser_marks(*modules: str, seconds: float, kernel: bool = True) -> list[Any]:
    """A browser test's marks: ``browser`` (and ``kernel``), skipped (saying why) when
    ``modules`` or Debian's chromium are missing, and its timeout."""
    missing = browser_missing(*modules)
    return [pytest.mark.browser, *([pytest.mark.kernel] if kernel else []),
            pytest.mark.skipif(missing is not None, reason=missing or ""),
            pytest.mark.timeout(seconds)]


@contextlib.contextmanager
def browser_page(**context: Any) -> Iterator[Any]:
    """A page of headless Debian chromium (``CHROMIUM_ARGS``) at 1100 x 1400; ``context``
    goes to playwright's ``new_context``. The browser is closed after."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=CHROMIUM_ARGS)
        try:
            yield browser.new_context(viewport={"width": 1100, "height": 1400},
                                      **context).new_page()
        finally:
            browser.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def jupyterlab(root: Path, home: Path, *, start_timeout: float = 60.0,
               python: str | os.PathLike[str] = sys.executable) -> Iterator[LabServer]:
    port = _free_port()
    dirs = {name: home / name for name in ("config", "data", "runtime", "ipython", "home",
                                           "settings", "workspaces")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    notification = dirs["settings"] / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    # No "get notified about news?" toast over the screenshots, no update check.
    (notification / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(dirs["config"]),
           "JUPYTER_DATA_DIR": str(dirs["data"]), "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
           "IPYTHONDIR": str(dirs["ipython"]), "HOME": str(dirs["home"]),
           "JUPYTER_PLATFORM_DIRS": "1", "PYTHONUNBUFFERED": "1"}
    log = home / "jupyterlab.log"
    command = [os.fspath(python), "-m", "jupyterlab", "--no-browser", "--allow-root",
               "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
               "--IdentityProvider.token=", "--ServerApp.password=",
               "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={root}",
               "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               f"--LabApp.user_settings_dir={dirs['settings']}",
               f"--LabApp.workspaces_dir={dirs['workspaces']}"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, log, start_timeout)
        yield LabServer(url=url, root=root, log=log)
    finally:
        _stop(process)


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {process.returncode}:\n"
                               + log.read_text(errors="replace")[-4000:])
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"JupyterLab did not answer within {timeout:g} s:\n"
                       + log.read_text(errors="replace")[-4000:])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    # Kernels the server started share its process group; make sure none survive.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


LAB_VENV = "DSH_LAB_VENV"
"""Names a venv :func:`lab_only_venv` may use as it is (``.ci/run`` makes one)."""


def lab_only_venv(directory: Path, *, timeout: float = 300.0) -> Path:
    """The python of a venv holding this checkout with only its ``[lab]`` extra, as
    README and the quickstart tell a new user to install it (``$DSH_LAB_VENV``'s, when
    set; otherwise made in ``directory``, ~15 s with pip's cache warm)."""
    given = os.environ.get(LAB_VENV)
    if given:
        return Path(given, "bin", "python")
    venv = directory / "venv"
    checkout = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", "-e", f"{checkout}[lab]"],
                          timeout=timeout, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip install -e '.[lab]' failed:\n{done.stderr[-4000:]}")
    return venv / "bin" / "python"


# The cells of the approvals-after-a-restart tests (test_pending_kernel.py drives a kernel as
# a front end would, test_pending_browser.py JupyterLab in chromium): a setup cell making a
# journaled registry whose tools count their bodies in ``counter`` and whose ``rm`` asks on a
# card nobody clicks, and a program whose ``rm`` waits on it.
PENDING_SETUP = """%load_ext dsh_jupyter
from pathlib import Path
from dsh_jupyter import Ask, ToolRegistry
from dsh_jupyter.kernel import KernelRuntime
from dsh_jupyter.widgets import NotebookApprovals

COUNTER = Path({counter!r})
runtime = await KernelRuntime().__aenter__()
registry = ToolRegistry(mode="code", code_runtime=runtime, journal={journal!r},
                        approval=NotebookApprovals(interactive=True))

def count(line):
    with COUNTER.open("a") as counter:
        counter.write(line + "\\n")

@registry.tool
async def read(path: str) -> str:
    "Read a file."
    count(f"read {{path}}")
    return f"<{{path}}>"

@registry.tool
async def rm(path: str) -> str:
    "Remove a file."
    count(f"rm {{path}}")
    return f"removed {{path}}"

registry.on_pre_execute(
    lambda execution, decision: Ask("rm deletes a file") if execution.name == "rm" else None)"""

PENDING_PROGRAM = """%%run_code --description "Tidy up"
first = await tools.read({"path": "a.txt"})
print("read", first)
removed = await tools.rm({"path": "a.txt"})
print("rm", removed)
return await tools.read({"path": "b.txt"})"""
