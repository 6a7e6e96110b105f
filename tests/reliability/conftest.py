"""Fixtures of the reliability suite, and the figures it reports.

Sizes follow ``DSH_RELIABILITY_SCALE`` (``default``, ``short``, ``long``; see
``bench/reliability.py``). With ``DSH_RELIABILITY_FIGURES=PATH`` the session
writes its figures (faults survived, messages fuzzed, runs soaked, leaks found,
and notes such as RSS growth) to ``PATH`` as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator, Generator
from pathlib import Path
from typing import Any

import pytest

try:
    import dsh_jupyter  # noqa: F401
except ModuleNotFoundError:  # running from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from reliability_support import Figures, Harness, temp_root

_TOTALS = pytest.StashKey[Counter[str]]()
_NOTES = pytest.StashKey[dict[str, Any]]()
_FIGURES = pytest.StashKey[Figures]()
_PASSED = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_TOTALS] = Counter()
    config.stash[_NOTES] = {}


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    recorded = Figures()
    request.node.stash[_FIGURES] = recorded
    return recorded


@pytest.fixture
async def harness(figures: Figures,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Harness]:
    """Runtimes and registries for one test; a test ends with ``assert not await
    harness.finish()`` (done here too, as a safety net, when it did not)."""
    tmp_path_factory.getbasetemp()  # before temp_root() redirects tempfile's default
    with temp_root() as root:
        created = Harness(root, figures)
        created.baseline()
        yield created
        if not created.finished:
            leaked = await created.finish()
            assert not leaked, f"leaked: {leaked}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.when == "call":
        item.stash[_PASSED] = report.passed
    elif report.when == "teardown":
        recorded = item.stash.get(_FIGURES, None)
        if recorded is not None:
            passed = item.stash.get(_PASSED, False) and report.passed
            totals = item.config.stash[_TOTALS]
            for name, amount in recorded.counts.items():
                if passed or name == "leaks found":
                    totals[name] += amount
            if passed:
                item.config.stash[_NOTES].update(recorded.notes)
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("DSH_RELIABILITY_FIGURES")
    if path:
        totals = session.config.stash[_TOTALS]  # inside dict(...), mypy mistypes the key
        data = {"counts": dict(totals), "notes": session.config.stash[_NOTES]}
        Path(path).write_text(json.dumps(data, indent=2, sort_keys=True))
