"""The stock launch's public names, at the path the docs name them by; they are defined
in :mod:`dsh_jupyter.kernel.launch.stock` (see there)."""

from .launch.stock import DEFAULT_KERNEL_NAME, MissingProvisionerError, StockLauncher

__all__ = ["DEFAULT_KERNEL_NAME", "MissingProvisionerError", "StockLauncher"]
