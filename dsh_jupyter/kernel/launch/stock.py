"""The stock launch: any kernelspec through jupyter-client's ``AsyncKernelManager``.

:class:`StockLauncher` (a :class:`~.launch.KernelLauncher`) starts any kernelspec
through ``AsyncKernelManager`` and its provisioner; for local kernels it wraps the
command in the keeper (see ``_keeper.py``) so the kernel's whole process tree can be
accounted and killed, and confined (see ``sandbox``). Remote provisioners get no
wrapper and no process tree: they are watched with ``is_alive`` and limited by wall
time, and cannot be confined here. Without a kernelspec name it serves the host's
Python with ipykernel (:data:`DEFAULT_KERNEL_NAME`).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import zmq.asyncio
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from ...errors import CodeModeError
from ..config import KernelRuntimeConfig
from ..confine.caps import RuntimeCgroups, new_caps
from ..confine.plan import confinement_plan, restriction_plan
from ..confine.sandbox import CONFINE_PACKAGE, SandboxConfig
from ..run.workspace import Workspace
from . import proctree
from .base import CHILD_SCRIPT, KERNEL_ARGS, check_host_ipykernel, describe_status

DEFAULT_KERNEL_NAME = "dsh-jupyter-python"


class MissingProvisionerError(NoSuchKernel):
    """A kernelspec (or ``KernelRuntimeConfig.provisioner``) names a kernel provisioner that
    is not installed here. A :class:`NoSuchKernel`, as jupyter-client reports it, but saying
    which provisioner is missing and how to fix it."""

    def __init__(self, kernel_name: str, provisioner: str, *, from_config: bool) -> None:
        super().__init__(kernel_name)
        self.provisioner = provisioner
        self.from_config = from_config

    def __str__(self) -> str:
        where = ("KernelRuntimeConfig(provisioner=...)" if self.from_config
                 else f"the kernelspec {self.name!r}")
        installed = ", ".join(sorted(_installed_provisioners())) or "none"
        return (f"{where} names the kernel provisioner {self.provisioner!r}, which is not "
                f"installed in this environment (installed: {installed}). Install the package "
                f"that provides it (an entry point in the group {_PROVISIONERS!r}; Enterprise "
                "Gateway's remote provisioners come with 'pip install gateway_provisioners'), "
                "or choose an installed one with KernelRuntimeConfig(provisioner=...)")


_PROVISIONERS = "jupyter_client.kernel_provisioners"
LOCAL_PROVISIONER = "local-provisioner"
"""What jupyter-client uses for a kernelspec that names no provisioner."""


def _installed_provisioners() -> set[str]:
    return {entry.name for entry in entry_points(group=_PROVISIONERS)}


class _SpecManager(KernelSpecManager):
    """Serves the default spec (the host's Python) and applies the provisioner settings:
    ``provisioner`` replaces the kernelspec's choice, ``provisioner_config`` is merged
    over the kernelspec's settings (kept only for the kernelspec's own provisioner)."""

    def __init__(self, *, provisioner: str | None,
                 provisioner_config: Mapping[str, Any] | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._provisioner = provisioner
        self._provisioner_config = dict(provisioner_config or {})

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        if kernel_name == DEFAULT_KERNEL_NAME:
            spec = KernelSpec(
                argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                      *KERNEL_ARGS],
                display_name="Python (dsh-jupyter)",
                language="python",
                interrupt_mode="signal",
                metadata={},
            )
        else:
            spec = self._named_spec(kernel_name)
        if self._provisioner is None and not self._provisioner_config:
            return spec
        stanza = spec.metadata.get("kernel_provisioner")
        stanza = stanza if isinstance(stanza, Mapping) else {}
        own = stanza.get("provisioner_name")
        name = self._provisioner or own or LOCAL_PROVISIONER
        kept = stanza.get("config") if name == (own or LOCAL_PROVISIONER) else None
        config = {**(kept if isinstance(kept, Mapping) else {}), **self._provisioner_config}
        if name not in _installed_provisioners():
            raise MissingProvisionerError(kernel_name, name,
                                          from_config=self._provisioner is not None)
        spec.metadata = {**spec.metadata,
                         "kernel_provisioner": {"provisioner_name": name, "config": config}}
        return spec

    def _named_spec(self, kernel_name: str) -> KernelSpec:
        """jupyter-client's spec; where it says "No such kernel" because the spec names a
        provisioner that is not installed, the spec itself (when ``provisioner`` replaces
        that choice) or an error naming the provisioner."""
        try:
            spec: KernelSpec = super().get_kernel_spec(kernel_name)
            return spec
        except NoSuchKernel:
            directory = self.find_kernel_specs().get(kernel_name.lower())
            if directory is None:
                raise
            spec = KernelSpec.from_resource_dir(directory)
        stanza = spec.metadata.get("kernel_provisioner")
        wanted = stanza.get("provisioner_name") if isinstance(stanza, Mapping) else None
        if self._provisioner is not None or not isinstance(wanted, str):
            return spec
        raise MissingProvisionerError(kernel_name, wanted, from_config=False) from None


class _KeptKernelManager(AsyncKernelManager):
    """Prefixes local kernel commands with the keeper, its resource limits and the
    confinement of the kernel (``confinement``, when the runtime confines kernels)."""

    keeper_args: tuple[str, ...] = ()
    confinement: SandboxConfig | None = None
    restriction: SandboxConfig | None = None
    """The sandbox of a kernel that cannot be confined here: its walls that need no
    namespace (``_confine.restrict``)."""
    workspace: Workspace | None = None
    inputs: Mapping[str, Path] | None = None

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        command: list[str] = super().format_kernel_cmd(extra_arguments)
        if isinstance(self.provisioner, LocalProvisioner):
            keeper = (Path(__file__).parent / "_keeper.py").read_text(encoding="utf-8")
            confine: list[str] = []
            caps = self.workspace.caps if self.workspace is not None else None
            if self.confinement is not None and self.workspace is not None:
                plan = confinement_plan(self.confinement, self.workspace, command=command,
                                        inputs=self.inputs,
                                        cgroups=caps.cgroups if caps is not None else ())
                confine = ["--confine", str(CONFINE_PACKAGE), json.dumps(plan)]
            elif self.restriction is not None and self.workspace is not None:
                plan = restriction_plan(self.restriction, self.workspace, command=command)
                confine = ["--restrict", str(CONFINE_PACKAGE), json.dumps(plan)]
            limits = [word for name, value in (caps.rlimits if caps is not None else {}).items()
                      for word in (f"--{name}", str(value))]
            return [sys.executable, "-I", "-S", "-c", keeper, str(CHILD_SCRIPT),
                    *self.keeper_args, *limits,
                    *confine, "--", *command]
        if self.confinement is not None:
            raise CodeModeError(
                f"kernels of the provisioner {type(self.provisioner).__name__} are not local, "
                "so they cannot be confined here: confine them where they run and pass "
                "sandbox=None")
        return command


class StockKernel:
    """A kernel started by jupyter-client (see :class:`KernelProcess`)."""

    def __init__(self, manager: _KeptKernelManager, *, local: bool) -> None:
        self._manager = manager
        self._local = local
        self.host_ip: str | None = None
        """Where the host reaches the kernel's IPC sockets, when not where the kernel binds
        them (a confined kernel's own ``/workspace``)."""
        self._process: subprocess.Popen[bytes] | None = getattr(
            manager.provisioner, "process", None)
        self._killed = False
        self._reaped = False
        self._status: int | None = None

    @property
    def connection_info(self) -> dict[str, Any]:
        info = dict(self._manager.get_connection_info(session=False))
        if self.host_ip is not None:
            info["ip"] = self.host_ip
        return info

    @property
    def root_pid(self) -> int | None:
        return self._process.pid if self._local and self._process is not None else None

    async def is_alive(self) -> bool:
        if self._killed:
            return False
        if self._process is not None:
            self._status = self._process.poll()
            return self._status is None
        alive: bool = await self._manager.is_alive()
        return alive

    def exit_reason(self) -> str:
        return describe_status(self._status)

    async def interrupt(self) -> None:
        if not self._killed:
            await self._manager.interrupt_kernel()

    async def kill(self) -> None:
        self._killed = True  # from now on the kernel counts as gone
        if self._reaped:
            return
        manager = self._manager
        if self._process is not None:
            proctree.kill_tree(self._process.pid)
            await _reap(self._process)
            if manager.provisioner is not None:
                await manager.provisioner.wait()
        else:
            await manager.shutdown_kernel(now=True)
        await manager.cleanup_resources()
        self._reaped = True

    async def wait_gone(self) -> None:
        return None  # kill already reaped the whole tree


async def _reap(process: subprocess.Popen[bytes]) -> None:
    # SIGKILL lands within microseconds; poll briefly instead of the provisioner's 100 ms loop.
    delay = 0.0005
    while process.poll() is None:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)


