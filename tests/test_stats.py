"""The statistics of ``stats.py`` against figures worked out elsewhere: published tables, exact
identities, numpy and counts made pair by pair, never the formula typed again."""

from __future__ import annotations

import math
from decimal import Decimal

from statistics import NormalDist

import numpy as np
import pytest

from avatar_metrics.stats import (Estimate, auc_interval, hanley_mcneil, inference_risk, least_protection_interval,
                                  median_interval, median_ranks, midpoint_ranks, rate_estimate, risk_interval, wilson,
                                  z_bonferroni)

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


@pytest.mark.parametrize("n_pos,n_neg", [(1, 1), (10, 10), (7, 30), (200, 50)])
def test_hanley_mcneil_at_one_half_is_the_mann_whitney_null_variance(n_pos, n_neg):
    """At AUC = 1/2 (Q1 = Q2 = 1/3) the formula is exact: Var(U) = n1 n2 (n1 + n2 + 1) / 12
    (Mann and Whitney, 1947), so SE(AUC)^2 = (n1 + n2 + 1) / (12 n1 n2)."""
    assert hanley_mcneil(0.5, n_pos, n_neg) ** 2 == pytest.approx((n_pos + n_neg + 1) / (12 * n_pos * n_neg), rel=1e-12)
    lo, hi = auc_interval(0.5, n_pos, n_neg)
    assert hi - 0.5 == pytest.approx(min(0.5, 1.959964 * hanley_mcneil(0.5, n_pos, n_neg)), rel=1e-12)
    assert lo == pytest.approx(1 - hi, abs=1e-15)


def test_an_auc_of_one_is_sure_only_for_its_formula():
    """At AUC = 1 every pair is ranked right: the variance is 0, whatever the sizes."""
    assert hanley_mcneil(1.0, 5, 7) == 0.0 and auc_interval(1.0, 5, 7) == (1.0, 1.0)


@pytest.mark.parametrize("m", [10, 25, 26, 101, 500, 1000, 1999])
def test_the_median_interval_covers_the_median_with_95_percent(m):
    """The order statistics of ranks lo and hi hold the population median with probability
    sum over lo <= k < hi of C(m, k) / 2^m (the number of values below it is binomial)."""
    lo, hi = median_ranks(m)
    assert sum(math.comb(m, k) for k in range(lo, hi)) / 2**m >= 0.95
    values = [v for v in range(m)]  # distinct values: the interval is their lo-th and hi-th
    assert median_interval([(v, 1) for v in values]) == [float(lo - 1), float(hi - 1)]


@pytest.mark.parametrize("counts", [(30, 100, 10, 100), (5, 20, 5, 20), (0, 50, 12, 40), (40, 40, 3, 60)])
def test_the_risk_interval_is_the_widest_over_the_two_wilson_boxes(counts):
    """Every risk computed from a p_O and a p_H inside their Wilson intervals lies inside."""
    r_o, n_o, r_h, n_h = counts
    lo, hi = risk_interval(r_o, n_o, r_h, n_h)
    (o_lo, o_hi), (h_lo, h_hi) = wilson(r_o, n_o), wilson(r_h, n_h)
    grid = [(o_lo + (o_hi - o_lo) * i / 20, h_lo + (h_hi - h_lo) * j / 20) for i in range(21) for j in range(21)]
    risks = [inference_risk(p_o, p_h) for p_o, p_h in grid]
    assert min(risks) == pytest.approx(lo, abs=1e-12) and max(risks) == pytest.approx(hi, abs=1e-12)
    assert lo <= inference_risk(r_o / n_o, r_h / n_h) <= hi


def test_the_least_protection_takes_each_secret_at_the_bonferroni_z():
    rights = [(30, 10), (12, 11), (40, 2)]
    lo, hi = least_protection_interval(rights, 60, 50)
    z = NormalDist().inv_cdf(1 - 0.025 / 3)
    ends = [risk_interval(r_o, 60, r_h, 50, z) for r_o, r_h in rights]
    assert (lo, hi) == (min(100 * (1 - h) for _, h in ends), min(100 * (1 - l) for l, _ in ends))
    one = least_protection_interval(rights[:1], 60, 50)  # one secret: its own interval at z = 1.96
    assert one == pytest.approx(tuple(100 * (1 - x) for x in reversed(risk_interval(30, 60, 10, 50))))
    assert lo < one[0]  # three secrets: a wider interval than one's


def test_an_estimate_publishes_its_interval_and_its_queries():
    e = rate_estimate(1000, 20000)
    assert e.value == 95.0 and e.queries == 20000 and 0.28 < (e.ci95[1] - e.ci95[0]) / 2 < 0.32  # README: +-0.3
    assert e.details() == {"sampled": 20000, "ci95": [e.ci95[0], e.ci95[1]]}
    assert Estimate(1.0, (0.5, 2.0), None).details()["sampled"] is None
