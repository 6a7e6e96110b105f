"""Fixtures for the evaluation tests."""

from __future__ import annotations

import pytest

from dsh_jupyter.evaluation import TaskSet, load_task_set


@pytest.fixture
def shipped() -> TaskSet:
    """The shipped ``shop`` task set (small: seven tasks, native and code recordings)."""
    return load_task_set("shop")
