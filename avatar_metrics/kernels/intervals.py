"""Confidence intervals of metrics computed from a query sample (spec: "Sampled
queries and confidence intervals"): pure functions of counts, no Spark.

- A rate ``100 * (1 - k/n)``: the Wilson score interval of ``k/n`` at
  z = 1.959964, mapped through ``100 * (1 - p)`` (so its ends swap).
- A median of ``m`` values: the order statistics of 1-based ranks
  ``floor(m/2 - z*sqrt(m)/2)`` and ``ceil(1 + m/2 + z*sqrt(m)/2)``, clipped to
  ``[1, m]``.
- An AUC over ``n_pos`` positives and ``n_neg`` negatives: ``AUC +- z*SE`` with
  Hanley and McNeil's (1982) standard error, clipped to ``[0, 1]``.
- An attribute-inference risk ``(p_O - p_H) / (1 - p_H)``: the widest risk over
  the Wilson intervals of ``p_O`` and ``p_H`` (it grows with ``p_O`` and falls
  with ``p_H``, so the ends pair the opposite ends). The headline, a minimum
  over ``|S|`` secrets, takes each secret's interval at the Bonferroni
  ``z = Phi^-1(1 - 0.025/|S|)`` (``z_bonferroni``).

Also the ranks of the midpoint percentile (``midpoint_ranks``), in exact arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist
from typing import Sequence

Z95 = 1.959964


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
