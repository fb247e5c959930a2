"""The plain scan (``kernels.index``): every point of a block for a tile of queries, in tiles
of ``FLAT_TILE`` points (``_flat``). The race of the index times it against the traversal,
and the categorical walk (``kernels.mismatch``) finishes with it; every way folds the same
points into the same states, bit for bit.

The points are held column by column (``Columns``), each variable in the form its term
needs: a categorical as an integer code per point (``CT``; the codes of one variable are
dense, a null is a code of its own, and a query value no point has is -1, so that equal
codes are exactly the spec's equal values, null against null included); a number as its
float64 values (``NT``). A distance is still the float64 sum of its terms in V's order,
divided by |V|: the same terms, the same order, the same bits as ``terms._distance``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from .keyed import JIT_CACHE as _CACHE
from .terms import NO_REFCOUNT, WITHIN, _fold

CAT, NUM, CONST = 0, 1, 2  # a variable's kind in ``Columns.kind``: categorical, number with a range, constant
NULL_CODE = -2  # a null categorical value among the codes before they are made dense (``_profiles``' too)


class Columns(NamedTuple):
    """A block's points variable by variable, for the plain scan. ``kind[v]`` says how variable
    v's term is computed and ``slot[v]`` where its values are: row ``slot[v]`` of ``CT`` (codes,
    int32) or of ``NT`` (float64). ``nulls[v]``: some point is null on v. ``levels`` (Python
    side only, not passed to a kernel) are each categorical's values, sorted, as ``_profiles``
    gives them: a code is the position of a value in them."""

    NT: np.ndarray  # float64, numeric variables x points
    CT: np.ndarray  # int32, categorical variables x points
    kind: np.ndarray  # int64 per variable: CAT, NUM or CONST
    slot: np.ndarray  # int64 per variable
    nulls: np.ndarray  # bool per variable


def columns(P: np.ndarray, is_cat: np.ndarray, ranges: np.ndarray) -> tuple[Columns, list[np.ndarray]]:
    """The scan's columns of the points ``P`` (points x |V|, one NaN bit pattern), and the
    categorical levels ``query_codes`` maps queries with."""
    nv = P.shape[1]
    nan = np.isnan(P)
    cats = np.flatnonzero(is_cat)
    nums = np.flatnonzero(~is_cat)
    kind = np.where(is_cat, CAT, np.where(np.asarray(ranges) > 0, NUM, CONST)).astype(np.int64)
    slot = np.zeros(nv, dtype=np.int64)
    slot[cats] = np.arange(cats.size)
    slot[nums] = np.arange(nums.size)
    CT = np.empty((cats.size, P.shape[0]), dtype=np.int32)
    levels = []
    for s, v in enumerate(cats):
        raw = np.where(nan[:, v], NULL_CODE, np.nan_to_num(P[:, v], nan=NULL_CODE)).astype(np.int64)
        vals, dense = np.unique(raw, return_inverse=True)
        CT[s] = dense
        levels.append(vals)
    NT = np.ascontiguousarray(P[:, nums].T, dtype=np.float64)
    return Columns(NT, CT, kind, slot, nan.any(axis=0)), levels


def query_codes(Q: np.ndarray, is_cat: np.ndarray, levels: list[np.ndarray]) -> np.ndarray:
    """The queries' categorical values as the points' codes (queries x categoricals, int32):
    -1 for a value no point has."""
    cats = np.flatnonzero(is_cat)
    out = np.empty((Q.shape[0], cats.size), dtype=np.int32)
    for s, v in enumerate(cats):
        raw = np.where(np.isnan(Q[:, v]), NULL_CODE, np.nan_to_num(Q[:, v], nan=NULL_CODE)).astype(np.int64)
        vals = levels[s]
        i = np.minimum(np.searchsorted(vals, raw), max(vals.size - 1, 0))
        out[:, s] = np.where(vals[i] == raw, i, -1) if vals.size else -1
    return out


@njit(cache=_CACHE)
def _flat(Q, QC, qsel, sq, cols, ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, cap, skip, work):
    """Every point for every query of ``qsel``: no bound, no pruning (the plain scan).

    The distances from one query to a tile of points are summed a variable at a time along
    contiguous rows, which the compiler vectorises: a categorical term is one comparison of
    integer codes (no test for null), a number's skips the test for null where no point and
    not the query is null, and a constant's adds nothing where neither is (adding 0.0 to a
    non-negative sum leaves its bits). A tile none of whose sums can reach the query's limit
    (``_reach``) goes no further; the others are folded point by point. Counting within a
    radius, a query past ``cap`` (``n1 > cap`` and ``n2 > 0``, as in ``_within_walk``) is
    left at the next tile. ``QC``: the queries' codes (``query_codes``), row q for query q.
    ``skip``: the points of fewer categorical mismatches are left out (the categorical walk,
    ``kernels.mismatch``, folded them). ``work``: [distances evaluated, points whose
    mismatches were counted], added to."""
    dist = np.empty(FLAT_TILE)
    miss = np.empty(FLAT_TILE, dtype=np.int32)
    near = np.empty(FLAT_TILE, dtype=np.int64)
    _flat_tiles(Q, QC, qsel, sq, cols, ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, cap, skip,
                work, dist, miss, near)


@njit(cache=_CACHE, inline="always")
def _reach(limit, nv):
    """The largest float sum s whose distance ``s / nv`` can still be at most ``limit``: a sum
    above it gives a distance above the limit (division is monotone), so a tile whose sums are
    all above it folds nothing."""
    if not limit < np.inf:
        return np.inf
    s = limit * nv
    while np.nextafter(s, np.inf) / nv <= limit:
        s = np.nextafter(s, np.inf)
    return s


@njit(cache=_CACHE, inline="always")
def _sum_at(Q, QC, q, cols, ranges, nv, p):
    """The float sum of the terms of query q and point p in V's order (``_flat_tiles``' terms,
    one point at a time)."""
    NT, CT, kind, slot, nulls = cols
    s = 0.0
    for v in range(nv):
        k = kind[v]
        if k == CAT:
            s += 0.0 if CT[slot[v], p] == QC[q, slot[v]] else 1.0
            continue
        x = Q[q, v]
        y = NT[slot[v], p]
        if (x != x) | (y != y):
            s += 0.0 if ((x != x) & (y != y)) else 1.0
        elif k == NUM:
            s += abs(x - y) / ranges[v]
    return s


@njit(cache=_CACHE, inline="always")
def _sum_row(Q, q, P, kind, ranges, nv, p):
    """``_sum_at`` from the point's row of ``P`` (points x |V|, as the index holds them: a
    categorical as the block's code, null as NaN), for a search that meets points one at a
    time in no order (``kernels.mismatch``): one or two cache lines a point where the columns
    take one a variable. The same terms in the same order, so the same bits: equal codes are
    equal values, null equals null, and a query value no point has (-1) equals none."""
    s = 0.0
    for v in range(nv):
        x = Q[q, v]
        y = P[p, v]
        k = kind[v]
        if k == CAT:
            s += 0.0 if (x == y) | ((x != x) & (y != y)) else 1.0
            continue
        if (x != x) | (y != y):
            s += 0.0 if ((x != x) & (y != y)) else 1.0
        elif k == NUM:
            s += abs(x - y) / ranges[v]
    return s


@njit(cache=_CACHE, **NO_REFCOUNT)
def _flat_tiles(Q, QC, qsel, sq, cols, ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, cap, skip,
                work, dist, miss, near):
    """``_flat`` with its buffers given: tiles of FLAT_QUERIES queries x FLAT_TILE points (both in cache).

    Before a tile's distances, its categorical mismatches (``miss``): a point with more of them
    than the query's reach (``_reach``) cannot be folded. The float sum of the terms is at
    least the number of mismatch terms (each is exactly 1, the others are at least 0, and
    rounding is monotone: adding 1 to a partial sum at least an integer c gives at least
    c + 1, which float64 holds exactly), so the point's distance is above the limit. When
    few points of a tile pass, their sums are taken one point at a time (``_sum_at``); else
    the whole tile's, a variable at a time."""
    NT, CT, kind, slot, nulls = cols
    ncat = CT.shape[0]
    n = CT.shape[1] if ncat else NT.shape[1]
    nq = qsel.shape[0]
    for i0 in range(0, nq, FLAT_QUERIES):
        i1 = min(nq, i0 + FLAT_QUERIES)
        for p0 in range(0, n, FLAT_TILE):
            m = min(n - p0, FLAT_TILE)
            for i in range(i0, i1):
                q = qsel[i]
                if mode == WITHIN and n1[q] > cap and n2[q] > 0:
                    continue  # capped
                reach = _reach(lim[q], nv)
                counted = reach < ncat or skip > 0
                if counted:  # the mismatches can leave points out
                    work[1] += m
                    for t in range(m):
                        miss[t] = 0
                    for c in range(ncat):
                        code = QC[q, c]
                        row = CT[c, p0:p0 + m]
                        for t in range(m):
                            miss[t] += np.int32(row[t] != code)
                    k = 0
                    for t in range(m):
                        if skip <= miss[t] <= reach:
                            near[k] = t
                            k += 1
                    if k == 0:
                        continue
                    if k * FLAT_FEW < m:
                        work[0] += k
                        for j in range(k):
                            p = p0 + near[j]
                            d = _sum_at(Q, QC, q, cols, ranges, nv, p) / nv
                            if d > a[q] and d >= lim[q]:
                                continue
                            _fold(mode, q, p, d, members, moff, sq[q], a, lim, n1, n2, bkey, bcid)
                        continue
                work[0] += m
                for t in range(m):
                    dist[t] = 0.0
                for v in range(nv):  # the terms of ``_distance``, one variable for the whole tile
                    kv = kind[v]
                    if kv == CAT:
                        code = QC[q, slot[v]]
                        row = CT[slot[v], p0:p0 + m]
                        for t in range(m):
                            dist[t] += 0.0 if row[t] == code else 1.0
                        continue
                    x = Q[q, v]
                    rown = NT[slot[v], p0:p0 + m]
                    if x != x:
                        for t in range(m):
                            y = rown[t]
                            dist[t] += 0.0 if y != y else 1.0
                    elif kv == NUM:
                        r = ranges[v]
                        if nulls[v]:
                            for t in range(m):
                                y = rown[t]
                                dist[t] += 1.0 if y != y else abs(x - y) / r
                        else:
                            for t in range(m):
                                dist[t] += abs(x - rown[t]) / r
                    elif nulls[v]:  # a constant: 1 against a null, else 0 (added as nothing)
                        for t in range(m):
                            y = rown[t]
                            dist[t] += 1.0 if y != y else 0.0
                hits = 0
                for t in range(m):
                    hits += 1 if dist[t] <= reach else 0
                if hits == 0:
                    continue
                for t in range(m):
                    if dist[t] > reach or (counted and miss[t] < skip):
                        continue
                    d = dist[t] / nv
                    if d > a[q] and d >= lim[q]:  # changes nothing (both folds); skipped without a call
                        continue
                    _fold(mode, q, p0 + t, d, members, moff, sq[q], a, lim, n1, n2, bkey, bcid)


# The plain scan's tiles: points whose distances to one query are summed together, and queries
# that meet a tile before the next (4 KiB of distances; 512 points of 16 variables: 32 KiB)
FLAT_TILE = 512


FLAT_QUERIES = 128

# a tile of which fewer than one point in FLAT_FEW passes its mismatches is summed point by point
FLAT_FEW = 4
