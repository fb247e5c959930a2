"""The statistics of the report, in one place: pure functions of counts, no Spark.

``Estimate`` is what a metric computed from a query sample publishes (spec:
"Sampled queries and confidence intervals"): its value, its 95 % interval in the
metric's unit, and its number of queries. The intervals:

- A rate ``100 * (1 - k/n)``: the Wilson score interval of ``k/n`` at
  z = 1.959964, mapped through ``100 * (1 - p)`` (so its ends swap).
- A median of ``m`` values: the order statistics of 1-based ranks
  ``floor(m/2 - z*sqrt(m)/2)`` and ``ceil(1 + m/2 + z*sqrt(m)/2)``, clipped to
  ``[1, m]``.
- A share with a weighted count (DCR Share, ties weighted by ``e``): Wilson's
  interval with the weighted count in place of ``k``, mapped through the metric.
- An AUC over ``n_pos`` positives and ``n_neg`` negatives: ``AUC +- z*SE`` with
  Hanley and McNeil's (1982) standard error, clipped to ``[0, 1]``.
- An attribute-inference risk ``(p_O - p_H) / (1 - p_H)``: the widest risk over
  the Wilson intervals of ``p_O`` and ``p_H`` (it grows with ``p_O`` and falls
  with ``p_H``, so the ends pair the opposite ends). The headline, a minimum
  over ``|S|`` secrets, takes each secret's interval at the Bonferroni
  ``z = Phi^-1(1 - 0.025/|S|)`` (``z_bonferroni``).

Also the ranks of the midpoint percentile (``midpoint_ranks``), in exact
arithmetic, and the Mann-Whitney counts of two groups' scores with their AUC
(``Ranking``; Spark counts them in ``engine.aggregate.mann_whitney``).

Each is tested against figures worked out elsewhere (``tests/test_stats.py``):
Newcombe's published Wilson intervals, Hanley and McNeil's worked example, the
normal tables, numpy's midpoint percentile, the binomial coverage of the median's
order statistics, and pair-by-pair counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Sequence

Z95 = 1.959964


@dataclass(frozen=True)
class Estimate:
    """A figure computed from ``queries`` sampled queries, with its 95 % interval (its unit's)."""

    value: float
    ci95: tuple[float, float]
    queries: int | None  # None: the queries of this side were not sampled

    def details(self) -> dict:
        """What the metric's details carry of it (spec: ``ci95`` and ``sampled``)."""
        return {"sampled": self.queries, "ci95": [self.ci95[0], self.ci95[1]]}


@dataclass(frozen=True)
class Ranking:
    """The Mann-Whitney counts of two groups' scores, the positives ranked first by lower score."""

    positives: int
    negatives: int
    wins2: int  # 2 x #(positive < negative) + #(positive == negative), over all pairs

    @property
    def auc(self) -> float:
        """P(positive < negative) + P(tie) / 2, rounded once (Python's int division is exact)."""
        return self.wins2 / (2 * self.positives * self.negatives)


def midpoint_ranks(m: int, q: float) -> tuple[int, int]:
    """The 0-based ranks ``floor(h)`` and ``ceil(h)``, ``h = (m - 1) q / 100``, of the midpoint
    percentile of ``m`` sorted values, ``q`` taken as the decimal the user wrote (its shortest
    repr) and ``h`` computed exactly: in float64, ``3000 * 1.1 / 100`` is ``33.00000000000001``."""
    h = (m - 1) * Fraction(repr(float(q))) / 100
    return math.floor(h), math.ceil(h)


def z_bonferroni(tests: int) -> float:
    """The z of a 95 % interval shared by ``tests`` intervals (Bonferroni): ``Z95`` for one."""
    return Z95 if tests <= 1 else NormalDist().inv_cdf(1.0 - 0.025 / tests)


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of the proportion ``k / n`` (0 <= k <= n, n >= 1)."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"a proportion needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_interval(k: int, n: int, z: float = Z95) -> list[float]:
    """The interval of ``100 * (1 - k/n)``: Wilson's of ``k/n``, mapped (lower end first)."""
    lo, hi = wilson(k, n, z)
    return [100.0 * (1.0 - hi), 100.0 * (1.0 - lo)]


def share_interval(k, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson interval of a share ``k / n`` whose count ``k`` is weighted (DCR Share: ties
    count ``e``), ``k`` taken as a real number in [0, n]."""
    return wilson(float(k), n, z)


def rate_estimate(k: int, n: int) -> Estimate:
    """The rate ``100 * (1 - k/n)`` over ``n`` sampled queries, with its Wilson interval."""
    lo, hi = rate_interval(k, n)
    return Estimate(100.0 * (1.0 - k / n), (lo, hi), n)


def median_ranks(m: int, z: float = Z95) -> tuple[int, int]:
    """The 1-based ranks of the order statistics that bound the median of ``m`` values."""
    if m < 1:
        raise ValueError("a median needs at least one value")
    half = z * math.sqrt(m) / 2.0
    lo = math.floor(m / 2.0 - half)
    hi = math.ceil(1.0 + m / 2.0 + half)
    return min(max(lo, 1), m), min(max(hi, 1), m)


def median_interval(counts: Sequence[tuple[float, int]], z: float = Z95) -> list[float]:
    """The median's interval from ``(value, how many)`` pairs in increasing value order."""
    m = sum(c for _, c in counts)
    ranks = median_ranks(m, z)
    out, seen = [], 0
    want = list(ranks)
    for value, c in counts:
        seen += c
        while want and want[0] <= seen:
            out.append(float(value))
            want.pop(0)
    return out


def hanley_mcneil(auc: float, n_pos: int, n_neg: int) -> float:
    """The standard error of an AUC (Hanley and McNeil 1982). ``auc`` is the probability that a
    positive ranks above a negative; Q1 = AUC/(2-AUC) (two positives above one negative) goes
    with ``n_pos - 1``, Q2 = 2 AUC^2/(1+AUC) (one positive above two negatives) with ``n_neg - 1``."""
    if n_pos < 1 or n_neg < 1:
        raise ValueError(f"an AUC needs a positive and a negative, got {n_pos} and {n_neg}")
    q1 = auc / (2.0 - auc)
    q2 = 2.0 * auc * auc / (1.0 + auc)
    a2 = auc * auc
    var = (auc * (1.0 - auc) + (n_pos - 1) * (q1 - a2) + (n_neg - 1) * (q2 - a2)) / (n_pos * n_neg)
    return math.sqrt(max(var, 0.0))


def auc_interval(auc: float, n_pos: int, n_neg: int, z: float = Z95) -> tuple[float, float]:
    """``AUC +- z*SE`` (Hanley-McNeil), clipped to [0, 1]."""
    se = hanley_mcneil(auc, n_pos, n_neg)
    return max(0.0, auc - z * se), min(1.0, auc + z * se)


def inference_risk(p_o: float, p_h: float) -> float:
    """``(p_O - p_H) / (1 - p_H)`` clipped to [0, 1]; 0 when ``p_H`` is 1 (anonymeter's risk)."""
    if p_h >= 1.0:
        return 0.0
    return min(1.0, max(0.0, (p_o - p_h) / (1.0 - p_h)))


def risk_interval(right_o: int, n_o: int, right_h: int, n_h: int, z: float = Z95) -> tuple[float, float]:
    """The widest risk over the Wilson intervals of ``p_O = right_o/n_o`` and ``p_H = right_h/n_h``."""
    o_lo, o_hi = wilson(right_o, n_o, z)
    h_lo, h_hi = wilson(right_h, n_h, z)
    return inference_risk(o_lo, h_hi), inference_risk(o_hi, h_lo)


def least_protection_interval(rights: Sequence[tuple[int, int]], n_o: int, n_h: int) -> tuple[float, float]:
    """The 95 % interval of ``min over secrets of 100 (1 - risk)``, from each secret's right guesses
    ``(right_o, right_h)`` among ``n_o`` and ``n_h`` targets: each secret's protection interval at
    the Bonferroni z of their number, and the minimum of each end. When every secret's interval
    holds its protection (probability at least 95 %), the minimum lies inside."""
    z = z_bonferroni(len(rights))
    ends = [risk_interval(r_o, n_o, r_h, n_h, z) for r_o, r_h in rights]
    return min(100.0 * (1.0 - hi) for _, hi in ends), min(100.0 * (1.0 - lo) for lo, _ in ends)
