"""Sessions as notebooks: a recorded session log exported to a runnable notebook.

::

    from dsh_jupyter.sessions import export_notebook

    export_notebook("session.jsonl", "session.ipynb", tools="mypackage.tools:registry")

:mod:`.turns` reads a log as runs, model turns, native calls and programs;
:mod:`.export` writes those as cells (nbformat); :mod:`.setup` opens the registry an
exported notebook re-runs its programs against, and :mod:`.approvals` answers the
approvals they ask for (ask, replay the recorded answers, deny); :mod:`.command` is
``dsh-jupyter export``. Importing this package imports neither nbformat nor a kernel
client. See docs/sessions.md.
"""

from .export import export_notebook, load_events
from .setup import open_session_registry

__all__ = ["export_notebook", "load_events", "open_session_registry"]
