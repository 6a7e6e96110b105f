"""Where a cold forked kernel's start goes, measured inside the child.

    python bench/fork_profile.py [--samples 15] [--mode confined|unconfined|both]
    PYTHONPATH=/path/to/other/checkout python bench/fork_profile.py   # another tree

The fork server is started from a stand-in script that loads the real one by path and
wraps, for this benchmark only, the steps its child takes: each child notes
``time.perf_counter()`` (one clock with the host's), its CPU time and its page faults at
its first line, once confined, once ``_child.finish`` is done, when ``IPKernelApp.start``
begins and when it first publishes ``busy`` (the answer to the host's ``kernel_info``),
and the time, CPU and faults of each ``init_*`` step of the application it runs (whichever
start the tree has: built in the child, or prepared in the server and finished there). It
writes them to a file the server opened before any fork. Prints the medians, each mark
from the host's request. Nothing in the package is changed to be measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import zmq.asyncio
from cold import close_launchers, cold_start

import dsh_jupyter
from dsh_jupyter.kernel import KernelRuntimeConfig
from dsh_jupyter.kernel.confine.caps import RuntimeCgroups
from dsh_jupyter.kernel.confine.sandbox import SandboxConfig, confinement_problem
from dsh_jupyter.kernel.launch import forkserver
from dsh_jupyter.kernel.launch.forkserver import ForkLauncher
from dsh_jupyter.kernel.run.workspace import create_runtime_directory

STAND_IN = '''\
import functools, importlib.util, json, os, resource, sys, time

spec = importlib.util.spec_from_file_location("_dsh_jupyter_forkserver", {server!r})
server = importlib.util.module_from_spec(spec)
spec.loader.exec_module(server)
out = os.open({out!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
marks, steps = [], {{}}


def usage():
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime, used.ru_minflt


def mark(name):
    marks.append((name, time.perf_counter(), *usage()))


def timed(owner, name):
    original = owner.__dict__[name]
    key = f"{{owner.__name__}}.{{name}}"

    @functools.wraps(original)
    def step(*args, **kwargs):
        started, (cpu, faults) = time.perf_counter(), usage()
        try:
            return original(*args, **kwargs)
        finally:
            now, (cpu_now, faults_now) = time.perf_counter(), usage()
            total = steps.setdefault(key, [0.0, 0.0, 0])
            total[0] += now - started
            total[1] += cpu_now - cpu
            total[2] += faults_now - faults

    setattr(owner, name, step)


spawn = server.Server.spawn


def spawn_marked(self, request):
    marks.clear()
    steps.clear()
    mark("request")
    return spawn(self, request)


become = server.Server.become_kernel


def become_marked(self, request, mapping):
    mark("child's first line")
    enter, finish = self.confine.enter, self.child.finish

    def entered(*args, **kwargs):
        enter(*args, **kwargs)
        mark("confined")

    def finished(*args, **kwargs):
        finish(*args, **kwargs)
        mark("_child.finish done")

    self.confine.enter, self.child.finish = entered, finished
    return become(self, request, mapping)


server.Server.spawn, server.Server.become_kernel = spawn_marked, become_marked
preload = server._preload


def preload_marked(*args, **kwargs):
    preload(*args, **kwargs)
    from IPython.core.application import BaseIPythonApplication
    from IPython.core.shellapp import InteractiveShellApp
    from ipykernel.kernelapp import IPKernelApp
    from ipykernel.kernelbase import Kernel

    for owner in (IPKernelApp, BaseIPythonApplication, InteractiveShellApp):
        for name in [name for name in vars(owner) if name.startswith("init_")]:
            timed(owner, name)
    start, publish = IPKernelApp.start, Kernel._publish_status

    def started(app):
        mark("IPKernelApp.start")
        return start(app)

    def published(kernel, status, *args, **kwargs):
        if marks and status == "busy":
            mark("first busy")
            os.write(out, (json.dumps({{"marks": marks, "steps": steps}}) + "\\n").encode())
            marks.clear()
        return publish(kernel, status, *args, **kwargs)

    IPKernelApp.start, Kernel._publish_status = started, published


server._preload = preload_marked
server.main(sys.argv[1:])
'''


async def profile(samples: int, modes: list[str], scratch: Path) -> None:
    out = scratch / "marks.jsonl"
    stand_in = scratch / "server.py"
    stand_in.write_text(STAND_IN.format(server=str(forkserver.SERVER_SCRIPT), out=str(out)))
    forkserver.SERVER_SCRIPT = stand_in  # this process only
    context = zmq.asyncio.Context()
    directory = create_runtime_directory()
    cgroups = RuntimeCgroups.open(None) if "confined" in modes else None
    launchers: dict[str, tuple[ForkLauncher, KernelRuntimeConfig]] = {}
    for mode in modes:
        sandbox = SandboxConfig() if mode == "confined" else None
        config = KernelRuntimeConfig(sandbox=sandbox)
        launchers[mode] = (ForkLauncher(config, directory, sandbox,
                                        cgroups if sandbox else None), config)
        await launchers[mode][0].server()
    hosts: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    try:
        for _ in range(samples):
            for mode, (launcher, config) in launchers.items():
                hosts[mode].append(await cold_start(launcher, config, context, directory))
    finally:
        await close_launchers((launcher for launcher, _ in launchers.values()), context,
                              directory, cgroups)
    children = [json.loads(line) for line in out.read_text().splitlines()]
    for index, mode in enumerate(modes):
        report(mode, hosts[mode], children[index::len(modes)])


def report(mode: str, hosts: list[tuple[float, float]], children: list[dict[str, Any]]) -> None:
    print(f"{mode}: {len(children)} kernels; medians, each mark from the host's request")
    at: dict[str, list[tuple[float, float, float]]] = {}
    for (started, ready), child in zip(hosts, children, strict=True):
        for name, when, cpu, faults in child["marks"]:
            at.setdefault(name, []).append(((when - started) * 1000, cpu * 1000, faults))
        at.setdefault("host: kernel ready", []).append(((ready - started) * 1000, 0, 0))
    for name, values in at.items():
        when, cpu, faults = (statistics.median(v[i] for v in values) for i in range(3))
        usage = (f"  child's CPU {cpu:6.2f} ms, {faults:5.0f} page faults"
                 if name not in ("request", "host: kernel ready") else "")
        print(f"  {name:<24} {when:7.2f} ms{usage}")
    print("  the application's init_* steps (time, CPU, page faults; a step's own and what "
          "it calls):")
    names = {name for child in children for name in child["steps"]}
    for name in sorted(names, key=lambda n: -statistics.median(
            child["steps"].get(n, [0, 0, 0])[0] for child in children)):
        totals = [child["steps"].get(name, [0.0, 0.0, 0]) for child in children]
        when, cpu, faults = (statistics.median(t[i] for t in totals) for i in range(3))
        if when >= 0.0001:
            print(f"    {name:<42} {when * 1000:6.2f} ms {cpu * 1000:6.2f} ms {faults:6.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--mode", choices=["confined", "unconfined", "both"], default="both")
    options = parser.parse_args()
    modes = ["unconfined", "confined"] if options.mode == "both" else [options.mode]
    if "confined" in modes and confinement_problem() is not None:
        print(f"confinement unavailable here ({confinement_problem()}): unconfined only")
        modes = ["unconfined"]
    print(f"{dsh_jupyter.__file__}")
    with tempfile.TemporaryDirectory(prefix="dsh-fork-profile-") as scratch:
        asyncio.run(profile(options.samples, modes, Path(scratch)))


if __name__ == "__main__":
    main()
