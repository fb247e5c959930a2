"""The exact index's smallest pieces (``kernels.index``): the Gower distance of a query
to a point by the float64 terms in the order of V, folding a point into a query's state
(nearest: top-2, the count at d1 and the keyed tie-break; within: counts at and inside a
radius, and the tie-break at it), and the bounds of a distance. One routine bounds a
variable's term over a box of points (``_term_bounds``, its numeric part ``_gap_span``);
from it come the bounds of a node of the tree over all groups (``_outer_bounds``), the gaps
to a box of the groups' trees (``_gaps``) and the lower bound from a block's summary
(``Summary``, ``lower_bounds``: which blocks a query must search). Compiled with numba, no
fastmath."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from .gower import Space

from .keyed import JIT_CACHE as _CACHE
from .keyed import mix_jit as _mix

# the folds of a visited point: the top-2 state, counts within a radius, or the nearest only
# (NEAREST1: d2 kept at d1, so that every walk and scan prunes by d1; d1, n1 and the
# tie-break are exact by the same argument as top-2's, with d1 for d2 as the limit)
NEAREST, WITHIN, NEAREST1 = 0, 1, 2


@njit(cache=_CACHE, inline="always")
def _distance(Q, q, P, p, is_cat, ranges, nv):
    # the spec's terms in V's order (null against null 0, null against a value 1);
    # the non-short-circuit | and & let the compiler select a categorical term
    # without a branch (one on codes equal half the time is mispredicted: 9 ns a
    # pair of two categoricals with it, 3 ns without)
    s = 0.0
    for v in range(nv):
        a = Q[q, v]
        b = P[p, v]
        an = a != a  # NaN: null
        bn = b != b
        if is_cat[v]:
            t = 0.0 if ((a == b) | (an & bn)) else 1.0
        elif an | bn:
            t = 0.0 if (an & bn) else 1.0
        else:
            r = ranges[v]
            t = abs(a - b) / r if r > 0 else 0.0
        s += t
    return s / nv


@njit(cache=_CACHE, inline="always")
def _take(q, p, d, members, moff, sq, d1, d2, n1, bkey, bcid, first_only):
    """Fold point p at distance d into query q's state.

    ``first_only`` (``NEAREST1``): d2 is set to d1 whenever d1 changes, so it is never the
    second distance but the limit a point must not exceed to matter (every point at d1 is
    still folded: the tests are strict). A state may also be a bound only (d1 = inf, d2 = B: a later pass started from the
    query's reach): a point beyond B is left out, and d2 stays at most B (the engine's
    merge keeps the true second distance, which is at most B)."""
    if d > d2[q] or (d > d1[q] and d >= d2[q]):
        return
    m = moff[p + 1] - moff[p]
    if d > d1[q]:  # d1 < d < d2
        d2[q] = d
        return
    # d <= d1: the members' tie keys are needed
    j0 = moff[p]
    c_best = members[j0]
    k_best = np.int64(_mix(sq ^ np.uint64(c_best)) >> np.uint64(1))
    for j in range(j0 + 1, moff[p + 1]):
        c = members[j]
        k = np.int64(_mix(sq ^ np.uint64(c)) >> np.uint64(1))
        if k < k_best or (k == k_best and c < c_best):
            k_best = k
            c_best = c
    if d < d1[q]:
        d2[q] = d if (m >= 2 or first_only) else min(d1[q], d2[q])  # d1 when d1 <= d2; B for a bound-only state
        d1[q] = d
        n1[q] = m
        bkey[q] = k_best
        bcid[q] = c_best
    else:  # d == d1
        n1[q] += m
        d2[q] = d
        if k_best < bkey[q] or (k_best == bkey[q] and c_best < bcid[q]):
            bkey[q] = k_best
            bcid[q] = c_best


@njit(cache=_CACHE, inline="always")
def _count(q, p, d, members, moff, sq, radius, le, lt, bkey, bcid):
    """Count point p at distance d against query q's radius (``within`` mode)."""
    if d > radius[q]:
        return
    m = moff[p + 1] - moff[p]
    le[q] += m
    if d < radius[q]:
        lt[q] += m
        return
    # d == radius: the tie-break among the candidates at the radius
    for j in range(moff[p], moff[p + 1]):
        c = members[j]
        k = np.int64(_mix(sq ^ np.uint64(c)) >> np.uint64(1))
        if k < bkey[q] or (k == bkey[q] and c < bcid[q]):
            bkey[q] = k
            bcid[q] = c


