"""An exact index for the Gower nearest-neighbour search (the fast path).

Same results as ``gower.search``, bit for bit, found with much less work:

1. **Points.** Candidates with identical values on the searched variables are
   one point with a list of members: distances are computed once per point;
   only ties hash every member (the spec's tie-break needs each one).
2. **Profiles.** Points are grouped by profile: categorical codes (null is a
   value) and the null mask of the numeric variables. Between a query and any
   point of a group, every differing profile position adds a term of exactly
   1, so ``H / |V|`` (H = differing positions) bounds the distance from below.
   Groups are visited in order of H: the query's own profile first (an exact
   lookup), then the groups one position away (a lookup per position) for the
   queries whose ``d2`` reaches ``1 / |V|``, then, only for those whose ``d2``
   reaches ``2 / |V|``, the others in order of H (H of every group in one
   vectorised compiled pass over the groups' codes, position by position; the
   groups of each H gathered when the walk gets there; one compiled loop, so
   thousands of groups cost no Python calls). A group is skipped for the queries whose
   current second distance ``d2`` is below its bound, and the walk stops when
   no query reaches it.
3. **A sorted scan.** Within a group, points are sorted by one numeric
   variable; a query scans outward from its place and stops on each side when
   the group's H ones plus that variable's own term, ``(H + |x - y| / range) /
   |V|`` (shrunk by the margin of the boxes below), exceeds ``d2``.
4. **Trees of boxes.** A group of ``TREE_MIN`` points or more with values on
   two numeric variables or more (one profile shared by thousands of points:
   many continuous variables, few categories) is not scanned but split in two
   at the median of its most spread numeric variable, again and again down to
   leaves of ``TREE_LEAF`` points; each node
   keeps the min and max of every numeric variable. A query walks the tree
   depth first, the nearer child first, and skips a node whose bound, (H +
   gaps to its box) / |V| shrunk by the box margin, exceeds its limit; a count
   within a radius takes a node wholly inside the radius at once.
5. **A race with the plain scan.** Where the bounds prune little (ids,
   thousands of levels, many continuous variables), the traversal can cost
   more than comparing every point. With 256 queries or more, one query in 32
   goes through both, the traversal and the plain scan of every point, 1, 2,
   4, ... queries at a time, stopped once 15 have and one way has cost twice
   the other (once 3 have, and one way has cost twice what the other would for
   the whole sample); the faster takes the other queries. Both give the same state bit
   for bit, so the choice, which depends on timing, never changes a result.

Why the bounds are safe in floating point: a distance is the float sum of
non-negative terms in the order of V, divided by |V|. Rounding is monotone, so
that sum is at least the float sum of any subsequence of its terms (H ones, or
the one scan term), and so is the quotient. A point is skipped only when its
bound is strictly above ``d2``: it could change neither ``d1``, ``d2``, the
count at ``d1`` nor the tie-break.

Counts within a radius (``within``, the Local Cloaking and Hidden Rate
primitive) walk a tree over all the groups instead of the groups one by one.
The groups are laid out in the order of their profiles, the variables of
fewest levels first; a node of that tree is a run of whole groups split at the
group boundary nearest its middle point, and keeps per variable the min and
max of its values and its count of nulls. From those, each variable's term
lies between a least and a most value (a categorical the node never takes
gives 1, one it always takes 0; a numeric gives its gap to the node's range and
its farthest span), and their float sums in the order of V bound every point's
distance from below and above (float addition is monotone in each operand).
A node wholly beyond the query's radius is skipped, one wholly inside it is
counted at once (strictly inside: no tie at the radius), a node of one group
goes through that group's tree or its runs of four points (``_count_boxes``),
and a small node of several groups point by point. Every candidate at distance
<= radius is met or counted (``le``, and ``lt`` when strictly closer), and
the members exactly at the radius are hashed for the tie-break. Counts of
disjoint blocks add up; their winners merge by the smallest (key, id).

The per-query loops are compiled with numba (no fastmath: IEEE operations in
the same order as the numpy kernel).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from .gower import NO_KEY, Space, State
from .keyed import JIT_CACHE as _CACHE
from .keyed import mix
from .keyed import mix_jit as _mix
from .keyed import query_salts


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
def _take(q, p, d, members, moff, sq, d1, d2, n1, bkey, bcid):
    """Fold point p at distance d into query q's state.

    A state may also be a bound only (d1 = inf, d2 = B: a later pass started from the
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
        d2[q] = d if m >= 2 else min(d1[q], d2[q])  # d1 when d1 <= d2; B for a bound-only state
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


NEAREST, WITHIN = 0, 1  # the two folds of a visited point: top-2 state, or counts within a radius
NO_CAP = np.iinfo(np.int64).max  # a count within a radius with no cap


@njit(cache=_CACHE, inline="always")
def _fold(mode, q, p, d, members, moff, sq, a, lim, n1, n2, bkey, bcid):
    if mode == NEAREST:  # a = d1, lim = d2
        _take(q, p, d, members, moff, sq, a, lim, n1, bkey, bcid)
    else:  # lim = radius, n1 = at most the radius, n2 = closer than it
        _count(q, p, d, members, moff, sq, lim, n1, n2, bkey, bcid)


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
        bhi = hi[k, v]
        if x < blo:
            lo_sum += (blo - x) / rv
        elif x > bhi:
            lo_sum += (x - bhi) / rv
        hi_sum += max(abs(x - blo), abs(bhi - x)) / rv
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


@njit(cache=_CACHE, **NO_REFCOUNT)
def _count_boxes(Q, q, lb, P, start, stop, boxes, is_cat, ranges, nv, members, moff, sq, radius,
                 le, lt, bkey, bcid):
    """Count query q's candidates within its radius in one group, box by box.

    A box is a run of points of the group with the min and max of each numeric
    variable. With H the group's differing profile positions, every point's
    distance lies within (H + sum of the gaps to the box) / |V| and (H + sum of
    the farthest spans) / |V|, each widened by MARGIN_ULPS * (|V| + 4) ulps:
    a box wholly beyond the radius is skipped, one wholly inside it is counted
    at once (strictly inside: no tie at the radius), the others point by point.
    """
    cb, pchunk, box_lo, box_hi, box_m = boxes
    h = np.floor(lb * nv + 0.5)
    delta = MARGIN_ULPS * (nv + 4) * 2.0**-53
    r = radius[q]
    for k in range(pchunk[start], pchunk[stop - 1] + 1):
        lo_sum, hi_sum = _gaps(Q, q, k, box_lo, box_hi, ranges, nv)
        if (h + lo_sum) / nv * (1.0 - delta) > r:
            continue
        if (h + hi_sum) / nv * (1.0 + delta) < r:
            le[q] += box_m[k]
            lt[q] += box_m[k]
            continue
        for p in range(cb[k], cb[k + 1]):
            d = _distance(Q, q, P, p, is_cat, ranges, nv)
            _count(q, p, d, members, moff, sq, radius, le, lt, bkey, bcid)


@njit(cache=_CACHE, **NO_REFCOUNT)
def _tree_group(Q, q, lb, P, root, tree, is_cat, ranges, nv, members, moff, sq, mode, a, lim, n1, n2, bkey,
                bcid, stack, bstack):
    """Query q against one group through its tree of boxes (see ``_kd_tree``).

    A node's bound is that of ``_count_boxes`` for its box: (H + gaps) / |V|,
    shrunk by the margin. The nearest search goes depth first, the closer child
    first, and skips a node whose bound exceeds the query's d2 when it is reached
    (d2 only shrinks); the count within a radius skips a node wholly beyond the
    radius and counts one wholly inside it at once."""
    lo, hi, ns, ne, left, nm, _ = tree
    h = np.floor(lb * nv + 0.5)
    delta = MARGIN_ULPS * (nv + 4) * 2.0**-53
    g0, _ = _gaps(Q, q, root, lo, hi, ranges, nv)
    stack[0] = root
    bstack[0] = (h + g0) / nv * (1.0 - delta)
    sp = 1
    while sp > 0:
        sp -= 1
        k = stack[sp]
        if bstack[sp] > lim[q]:
            continue
        if mode == WITHIN:
            _, up = _gaps(Q, q, k, lo, hi, ranges, nv)
            if (h + up) / nv * (1.0 + delta) < lim[q]:
                n1[q] += nm[k]
                n2[q] += nm[k]
                continue
        c0 = left[k]
        if c0 < 0:
            for p in range(ns[k], ne[k]):
                d = _distance(Q, q, P, p, is_cat, ranges, nv)
                if d > a[q] and d >= lim[q]:  # changes nothing (both folds); skipped without a call
                    continue
                _fold(mode, q, p, d, members, moff, sq, a, lim, n1, n2, bkey, bcid)
            continue
        l0, _ = _gaps(Q, q, c0, lo, hi, ranges, nv)
        l1, _ = _gaps(Q, q, c0 + 1, lo, hi, ranges, nv)
        b0 = (h + l0) / nv * (1.0 - delta)
        b1 = (h + l1) / nv * (1.0 - delta)
        near, far, bn, bf = (c0, c0 + 1, b0, b1) if b0 <= b1 else (c0 + 1, c0, b1, b0)
        if bf <= lim[q]:  # pushed first: popped after the nearer one
            stack[sp] = far
            bstack[sp] = bf
            sp += 1
        if bn <= lim[q]:
            stack[sp] = near
            bstack[sp] = bn
            sp += 1


@njit(cache=_CACHE)
def _kd_tree(P, gstart, gstop, is_num, ranges, tree_min, leaf, cap):
    """Trees of boxes over the groups of ``tree_min`` points or more and two numeric
    variables or more with values.

    A node is a run of the group's points with the min and max of each numeric
    variable (NaN where the group has none); a node of more than ``leaf`` points
    is split at the median of its most spread variable (relative to its range)
    into two runs, which become its children ``left`` and ``left + 1``. Returns
    the order of the points that makes every node a run, the nodes, and each
    group's root (-1: no tree)."""
    n, nv = P.shape
    G = gstart.shape[0]
    perm = np.arange(n)
    lo = np.full((cap, nv), np.nan)
    hi = np.full((cap, nv), np.nan)
    ns = np.zeros(cap, dtype=np.int64)
    ne = np.zeros(cap, dtype=np.int64)
    left = np.full(cap, -1, dtype=np.int64)
    groot = np.full(G, -1, dtype=np.int64)
    stack = np.empty(cap, dtype=np.int64)
    k = 0
    for g in range(G):
        if gstop[g] - gstart[g] < tree_min:
            continue
        valued = 0  # numeric variables with values in the group: with one, its sorted scan visits
        for v in range(nv):  # the points in order of distance, and hashes no tied member in vain
            if is_num[v] and not np.isnan(P[gstart[g], v]):
                valued += 1
        if valued < 2:
            continue
        groot[g] = k
        ns[k] = gstart[g]
        ne[k] = gstop[g]
        k += 1
        stack[0] = groot[g]
        sp = 1
        while sp > 0:
            sp -= 1
            c = stack[sp]
            s, e = ns[c], ne[c]
            best = -1
            spread = 0.0
            for v in range(nv):
                if not is_num[v]:
                    continue
                mn = np.inf
                mx = -np.inf
                for i in range(s, e):
                    x = P[perm[i], v]
                    if x < mn:
                        mn = x
                    if x > mx:
                        mx = x
                if mn <= mx:  # (NaN compares false: a null position stays NaN)
                    lo[c, v] = mn
                    hi[c, v] = mx
                    if (mx - mn) / ranges[v] > spread:
                        spread = (mx - mn) / ranges[v]
                        best = v
            if e - s <= leaf or best < 0:
                continue
            vals = np.empty(e - s)
            for i in range(s, e):
                vals[i - s] = P[perm[i], best]
            seg = perm[s:e][np.argsort(vals, kind="mergesort")]
            perm[s:e] = seg
            mid = (s + e) // 2
            left[c] = k
            ns[k], ne[k], ns[k + 1], ne[k + 1] = s, mid, mid, e
            stack[sp] = k
            stack[sp + 1] = k + 1
            sp += 2
            k += 2
    return perm, lo[:k].copy(), hi[:k].copy(), ns[:k].copy(), ne[:k].copy(), left[:k].copy(), groot


@njit(cache=_CACHE)
def _scan_group(Q, qsel, sq, lb, P, start, stop, root, scan, scanvals, is_cat, ranges, nv,
                members, moff, mode, a, lim, n1, n2, bkey, bcid, tree):
    """Queries ``qsel`` against the points start..stop of one group (sorted by ``scan``).

    ``lim[q]`` is the query's pruning limit (its d2, or its radius): a point
    whose lower bound exceeds it is never met. A group with a tree (``root`` >= 0)
    goes through it (``_tree_group``). (Counts within a radius reach the groups
    through the tree over all of them, ``_within_outer``.)"""
    if root >= 0:
        stack = np.empty(TREE_STACK, dtype=np.int64)
        bstack = np.empty(TREE_STACK)
        for i in range(qsel.shape[0]):
            q = qsel[i]
            if lb <= lim[q]:
                _tree_group(Q, q, lb, P, root, tree, is_cat, ranges, nv, members, moff, sq[q], mode, a, lim, n1,
                            n2, bkey, bcid, stack, bstack)
        return
    _scan_points(Q, qsel, sq, lb, P, start, stop, scan, scanvals, is_cat, ranges, nv, members, moff, mode, a, lim,
                 n1, n2, bkey, bcid)


@njit(cache=_CACHE, **NO_REFCOUNT)
def _scan_points(Q, qsel, sq, lb, P, start, stop, scan, scanvals, is_cat, ranges, nv, members, moff, mode, a, lim,
                 n1, n2, bkey, bcid):
    """``_scan_group`` for a group with no tree: its points, sorted by ``scan``, from the query's value outwards."""
    for i in range(qsel.shape[0]):
        q = qsel[i]
        if lb > lim[q]:
            continue
        x = Q[q, scan] if scan >= 0 else np.nan
        if scan < 0 or np.isnan(x) or np.isnan(scanvals[start]):
            for p in range(start, stop):
                d = _distance(Q, q, P, p, is_cat, ranges, nv)
                if d > a[q] and d >= lim[q]:
                    continue
                _fold(mode, q, p, d, members, moff, sq[q], a, lim, n1, n2, bkey, bcid)
            continue
        r = ranges[scan]
        # a point's bound: its group's H ones plus its scan term, (H + gap / r) / |V|, shrunk by
        # the box margin (the float sum of those terms in V's order may round below their sum)
        h = np.floor(lb * nv + 0.5)
        shrink = 1.0 - MARGIN_ULPS * (nv + 4) * 2.0**-53
        # first point with scan value >= x
        lo, hi = start, stop
        while lo < hi:
            mid = (lo + hi) // 2
            if scanvals[mid] < x:
                lo = mid + 1
            else:
                hi = mid
        left = lo - 1
        right = lo
        while left >= start or right < stop:
            # the side whose next point is closer on the scan variable
            if right < stop and (left < start or scanvals[right] - x <= x - scanvals[left]):
                p = right
                right += 1
                gap = scanvals[p] - x
                side = 1
            else:
                p = left
                left -= 1
                gap = x - scanvals[p]
                side = -1
            bound = (h + gap / r) / nv * shrink
            if bound > lim[q]:
                if side == 1:
                    right = stop
                else:
                    left = start - 1
                continue
            d = _distance(Q, q, P, p, is_cat, ranges, nv)
            if d > a[q] and d >= lim[q]:  # changes nothing (both folds); skipped without a call
                continue
            _fold(mode, q, p, d, members, moff, sq[q], a, lim, n1, n2, bkey, bcid)


@njit(cache=_CACHE)
def _outer_tree(gstart, gstop, leaf):
    """The shape of the tree over all the groups (see ``_outer_summaries``): a node is a run of
    whole groups [ga, gb), split at the group boundary nearest its middle point while it holds
    more than one group and more than ``leaf`` points; children ``left`` and ``left + 1``."""
    G = gstart.shape[0]
    cap = max(1, 2 * G)
    ga = np.zeros(cap, dtype=np.int64)
    gb = np.zeros(cap, dtype=np.int64)
    left = np.full(cap, -1, dtype=np.int64)
    stack = np.empty(cap, dtype=np.int64)
    if G == 0:
        return ga[:0].copy(), gb[:0].copy(), left[:0].copy()
    ga[0], gb[0] = 0, G
    k = 1
    stack[0] = 0
    sp = 1
    while sp > 0:
        sp -= 1
        c = stack[sp]
        a, b = ga[c], gb[c]
        if b - a < 2 or gstop[b - 1] - gstart[a] <= leaf:
            continue
        mid = (gstart[a] + gstop[b - 1]) // 2
        m = np.searchsorted(gstart, mid)
        m = min(max(m, a + 1), b - 1)
        if m > a + 1 and mid - gstart[m - 1] < gstart[m] - mid:
            m -= 1
        left[c] = k
        ga[k], gb[k], ga[k + 1], gb[k + 1] = a, m, m, b
        stack[sp] = k
        stack[sp + 1] = k + 1
        sp += 2
        k += 2
    return ga[:k].copy(), gb[:k].copy(), left[:k].copy()


@njit(cache=_CACHE)
def _outer_summaries(P, ns, ne):
    """Per node and variable: min and max of the non-null values (NaN when none), and nulls."""
    K = ns.shape[0]
    nv = P.shape[1]
    lo = np.full((K, nv), np.nan)
    hi = np.full((K, nv), np.nan)
    nnull = np.zeros((K, nv), dtype=np.int64)
    for k in range(K):
        for v in range(nv):
            mn = np.inf
            mx = -np.inf
            c = 0
            for p in range(ns[k], ne[k]):
                x = P[p, v]
                if np.isnan(x):
                    c += 1
                else:
                    if x < mn:
                        mn = x
                    if x > mx:
                        mx = x
            nnull[k, v] = c
            if mn <= mx:
                lo[k, v] = mn
                hi[k, v] = mx
    return lo, hi, nnull


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
        x = Q[q, v]
        c = nnull[k, v]
        t_lo, t_hi = 0.0, 1.0
        if np.isnan(x):
            if c == npts:
                t_hi = 0.0
            elif c == 0:
                t_lo = 1.0
                h += 1
        elif c == npts:
            t_lo = 1.0
            h += 1
        elif is_cat[v] or not ranges[v] > 0:
            if is_cat[v] and (x < lo[k, v] or x > hi[k, v]):
                t_lo = 1.0  # no point has the query's code
                h += 1
            elif c == 0 and (not is_cat[v] or lo[k, v] == hi[k, v]):
                t_hi = 0.0  # every point has its code (or a value of a constant variable)
        else:
            rv = ranges[v]
            blo = lo[k, v]
            bhi = hi[k, v]
            gap = 0.0
            if x < blo:
                gap = (blo - x) / rv
            elif x > bhi:
                gap = (x - bhi) / rv
            span = max(abs(x - blo), abs(bhi - x)) / rv
            if c == 0:
                t_lo, t_hi = gap, span
            else:  # nulls among the points: their term is 1
                t_lo, t_hi = min(gap, 1.0), max(span, 1.0)
        s_lo += t_lo
        s_hi += t_hi
    delta = MARGIN_ULPS * (nv + 4) * 2.0**-53
    return s_lo / nv * (1.0 - delta), s_hi / nv * (1.0 + delta), h


@njit(cache=_CACHE)
def _within_outer(Q, qsel, sq, P, is_cat, ranges, nv, members, moff, radius, le, lt, bkey, bcid, boxes, tree,
                  outer, cap):
    """Counts within each query's radius through the tree over all the groups: a node wholly
    beyond the radius is skipped, one wholly inside it counted at once; a node of one group goes
    through that group's tree, or box by box, with the group's H; a small node of several groups
    point by point. A query is left once it has more than ``cap`` candidates within its radius
    and one of them strictly inside it (the spec's cap: its count is only needed up to ``cap``,
    and its own candidate cannot be the nearest any more)."""
    stack = np.empty(outer[0].shape[0] + 1, dtype=np.int64)  # a depth-first walk holds fewer nodes than the tree
    tstack = np.empty(TREE_STACK, dtype=np.int64)
    bstack = np.empty(TREE_STACK)
    _within_walk(Q, qsel, sq, P, is_cat, ranges, nv, members, moff, radius, le, lt, bkey, bcid, boxes, tree, outer,
                 stack, tstack, bstack, cap)


@njit(cache=_CACHE, **NO_REFCOUNT)
def _within_walk(Q, qsel, sq, P, is_cat, ranges, nv, members, moff, radius, le, lt, bkey, bcid, boxes, tree, outer,
                 stack, tstack, bstack, cap):
    """``_within_outer`` with its stacks given."""
    ns, ne, ga, gb, left, nm = outer[0], outer[1], outer[2], outer[3], outer[4], outer[5]
    gstart = outer[9]
    groot = tree[6]
    for i in range(qsel.shape[0]):
        q = qsel[i]
        r = radius[q]
        stack[0] = 0
        sp = 1 if ns.shape[0] > 0 else 0
        while sp > 0:
            if le[q] > cap and lt[q] > 0:
                break  # capped: checked between nodes, so a query may pass its cap by one node's count
            sp -= 1
            k = stack[sp]
            b_lo, b_hi, h = _outer_bounds(Q, q, k, outer, is_cat, ranges, nv)
            if b_lo > r:
                continue
            if b_hi < r:
                le[q] += nm[k]
                lt[q] += nm[k]
                continue
            if left[k] >= 0:
                stack[sp] = left[k]
                stack[sp + 1] = left[k] + 1
                sp += 2
                continue
            if gb[k] - ga[k] == 1:
                g = ga[k]
                lb = h / nv
                if groot[g] >= 0:
                    _tree_group(Q, q, lb, P, groot[g], tree, is_cat, ranges, nv, members, moff, sq[q], WITHIN,
                                radius, radius, le, lt, bkey, bcid, tstack, bstack)
                else:
                    _count_boxes(Q, q, lb, P, gstart[g], ne[k], boxes, is_cat, ranges, nv, members, moff, sq[q],
                                 radius, le, lt, bkey, bcid)
                continue
            for p in range(ns[k], ne[k]):
                d = _distance(Q, q, P, p, is_cat, ranges, nv)
                _count(q, p, d, members, moff, sq[q], radius, le, lt, bkey, bcid)


HAMMING_CHUNK = 8192  # groups whose distances ``_hamming`` sums at once (16 KiB of int16: in L1)


@njit(cache=_CACHE)
def _hamming(qcodes, gcodes, H):
    """Fill H[g]: the positions where group g's profile differs from the query's (``qcodes``:
    its dense code per position, -1 where no group has its value).

    ``gcodes`` holds the groups' dense codes position by position (|V| x groups): the
    comparisons run along contiguous rows, a chunk of the groups at a time, and vectorise.
    This is the walk's cost per query profile (every group, every profile): 0.17 ms for
    133,000 groups of 16 positions, where a loop over each group's profile took 0.8."""
    nv, G = gcodes.shape
    for g0 in range(0, G, HAMMING_CHUNK):
        g1 = min(G, g0 + HAMMING_CHUNK)
        Hc = H[g0:g1]
        Hc[:] = 0
        for j in range(nv):
            c = qcodes[j]
            row = gcodes[j, g0:g1]
            for g in range(g1 - g0):
                Hc[g] += np.int16(row[g] != c)


@njit(cache=_CACHE)
def _scan_far(Q, need, sq, H, at, gstart, gstop, P, scan, scanvals, is_cat, ranges, nv,
              members, moff, mode, a, lim, n1, n2, bkey, bcid, tree):
    """The groups at H >= 2 in order of (H, g), their bound H / |V|, each for the queries of
    ``need`` whose limit still reaches it (``need`` is filtered in place); stops when none does
    (the limits only shrink). The groups of one H are gathered into ``at`` (the caller's, one
    per group) when the walk gets there: most walks stop after a few."""
    m = need.shape[0]
    G = H.shape[0]
    for h in range(2, nv + 1):
        lb = h / nv
        n_at = 0
        for g in range(G):
            if H[g] == h:
                at[n_at] = g
                n_at += 1
        for i in range(n_at):
            g = at[i]
            k = 0
            for t in range(m):
                q = need[t]
                if lim[q] >= lb:
                    need[k] = q
                    k += 1
            m = k
            if m == 0:
                return
            _scan_group(Q, need[:m], sq, lb, P, gstart[g], gstop[g], tree[6][g], scan, scanvals, is_cat, ranges,
                        nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, tree)
        k = 0  # the queries that reach the next H (those of an H without groups too)
        for t in range(m):
            q = need[t]
            if lim[q] >= (h + 1) / nv:
                need[k] = q
                k += 1
        m = k
        if m == 0:
            return


@njit(cache=_CACHE)
def _walk_profiles(Q, qorder, pstart, g0s, wlo, whi, worder, woff, ucodes, gcodes, sq, gstart, gstop, P, scan,
                   scanvals, is_cat, ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, tree):
    """The nearest search of every query profile in one compiled call. Profile b's queries are
    ``qorder[pstart[b]:pstart[b + 1]]``: its own group ``g0s[b]`` (-1: none) first, then for the
    queries whose limit reaches 1 / |V| the groups one position away (position j's are among
    ``worder[woff[j] + wlo[b, j] : woff[j] + whi[b, j]]``, with its own group and, when two hashes
    collide, groups whose codes differ elsewhere too: those are left to the far walk), then for
    those reaching 2 / |V| the others in order of H (``_hamming``, ``_scan_far``)."""
    G = gstart.shape[0]
    groot = tree[6]
    lb1 = 1.0 / nv
    need = np.empty(qorder.shape[0], dtype=np.int64)
    H = np.empty(G, dtype=np.int16)  # the buffers of the far groups, shared by every profile
    at = np.empty(G, dtype=np.int64)
    for b in range(pstart.shape[0] - 1):
        qsel = qorder[pstart[b] : pstart[b + 1]]
        g0 = g0s[b]
        visited = 0
        if g0 >= 0:
            _scan_group(Q, qsel, sq, 0.0, P, gstart[g0], gstop[g0], groot[g0], scan, scanvals, is_cat, ranges, nv,
                        members, moff, mode, a, lim, n1, n2, bkey, bcid, tree)
            visited = 1
        m = 0
        for t in range(qsel.shape[0]):  # the others cannot meet a group at H >= 1
            q = qsel[t]
            if lim[q] >= lb1:
                need[m] = q
                m += 1
        if m == 0 or visited == G:
            continue
        for j in range(nv):  # H = 1: each group one position away is in exactly one list
            for t in range(woff[j] + wlo[b, j], woff[j] + whi[b, j]):
                g = worder[t]
                if g == g0:
                    continue
                other = False  # a hash collision: the group differs at another position too
                for p in range(nv):
                    if p != j and gcodes[p, g] != ucodes[b, p]:
                        other = True
                        break
                if other:
                    continue
                _scan_group(Q, need[:m], sq, lb1, P, gstart[g], gstop[g], groot[g], scan, scanvals, is_cat,
                            ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, tree)
                visited += 1
        k = 0
        for t in range(m):
            q = need[t]
            if lim[q] >= 2.0 / nv:
                need[k] = q
                k += 1
        if k and visited < G:  # H >= 2
            _hamming(ucodes[b], gcodes, H)
            _scan_far(Q, need[:k], sq, H, at, gstart, gstop, P, scan, scanvals, is_cat, ranges, nv, members, moff,
                      mode, a, lim, n1, n2, bkey, bcid, tree)


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
BOX = 4  # points per box of ``_count_boxes``
# Groups of TREE_MIN points or more (and two numeric variables with values) are searched
# through a tree of boxes (``_kd_tree``)
# whose leaves hold at most TREE_LEAF points; TREE_STACK bounds its depth-first stack
# (a tree is at most log2(points) + 1 levels deep, and the stack grows by one per level).
TREE_MIN = 64
TREE_LEAF = 8
TREE_STACK = 128
OUTER_LEAF = 8  # a node of the tree over all the groups holding this many points or fewer is a leaf
# The race of ``_traverse``: with this many queries or more, one in RACE_STRIDE
# goes first through both ways, and the faster takes the others.
RACE_MIN_QUERIES = 256
RACE_STRIDE = 32
RACE_DECIDE = 15  # queries of the sample after which a clear race stops (1 + 2 + 4 + 8)
RACE_EARLY = 3  # after which a race stops whose slow way has cost more than the whole sample by the other
RACE_MARGIN = 2.0


def _boxes(P, moff, g_of_point, gstart, is_cat):
    """Runs of BOX points within each group: (starts + end, box of each point,
    min and max of each numeric variable (NaN elsewhere), members per box)."""
    n = P.shape[0]
    if n == 0:
        return (np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros((0, P.shape[1])),
                np.zeros((0, P.shape[1])), np.zeros(0, np.int64))
    first = (np.arange(n) - gstart[g_of_point]) % BOX == 0
    starts = np.flatnonzero(first)
    pchunk = np.cumsum(first) - 1
    numeric = np.where(np.asarray(is_cat)[None, :], np.nan, P)
    box_lo = np.fmin.reduceat(numeric, starts, axis=0)
    box_hi = np.fmax.reduceat(numeric, starts, axis=0)
    box_m = np.add.reduceat(moff[1:] - moff[:-1], starts)
    return (np.r_[starts, n].astype(np.int64), pchunk.astype(np.int64), np.ascontiguousarray(box_lo),
            np.ascontiguousarray(box_hi), box_m.astype(np.int64))


def _profiles(X: np.ndarray, is_cat: np.ndarray) -> np.ndarray:
    """Profile matrix: categorical codes (null -> -2) and numeric null flags."""
    prof = np.empty(X.shape, dtype=np.int64)
    nan = np.isnan(X)
    for v in range(X.shape[1]):
        if is_cat[v]:
            prof[:, v] = np.where(nan[:, v], -2, np.nan_to_num(X[:, v], nan=-2.0)).astype(np.int64)
        else:
            prof[:, v] = nan[:, v]
    return prof


def _code_hashes(codes: np.ndarray) -> np.ndarray:
    """Per profile and position (``codes``: dense codes, profiles x positions), a 64-bit hash of
    (position, code). A profile's hash is their sum (wrapping), and its hash without position j
    that sum less the term of j: the lookups one position away keep one 64-bit key per group and
    position, where the profiles' bytes without j took |V| - 1 times as much (at 60 variables
    and 133,171 groups, 3.5 GiB). Equal keys are candidates only: ``_walk_profiles`` checks the
    codes of every group it takes from a lookup, so a collision costs a check, never a result."""
    pos = np.arange(codes.shape[1], dtype=np.uint64) + np.uint64(1)
    low = codes.astype(np.int64) & np.int64(0xFFFFFFFF)
    return mix((pos << np.uint64(32)) ^ low.astype(np.uint64))


def _rows_as_bytes(A: np.ndarray) -> np.ndarray:
    A = np.ascontiguousarray(A)
    return A.view(np.dtype((np.void, A.dtype.itemsize * A.shape[1]))).ravel()


@dataclass
class Within:
    """Counts of a search within per-query radii; blocks' counts add up, winners take the min."""

    le: np.ndarray  # candidates at distance <= radius
    lt: np.ndarray  # candidates at distance < radius
    key: np.ndarray  # smallest (tie key, id) among the candidates exactly at the radius
    cid: np.ndarray

    @classmethod
    def empty(cls, n: int) -> "Within":
        return cls(le=np.zeros(n, dtype=np.int64), lt=np.zeros(n, dtype=np.int64),
                   key=np.full(n, NO_KEY, dtype=np.int64), cid=np.full(n, -1, dtype=np.int64))


class CandidateIndex:
    """The candidates of one block, indexed for exact Gower searches."""

    def __init__(self, C: np.ndarray, cids: np.ndarray, space: Space):
        self.space = space
        nv = space.n_vars
        C = np.where(np.isnan(C), np.nan, C).reshape(-1, nv)  # one NaN bit pattern
        cids = np.asarray(cids, dtype=np.int64)
        # 1. points
        uniq, inverse = np.unique(_rows_as_bytes(C), return_inverse=True)
        first = np.full(uniq.shape[0], -1, dtype=np.int64)
        first[inverse[::-1]] = np.arange(C.shape[0])[::-1]
        points = C[first]
        moff = np.zeros(uniq.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(inverse, minlength=uniq.shape[0]), out=moff[1:])
        # 2. groups by profile; 3. scan variable
        prof = _profiles(points, space.is_cat)
        gkeys, gfirst, ginv = np.unique(_rows_as_bytes(prof), return_index=True, return_inverse=True)
        # groups in the order of their profiles, the variables of fewest levels first: the tree
        # over all the groups splits on those first, so its nodes share their values
        gp = prof[gfirst]
        levels = np.array([np.unique(gp[:, v]).size for v in range(nv)])
        pri = np.argsort(levels, kind="stable")
        rank = np.empty(gkeys.size, dtype=np.int64)
        rank[np.lexsort([gp[:, v] for v in pri[::-1]])] = np.arange(gkeys.size)
        ginv = rank[ginv]
        numeric = np.flatnonzero(~space.is_cat & (space.ranges > 0))
        self.scan = -1
        if numeric.size:
            distinct = [np.unique(points[:, v][~np.isnan(points[:, v])]).size for v in numeric]
            self.scan = int(numeric[int(np.argmax(distinct))])
        scanv = points[:, self.scan] if self.scan >= 0 else np.zeros(points.shape[0])
        porder = np.lexsort((scanv, ginv))
        g_sorted = ginv[porder]
        self.gstart = np.searchsorted(g_sorted, np.arange(gkeys.size), side="left")
        self.gstop = np.searchsorted(g_sorted, np.arange(gkeys.size), side="right")
        # 4. trees of boxes over the large groups: their points in the trees' order
        sizes = self.gstop - self.gstart
        half = max(1, (TREE_LEAF + 1) // 2)  # a split node's children hold at least this many points
        cap = int(np.sum(np.where(sizes >= TREE_MIN, 2 * np.maximum(1, sizes // half), 0)))
        is_num = np.ascontiguousarray(~space.is_cat & (space.ranges > 0))
        perm, *nodes, groot = _kd_tree(np.ascontiguousarray(points[porder]), self.gstart, self.gstop, is_num,
                                       np.ascontiguousarray(space.ranges, dtype=np.float64), TREE_MIN, TREE_LEAF,
                                       max(cap, 1))
        porder = porder[perm]
        # members follow their points' new order
        counts = moff[1:] - moff[:-1]
        rank = np.empty_like(porder)
        rank[porder] = np.arange(porder.size)
        self.members = cids[np.argsort(rank[inverse], kind="stable")]
        self.moff = np.zeros(porder.size + 1, dtype=np.int64)
        np.cumsum(counts[porder], out=self.moff[1:])
        self.P = np.ascontiguousarray(points[porder])
        self.PT = np.ascontiguousarray(self.P.T)  # variable by variable, for the plain scan (``_flat``)
        self.scanvals = np.ascontiguousarray(scanv[porder])
        lo, hi, ns, ne, left = nodes
        self.tree = (lo, hi, ns, ne, left, self.moff[ne] - self.moff[ns], groot)
        self.gprof = np.ascontiguousarray(prof[porder][self.gstart])
        # exact lookups of a profile: the groups' keys sorted (searched for all query profiles at once)
        own = _rows_as_bytes(self.gprof)
        self._own_order = np.argsort(own, kind="stable").astype(np.int64)
        self._own_keys = own[self._own_order]
        # the groups' profiles position by position as dense codes, for ``_hamming``
        self.gvals = [np.unique(self.gprof[:, j]) for j in range(nv)]
        width = np.int16 if max((v.size for v in self.gvals), default=0) < 2**15 else np.int32
        self.gcodes = np.empty((nv, gkeys.size), dtype=width)
        for j in range(nv):
            self.gcodes[j] = np.searchsorted(self.gvals[j], self.gprof[:, j])
        # the groups one position away from a profile: per position j, the hashes of the groups'
        # profiles without j, sorted, and the groups in that order (``lookups``, built at first use)
        self._wild: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.boxes = _boxes(self.P, self.moff, g_sorted, self.gstart, space.is_cat)
        # 5. the tree over all the groups, for the counts within a radius
        oga, ogb, oleft = _outer_tree(self.gstart, self.gstop, OUTER_LEAF)
        ons, one = self.gstart[oga], self.gstop[ogb - 1]
        olo, ohi, onull = _outer_summaries(self.P, ons, one)
        self.outer = (ons, one, oga, ogb, oleft, self.moff[one] - self.moff[ons], olo, ohi, onull, self.gstart)
        self.n_candidates = int(cids.shape[0])
        self.choices: dict[str, int] = {}  # how the calls went: "index" or "flat" (the plain scan)

    def search(self, Q: np.ndarray, qids: np.ndarray, salt: int, state: State | None = None,
               how: str = "auto") -> State:
        """Fold this block's candidates into the queries' top-2 state."""
        nq = Q.shape[0]
        st = _start_state(nq, state)
        if nq and self.n_candidates:
            unused = np.zeros(nq, dtype=np.int64)
            self._traverse(Q, qids, salt, (NEAREST, st.d1, st.d2, st.n1, unused, st.key, st.cid), how)
        return st

    def within(self, Q: np.ndarray, qids: np.ndarray, salt: int, radius: np.ndarray, how: str = "auto",
               cap: int | None = None, base: tuple[np.ndarray, np.ndarray] | None = None) -> Within:
        """Per query, this block's candidates at most ``radius`` away (``le``), closer
        than it (``lt``), and the tie-break winner among those exactly at it.

        With ``cap``, the index or the plain scan may leave a query once ``le > cap`` and
        ``lt > 0``: then ``le`` is only known to exceed ``cap`` (``min(le, cap + 1)`` is
        exact), ``lt`` to be positive, and the tie-break winner is not searched for (with a
        candidate strictly inside the radius, none at it can be the nearest). Otherwise all
        exact. ``base`` (le, lt per query): what other blocks counted, added to this block's
        counts for the cap only (the result is this block's counts)."""
        nq = Q.shape[0]
        out = Within.empty(nq)
        if nq and self.n_candidates:
            radius = np.ascontiguousarray(radius, dtype=np.float64)
            if base is not None and cap is not None:
                out.le[:] = base[0]
                out.lt[:] = base[1]
            self._traverse(Q, qids, salt, (WITHIN, radius, radius, out.le, out.lt, out.key, out.cid), how,
                           NO_CAP if cap is None else int(cap))
            if base is not None and cap is not None:
                out.le -= np.asarray(base[0], dtype=np.int64)
                out.lt -= np.asarray(base[1], dtype=np.int64)
        return out

    def lookups(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The lookups one position away, all positions in one array each: (keys, groups, offsets).
        Position j's are ``[off[j], off[j + 1])``: the groups' hashes without j (``_code_hashes``),
        sorted, and the groups in that order."""
        if self._wild is None:
            nv, G = self.gcodes.shape
            terms = _code_hashes(self.gcodes.T)
            full = terms.sum(axis=1, dtype=np.uint64)
            keys = np.empty(nv * G, dtype=np.uint64)
            order = np.empty(nv * G, dtype=np.int64)
            for j in range(nv):
                rest = full - terms[:, j]
                o = np.argsort(rest, kind="stable")
                keys[j * G:(j + 1) * G] = rest[o]
                order[j * G:(j + 1) * G] = o
            self._wild = (keys, order, np.arange(nv + 1, dtype=np.int64) * G)
        return self._wild

    def _dense(self, prof: np.ndarray) -> np.ndarray:
        """Profiles' dense codes per position (``gcodes``), -1 where no group has the value."""
        out = np.empty(prof.shape, dtype=self.gcodes.dtype)
        for j, vals in enumerate(self.gvals):
            i = np.minimum(np.searchsorted(vals, prof[:, j]), max(vals.size - 1, 0))
            out[:, j] = np.where(vals[i] == prof[:, j], i, -1) if vals.size else -1
        return out

    def _traverse(self, Q, qids, salt, fold, how: str = "auto", cap: int = NO_CAP):
        """Fold this block into the queries' state: by the index, or by the plain scan of
        every point (``how``: "index", "flat", or "auto": both race on a sample of the
        queries and the faster takes the rest; either gives the same state, bit for bit)."""
        space = self.space
        Q = np.ascontiguousarray(np.where(np.isnan(Q), np.nan, Q))
        sq = query_salts(salt, np.asarray(qids, dtype=np.int64))
        is_cat = np.ascontiguousarray(space.is_cat, dtype=np.bool_)
        ranges = np.ascontiguousarray(space.ranges, dtype=np.float64)
        args = (self.P, is_cat, ranges, space.n_vars, self.members, self.moff, *fold)
        nq = Q.shape[0]
        rest = np.arange(nq, dtype=np.int64)
        if how == "auto" and nq >= RACE_MIN_QUERIES:
            _warm_up()  # the race must time the searches, not the loading of their compiled code
            self.lookups()  # built before the timing: the sample must not pay for them
            sample = rest[::RACE_STRIDE]
            # the plain scan's copy of the state, taken before the index folds the sample:
            # from the index's result it would skip the work of finding the nearest points
            # (with many tied members, most of it) and win races it should lose
            scratch = (fold[0], *(np.array(x) for x in fold[1:]))
            # both ways on the same queries, 1, 2, 4, ... at a time (the plain scan's state is
            # dropped), until the sample is done, or one way has cost RACE_MARGIN times the other
            # once RACE_DECIDE queries are done, or RACE_MARGIN times what the other would cost
            # for the whole sample once RACE_EARLY are: a sample of the slow way costs what it costs
            done, step, t_index, t_flat = 0, 1, 0.0, 0.0
            while done < sample.size:
                part = sample[done : done + step]
                t0 = time.perf_counter()
                self._by_index(Q, part, sq, args, cap)
                t_index += time.perf_counter() - t0
                t0 = time.perf_counter()
                _flat(Q, part, sq, self.PT, *args[1:6], *scratch, cap)
                t_flat += time.perf_counter() - t0
                done, step = done + part.size, 2 * step
                slow, fast = max(t_index, t_flat), min(t_index, t_flat)
                if done >= RACE_DECIDE and slow > RACE_MARGIN * fast:
                    break
                if done >= RACE_EARLY and slow > RACE_MARGIN * fast / done * sample.size:
                    break
            how = "flat" if t_flat < t_index else "index"
            rest = np.setdiff1d(rest, sample[:done], assume_unique=True)  # the sample's rest too
        self.choices[how] = self.choices.get(how, 0) + 1
        if how == "flat":
            _flat(Q, rest, sq, self.PT, *args[1:], cap)
        else:
            self._by_index(Q, rest, sq, args, cap)

    def _by_index(self, Q, qs, sq, args, cap: int = NO_CAP):
        """Visit, for each query of ``qs``, the groups whose bound H/|V| does not exceed its limit
        (counts within a radius: the nodes of the tree over all the groups that cross it, up to
        ``cap``, see ``within``)."""
        if qs.size == 0:
            return
        if args[6] == WITHIN:
            _within_outer(Q, qs, sq, *args[:6], *args[8:], self.boxes, self.tree, self.outer, cap)
            return
        nv = self.space.n_vars
        extra = (*args[1:], self.tree)
        qprof = _profiles(Q[qs], self.space.is_cat)
        _, qinv = np.unique(_rows_as_bytes(qprof), return_inverse=True)
        qorder = np.argsort(qinv, kind="stable")
        bounds = np.flatnonzero(np.r_[True, qinv[qorder][1:] != qinv[qorder][:-1], True])
        # per distinct query profile, for all at once (a Python call per profile and position cost
        # more than the compiled walk on data of thousands of groups): its own group, the runs of
        # the groups one position away in each position's lookup, its dense codes
        uprof = np.ascontiguousarray(qprof[qorder[bounds[:-1]]])
        U = uprof.shape[0]
        ukeys = _rows_as_bytes(uprof)
        i = np.minimum(np.searchsorted(self._own_keys, ukeys), self._own_keys.size - 1)
        g0s = np.where(self._own_keys[i] == ukeys, self._own_order[i], -1).astype(np.int64)
        ucodes = self._dense(uprof)
        terms = _code_hashes(ucodes)
        full = terms.sum(axis=1, dtype=np.uint64)
        wkeys, worder, woff = self.lookups()
        wlo = np.empty((U, nv), dtype=np.int64)
        whi = np.empty((U, nv), dtype=np.int64)
        for j in range(nv):
            keys = wkeys[woff[j]:woff[j + 1]]
            wq = full - terms[:, j]
            wlo[:, j] = np.searchsorted(keys, wq, side="left")
            whi[:, j] = np.searchsorted(keys, wq, side="right")
        _walk_profiles(Q, np.ascontiguousarray(qs[qorder]), bounds.astype(np.int64), g0s, wlo, whi,
                       worder, woff, ucodes, self.gcodes, sq, self.gstart, self.gstop,
                       self.P, self.scan, self.scanvals, *extra)


_WARMED = False  # set once this process has run every compiled entry point


def _warm_up() -> None:
    """Run both ways, nearest and within, once on a tiny block, so that the race of
    ``_traverse`` does not time numba loading its functions from the cache (about 15 ms
    per entry point in a new Python worker, as much as the index's whole share of a
    race sample on a small block) or compiling them (seconds, cache cold)."""
    global _WARMED
    if _WARMED:
        return
    _WARMED = True
    space = Space(is_cat=np.array([True, True, True, False]), ranges=np.array([0.0, 0.0, 0.0, 1.0]))
    C = np.array([[0, 0, 0, 0.5], [1, 0, 0, 0.2], [1, 1, 0, 0.9], [1, 1, 1, np.nan]])
    Q = np.array([[0, 0, 0, 0.1], [1, 1, 1, 0.3]])
    qids = np.arange(2, dtype=np.int64)
    index = CandidateIndex(C, np.arange(4, dtype=np.int64) + 2, space)
    for how in ("index", "flat"):
        index.search(Q, qids, 0, how=how)
        index.within(Q, qids, 0, np.array([0.5, 1.0]), how=how)


def plain_search(Q: np.ndarray, qids: np.ndarray, C: np.ndarray, cids: np.ndarray, space: Space, salt: int,
                 state: State | None = None) -> State:
    """The plain compiled kernel: every candidate for every query, no index (the
    benchmark's baseline, and what the index is checked against)."""
    nq = Q.shape[0]
    st = _start_state(nq, state)
    if nq and C.shape[0]:
        PT, members, moff, sq, is_cat, ranges, Q = _plain_args(Q, qids, C, cids, space, salt)
        _flat(Q, np.arange(nq, dtype=np.int64), sq, PT, is_cat, ranges, space.n_vars, members, moff,
              NEAREST, st.d1, st.d2, st.n1, np.zeros(nq, dtype=np.int64), st.key, st.cid, NO_CAP)
    return st


def plain_within(Q: np.ndarray, qids: np.ndarray, C: np.ndarray, cids: np.ndarray, space: Space, salt: int,
                 radius: np.ndarray) -> Within:
    """``CandidateIndex.within`` by the plain compiled kernel."""
    nq = Q.shape[0]
    out = Within.empty(nq)
    if nq and C.shape[0]:
        PT, members, moff, sq, is_cat, ranges, Q = _plain_args(Q, qids, C, cids, space, salt)
        r = np.ascontiguousarray(radius, dtype=np.float64)
        _flat(Q, np.arange(nq, dtype=np.int64), sq, PT, is_cat, ranges, space.n_vars, members, moff,
              WITHIN, r, r, out.le, out.lt, out.key, out.cid, NO_CAP)
    return out


def _start_state(nq: int, state: State | None) -> State:
    """A fresh state, or a copy of the one carried in (the caller's arrays stay as they were)."""
    if state is None:
        return State.empty(nq)
    return State(*(np.array(getattr(state, f)) for f in ("d1", "d2", "n1", "cid", "key")))


def _plain_args(Q, qids, C, cids, space, salt):
    P = np.ascontiguousarray(np.where(np.isnan(C), np.nan, C), dtype=np.float64).reshape(-1, space.n_vars)
    members = np.ascontiguousarray(cids, dtype=np.int64)
    moff = np.arange(members.size + 1, dtype=np.int64)
    sq = query_salts(salt, np.asarray(qids, dtype=np.int64))
    return (np.ascontiguousarray(P.T), members, moff, sq, np.ascontiguousarray(space.is_cat, dtype=np.bool_),
            np.ascontiguousarray(space.ranges, dtype=np.float64),
            np.ascontiguousarray(np.where(np.isnan(Q), np.nan, Q), dtype=np.float64))
