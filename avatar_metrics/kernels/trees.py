"""The box trees of the exact index (``kernels.index``): a k-d tree over the points of one
large group (``_kd_tree``) and its walk for a query (``_tree_group``), the sorted scan of a
group (``_scan_group``, ``_scan_points``), the runs of four points of a count within a radius
(``_boxes``, ``_count_boxes``), and the tree over all the groups that the count walks
(``_outer_tree``, ``_outer_summaries``, ``_within_outer``, ``_within_walk``)."""

from __future__ import annotations

import numpy as np
from numba import njit

from .keyed import JIT_CACHE as _CACHE
from .terms import MARGIN_ULPS, NO_REFCOUNT, WITHIN, _count, _distance, _fold, _gaps, _outer_bounds


@njit(cache=_CACHE, **NO_REFCOUNT)
def _count_boxes(Q, q, lb, P, start, stop, boxes, is_cat, ranges, nv, members, moff, sq, radius,
                 le, lt, bkey, bcid, work):
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
            work[0] += 1
            _count(q, p, d, members, moff, sq, radius, le, lt, bkey, bcid)


@njit(cache=_CACHE, **NO_REFCOUNT)
def _tree_group(Q, q, lb, P, root, tree, is_cat, ranges, nv, members, moff, sq, mode, a, lim, n1, n2, bkey,
                bcid, stack, bstack, work):
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
                work[0] += 1
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
                members, moff, mode, a, lim, n1, n2, bkey, bcid, tree, work):
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
                            n2, bkey, bcid, stack, bstack, work)
        return
    _scan_points(Q, qsel, sq, lb, P, start, stop, scan, scanvals, is_cat, ranges, nv, members, moff, mode, a, lim,
                 n1, n2, bkey, bcid, work)


@njit(cache=_CACHE, **NO_REFCOUNT)
def _scan_points(Q, qsel, sq, lb, P, start, stop, scan, scanvals, is_cat, ranges, nv, members, moff, mode, a, lim,
                 n1, n2, bkey, bcid, work):
    """``_scan_group`` for a group with no tree: its points, sorted by ``scan``, from the query's value outwards."""
    for i in range(qsel.shape[0]):
        q = qsel[i]
        if lb > lim[q]:
            continue
        x = Q[q, scan] if scan >= 0 else np.nan
        if scan < 0 or np.isnan(x) or np.isnan(scanvals[start]):
            for p in range(start, stop):
                d = _distance(Q, q, P, p, is_cat, ranges, nv)
                work[0] += 1
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
            work[0] += 1
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


@njit(cache=_CACHE)
def _within_outer(Q, qsel, sq, P, is_cat, ranges, nv, members, moff, radius, le, lt, bkey, bcid, boxes, tree,
                  outer, cap, work):
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
                 stack, tstack, bstack, cap, work)


@njit(cache=_CACHE, **NO_REFCOUNT)
def _within_walk(Q, qsel, sq, P, is_cat, ranges, nv, members, moff, radius, le, lt, bkey, bcid, boxes, tree, outer,
                 stack, tstack, bstack, cap, work):
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
                    _tree_group(Q, q, lb, P, groot[g], tree, is_cat, ranges, nv, members, moff, sq[q], np.int64(WITHIN),
                                radius, radius, le, lt, bkey, bcid, tstack, bstack, work)
                else:
                    _count_boxes(Q, q, lb, P, gstart[g], ne[k], boxes, is_cat, ranges, nv, members, moff, sq[q],
                                 radius, le, lt, bkey, bcid, work)
                continue
            for p in range(ns[k], ne[k]):
                d = _distance(Q, q, P, p, is_cat, ranges, nv)
                work[0] += 1
                _count(q, p, d, members, moff, sq[q], radius, le, lt, bkey, bcid)


BOX = 4  # points per box of ``_count_boxes``


TREE_STACK = 128


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
