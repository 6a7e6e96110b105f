"""The one place that imports ipywidgets and IPython, lazily.

Importing ipywidgets inside a kernel registers its comm targets, so nothing
here runs at import time: a widget exists only once a card is displayed or its
``widget`` attribute is read.
"""

from __future__ import annotations

from typing import Any, cast

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def ipywidgets() -> Any:
    import ipywidgets

    return ipywidgets


def widget_view(widget: Any) -> dict[str, Any]:
    """The widget-view mime payload that makes a front end render ``widget``."""
    return {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}


def in_kernel() -> bool:
    """True inside an IPython kernel (a notebook, papermill, nbval); False in scripts."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def display(bundle: dict[str, Any]) -> Any:
    """Publish ``bundle`` with a display id; returns the handle to update it."""
    from IPython.display import display as ipython_display

    return cast(Any, ipython_display)(bundle, raw=True, display_id=True)
