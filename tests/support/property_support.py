"""How many examples a property test tries.

Each test names its full count; ``.ci/run``'s full suite runs that (``DSH_THOROUGH=1``).
Elsewhere (a developer's ``pytest tests/unit``, the CI's timed unit tier) a test tries a
quarter of it, at least 50: the unit tier's property tests took half of its minute at full
count. Hypothesis keeps the failing examples it finds in its database and tries them first
next time, whatever the count.
"""

from __future__ import annotations

import os

THOROUGH = os.environ.get("DSH_THOROUGH", "") not in ("", "0")


def examples(full: int) -> int:
    """``full`` when thorough, else a quarter of it (at least 50, at most ``full``)."""
    return full if THOROUGH else min(full, max(50, full // 4))
