"""Moved to :mod:`dsh_jupyter.codemode.bridge`; this module keeps the old import path working.

Code Mode is its own package now (:mod:`dsh_jupyter.codemode`), which the registry core
does not import; only this re-export does. No warning is emitted: import from the new
home in new code.
"""

from ..codemode.bridge import (
    OUTPUT_BATCH_SECONDS,
    SETTLED_REASON,
    DispatchBridge,
)

__all__ = [
    "DispatchBridge",
    "OUTPUT_BATCH_SECONDS",
    "SETTLED_REASON",
]
