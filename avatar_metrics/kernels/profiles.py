"""The profile walk of the exact index (``kernels.index``): profiles (categorical codes and
numeric null flags) of the points, their 64-bit position hashes for the lookups one position
away, the Hamming distance of a query's profile to every group, and the walk over the groups
in order of that distance (``_walk_profiles``, ``_scan_far``)."""

from __future__ import annotations

import numpy as np
from numba import njit

from .keyed import JIT_CACHE as _CACHE
from .keyed import mix
from .trees import _scan_group


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
              members, moff, mode, a, lim, n1, n2, bkey, bcid, tree, work):
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
                        nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, tree, work)
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
                   scanvals, is_cat, ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, tree, work):
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
                        members, moff, mode, a, lim, n1, n2, bkey, bcid, tree, work)
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
                            ranges, nv, members, moff, mode, a, lim, n1, n2, bkey, bcid, tree, work)
                visited += 1
        k = 0
        for t in range(m):
            q = need[t]
            if lim[q] >= 2.0 / nv:
                need[k] = q
                k += 1
        if k and visited < G:  # H >= 2
            _hamming(ucodes[b], gcodes, H)
            work[1] += G  # every group's profile compared with the query's
            _scan_far(Q, need[:k], sq, H, at, gstart, gstop, P, scan, scanvals, is_cat, ranges, nv, members, moff,
                      mode, a, lim, n1, n2, bkey, bcid, tree, work)


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
