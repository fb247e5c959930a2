"""The categorical walk: a search way that finds a query's candidates by their categorical
values, for data with no locality (``kernels.index``'s third way, raced like the others).

Why it prunes. A categorical term is exactly 0 or 1, every other term at least 0, and the
distance the kernels compute is the float64 sum of the terms in V's order, divided by |V|.
Rounding is monotone, so that sum is at least the number of categorical mismatches ``k``:
adding 1 to a partial sum of at least an integer c gives at least c + 1, which float64 holds
exactly, and adding a term at least 0 never goes below the partial sum. A point with ``k``
mismatches can therefore change a query's state only when ``k`` is at most the query's
reach, the largest sum whose distance is still within its limit (``flat._reach``: its
second distance, or its radius). On census-shaped data a query's reach is a few
mismatches, and the points that few mismatches away are a small share of the block.

The construction. Points with the same categorical codes are one group. For each set W
of ``w`` categorical variables (``w`` up to ``levels``), a table holds the groups bucketed
by their key outside W (the wrapping sum of 64-bit hashes of (variable, code) over the
variables not in W). A query walks ``w = 0, 1, ..., levels``: at level w it computes its
own key outside each W of that size, reads that one bucket, and takes the groups of it
whose codes equal its own outside W and differ on every variable of W, so that a group is
taken exactly once, at the level of its mismatch count and in the table of its mismatch
set (a key that collides costs a check, never a point). It evaluates every point of a group taken
with the exact float64 distance and folds it as the plain scan does. Before each level,
and before each group, it stops once ``w`` is strictly above its reach: every point left
has at least ``w`` mismatches, so a distance above the limit; a point whose sum is exactly
at the reach is evaluated, so ties at the bound (and the keyed tie-break among them) are
those of the plain scan. A query whose reach is still at least ``levels + 1`` after the
last level finishes against the block with the plain scan (``flat._flat``), which leaves
out every point of at most ``levels`` mismatches: those were evaluated by the walk. Each
point is thus folded at most once and every point that could change the state is, so the
state is the plain scan's, bit for bit.

What it costs. A table is 4 bytes per group (its number, and the rest of the 32 bits a
fingerprint) and 4 per bucket, about 6 bytes per group in all; the levels kept are
as many as ``TABLE_BYTES`` allows, and no more than ``MAX_TABLES`` tables, so an index of a
block of B points holds at most about ``TABLE_BYTES`` of tables, built in the Python worker
where the block is searched, at the walk's first use (before a race times it).
``search.block_size`` bounds B, and with it the tables of one level; a smaller block keeps
more levels in the same bytes, up to ``MAX_TABLES``. On census-shaped data (ten
categoricals): a block of 1,000,000 keeps three levels (176 tables, 1.0 GiB), one of 200,000
four (386 tables, 0.5 GiB); a fourth level at 1,000,000 would take 2.2 GiB, and the fifth
and sixth that 200,000 points would fit in the same bytes made the whole report 1.4 times
slower (a query of a wide reach reads one bucket per table of its levels).
"""

from __future__ import annotations

from itertools import combinations
from math import comb

import numpy as np
from numba import njit

from .flat import Columns, _reach, _sum_row
from .keyed import JIT_CACHE as _CACHE
from .profiles import _code_hashes  # a hash of (variable, code) per row and categorical variable
from .terms import NO_REFCOUNT, WITHIN, _fold

TABLE_BYTES = 1152 * 2**20  # the tables one index may hold: the levels kept are those that fit
MAX_LEVELS = 8  # and at most this many mismatches deep (beyond, the tables outnumber the points)
MAX_TABLES = 400  # and at most this many tables in all (levels 0 to 4 of ten categoricals: 386)


