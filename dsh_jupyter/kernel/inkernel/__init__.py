"""The code that runs inside the throwaway kernel: standard library plus ``comm``.

The host sends these modules to the kernel *as source* (nothing is imported from
dsh-jupyter there, so a kernel without it installed works too): ``_loader`` executes them
as the package ``_dsh_jupyter_inkernel`` and its submodules. The host is the only peer:
everything arrives over one comm whose target is ``messages.TARGET_NAME`` (or over the
socket carrier that the setup cell, and only it, names).

- ``messages``: the message shapes, the host's definitions too (it imports this package
  for them and a few names; importing it runs nothing and patches nothing);
- ``values``: lossless JSON, checked where the program made it;
- ``frames``: large values as frames;
- ``outputs``: streams, displays and figures in the kernel;
- ``call_client``: the kernel end of tool calls (the host's is the call server), and
  ``ToolCallError``;
- ``tools``: the ``tools`` namespace of a run;
- ``program``: a program compiled as an async function's body, and its tracebacks;
- ``shortcuts``: the kernel runs the host's program cell itself, and takes replies to
  calls off ipykernel's shell-channel thread (both verified, both with ipykernel's own
  path as the fallback);
- ``runner``: :func:`start` (what the setup cell calls) and the kernel's
  :class:`Runtime`, which executes each program.
"""

from .call_client import ToolCallError
from .runner import Runtime, start

__all__ = ["Runtime", "ToolCallError", "start"]
