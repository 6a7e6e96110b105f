"""pass@k and the Wilson interval against published values."""

from __future__ import annotations

import itertools
import math

import pytest

from dsh_jupyter.evaluation import pass_at_k, wilson_interval
from dsh_jupyter.evaluation.stats import mean_pass_at_k


def codex_pass_at_k(n: int, c: int, k: int) -> float:
    """The numerically stable form from Chen et al. 2021 (Figure 3), in plain Python."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def test_pass_at_k_known_values() -> None:
    assert pass_at_k(1, 1, 1) == 1.0 and pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)      # pass@1 is c / n
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)     # 1 - C(2,2) / C(3,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)       # 1 - C(3,3) / C(5,3)
    assert pass_at_k(100, 0, 10) == 0.0 and pass_at_k(100, 95, 10) == 1.0
    for n, c, k in itertools.product(range(1, 12), range(12), range(1, 12)):
        if c <= n and k <= n:
            assert pass_at_k(n, c, k) == pytest.approx(codex_pass_at_k(n, c, k)), (n, c, k)


def test_pass_at_k_is_averaged_over_tasks() -> None:
    assert mean_pass_at_k([(3, 3), (3, 0), (3, 1)], 1) == pytest.approx((1 + 0 + 1 / 3) / 3)
    assert mean_pass_at_k([(3, 3), (3, 0), (3, 1)], 3) == pytest.approx(2 / 3)
    assert mean_pass_at_k([], 1) == 0.0


@pytest.mark.parametrize(("successes", "trials", "low", "high"), [
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion",
    # Statistics in Medicine 17:857-872, Table I, method 3 (Wilson score).
    (81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (24, 24, 0.8620, 1.0),  # all passing is not certainty
])
def test_wilson_interval_published_values(successes: int, trials: int, low: float,
                                          high: float) -> None:
    assert wilson_interval(successes, trials) == pytest.approx((low, high), abs=5e-5)


def test_bad_counts_are_refused() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
