"""The plain scan (``kernels.index``): every point of a block for a tile of queries, in tiles
of ``FLAT_TILE`` points (``_flat``). The race of the index times it against the traversal;
both fold the same points into the same states, bit for bit."""

from __future__ import annotations

import numpy as np
from numba import njit

from .keyed import JIT_CACHE as _CACHE
from .terms import NO_REFCOUNT, WITHIN, _fold


@njit(cache=_CACHE)
def _flat(Q, qsel, sq, PT, is_cat, ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, cap):
    """Every point for every query of ``qsel``: no bound, no pruning (the plain scan).

    ``PT`` holds the points variable by variable (|V| x points, ``CandidateIndex.PT``): the
    distances from one query to a tile of points are summed a variable at a time along
    contiguous rows, which the compiler vectorises, where a point at a time it cannot (1.3 to
    1.75 times faster on the eight shapes of ``bench/shapes.py``, 4 to 60 variables). Each
    distance is still the float sum of its terms in V's order, then divided by |V|: the same
    bits as ``_distance``. Counting within a radius, a query past ``cap`` (``n1 > cap`` and
    ``n2 > 0``, as in ``_within_walk``) is left at the next tile."""
    dist = np.empty(FLAT_TILE)
    _flat_tiles(Q, qsel, sq, PT, is_cat, ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, cap, dist)


@njit(cache=_CACHE, **NO_REFCOUNT)
def _flat_tiles(Q, qsel, sq, PT, is_cat, ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, cap, dist):
    """``_flat`` with its buffer given: tiles of FLAT_QUERIES queries x FLAT_TILE points (both in cache)."""
    n = PT.shape[1]
    nq = qsel.shape[0]
    for i0 in range(0, nq, FLAT_QUERIES):
        i1 = min(nq, i0 + FLAT_QUERIES)
        for p0 in range(0, n, FLAT_TILE):
            m = min(n - p0, FLAT_TILE)
            for i in range(i0, i1):
                q = qsel[i]
                if mode == WITHIN and n1[q] > cap and n2[q] > 0:
                    continue  # capped
                for t in range(m):
                    dist[t] = 0.0
                for v in range(nv):  # the terms of ``_distance``, one variable for the whole tile
                    x = Q[q, v]
                    xn = x != x
                    if is_cat[v]:
                        for t in range(m):
                            y = PT[v, p0 + t]
                            dist[t] += 0.0 if ((x == y) | (xn & (y != y))) else 1.0
                    elif xn:
                        for t in range(m):
                            y = PT[v, p0 + t]
                            dist[t] += 0.0 if y != y else 1.0
                    elif ranges[v] > 0:
                        r = ranges[v]
                        for t in range(m):
                            y = PT[v, p0 + t]
                            dist[t] += 1.0 if y != y else abs(x - y) / r
                    else:
                        for t in range(m):
                            y = PT[v, p0 + t]
                            dist[t] += 1.0 if y != y else 0.0
                for t in range(m):
                    d = dist[t] / nv
                    if d > a[q] and d >= lim[q]:  # changes nothing (both folds); skipped without a call
                        continue
                    _fold(mode, q, p0 + t, d, members, moff, sq[q], a, lim, n1, n2, bkey, bcid)


# The plain scan's tiles: points whose distances to one query are summed together, and queries
# that meet a tile before the next (4 KiB of distances; 512 points of 16 variables: 64 KiB)
FLAT_TILE = 512


FLAT_QUERIES = 128
