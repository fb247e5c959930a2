"""The statistics of ``kernels/intervals.py`` against figures worked out elsewhere: published
tables and numpy, never the formula typed again."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from avatar_metrics.kernels.intervals import midpoint_ranks, wilson, z_bonferroni

# Newcombe (1998), "Two-sided confidence intervals for the single proportion", Statistics in
# Medicine 17: 857-872, Table II, method 3 (Wilson score, no continuity correction), 4 decimals.
NEWCOMBE = [((81, 263), (0.2553, 0.3662)), ((15, 148), (0.0624, 0.1605)), ((0, 20), (0.0, 0.1611)),
            ((1, 29), (0.0061, 0.1718)), ((29, 29), (0.8830, 1.0))]


@pytest.mark.parametrize("counts,published", NEWCOMBE)
def test_wilson_gives_newcombes_published_intervals(counts, published):
    assert [round(x, 4) for x in wilson(*counts)] == list(published)


# the standard normal's quantiles Phi^-1(1 - 0.025 / k), from printed tables (4 decimals)
@pytest.mark.parametrize("tests,z", [(1, 1.9600), (2, 2.2414), (3, 2.3940), (4, 2.4977), (10, 2.8070)])
def test_the_bonferroni_z_is_the_normal_quantile(tests, z):
    assert round(z_bonferroni(tests), 4) == z


def test_the_midpoint_rank_is_exact_where_float64_is_not():
    """3000 * 1.1 / 100 is 33.00000000000001 in float64: its ceiling would take element 34."""
    assert 3000 * 1.1 / 100 != 33 and midpoint_ranks(3001, 1.1) == (33, 33)
    x = np.arange(3001.0) ** 2
    lo, hi = midpoint_ranks(3001, 1.1)
    assert (x[lo] + x[hi]) / 2 == np.percentile(x, 1.1, method="midpoint") == 33.0**2


@pytest.mark.parametrize("seed", range(4))
def test_midpoint_percentiles_agree_with_numpy(seed):
    """numpy where the rank is not a whole number (float64 cannot cross one there: q has at most
    three decimals, so h is a multiple of 1/100,000); the element itself where it is, which
    numpy misses when (m - 1) * q / 100 rounds below it (2000 * 0.329 is 657.9999999999999)."""
    rng = np.random.default_rng(seed)
    for _ in range(200):
        m = int(rng.integers(1, 5000))
        q = round(float(rng.uniform(0, 100)), int(rng.integers(0, 4)))
        x = np.sort(rng.integers(0, 10**6, m).astype(float))  # integers: numpy's midpoint is exact on them
        lo, hi = midpoint_ranks(m, q)
        h = Decimal(repr(q)) * (m - 1) / 100
        want = x[int(h)] if h == int(h) else np.percentile(x, q, method="midpoint")
        assert (x[lo] + x[hi]) / 2 == want, (m, q)
