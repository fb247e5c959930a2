"""Confidence intervals of metrics computed from a query sample (spec: "Sampled
queries and confidence intervals"): pure functions of counts, no Spark.

- A rate ``100 * (1 - k/n)``: the Wilson score interval of ``k/n`` at
  z = 1.959964, mapped through ``100 * (1 - p)`` (so its ends swap).
- A median of ``m`` values: the order statistics of 1-based ranks
  ``floor(m/2 - z*sqrt(m)/2)`` and ``ceil(1 + m/2 + z*sqrt(m)/2)``, clipped to
  ``[1, m]``.
"""

from __future__ import annotations

import math
from typing import Sequence

Z95 = 1.959964


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