class MismatchTables:
    """A block's points grouped by categorical codes, with the walk's tables (built by level).

    A level's table for the wild set W is the groups bucketed by the top ``bits`` bits of the
    64-bit sum of their (variable, code) hashes outside W: ``gids[t, boff[t, b]:boff[t, b + 1]]``.
    An entry is a group number in its low ``gbits`` bits and the next bits of the key in the
    others (a fingerprint: a bucket-mate whose differs is passed over without reading its codes)
    are bucket b's groups (a counting sort: 4 bytes a group and 4 a bucket, about two groups a
    bucket). A lookup reads one bucket; the walk checks the codes of every group in it."""

    def __init__(self, cols: Columns, table_bytes: int = TABLE_BYTES):
        CT = cols.CT
        self.ncat = C = CT.shape[0]
        n = CT.shape[1]
        if C:
            prof = np.ascontiguousarray(CT.T)
            _, ginv = np.unique(prof.view(np.dtype((np.void, 4 * C))).ravel(), return_inverse=True)
            ginv = ginv.ravel()
        else:
            ginv = np.zeros(n, dtype=np.int64)
        G = int(ginv.max()) + 1 if ginv.size else 0
        self.groups = G
        self.gpts = np.argsort(ginv, kind="stable").astype(np.int64)
        self.goff = np.zeros(G + 1, dtype=np.int64)
        np.cumsum(np.bincount(ginv, minlength=G), out=self.goff[1:])
        # a group's codes side by side (G x C: one cache line for the checks of a group)
        self.gcodes = np.ascontiguousarray(CT[:, self.gpts[self.goff[:-1]]].T) if C else np.zeros((G, 0), np.int32)
        self.gterm = np.ascontiguousarray(_code_hashes(self.gcodes).T) if C else np.zeros((0, G), np.uint64)  # C x G
        self.gbits = max(1, int(G - 1).bit_length())  # an entry's bits for its group (the rest: fingerprint)
        self.gfull = self.gterm.sum(axis=0, dtype=np.uint64) if C else np.zeros(G, np.uint64)
        self.bits = max(1, int(np.log2(max(G, 2))))  # about two groups a bucket
        levels = 0
        while (levels + 1 <= min(C - 1, MAX_LEVELS) and self.bytes_to(levels + 1) <= table_bytes
               and self.tables_to(levels + 1) <= MAX_TABLES):
            levels += 1
        self.levels = levels if C else -1  # the deepest level kept (-1: no categorical, the walk is the scan)
        self._tables: tuple[np.ndarray, ...] | None = None

    def tables_to(self, w: int) -> int:
        """The tables of levels 0 to w: one per set of at most w wild variables."""
        return sum(comb(self.ncat, k) for k in range(w + 1))

    def bytes_to(self, w: int) -> int:
        """The bytes of the tables of levels 0 to w (4 a group and 4 a bucket, per table)."""
        return self.tables_to(w) * (4 * self.groups + 4 * (2**self.bits + 1))

    def tables(self) -> tuple[np.ndarray, ...]:
        """Every level's tables, built at first use: (level starts, wild variables T x levels
        padded with -1, bucket offsets T x (2**bits + 1), groups T x G); level w's tables are
        rows ``start[w]:start[w + 1]``."""
        if self._tables is None:
            subsets = [W for w in range(self.levels + 1) for W in combinations(range(self.ncat), w)]
            start = np.zeros(self.levels + 2, dtype=np.int64)
            for w in range(self.levels + 1):
                start[w + 1] = start[w] + comb(self.ncat, w)
            width = max(self.levels, 1)
            wild = np.full((len(subsets), width), -1, dtype=np.int64)
            for t, W in enumerate(subsets):
                wild[t, :len(W)] = W
            boff = np.empty((len(subsets), 2**self.bits + 1), dtype=np.int32)
            gids = np.empty((len(subsets), self.groups), dtype=np.uint32)
            _build(self.gterm, self.gfull, wild, self.bits, self.gbits, boff, gids)
            self._tables = (start, wild, boff, gids)
        return self._tables

    @property
    def nbytes(self) -> int:
        return sum(x.nbytes for x in (self._tables or ())) + self.gcodes.nbytes + self.gterm.nbytes + \
            self.gpts.nbytes


@njit(cache=_CACHE, inline="always")
def _fingerprint(k, bits, gbits):
    """The key's bits below the bucket's, as many as an entry has beside its group (``32 - gbits``)."""
    if gbits >= 32:
        return np.uint32(0)
    return np.uint32((k << np.uint64(bits)) >> np.uint64(64 - (32 - gbits)))


@njit(cache=_CACHE)
def _build(gterm, gfull, wild, bits, gbits, boff, gids):
    """Each table's counting sort of the groups by bucket (the top ``bits`` bits of their key
    outside W), an entry the group and its fingerprint (``_fingerprint``)."""
    G = gfull.shape[0]
    shift = np.uint64(64 - bits)
    fp = np.empty(G, dtype=np.uint32)
    bucket = np.empty(G, dtype=np.int64)
    for t in range(wild.shape[0]):
        boff[t, :] = 0
        for g in range(G):
            k = gfull[g]
            for j in range(wild.shape[1]):
                if wild[t, j] >= 0:
                    k -= gterm[wild[t, j], g]
            b = np.int64(k >> shift)
            bucket[g] = b
            fp[g] = _fingerprint(k, bits, gbits)
            boff[t, b + 1] += 1
        for b in range(boff.shape[1] - 1):
            boff[t, b + 1] += boff[t, b]
        for g in range(G):  # the offsets move up by one bucket as they are filled
            b = bucket[g]
            gids[t, boff[t, b]] = (fp[g] << np.uint32(gbits)) | np.uint32(g)
            boff[t, b] += 1
        for b in range(boff.shape[1] - 1, 0, -1):
            boff[t, b] = boff[t, b - 1]
        boff[t, 0] = 0


@njit(cache=_CACHE, inline="always")
def _walk_reach(q, mode, lim, n1, n2, nv, cap):
    """Query q's reach (``flat._reach``), or -1 once a count within a radius is past its cap."""
    if mode == WITHIN and n1[q] > cap and n2[q] > 0:
        return -1.0
    return _reach(lim[q], nv)


