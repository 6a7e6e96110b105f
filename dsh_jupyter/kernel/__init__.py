"""The kernel runtime: every program runs in a fresh, throwaway IPython kernel (or, opted
in with ``StatefulConfig``, in its conversation's kept kernel).

``KernelRuntime`` implements :class:`dsh_jupyter.runtime.CodeRuntime`; see
``docs/kernel-runtime.md`` for the lifecycle, protocol and budgets. ``InProcessRuntime`` runs
the same in-kernel code and run lifecycle in the host's process (no isolation: tests,
benchmarks, trusted programs).
"""

from .config import KernelRuntimeConfig
from .gateway_config import GatewayConfig
from .run.inprocess import InProcessRuntime
from .run.runtime import KernelRuntime
from .run.stateful import SessionInfo
from .stateful_config import StatefulConfig

__all__ = ["GatewayConfig", "InProcessRuntime", "KernelRuntime", "KernelRuntimeConfig",
           "SessionInfo", "StatefulConfig"]