NO_CAP = np.iinfo(np.int64).max  # a count within a radius with no cap


@njit(cache=_CACHE, inline="always")
def _fold(mode, q, p, d, members, moff, sq, a, lim, n1, n2, bkey, bcid):
    if mode == WITHIN:  # lim = radius, n1 = at most the radius, n2 = closer than it
        _count(q, p, d, members, moff, sq, lim, n1, n2, bkey, bcid)
    else:  # a = d1, lim = d2 (NEAREST1: d1 again)
        _take(q, p, d, members, moff, sq, a, lim, n1, bkey, bcid, mode == NEAREST1)


@njit(cache=_CACHE, inline="always")
def _gap_span(x, blo, bhi, rv):
    """The least and the most ``|x - y| / rv`` for y in ``[blo, bhi]`` (x, blo, bhi numbers, rv > 0):
    the one numeric term of every bound below."""
    gap = 0.0
    if x < blo:
        gap = (blo - x) / rv
    elif x > bhi:
        gap = (x - bhi) / rv
    return gap, max(abs(x - blo), abs(bhi - x)) / rv


@njit(cache=_CACHE, inline="always")
def _term_bounds(x, cat, rv, blo, bhi, nulls, npts):
    """The least and the most one variable's term can be between the query value ``x`` and
    any of ``npts`` points of which ``nulls`` are null and the others' values (a number, or
    a categorical code) lie in ``[blo, bhi]``; and 1 when the least is 1 by a null or a
    category (the index's H), else 0. A null against a null gives 0, against a value 1."""
    t_lo, t_hi, h = 0.0, 1.0, 0
    if np.isnan(x):
        if nulls == npts:
            t_hi = 0.0
        elif nulls == 0:
            t_lo, h = 1.0, 1
    elif nulls == npts:
        t_lo, h = 1.0, 1
    elif cat or not rv > 0:
        if cat and (x < blo or x > bhi):
            t_lo, h = 1.0, 1  # no point has the query's code
        elif nulls == 0 and (not cat or blo == bhi):
            t_hi = 0.0  # every point has its code (or a value of a constant variable)
    else:
        gap, span = _gap_span(x, blo, bhi, rv)
        if nulls == 0:
            t_lo, t_hi = gap, span
        else:  # nulls among the points: their term is 1
            t_lo, t_hi = min(gap, 1.0), max(span, 1.0)
    return t_lo, t_hi, h


@njit(cache=_CACHE, inline="always")
def _gaps(Q, q, k, lo, hi, ranges, nv):
    """Node k's sums over the numeric positions shared with query q: gaps to its box, farthest spans."""
    lo_sum = 0.0
    hi_sum = 0.0
    for v in range(nv):
        blo = lo[k, v]
        x = Q[q, v]
        rv = ranges[v]
        if np.isnan(blo) or np.isnan(x) or not rv > 0:
            continue  # a categorical or null position (in H), or a constant variable (0)
        gap, span = _gap_span(x, blo, hi[k, v], rv)
        lo_sum += gap
        hi_sum += span
    return lo_sum, hi_sum


def _no_refcount() -> dict:
    """numba's option to compile a function without reference counting, where numba has it.

    The functions that fold points (``NO_REFCOUNT``) allocate nothing: their arrays are
    their caller's. With reference counting, the fold's branches kept an increment and a
    decrement of every array argument around each folded point: 55 ns a point, where the
    fold itself takes 3. ``_nrt`` is an option of numba's CPU target, not of its user
    documentation: a numba without it compiles them as the others (same results, slower).
    """
    try:
        from numba.core.cpu import CPUTargetOptions
    except ImportError:
        return {}
    return {"_nrt": False} if hasattr(CPUTargetOptions, "_nrt") else {}


