"""The unit tier starts nothing: no kernel, no subprocess, no fork.

An autouse guard replaces every way this package, its dependencies and the tests start a
process, for the length of each test here, with one that fails the test and says what it
tried to start. Subprocesses (``subprocess``, ``asyncio``'s subprocesses and jupyter_client's
``launch_kernel`` all end in ``Popen._execute_child``), ``multiprocessing``'s spawns
(``_posixsubprocess.fork_exec``), ``os.fork``/``forkpty``/``posix_spawn``/``system``, and
kernels (jupyter_client's kernel managers, and entering a ``KernelRuntime``, whose kernels may
come from a fork server already running). A test that needs one of these belongs in
``tests/kernel/`` or ``tests/integration/``.
"""

from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import platform
import subprocess
import traceback
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import AsyncKernelManager, KernelManager

from dsh_jupyter.kernel import KernelRuntime

_WHERE = "tests/kernel/ or tests/integration/"
_CHECKOUT = Path(__file__).resolve().parents[2]

# platform.platform() runs `uname -p` once per process and caches the answer; the OpenAI
# client asks for it in its headers. Asked here, at collection, so that no test is blamed for
# being the first to ask.
platform.platform()

# matplotlib builds its font cache (running `fc-list`) the first time a process on a new
# machine imports its font manager; built here, at collection, for the same reason.
with contextlib.suppress(ImportError):  # without the eval extra its tests skip
    import matplotlib.font_manager  # noqa: F401


def _refusal(what: str, seen: list[str]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        said = (f"a unit test started {what}{_described(args)}{_caller()}: it belongs in "
                f"{_WHERE}")
        seen.append(said)
        pytest.fail(said, pytrace=False)  # the message says where: a deep trace can crash

    return refuse


def _caller() -> str:
    """Where in the checkout (the tests or the package) the start came from."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = Path(frame.filename)
        if path.is_relative_to(_CHECKOUT) and ".venv" not in path.parts:
            return f" from {path.relative_to(_CHECKOUT)}:{frame.lineno}"
    return ""


def _described(args: tuple[Any, ...]) -> str:
    for each in args:
        if isinstance(each, (list, tuple)) and each:
            return f" ({' '.join(map(str, each))[:120]})"
        if isinstance(each, (str, bytes)):
            return f" ({str(each)[:120]})"
    return ""


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.fixture(autouse=True)
def nothing_started(request: pytest.FixtureRequest,
                    monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fail the test that starts a process or a kernel; also when the code under test
    swallowed the failure (it is raised again at teardown, from the list this yields)."""
    seen: list[str] = []
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refusal("a subprocess", seen))
    monkeypatch.setattr(_posixsubprocess, "fork_exec", _refusal("a process (fork_exec)", seen))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        monkeypatch.setattr(os, name, _refusal(f"a process (os.{name})", seen))
    for manager in (KernelManager, AsyncKernelManager):
        monkeypatch.setattr(manager, "start_kernel", _refusal("a jupyter_client kernel", seen))
    monkeypatch.setattr(KernelRuntime, "__aenter__", _refusal("a kernel runtime", seen))
    yield seen
    if seen and not request.node.stash.get(_FAILED, False):
        pytest.fail(seen[0], pytrace=False)
