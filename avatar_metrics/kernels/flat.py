"""The plain scan (``kernels.index``): every point of a block for a tile of queries, in tiles
of ``FLAT_TILE`` points (``_flat``), leaving out the points with too many categorical
mismatches, found by counting matches 64 points to a word (``_matches``). The race of the
index times it against the traversal, and the categorical walk (``kernels.mismatch``)
finishes with it; every way folds the same points into the same states, bit for bit.

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
from numba.cpython.unsafe.numbers import trailing_zeros

from .keyed import JIT_CACHE as _CACHE
from .terms import NO_REFCOUNT, WITHIN, _fold

CAT, NUM, CONST = 0, 1, 2  # a variable's kind in ``Columns.kind``: categorical, number with a range, constant
NULL_CODE = -2  # a null categorical value among the codes before they are made dense (``_profiles``' too)


class Columns(NamedTuple):
    """A block's points variable by variable, for the plain scan. ``kind[v]`` says how variable
    v's term is computed and ``slot[v]`` where its values are: row ``slot[v]`` of ``CT`` (codes,
    int32) or of ``NT`` (float64). ``nulls[v]``: some point is null on v. ``levels`` (Python
    side only, not passed to a kernel) are each categorical's values, sorted, as ``_profiles``
    gives them: a code is the position of a value in them.

    The points holding each code, for counting a tile's categorical matches 64 points to a
    word (``_matches``): a categorical of at most ``BIT_LEVELS`` codes as one bitmap per code,
    row ``boff[s] + code`` of ``BM`` (bit p of word p // 64: point p has the code); any other
    as its points sorted by code, ``post[poff[pbase[s] + code]:poff[pbase[s] + code + 1]]``
    (ascending). ``boff[s]`` is -1 for the second kind, ``pbase[s]`` for the first."""

    NT: np.ndarray  # float64, numeric variables x points
    CT: np.ndarray  # int32, categorical variables x points
    kind: np.ndarray  # int64 per variable: CAT, NUM or CONST
    slot: np.ndarray  # int64 per variable
    nulls: np.ndarray  # bool per variable
    P: np.ndarray  # float64, the points' rows (points x |V|), for a point's distance alone (``_sum_row``)
    BM: np.ndarray  # uint64, bitmaps x words
    boff: np.ndarray  # int64 per categorical: its first bitmap, or -1
    post: np.ndarray  # int32, points sorted by code (categoricals of more than BIT_LEVELS codes)
    poff: np.ndarray  # int64, where each code's points start in post (and one past the last)
    pbase: np.ndarray  # int64 per categorical: its first code's entry in poff, or -1


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
    return Columns(NT, CT, kind, slot, nan.any(axis=0), np.ascontiguousarray(P, dtype=np.float64),
                   *_code_points(CT, [v.size for v in levels])), levels


def _code_points(CT: np.ndarray, nlevels: list[int]) -> tuple[np.ndarray, ...]:
    """``Columns``' points by code: (BM, boff, post, poff, pbase)."""
    n = CT.shape[1]
    words = (n + 63) // 64
    dense = [s for s, L in enumerate(nlevels) if L <= BIT_LEVELS]
    boff = np.full(len(nlevels), -1, dtype=np.int64)
    pbase = np.full(len(nlevels), -1, dtype=np.int64)
    BM = np.zeros((sum(nlevels[s] for s in dense), words), dtype=np.uint64)
    row = 0
    for s in dense:
        boff[s] = row
        _set_bits(CT[s], row, BM)
        row += nlevels[s]
    posts, offs, base = [], [np.zeros(1, dtype=np.int64)], 0
    for s, L in enumerate(nlevels):
        if boff[s] >= 0:
            continue
        pbase[s] = base
        order = np.argsort(CT[s], kind="stable").astype(np.int32)  # by code, then by point
        posts.append(order)
        offs.append(sum(p.size for p in posts[:-1]) + np.cumsum(np.bincount(CT[s], minlength=L)))
        base += L
    post = np.concatenate(posts) if posts else np.zeros(0, dtype=np.int32)
    poff = np.concatenate(offs).astype(np.int64)
    return BM, boff, post, poff, pbase


@njit(cache=_CACHE)
def _set_bits(codes, row, BM):
    for p in range(codes.shape[0]):
        BM[row + codes[p], p >> 6] |= np.uint64(1) << np.uint64(p & 63)


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
    near = np.empty(FLAT_TILE, dtype=np.int64)
    nb = 1  # bit planes of a count of matches, 0 to the categoricals
    while cols.CT.shape[0] >> nb:
        nb += 1
    planes = np.empty((nb, COUNT_TILE // 64), dtype=np.uint64)
    cand = np.empty(COUNT_TILE // 64, dtype=np.uint64)
    scratch = np.empty((3, COUNT_TILE // 64), dtype=np.uint64)
    _flat_tiles(Q, QC, qsel, sq, cols, ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, cap, skip,
                work, dist, near, planes, cand, scratch)


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
def _sum_row(Q, q, P, kind, ranges, nv, p):
    """The float sum of the terms of query q and point p in V's order, from the point's row of
    ``P`` (points x |V|, as the index holds them: a categorical as the block's code, null as
    NaN), for a search that meets points one at a time (the walk of ``kernels.mismatch``, the
    few candidates of a tile): one or two cache lines a point where the columns take one a
    variable. The terms of ``_tile`` in the same order, so the same bits: equal codes are
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
                work, dist, near, planes, cand, scratch):
    """``_flat`` with its buffers given: tiles of FLAT_QUERIES queries x FLAT_TILE points (both in cache).

    Before a tile's distances, its points of at least ``skip`` and at most ``reach``
    categorical mismatches (``_matches``): a point with more of them than the query's reach
    (``_reach``) cannot be folded. The float sum of the terms is at least the number of
    mismatch terms (each is exactly 1, the others are at least 0, and rounding is monotone:
    adding 1 to a partial sum at least an integer c gives at least c + 1, which float64 holds
    exactly), so the point's distance is above the limit. When few points of a tile pass,
    their sums are taken one point at a time (``_sum_row``), in the points' order; else the
    whole tile's, a variable at a time (``_tile``). The matches are counted for a count tile
    of COUNT_TILE points at once, from the first tile where the query needs them: a reach
    that falls later in it (the nearest's second distance) leaves a superset of its
    candidates, each of which is still tested against the limit."""
    NT, CT, kind, slot, nulls = cols.NT, cols.CT, cols.kind, cols.slot, cols.nulls
    ncat = CT.shape[0]
    n = CT.shape[1] if ncat else NT.shape[1]
    nq = qsel.shape[0]
    for i0 in range(0, nq, FLAT_QUERIES):
        i1 = min(nq, i0 + FLAT_QUERIES)
        for s0 in range(0, n, COUNT_TILE):
            s1 = min(n, s0 + COUNT_TILE)
            for i in range(i0, i1):
                q = qsel[i]
                c0 = c1 = s0  # the points whose matches are in ``cand`` (from word 0)
                seen = np.nan  # the limit ``reach`` is of
                reach = 0.0
                for p0 in range(s0, s1, FLAT_TILE):
                    m = min(s1 - p0, FLAT_TILE)
                    if mode == WITHIN and n1[q] > cap and n2[q] > 0:
                        break  # capped
                    if lim[q] != seen:
                        seen = lim[q]
                        reach = _reach(seen, nv)
                    counted = reach < ncat or skip > 0
                    if counted:  # the mismatches can leave points out
                        if p0 >= c1:  # the matches from this tile to the count tile's end (an earlier reach's, if
                            # it falls: a superset of the candidates, each still tested against the limit)
                            c0, c1 = p0, s1
                            work[1] += c1 - c0
                            _matches(cols, QC, q, c0, c1 - c0, ncat - int(reach) if reach < ncat else 0,
                                     ncat - skip, planes, cand, scratch[0], scratch[1], scratch[2])
                        w0 = (p0 - c0) >> 6
                        k = _bits(cand, w0, m, near)
                        if k == 0:
                            continue
                        if k * FLAT_FEW < m:
                            work[0] += k
                            for j in range(k):
                                p = p0 + near[j]
                                d = _sum_row(Q, q, cols.P, kind, ranges, nv, p) / nv
                                if d > a[q] and d >= lim[q]:
                                    continue
                                _fold(mode, q, p, d, members, moff, sq[q], a, lim, n1, n2, bkey, bcid)
                            continue
                    work[0] += m
                    _tile(Q, QC, q, sq, p0, m, cols, ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid,
                          reach, counted, cand, (p0 - c0) >> 6, dist)


@njit(cache=_CACHE, **NO_REFCOUNT)
def _tile(Q, QC, q, sq, p0, m, cols, ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, reach, counted,
          cand, w0, dist):
    """Every point of the tile [p0, p0 + m) for query q, its sums taken a variable at a time; with
    ``counted``, only the points whose bit is set in ``cand`` from word ``w0`` are folded."""
    NT, CT, kind, slot, nulls = cols.NT, cols.CT, cols.kind, cols.slot, cols.nulls
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
        return
    for t in range(m):
        if dist[t] > reach or (counted and not (cand[w0 + (t >> 6)] >> np.uint64(t & 63)) & np.uint64(1)):
            continue
        d = dist[t] / nv
        if d > a[q] and d >= lim[q]:  # changes nothing (both folds); skipped without a call
            continue
        _fold(mode, q, p0 + t, d, members, moff, sq[q], a, lim, n1, n2, bkey, bcid)


@njit(cache=_CACHE, **NO_REFCOUNT)
def _matches(cols, QC, q, p0, m, least, most, planes, cand, carry, above, equal):
    """The points of [p0, p0 + m) (p0 a multiple of 64) that match query q on at least
    ``least`` and at most ``most`` categoricals, as bits in ``cand`` (bit t of word t // 64
    for point p0 + t).

    The count of each point's matches is kept in bit planes, 64 points to a word (plane b
    holds bit b of the counts): each categorical adds the bitmap of the points that hold the
    query's code, by a ripple of half adders through the planes. A query value no point has
    (code -1) adds nothing, so null against null is a match (a null is a code) and every other
    pair of codes is exactly the equality of values. The two bounds are then compared plane
    by plane from the highest. ``carry``, ``above``, ``equal``: scratch of as many words."""
    CT, BM, boff, post, poff, pbase = cols.CT, cols.BM, cols.boff, cols.post, cols.poff, cols.pbase
    ncat = CT.shape[0]
    nb = planes.shape[0]
    words = (m + 63) >> 6
    w0 = p0 >> 6
    for b in range(nb):
        for w in range(words):
            planes[b, w] = 0
    for c in range(ncat):
        code = QC[q, c]
        if code < 0:
            continue
        if boff[c] >= 0:
            r = boff[c] + code
            for w in range(words):
                carry[w] = BM[r, w0 + w]
        else:
            for w in range(words):
                carry[w] = 0
            e = poff[pbase[c] + code + 1]
            j = _first_at(post, poff[pbase[c] + code], e, p0)
            while j < e and post[j] < p0 + m:
                t = post[j] - p0
                carry[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
                j += 1
        for b in range(nb):
            for w in range(words):
                x = planes[b, w]
                planes[b, w] = x ^ carry[w]
                carry[w] = x & carry[w]
    _at_least(planes, words, least, cand, above, equal)
    if most < ncat:  # and not at least most + 1
        _at_least(planes, words, most + 1, carry, above, equal)
        for w in range(words):
            cand[w] &= ~carry[w]
    if m & 63:
        cand[words - 1] &= (np.uint64(1) << np.uint64(m & 63)) - np.uint64(1)


@njit(cache=_CACHE, inline="always")
def _bits(cand, w0, m, near):
    """The set bits of the m bits from word w0 of ``cand``, ascending, in ``near``: how many."""
    k = 0
    for w in range((m + 63) >> 6):
        x = cand[w0 + w]
        while x:
            near[k] = (w << 6) + np.int64(trailing_zeros(x))
            k += 1
            x &= x - np.uint64(1)
    return k


@njit(cache=_CACHE, inline="always")
def _at_least(planes, words, T, out, above, equal):
    """In ``out``, the bits of the first ``words`` words whose count (bit planes) is at least
    T: compared from the highest plane, a count is above T from the first plane where its bit
    is 1 and T's is 0 with the planes before equal. ``above``, ``equal``: scratch."""
    nb = planes.shape[0]
    if T <= 0 or T >> nb:  # below every count, or above every count the planes hold
        fill = ~np.uint64(0) if T <= 0 else np.uint64(0)
        for w in range(words):
            out[w] = fill
        return
    for w in range(words):
        above[w] = 0
        equal[w] = ~np.uint64(0)
    for b in range(nb - 1, -1, -1):
        if (T >> b) & 1:
            for w in range(words):
                equal[w] &= planes[b, w]
        else:
            for w in range(words):
                above[w] |= equal[w] & planes[b, w]
                equal[w] &= ~planes[b, w]
    for w in range(words):
        out[w] = above[w] | equal[w]


@njit(cache=_CACHE, inline="always")
def _first_at(post, s, e, p0):
    """The first entry of the sorted post[s:e] at least p0 (e if none): a binary search."""
    while s < e:
        h = (s + e) >> 1
        if post[h] < p0:
            s = h + 1
        else:
            e = h
    return s


# The plain scan's tiles: points whose distances to one query are summed together, and queries
# that meet a tile before the next (4 KiB of distances; 512 points of 16 variables: 32 KiB)
FLAT_TILE = 512


FLAT_QUERIES = 128
# the points whose categorical matches are counted together for one query (``_matches``), in
# whole tiles: 64 words of bits
COUNT_TILE = 8 * FLAT_TILE

# a categorical of at most this many codes keeps a bitmap per code (the block's points / 8 bytes
# each); one of more keeps its points sorted by code (4 bytes a point)
BIT_LEVELS = 64

# a tile of which fewer than one point in FLAT_FEW passes its mismatches is summed point by point
FLAT_FEW = 4