NO_REFCOUNT = _no_refcount()


# Relative margin of the box bounds of ``_count_boxes``: the rounding of a sum
# of |V| + 4 non-negative float64 operations stays far below it.
MARGIN_ULPS = 8


@njit(cache=_CACHE, inline="always")
def _outer_bounds(Q, q, k, outer, is_cat, ranges, nv):
    """Bounds of the distance from query q to every point of node k: per variable the least and
    the most its term can be, summed in V's order (so each float sum is at most, or at least,
    the distance's own), divided by |V| and widened by the box margin. Returns (lower, upper, H):
    H counts the null and categorical positions whose term is 1 for every point (when the node is
    one group: its differing profile positions, as in the groups' own bounds)."""
    _, _, _, _, _, _, lo, hi, nnull, _ = outer
    npts = outer[1][k] - outer[0][k]
    s_lo = 0.0
    s_hi = 0.0
    h = 0
    for v in range(nv):
        t_lo, t_hi, t_h = _term_bounds(Q[q, v], is_cat[v], ranges[v], lo[k, v], hi[k, v], nnull[k, v], npts)
        s_lo += t_lo
        s_hi += t_hi
        h += t_h
    delta = MARGIN_ULPS * (nv + 4) * 2.0**-53
    return s_lo / nv * (1.0 - delta), s_hi / nv * (1.0 + delta), h


# ---------------------------------------------------------------- a block's summary


@dataclass(frozen=True)
class Summary:
    """What a lower bound on the distance to any row of a block needs: per variable,
    whether a null occurs and, for numeric ones, the min and max of the values
    (NaN when every value is null)."""

    nulls: np.ndarray  # bool
    lo: np.ndarray  # float64
    hi: np.ndarray  # float64


def summarize(C: np.ndarray, space: Space) -> Summary:
    """The summary of the encoded rows ``C`` (at least one row)."""
    nan = np.isnan(C)
    lo = np.full(space.n_vars, np.nan)
    hi = np.full(space.n_vars, np.nan)
    for v in range(space.n_vars):
        vals = C[~nan[:, v], v]
        if not space.is_cat[v] and vals.size:
            lo[v], hi[v] = vals.min(), vals.max()
    return Summary(nulls=nan.any(axis=0), lo=lo, hi=hi)


def lower_bounds(Q: np.ndarray, s: Summary, space: Space) -> np.ndarray:
    """For each query, a distance no row of the summarized block is below, in floating point.

    ``Q`` is encoded against the block (``-1``: a category the block lacks). The terms' least
    values are ``_term_bounds``'s, as in the index's trees: a summary is a box of two or more
    points whose categorical codes lie in [0, inf), with a null among them when ``nulls``, and
    every one null where a number has no min. A float difference is monotone in each operand,
    so ``fl(lo - x)`` is at most ``fl(y - x)`` for every ``y >= lo``, and likewise the
    division, the sum in the order of V and the division by |V|: the bound is at most the
    distance the kernels compute, bit for bit (no margin needed)."""
    allnull = np.isnan(s.lo) & ~space.is_cat
    nnull = np.where(allnull, 2, s.nulls.astype(np.int64)).astype(np.int64)
    lo = np.where(space.is_cat, 0.0, s.lo)
    hi = np.where(space.is_cat, np.inf, s.hi)
    return _summary_bounds(np.ascontiguousarray(Q, dtype=np.float64), np.ascontiguousarray(space.is_cat, dtype=np.bool_),
                           np.ascontiguousarray(space.ranges, dtype=np.float64), lo, hi, nnull)


@njit(cache=_CACHE)
def _summary_bounds(Q, is_cat, ranges, lo, hi, nnull):
    nq, nv = Q.shape
    out = np.empty(nq)
    for q in range(nq):
        s = 0.0
        for v in range(nv):
            s += _term_bounds(Q[q, v], is_cat[v], ranges[v], lo[v], hi[v], nnull[v], 2)[0]
        out[q] = s / nv
    return out