def walk(tables: MismatchTables, Q, QC, qs, sq, P, cols, ranges, nv, members, moff, fold, cap, work) -> np.ndarray:
    """Fold the points of at most ``tables.levels`` mismatches into the queries ``qs`` by the
    walk; returns the queries that must finish with the plain scan (their reach is past the
    last level). ``P``: the block's points row by row (``CandidateIndex.P``; the distances
    are taken from it, ``flat._sum_row``), ``cols`` the same points column by column.
    ``fold``: (mode, a, lim, n1, n2, bkey, bcid); ``work``: [distances evaluated, candidates
    looked up], added to. One compiled call for all the queries."""
    qs = np.ascontiguousarray(qs, dtype=np.int64)
    if tables.levels < 0 or qs.size == 0:
        return qs
    start, wild, boff, gids = tables.tables()
    qterm = np.ascontiguousarray(_code_hashes(QC[qs]))  # rows in the order of ``qs``
    qfull = qterm.sum(axis=1, dtype=np.uint64)
    rest = np.zeros(qs.size, dtype=np.bool_)
    _walk(Q, QC, qs, qterm, qfull, start, wild, boff, gids, tables.bits, tables.gbits, tables.gcodes, tables.gpts,
          tables.goff,
          sq, P, cols.kind, ranges, nv, members, moff, *fold, cap, work, rest, np.empty(qs.size),
          np.empty(qs.size, np.int64), np.empty(qs.size, np.uint32), np.empty(qs.size, np.int64),
          np.empty(qs.size, np.int64))
    return qs[rest]


@njit(cache=_CACHE, **NO_REFCOUNT)
def _walk(Q, QC, qs, qterm, qfull, start, wild, boff, gids, bits, gbits, gcodes, gpts, goff, sq, P, kind, ranges, nv,
          members, moff, mode, a, lim, n1, n2, bkey, bcid, cap, work, rest, reach, act, fps, blo, bhi):
    """Each query of ``qs`` (its hashes: row i of ``qterm``, ``qfull``) level by level: per wild
    set W, one bucket; a group of the bucket whose codes equal the query's outside W and differ
    on all of W is evaluated point by point, while the level is within the query's reach.
    ``rest[i]``: query i's reach is past the last level (it must finish with the scan).
    ``reach``: scratch, each query's reach (-1 once past its cap), taken again after a fold;
    ``act``, ``fps``, ``blo``, ``bhi``: scratch, a table's queries, their fingerprints and
    buckets."""
    C = gcodes.shape[1]
    levels = start.shape[0] - 2
    shift = np.uint64(64 - bits)
    low = np.uint32((1 << gbits) - 1) if gbits < 32 else np.uint32(0xFFFFFFFF)
    # table by table, every query in turn, in two loops: the first finds each query's bucket
    # and reads its bounds, the second reads the buckets' entries. Query by query, every lookup
    # waited on memory before the next began; in a loop of independent lookups the core has
    # many under way at once. Each query meets the tables in the same order as query by
    # query, and its state depends on its own folds only, so it evaluates the same points
    # in the same order
    nq = qs.shape[0]
    for i in range(nq):
        reach[i] = _walk_reach(qs[i], mode, lim, n1, n2, nv, cap)
    for w in range(levels + 1):
        for t in range(start[w], start[w + 1]):
            m = 0
            for i in range(nq):
                if w > reach[i]:
                    continue
                k = qfull[i]
                for j in range(w):
                    k -= qterm[i, wild[t, j]]
                b = np.int64(k >> shift)
                act[m] = i
                fps[m] = _fingerprint(k, bits, gbits)
                blo[m] = boff[t, b]
                bhi[m] = boff[t, b + 1]
                m += 1
            for r in range(m):
                i = act[r]
                q = qs[i]
                f = fps[r]
                for e in range(blo[r], bhi[r]):
                    entry = gids[t, e]
                    work[1] += 1
                    if gbits < 32 and (entry >> np.uint32(gbits)) != f:
                        continue  # another key in the bucket
                    g = np.int64(entry & low)
                    wrong = 0  # the group must differ exactly on W
                    for j in range(w):
                        c = wild[t, j]
                        wrong += gcodes[g, c] == QC[q, c]
                    if wrong:
                        continue
                    for c in range(C):
                        if gcodes[g, c] != QC[q, c]:
                            wrong += 1
                    if wrong != w:
                        continue
                    for x in range(goff[g], goff[g + 1]):
                        p = gpts[x]
                        work[0] += 1
                        d = _sum_row(Q, q, P, kind, ranges, nv, p) / nv
                        if d > a[q] and d >= lim[q]:
                            continue
                        _fold(mode, q, p, d, members, moff, sq[q], a, lim, n1, n2, bkey, bcid)
                        reach[i] = _walk_reach(q, mode, lim, n1, n2, nv, cap)
    for i in range(nq):
        rest[i] = levels + 1 <= reach[i]  # (-1 past the cap)
