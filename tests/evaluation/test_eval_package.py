"""The evaluation package's surface, and that importing it does nothing heavy."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dsh_jupyter.evaluation as evaluation

pytestmark = pytest.mark.timeout(60)


def test_public_names_exist_and_are_sorted() -> None:
    assert evaluation.__all__ == sorted(evaluation.__all__)
    for name in evaluation.__all__:
        assert hasattr(evaluation, name), name


def test_import_starts_nothing_and_skips_heavy_modules() -> None:
    probe = ("import sys, dsh_jupyter.cli, dsh_jupyter.evaluation, dsh_jupyter.evaluation.report; "
             "print(sorted(m for m in ('papermill', 'matplotlib', 'pandas', "
             "'dsh_jupyter.kernel', 'dsh_jupyter.testing') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=50, check=True)
    assert done.stdout.strip() == "[]"
