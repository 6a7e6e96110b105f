"""One cold kernel start, timed as the benchmarks time it (``kernel.py``'s ready figures,
``fork_profile.py``), and the teardown of what such a measurement opened."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path

import zmq.asyncio

from dsh_jupyter.kernel import KernelRuntimeConfig
from dsh_jupyter.kernel.confine.caps import RuntimeCgroups
from dsh_jupyter.kernel.launch.base import KernelLauncher
from dsh_jupyter.kernel.run.workspace import Workspace, remove_tree
from dsh_jupyter.kernel.transport.connection import KernelConnection


async def cold_start(launcher: KernelLauncher, config: KernelRuntimeConfig,
                     context: zmq.asyncio.Context, directory: Path) -> tuple[float, float]:
    """One kernel, started and then killed: the ``perf_counter`` times of the start request
    and of kernel_info answered with iopub subscribed (the kernel can take a cell)."""
    workspace = Workspace.create(directory, confined=config.confinement is not None)
    try:
        started = time.perf_counter()
        process = await launcher.start(workspace, workspace.environment(config))
        connection = KernelConnection(context, process.connection_info,
                                      max_message_bytes=1 << 24)
        await connection.wait_ready(30)
        ready = time.perf_counter()
        connection.close()
        await process.kill()
        await process.wait_gone()
    finally:
        workspace.remove()
    await asyncio.sleep(0.05)
    return started, ready


async def close_launchers(launchers: Iterable[KernelLauncher], context: zmq.asyncio.Context,
                          directory: Path, cgroups: RuntimeCgroups | None) -> None:
    """Close what a cold-start measurement opened: its launchers (and fork servers), the
    zmq context, the runtime directory and the cgroups."""
    for launcher in launchers:
        await launcher.close()
    context.destroy(linger=0)
    remove_tree(directory)
    if cgroups is not None:
        cgroups.remove()
