"""The keeper: a tiny parent for a stock-launched local kernel (standard library only).

Run as ``python -I -S -c <this source> [--as BYTES] [--data BYTES] [--nofile N]
[--nproc N] [--fsize BYTES] [--cpu SECONDS] [--nice N] [--confine CONFINE_DIR PLAN_JSON]
[--restrict CONFINE_DIR PLAN_JSON] -- KERNEL_ARGV...`` (``--confine``: the kernel
runs in its own namespaces, see ``_confine/``; the keeper stays outside).
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

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)
    except Exception:  # not Linux: the host still kills the process group
        pass


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


def _lower_session(nice: int) -> None:
    """Lower this session's autogroup (the kernel's too) below the host: with autogroup
    scheduling sessions share the CPU as groups whatever their nice values. Linux allows
    it once per 100 ms without CAP_SYS_ADMIN, so retry a while (in a thread: the keeper
    keeps reaping meanwhile)."""
    import time

    for _ in range(50):
        try:
            with open("/proc/self/autogroup", "w") as autogroup:
                autogroup.write(str(nice))
            return
        except BlockingIOError:
            time.sleep(0.11)
        except OSError:
            return  # no autogroup scheduling here


def _load_confine(path: str) -> types.ModuleType:
    """The confiner, a package loaded from its directory (its modules import each other)."""
    import importlib.util

    name = "_dsh_jupyter_confine"
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(path, "__init__.py"), submodule_search_locations=[path])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _connection_in_memory(command: list[str], plan: dict[str, object]) -> list[str]:
    """The connection file (in the host directory, which a confined kernel cannot see)
    copied into a memfd the kernel inherits; the command names that instead."""
    path = plan.get("connection_file")
    if not isinstance(path, str):
        return command
    with open(path, "rb") as file:
        data = file.read()
    memfd = os.memfd_create("kernel.json", 0)  # no CLOEXEC: the kernel reads it after exec
    os.write(memfd, data)
    return [arg.replace(path, f"/proc/self/fd/{memfd}") for arg in command]


def main(argv: list[str]) -> int:
    limits: list[tuple[int, int, int]] = []
    import resource

    confine: tuple[str, dict[str, object]] | None = None
    restrict: tuple[str, dict[str, object]] | None = None
    nice = 0
    while argv and argv[0] != "--":
        if argv[0] == "--confine":
            confine, argv = (argv[1], json.loads(argv[2])), argv[3:]
            continue
        if argv[0] == "--restrict":
            restrict, argv = (argv[1], json.loads(argv[2])), argv[3:]
            continue
        option, value = argv[0], int(argv[1])
        argv = argv[2:]
        if option == "--as":
            limits.append((resource.RLIMIT_AS, value, value))
        elif option == "--nofile":
            limits.append((resource.RLIMIT_NOFILE, value, value))
        elif option == "--cpu":  # SIGXCPU at the limit; SIGKILL a second later if handled
            limits.append((resource.RLIMIT_CPU, value, value + 1))
        elif option == "--data":
            limits.append((resource.RLIMIT_DATA, value, value))
        elif option == "--nproc":
            limits.append((resource.RLIMIT_NPROC, value, value))
        elif option == "--fsize":
            limits.append((resource.RLIMIT_FSIZE, value, value))
        elif option == "--nice":
            nice = value
    command = argv[1:]
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a host killed outright takes its kernels along
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    module = _load_confine(confine[0]) if confine is not None else None
    mapping = module.mapping_pipes(confine[1]) if module is not None and confine else None
    kernel = os.fork()
    if kernel == 0:
        try:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if module is not None and confine is not None:
                command = _connection_in_memory(command, confine[1])
                module.enter(confine[1], mapping)  # returns in the confined kernel
                module.tidy_path()
            for which, soft, hard in limits:
                resource.setrlimit(which, (soft, hard))
            if restrict is not None:  # no namespaces here: the walls that need none
                _load_confine(restrict[0]).restrict(restrict[1])
            # Below the host, whose event loop must stay responsive (see _forkserver's
            # lower_priority: the session's autogroup too).
            with contextlib.suppress(OSError):
                os.nice(nice)
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    if mapping is not None and module is not None and confine is not None:
        module.map_child(kernel, confine[1], mapping)  # a root host: ours to write
    if nice:
        import threading

        threading.Thread(target=_lower_session, args=(nice,), daemon=True).start()
    status = 0
    while True:
        try:
            pid, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == kernel:
            status = 128 + os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)
            _kill_remaining()
            break
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
