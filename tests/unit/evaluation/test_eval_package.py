"""The evaluation package's surface, and that importing it does nothing heavy."""

from __future__ import annotations

import pytest

import dsh_jupyter.evaluation as evaluation

pytestmark = pytest.mark.timeout(60)


def test_public_names_exist_and_are_sorted() -> None:
    assert evaluation.__all__ == sorted(evaluation.__all__)
    for name in evaluation.__all__:
        assert hasattr(evaluation, name), name
