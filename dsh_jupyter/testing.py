"""Test helpers. :class:`InProcessRuntime` (now :class:`dsh_jupyter.kernel.InProcessRuntime`,
re-exported here) runs programs in *this* process: **not a sandbox**, it exists so Code
Mode's rules can be checked in milliseconds; real runs use
:class:`dsh_jupyter.kernel.KernelRuntime`. No module of ``dsh_jupyter`` imports this one.
"""

from __future__ import annotations

from .kernel.run.inprocess import InProcessRuntime

__all__ = ["InProcessRuntime"]
