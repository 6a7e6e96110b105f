"""The kernel runtime: every program runs in a fresh, throwaway IPython kernel (or, opted
in with ``StatefulConfig``, in its conversation's kept kernel).

``KernelRuntime`` implements :class:`dsh_jupyter.runtime.CodeRuntime`; see
``docs/kernel-runtime.md`` for the lifecycle, protocol and budgets.
"""

from .config import KernelRuntimeConfig
from .gateway_config import GatewayConfig
from .run.runtime import KernelRuntime
from .run.stateful import SessionInfo
from .stateful_config import StatefulConfig

__all__ = ["GatewayConfig", "KernelRuntime", "KernelRuntimeConfig", "SessionInfo",
           "StatefulConfig"]
