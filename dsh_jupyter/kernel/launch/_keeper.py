"""The keeper: a tiny parent for a stock-launched local kernel (standard library only).

Run as ``python -I -S -c <this source> CHILD_PY [--as BYTES] [--data BYTES] [--nofile N]
[--nproc N] [--fsize BYTES] [--cpu SECONDS] [--nice N] [--confine CONFINE_DIR PLAN_JSON]
[--restrict CONFINE_DIR PLAN_JSON] -- KERNEL_ARGV...`` (``CHILD_PY``: ``_child.py``, the
steps the fork server's children take too; ``--confine``: the kernel runs in its own
namespaces, see ``_confine/``; the keeper stays outside).
It makes itself a child *subreaper* (``PR_SET_CHILD_SUBREAPER``), so every
orphan the kernel leaves behind (``start_new_session`` children, double forks)
re-parents to it rather than to init; it starts the kernel with the resource
limits applied, ignores SIGINT (jupyter-client interrupts the whole process
group) and, when the kernel exits, kills whatever is left and exits with the
kernel's status (``128 + signal`` when the kernel died of a signal). The host
walks the keeper's tree to account CPU and to kill everything at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import types


def _load_child(path: str) -> types.ModuleType:
    """``_child.py``, the steps every launcher's child takes (bootstraps its ``load``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_dsh_jupyter_child", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _children() -> list[int]:
    me = os.getpid()
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                raw = file.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(name))
    return found


def _kill_remaining() -> None:
    while True:
        for pid in _children():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _lower_session(child: types.ModuleType, nice: int) -> None:
    """Lower this session's autogroup (the kernel's too) below the host (see
    ``_child.lower_session``), retrying a while (in a thread: the keeper keeps reaping
    meanwhile)."""
    import time

    for _ in range(50):
        if child.lower_session(nice):
            return
        time.sleep(0.11)


def _connection_in_memory(child: types.ModuleType, command: list[str],
                          plan: dict[str, object]) -> list[str]:
    """The connection file (in the host directory, which a confined kernel cannot see)
    copied into a memfd the kernel inherits; the command names that instead."""
    path = plan.get("connection_file")
    if not isinstance(path, str):
        return command
    with open(path, "rb") as file:
        memfd = child.connection_memfd(file.read(), across_exec=True)
    return [arg.replace(path, f"/proc/self/fd/{memfd}") for arg in command]


def main(argv: list[str]) -> int:
    child = _load_child(argv[0])
    argv = argv[1:]
    limits: dict[str, int] = {}
    confine: tuple[str, dict[str, object]] | None = None
    restrict: tuple[str, dict[str, object]] | None = None
    nice = 0
    while argv and argv[0] != "--":
        if argv[0] in ("--confine", "--restrict"):
            plan = (argv[1], json.loads(argv[2]))
            if argv[0] == "--confine":
                confine = plan
            else:
                restrict = plan
            argv = argv[3:]
            continue
        option, value = argv[0].removeprefix("--"), int(argv[1])
        argv = argv[2:]
        if option == "nice":
            nice = value
        elif option in child.LIMITS:
            limits[option] = value
    command = argv[1:]
    child.become_subreaper()
    child.prctl(child.PR_SET_PDEATHSIG, signal.SIGKILL)  # a host killed outright takes its
    signal.signal(signal.SIGINT, signal.SIG_IGN)          # kernels along
    walls = confine or restrict
    module = child.load("_dsh_jupyter_confine", walls[0]) if walls is not None else None
    mapping = module.mapping_pipes(confine[1]) if module is not None and confine else None
    kernel = os.fork()
    if kernel == 0:
        try:
            child.begin()
            if module is not None and confine is not None:
                command = _connection_in_memory(child, command, confine[1])
                module.enter(confine[1], mapping)  # returns in the confined kernel
            child.finish(module, confined=confine is not None,
                         restrict=restrict[1] if restrict is not None else None,
                         limits=limits, nice=nice)
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    if mapping is not None and module is not None and confine is not None:
        module.map_child(kernel, confine[1], mapping)  # a root host: ours to write
    if nice:
        import threading

        threading.Thread(target=_lower_session, args=(child, nice), daemon=True).start()
    status = 0
    while True:
        try:
            pid, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == kernel:
            status = child.exit_status(raw)
            _kill_remaining()
            break
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
