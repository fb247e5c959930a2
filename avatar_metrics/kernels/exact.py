"""Exact sums of float64 values, independent of order and partitioning.

A float64 ``x`` is ``M * 2**(e - 53)`` with ``M`` an integer below 2**53.
Summing ``M`` per exponent in integers is exact; the parts can be added in any
order (per partition, then across partitions in Spark) and give the same
rational number. ``engine.aggregate.weighted_summaries`` computes the parts in Spark
SQL; here they become the total, and the mean and standard deviation, which
are therefore the same bit for bit on one core or a cluster.
"""

from __future__ import annotations

import math
from fractions import Fraction


SHIFT = 26  # M = hi * 2**SHIFT + lo, 0 <= lo < 2**SHIFT


def recompose(parts) -> Fraction:
    """The exact sum from ``(exponent, sum_hi, sum_lo)`` triples."""
    total = Fraction(0)
    for e, s_hi, s_lo in parts:
        total += Fraction((int(s_hi) << SHIFT) + int(s_lo)) * Fraction(2) ** (int(e) - 53)
    return total


def mean_of(total: Fraction, n: int) -> float:
    """Exact mean rounded once to float64."""
    return float(total / n)


def sd_of(total_sq_dev: Fraction, n: int) -> float:
    """Sample standard deviation from the exact sum of squared deviations."""
    if n < 2:
        return math.nan
    return math.sqrt(float(total_sq_dev / (n - 1)))


# Squares of deviations above 2**511 overflow float64 (about 1.3e154 squared).
SQUARE_LIMIT_EXP = 511


def deviation_scale(max_abs_dev: float) -> int:
    """k such that deviations times 2**-k square without overflow (0 when none would).

    Scaling by a power of two is exact, and so is squaring then rescaling:
    with k > 0 the standard deviation is ``2**k * sqrt(sum((d * 2**-k)**2) / (n - 1))``,
    the value float64 would give with an unbounded exponent.
    """
    if not math.isfinite(max_abs_dev) or max_abs_dev < 2.0**SQUARE_LIMIT_EXP:
        return 0
    return math.frexp(max_abs_dev)[1] - SQUARE_LIMIT_EXP + 1
