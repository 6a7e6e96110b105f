"""Fixtures of the security suite: the reliability harness (real runtimes, leak checks)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

try:
    import dsh_jupyter  # noqa: F401
except ModuleNotFoundError:  # running from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel"))  # kernel_support

from reliability_support import Figures, Harness, temp_root


@pytest.fixture
async def harness(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Harness]:
    """Runtimes and registries for one test, closed at its end and checked for leaks."""
    tmp_path_factory.getbasetemp()  # before temp_root() redirects tempfile's default
    with temp_root() as root:
        created = Harness(root, Figures())
        created.baseline()
        yield created
        if not created.finished:
            leaked = await created.finish()
            assert not leaked, f"leaked: {leaked}"
