"""Code Mode: the model calls one tool, ``run_code``, with a Python program that calls the
registry's tools through a generated SDK (see ``docs/code-mode.md``).

The package plugs into the registry core through its seams, and the core imports none of
it (``tests/unit/test_import_cycles.py``):

- :mod:`.registry`: ``ToolRegistry``, the core with Code Mode plugged in;
- :mod:`.mode`: :class:`CodeMode`, what the core sees (the ``run_code`` transport, the
  prompt sections, the sub-call listener);
- :mod:`.run_code`: the ``run_code`` tool: running a program, its value and content;
- :mod:`.model_text`: how much of a result's text the model reads (``run_code_max_chars``);
- :mod:`.bridge`: a program's bindings (its ``tools.x`` calls, output, discovery helpers);
- :mod:`.scheduler`: the sub-call scheduler and :class:`SubCallOrdering`, the lifecycle
  listener that orders a program's sub-calls and emits their ``tool/code-dispatch*``
  events;
- :mod:`.prompt`, :mod:`.sdk_python`, :mod:`.discovery`: the prompt sections, the Python
  SDK, and the index, search and describe of ``discovery``;
- :mod:`.run_files`: the files a program writes, as the model, the user and the card get
  them;
- :mod:`.checker`, :mod:`.check`, :mod:`.ty_server`: the type check before a run
  (``check_programs``): the registry's kept ``ty server``, and what a check reports.
"""

from .mode import CodeMode
from .registry import ToolRegistry
from .scheduler import SubCallOrdering

__all__ = ["CodeMode", "SubCallOrdering", "ToolRegistry"]