class StockLauncher:
    """Starts kernels through ``AsyncKernelManager`` (any kernelspec, any provisioner)."""

    preloads_runtime = False

    def __init__(self, config: KernelRuntimeConfig, context: zmq.asyncio.Context,
                 confinement: SandboxConfig | None,
                 cgroups: RuntimeCgroups | None = None) -> None:
        self._config = config
        self._context = context
        self._confinement = confinement
        self._cgroups = cgroups
        self._specs = _SpecManager(provisioner=config.provisioner,
                                   provisioner_config=config.provisioner_config)
        if config.kernel_name is None:
            check_host_ipykernel()
        keeper_args: list[str] = ["--nice", str(config.kernel_nice)]
        if config.memory_bytes is not None:
            keeper_args += ["--as", str(config.memory_bytes)]
        if config.open_files is not None:
            keeper_args += ["--nofile", str(config.open_files)]
        sandbox = config.confinement
        if sandbox is not None and sandbox.cpu_seconds is not None:
            keeper_args += ["--cpu", str(sandbox.cpu_seconds)]
        self._keeper_args = tuple(keeper_args)

    @property
    def confines(self) -> bool:
        """Whether its kernels are confined (inputs are bound, not copied)."""
        return self._confinement is not None

    async def start(self, workspace: Workspace, env: dict[str, str]) -> StockKernel:
        # IPC sockets in the private workspace: no TCP port any local user could connect
        # to, and they work from a kernel's own network namespace. Other kernelspecs keep
        # TCP unless confined (not every kernel implements IPC).
        ipc = self._confinement is not None or self._config.kernel_name is None
        ip = f"{workspace.kernel.root}/zmq"
        transport = {"transport": "ipc", "ip": ip} if ipc else {}
        manager = _KeptKernelManager(
            kernel_name=self._config.kernel_name or DEFAULT_KERNEL_NAME,
            kernel_spec_manager=self._specs,
            connection_file=str(workspace.connection_file),
            context=self._context,
            **transport,
        )
        manager.keeper_args = self._keeper_args
        manager.confinement = self._confinement
        if self._confinement is None and self._config.kernel_name is None:
            manager.restriction = self._config.confinement
        workspace.caps = new_caps(self._config.confinement,
                                  confined=self._confinement is not None, cgroups=self._cgroups,
                                  address_space_bytes=self._config.memory_bytes)
        manager.workspace = workspace
        manager.inputs = self._config.input_paths
        # A confined kernel's working directory exists only inside its namespaces: the
        # keeper starts in the host directory and the kernel is moved there by _confine.
        cwd = workspace.kernel.cwd if self._confinement is None else str(workspace.root)
        try:
            await manager.start_kernel(
                env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            kernel = StockKernel(manager, local=isinstance(manager.provisioner, LocalProvisioner))
            if self._confinement is not None:
                await workspace.wait_confined(kernel, self._config.startup_seconds)
                kernel.host_ip = workspace.host_path(ip)
        except BaseException:
            if manager.has_kernel:
                await StockKernel(manager, local=True).kill()
            raise
        return kernel

    async def close(self) -> None:
        return None
