"""The run files' public names, at the path the docs name them by; they are defined in
:mod:`dsh_jupyter.kernel.run.files` (see there)."""

from .run.files import OutputCollector, OutputLimits

__all__ = ["OutputCollector", "OutputLimits"]
