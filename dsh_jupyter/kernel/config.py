"""Configuration of :class:`~dsh_jupyter.kernel.KernelRuntime`: budgets, launch, hygiene."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from types import MappingProxyType
from typing import Literal, cast

from ..json_value import JsonValue, NotJsonError, snapshot_json
from .confine.sandbox import SandboxConfig, SandboxSetting, resolve_sandbox
from .gateway_config import GatewayConfig
from .inkernel.messages import MAX_MESSAGE_BYTES
from .run.files import OutputLimits, check_inputs
from .run.remote_files import remote_input_entries
from .stateful_config import StatefulConfig

MiB = 1024 * 1024
MIN_MEMORY_BYTES = 768 * MiB
"""The smallest ``memory_bytes`` (RLIMIT_AS) a kernel can start under."""

DEFAULT_ENV_ALLOW: tuple[str, ...] = ("PATH", "LANG", "LANGUAGE", "LC_*", "TZ")
"""Host variables a kernel may inherit. A trailing ``*`` matches a prefix."""

Launcher = Literal["auto", "fork", "stock"]
Carrier = Literal["comm", "socket"]


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelRuntimeConfig:
    """How kernels are started, what a run may spend, and what a kernel may see.

    Budgets (per run):

    - ``compute_seconds``: CPU time of the kernel's process tree while the
      program runs (local kernels; remote kernels only get the wall budget).
    - ``wall_seconds``: elapsed time from the program's start to its result
      (starting the kernel has its own ``startup_seconds``).
    - ``max_output_bytes``: UTF-8 bytes of the compact JSON encoding of the log
      array (brackets and commas included) plus that of the return value. Over it,
      the run fails with ``output-limit`` and keeps the log entries that fit.
    - ``max_buffered_output_bytes`` (per runtime, not per run): what all runs in
      flight may hold together, in memory terms (each log entry counted with its
      overhead, so a million one-character lines cost what they weigh). A run
      that would pass it fails with ``output-limit``. It bounds one run too:
      raise it with ``max_output_bytes`` to let a run keep more than 16 MiB.
    - ``max_displays`` / ``max_display_bytes``: rich outputs of a run
      (``display(obj)``, matplotlib figures): how many it keeps and the bytes of
      their compact JSON together. Displays past either, or past half of
      ``max_buffered_output_bytes`` (what all runs' displays may hold), are
      dropped and a note says so; logs are never dropped for them (see
      :mod:`~.displays`).
    - ``memory_bytes`` / ``open_files``: optional RLIMIT_AS / RLIMIT_NOFILE of
      local kernels (a program over the memory cap gets ``MemoryError``).

    Confinement (``sandbox``, see :mod:`~.sandbox` and ``docs/security.md``):

    - ``"auto"`` (default): every local kernel, forked or not, runs in its own
      namespaces (its own files, processes and loopback; no privileges) where
      Linux allows it, else unconfined with one warning per runtime.
    - ``"required"``: the same, but entering the runtime fails where kernels
      cannot be confined.
    - a :class:`~.sandbox.SandboxConfig`: confined, with network, extra
      read-only paths or a CPU limit; ``None``: unconfined, no warning.
      Remote (gateway) kernels are confined by the gateway, never here.

    Launch:

    - ``kernel_name``: a kernelspec name; ``None`` means the host's Python with
      ipykernel (checked to be >= 7.4).
    - ``provisioner``: a ``jupyter_client.kernel_provisioners`` entry point name
      overriding the kernelspec's choice.
    - ``provisioner_config``: settings for the provisioner (its traits, e.g. a remote
      provisioner's host or image), merged key by key over the kernelspec's
      ``metadata.kernel_provisioner.config``. The kernelspec's settings are kept when
      ``provisioner`` is unset or names the kernelspec's own provisioner, and dropped when
      it names another one (they were written for a different class).
    - ``launcher``: ``"fork"`` forks kernels from a preloaded server (default
      kernel only), ``"stock"`` launches through jupyter-client, ``"auto"``
      picks ``"fork"`` when it applies.
    - ``pool_size``: kernels started ahead of need; each still serves one run.
    - ``kernel_nice``: how far below the host kernels run (``nice``, 0 to 19):
      a busy program must not take the CPU from the host's event loop.
    - ``carrier``: ``"comm"`` (always works) or ``"socket"``, an opt-in local
      unix socket negotiated over the comm (falls back to the comm when the
      kernel cannot reach it).

    Files (see :mod:`~.files` and ``docs/run-files.md``):

    - ``inputs``: ``{name: host path}`` of files or directories every run sees
      read-only at ``inputs/<name>`` in its working directory (bind-mounted when
      confined, copied with write bits cleared when not). Names are relative
      paths; each path must exist. Remote kernels get them through the kernel
      connection (at most 1 MiB together, see :mod:`~.remote_files`).
    - ``max_output_file_bytes`` / ``max_output_files`` / ``max_output_total_bytes``:
      what is collected of the files a program writes under ``outputs/``
      (:attr:`~dsh_jupyter.runtime.CodeRunResult.files`): a file over a cap is
      listed with the reason, without its bytes.

    Hygiene: kernels see only the host variables named by ``env_allow`` plus
    ``extra_env``; HOME, IPYTHONDIR and TMPDIR point into a per-run temporary
    directory that is removed after the run.

    State: ``stateful`` (a :class:`~.stateful.StatefulConfig`; ``None``, the default,
    runs every program fresh) keeps one kernel per conversation, so variables survive
    between its programs: see :mod:`~.stateful` and ``docs/stateful-runs.md``.

    Remote: ``gateway`` (a :class:`~.gateway_config.GatewayConfig`) starts every
    kernel on a Kernel Gateway or Enterprise Gateway; ``kernel_name`` then names
    a kernelspec there, ``extra_env`` is sent with each start (the gateway keeps
    what it allows), and the local-only options above must stay unset.
    """

    kernel_name: str | None = None
    provisioner: str | None = None
    provisioner_config: Mapping[str, JsonValue] | None = None
    launcher: Launcher = "auto"
    pool_size: int = 1
    carrier: Carrier = "comm"
    compute_seconds: float = 60.0
    wall_seconds: float = 600.0
    max_output_bytes: int = 64 * MiB
    max_buffered_output_bytes: int = 16 * MiB
    max_displays: int = 20
    max_display_bytes: int = 8 * MiB
    memory_bytes: int | None = None
    open_files: int | None = None
    startup_seconds: float = 60.0
    interrupt_grace_seconds: float = 0.5
    kernel_nice: int = 10
    max_pending_calls: int = 1024
    max_call_bytes: int = 16 * MiB
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW
    extra_env: Mapping[str, str] = field(default_factory=dict)
    gateway: GatewayConfig | None = None
    inputs: Mapping[str, str | PathLike[str]] = field(default_factory=dict)
    max_output_file_bytes: int = 8 * MiB
    max_output_files: int = 20
    max_output_total_bytes: int = 32 * MiB
    sandbox: SandboxConfig | SandboxSetting | None = "auto"
    stateful: StatefulConfig | None = None

    def __post_init__(self) -> None:
        for name in ("compute_seconds", "wall_seconds", "startup_seconds"):
            _require_positive(name, getattr(self, name))
        if not (math.isfinite(self.interrupt_grace_seconds) and self.interrupt_grace_seconds >= 0):
            raise ValueError("interrupt_grace_seconds must be a finite number >= 0")
        for name in ("max_output_bytes", "max_buffered_output_bytes", "max_pending_calls",
                     "max_call_bytes"):
            _require_count(name, getattr(self, name), minimum=1)
        _require_count("pool_size", self.pool_size, minimum=0)
        for name in ("max_output_file_bytes", "max_output_files", "max_output_total_bytes"):
            _require_count(name, getattr(self, name), minimum=0)  # 0: collect none
        object.__setattr__(self, "inputs", check_inputs(self.inputs))
        _require_count("max_displays", self.max_displays, minimum=0)  # 0: displays off
        _require_count("max_display_bytes", self.max_display_bytes, minimum=0)
        _require_count("kernel_nice", self.kernel_nice, minimum=0)
        if self.kernel_nice > 19:
            raise ValueError(f"kernel_nice must be 0 to 19, not {self.kernel_nice}")
        if self.memory_bytes is not None:
            # A fresh kernel already maps ~650 MiB of address space: a lower RLIMIT_AS
            # kills every kernel at start with nothing but "exited with status 1".
            _require_count("memory_bytes", self.memory_bytes, minimum=0)
            if self.memory_bytes < MIN_MEMORY_BYTES:
                raise ValueError(
                    f"memory_bytes={self.memory_bytes} is below {MIN_MEMORY_BYTES // MiB} MiB: "
                    "a kernel maps ~650 MiB of address space before running anything, so "
                    "RLIMIT_AS under that kills it at start")
        if self.open_files is not None:
            _require_count("open_files", self.open_files, minimum=16)
        if self.launcher not in ("auto", "fork", "stock"):
            raise ValueError(f"launcher must be 'auto', 'fork' or 'stock', not {self.launcher!r}")
        if self.carrier not in ("comm", "socket"):
            raise ValueError(f"carrier must be 'comm' or 'socket', not {self.carrier!r}")
        if self.launcher == "fork" and self.kernel_name is not None:
            raise ValueError("launcher='fork' forks the host's Python: leave kernel_name unset")
        if self.launcher == "fork" and (self.provisioner is not None
                                        or self.provisioner_config is not None):
            raise ValueError("launcher='fork' does not use a provisioner: leave provisioner "
                             "and provisioner_config unset")
        if self.provisioner_config is not None:
            settings = self.provisioner_config
            if not isinstance(settings, Mapping) or not all(isinstance(k, str) and k
                                                            for k in settings):
                raise ValueError("provisioner_config must map setting names to JSON values")
            try:
                frozen = cast("dict[str, JsonValue]", snapshot_json(dict(settings),
                                                                    freeze=False))
            except NotJsonError as exc:
                raise ValueError(f"provisioner_config must be JSON: {exc}") from None
            object.__setattr__(self, "provisioner_config", MappingProxyType(frozen))
        for label, value in (("kernel_name", self.kernel_name), ("provisioner", self.provisioner)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{label} must be a non-empty string or None")
        allow: object = self.env_allow
        if not isinstance(allow, tuple | list) or not all(isinstance(n, str) and n for n in allow):
            raise ValueError("env_allow must be a tuple of variable names (or 'PREFIX*')")
        extra = dict(self.extra_env)
        if not all(isinstance(k, str) and k and "=" not in k and isinstance(v, str)
                   for k, v in extra.items()):
            raise ValueError("extra_env must map variable names to strings")
        object.__setattr__(self, "env_allow", tuple(self.env_allow))
        object.__setattr__(self, "extra_env", MappingProxyType(extra))
        if self.stateful is not None and not isinstance(self.stateful, StatefulConfig):
            raise ValueError(f"stateful must be a StatefulConfig or None, not "
                             f"{type(self.stateful).__name__}: e.g. stateful=StatefulConfig()")
        if self.gateway is not None:
            self._check_remote_options()
            remote_input_entries(self.input_paths)  # ValueError over the remote cap
        _check_sandbox(self)

    @property
    def uses_fork(self) -> bool:
        """Whether kernels come from the fork server."""
        return self.gateway is None and (self.launcher == "fork" or (
            self.launcher == "auto" and self.kernel_name is None and self.provisioner is None
            and self.provisioner_config is None
        ))

    @property
    def output_limits(self) -> OutputLimits:
        """The caps of collecting a run's ``outputs/``."""
        return OutputLimits(max_file_bytes=self.max_output_file_bytes,
                            max_files=self.max_output_files,
                            max_total_bytes=self.max_output_total_bytes)

    @property
    def input_paths(self) -> Mapping[str, Path]:
        """``inputs`` as checked: ``{name: absolute real path}``."""
        return cast("Mapping[str, Path]", self.inputs)

    @property
    def confinement(self) -> SandboxConfig | None:
        """The sandbox local kernels get (``None``: unconfined), once resolved."""
        return self.sandbox if isinstance(self.sandbox, SandboxConfig) else None

    @property
    def max_message_bytes(self) -> int:
        """The largest message a kernel may send, on any channel or carrier (not an option:
        see :data:`~.inkernel.messages.MAX_MESSAGE_BYTES`). A bigger one ends the run as
        ``output-limit``."""
        return MAX_MESSAGE_BYTES

    def _check_remote_options(self) -> None:
        """Raise ``ValueError`` for options that only local kernels have (with ``gateway``)."""
        if not isinstance(self.gateway, GatewayConfig):
            raise ValueError("gateway must be a GatewayConfig or None")
        local_only = {
            "launcher": (self.launcher != "auto",
                         "the gateway launches kernels: leave launcher='auto'"),
            "provisioner": (self.provisioner is not None,
                            "the gateway's kernelspec chooses the provisioner"),
            "provisioner_config": (self.provisioner_config is not None,
                                   "the gateway's kernelspec configures the provisioner"),
            "carrier": (self.carrier != "comm",
                        "the socket carrier is local: remote kernels use comms"),
            "memory_bytes": (self.memory_bytes is not None,
                             "a local rlimit: limit a remote kernel's memory on the gateway "
                             "side (e.g. the kernel pod's resources)"),
            "open_files": (self.open_files is not None,
                           "a local rlimit: limit it on the gateway side"),
        }
        for name, (conflicts, why) in local_only.items():
            if conflicts:
                raise ValueError(f"{name} does not apply with gateway=...: {why}")


def _check_sandbox(config: KernelRuntimeConfig) -> None:
    if config.gateway is not None and config.sandbox not in ("auto", None):
        raise ValueError("sandbox does not apply with gateway=...: confine remote kernels on "
                         "the gateway side")
    resolved = None if config.gateway is not None else resolve_sandbox(config.sandbox)
    object.__setattr__(config, "sandbox", resolved)


def _require_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
        math.isfinite(value) and value > 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, not {value!r}")


def _require_count(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, not {value!r}")
