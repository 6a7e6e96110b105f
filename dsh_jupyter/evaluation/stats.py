"""Success statistics over repeated runs: pass@k and a confidence interval.

pass@k is the chance that at least one of ``k`` runs of a task succeeds, estimated
without bias from ``n >= k`` runs of which ``c`` succeeded (Chen et al. 2021,
"Evaluating Large Language Models Trained on Code", the Codex paper)::

    pass@k = 1 - C(n - c, k) / C(n, k)

averaged over tasks. The interval for a success rate is Wilson's score interval:
unlike the normal ("Wald") interval it stays inside [0, 1], does not shrink to a
point at 0 % or 100 % (what small evaluations mostly see: 20 tasks all passing
is not certainty), and keeps close to its nominal coverage for small ``n``
(Brown, Cai & DasGupta 2001 recommend it for n < 40). It treats every run as an
independent trial; repeats of one task are correlated, so with repeats the
interval is narrower than the truth, and pass@k is the figure to read per task.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

Z_95 = 1.959963984540054  # the standard normal's 97.5th percentile


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task from ``n`` runs with ``c`` successes.

    >>> round(pass_at_k(5, 1, 1), 6), pass_at_k(5, 1, 5), pass_at_k(5, 0, 3)
    (0.2, 1.0, 0.0)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """pass@k averaged over tasks, each given as ``(n, c)``."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    return sum(values) / len(values) if values else 0.0


def wilson_interval(successes: int, trials: int, *, z: float = Z_95) -> tuple[float, float]:
    """Wilson's score interval for ``successes / trials`` (95 % by default).

    >>> [round(x, 4) for x in wilson_interval(20, 20)]
    [0.8389, 1.0]
    """
    if not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes}/{trials}")
    if trials == 0:
        return (0.0, 1.0)
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return (max(0.0, centre - half), min(1.0, centre + half))
