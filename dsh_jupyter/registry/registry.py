"""Moved: the registry core is :class:`~dsh_jupyter.registry.core.RegistryCore`, and
``ToolRegistry`` (the core with Code Mode plugged in) is in
:mod:`dsh_jupyter.codemode.registry`; this module keeps the old import path working (no
warning: import ``ToolRegistry`` from ``dsh_jupyter`` or ``dsh_jupyter.registry``).
"""

from ..codemode.registry import ToolRegistry
from .core import RegistryChange

__all__ = ["RegistryChange", "ToolRegistry"]
