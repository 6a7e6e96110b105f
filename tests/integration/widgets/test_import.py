"""Importing the widgets package does nothing: no ipywidgets, no comm targets, no threads."""

from __future__ import annotations

import subprocess
import sys


def test_importing_widgets_imports_no_ipywidgets() -> None:
    code = (
        "import sys, threading\n"
        "import dsh_jupyter.widgets\n"
        "from dsh_jupyter.widgets import LiveView, NotebookApprovals, replay, tool_card\n"
        "assert 'ipywidgets' not in sys.modules, 'ipywidgets imported at import time'\n"
        "assert 'IPython' not in sys.modules, 'IPython imported at import time'\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
        "NotebookApprovals()\n"
        "assert 'ipywidgets' not in sys.modules, 'a service needs no widget until it asks'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
