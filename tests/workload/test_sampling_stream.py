"""The workload's categorical draws (bisect on a precomputed CDF) are the draws
``numpy.random.Generator.choice(n, p=p)`` makes: same indices, same RNG state after."""

from __future__ import annotations

from bisect import bisect_right

import numpy as np
import pytest

from kbtpsim.workload.generators import choice_cdf


@pytest.mark.parametrize("weights", [[1, 2, 1], [2, 1, 6, 2], [0.3, 0.7], [1, 0, 3],
                                     [1] * 7, [1e-9, 1, 5]])
def test_bisect_draws_what_choice_draws(weights: list[float]) -> None:
    w = np.array(weights, dtype=float)
    p = w / w.sum()
    cdf = choice_cdf(p)
    a, b = np.random.default_rng([7, 1]), np.random.default_rng([7, 1])
    ours = [bisect_right(cdf, b.random()) for _ in range(20000)]
    theirs = [int(a.choice(len(weights), p=p)) for _ in range(20000)]
    assert ours == theirs
    assert a.random() == b.random()  # one uniform per draw, as choice takes
    if 0 in weights:
        assert weights.index(0) not in ours
