"""Markers of the widget tests (registered here so pyproject stays untouched)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "browser: drives JupyterLab in Debian's chromium (needs jupyterlab, "
        "playwright and /usr/bin/chromium; skipped otherwise)")
