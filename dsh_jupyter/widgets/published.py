"""Something shown with a display id, so that its text fallbacks (what papermill and
nbconvert keep, the only part a saved notebook holds without the widget state) follow its
state; the widget view updates itself."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from . import _ipw


class Published:
    """Base of the live views: subclasses give ``_repr_mimebundle_`` and call
    :meth:`_republish` when what it returns may have changed."""

    def __init__(self) -> None:
        self._handles: list[Any] = []  # one display handle per time it was shown
        self._published: dict[str, Any] | None = None

    def _repr_mimebundle_(self, include: Collection[str] | None = None,
                          exclude: Collection[str] | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def __str__(self) -> str:
        return str(self._repr_mimebundle_(include=("text/plain",))["text/plain"])

    def _ipython_display_(self) -> None:
        self._published = self._repr_mimebundle_()
        self._handles.append(_ipw.display(self._published))

    def _republish(self) -> None:
        """Update every display of this view with its bundle, if that changed."""
        if not self._handles:
            return
        bundle = self._repr_mimebundle_()
        if bundle != self._published:
            self._published = bundle
            for handle in self._handles:
                handle.update(bundle, raw=True)
