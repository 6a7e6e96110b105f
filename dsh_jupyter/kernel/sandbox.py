"""The sandbox's public names, at the path the docs import them from; they are defined in
:mod:`dsh_jupyter.kernel.confine.sandbox` (see there)."""

from .confine.sandbox import (
    MissingWallWarning,
    SandboxConfig,
    SandboxSetting,
    UnconfinedWarning,
    confinement_problem,
)

__all__ = ["MissingWallWarning", "SandboxConfig", "SandboxSetting", "UnconfinedWarning",
           "confinement_problem"]
