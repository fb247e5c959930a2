"""An exact index for the Gower nearest-neighbour search (the fast path).

Same results as comparing every candidate with every query, bit for bit, found with much less work:

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
4. **Trees of boxes.** A group of ``Tuning.tree_min`` points or more with values on
   two numeric variables or more (one profile shared by thousands of points:
   many continuous variables, few categories) is not scanned but split in two
   at the median of its most spread numeric variable, again and again down to
   leaves of ``Tuning.tree_leaf`` points; each node
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
   for bit, so the choice, which depends on timing, never changes a result. Counts
   within a radius race in bands of radii (``Tuning.race_bands``, of 256 queries or
   more): on data with little locality a small radius prunes well through the index
   and a large one hardly at all, and one race for the whole block gave the plain scan
   to both (census-shaped, 50,000: 45 s for the count at a cap of 1,000, 29 s in bands).
   A nearest search checks a race's pick at scale (``CandidateIndex._at_scale``): a few
   queries a call favour the plain scan, and the first call of each kind times the walk
   and the index, when the race did not drop them by far, on 2,048 queries each.

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
from typing import Callable

import numpy as np

from .gower import Space, State
from .keyed import query_salts
from .flat import _flat, columns, query_codes
from .mismatch import TABLE_BYTES, MismatchTables, walk
from .plain import Within, _start_state, plain_search, plain_within  # noqa: F401 (the plain kernel, here too)
from .profiles import _code_hashes, _profiles, _rows_as_bytes, _walk_profiles
from .terms import NEAREST, NEAREST1, NO_CAP, WITHIN
from .trees import _boxes, _kd_tree, _outer_summaries, _outer_tree, _within_outer


@dataclass(frozen=True)
class Tuning:
    """The index's sizes and the race's rules: they change the work, never a result. The
    default is what every search uses; the tests pass others to take every path (trees over
    groups of two points, a race on every call, hashes that collide)."""

    # groups of tree_min points or more (and two numeric variables with values) are searched
    # through a tree of boxes (``_kd_tree``) whose leaves hold at most tree_leaf points
    tree_min: int = 64
    tree_leaf: int = 8
    outer_leaf: int = 8  # a node of the tree over all the groups holding this many points or fewer is a leaf
    # the race of ``_traverse``: with race_min_queries queries or more, one in race_stride goes
    # first through both ways, and the faster takes the others
    race_min_queries: int = 256
    race_stride: int = 32
    race_decide: int = 15  # queries of the sample after which a clear race stops (1 + 2 + 4 + 8)
    race_early: int = 3  # after which a race stops whose slow way has cost more than the whole sample by the other
    race_margin: float = 2.0
    # the nearest by the walk or the index where the race dropped it by at most race_explore
    # times (``_at_scale``): the first call of a kind with twice race_explore_queries queries or
    # more times it on that many
    race_explore: float = 8.0
    race_explore_queries: int = 2048
    race_explore_slack: float = 1.25
    race_bands: int = 8  # counts within a radius: the queries race in this many bands of radii
    code_hashes: Callable = _code_hashes  # a profile's codes -> 64-bit hashes (the lookups one position away)
    table_bytes: int = TABLE_BYTES  # the categorical walk's tables (``kernels.mismatch``): the levels kept fit in it


TUNING = Tuning()


class CandidateIndex:
    """The candidates of one block, indexed for exact Gower searches."""

    def __init__(self, C: np.ndarray, cids: np.ndarray, space: Space, tuning: Tuning = TUNING,
                 plain: bool = False):
        """``plain``: no index, every search by the plain scan of every candidate (a block so
        small that building the index, and compiling it in a new worker, costs more than it
        saves); the same states, bit for bit, as every way of the race."""
        self.space = space
        self.tuning = tuning
        self.plain = plain
        self.choices: dict[str, int] = {}  # how the calls went: "index", "flat" (the plain scan) or "mismatch"
        self._mismatch: MismatchTables | None = None
        self._seen: dict = {}  # per way and kind of call: whether that way takes it (``_at_scale``)
        # what the searches cost: distances evaluated, and candidates looked up without one (the walk's
        # table entries, the points whose mismatches the plain scan counted, the groups whose
        # profiles the index compared one by one)
        self.work = np.zeros(2, dtype=np.int64)
        nv = space.n_vars
        C = np.where(np.isnan(C), np.nan, C).reshape(-1, nv)  # one NaN bit pattern
        cids = np.asarray(cids, dtype=np.int64)
        self.n_candidates = int(cids.shape[0])
        if plain:  # what the plain scan reads, as ``plain_search`` has it: each record its own point
            self.P = np.ascontiguousarray(C, dtype=np.float64)
            self.members = np.ascontiguousarray(cids)
            self.moff = np.arange(cids.size + 1, dtype=np.int64)
            self.cols, self.levels = columns(self.P, space.is_cat, space.ranges)
            return
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
        half = max(1, (tuning.tree_leaf + 1) // 2)  # a split node's children hold at least this many points
        cap = int(np.sum(np.where(sizes >= tuning.tree_min, 2 * np.maximum(1, sizes // half), 0)))
        is_num = np.ascontiguousarray(~space.is_cat & (space.ranges > 0))
        perm, *nodes, groot = _kd_tree(np.ascontiguousarray(points[porder]), self.gstart, self.gstop, is_num,
                                       np.ascontiguousarray(space.ranges, dtype=np.float64), tuning.tree_min, tuning.tree_leaf,
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
        self.cols, self.levels = columns(self.P, space.is_cat, space.ranges)  # for the plain scan (``_flat``)
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
        oga, ogb, oleft = _outer_tree(self.gstart, self.gstop, tuning.outer_leaf)
        ons, one = self.gstart[oga], self.gstop[ogb - 1]
        olo, ohi, onull = _outer_summaries(self.P, ons, one)
        self.outer = (ons, one, oga, ogb, oleft, self.moff[one] - self.moff[ons], olo, ohi, onull, self.gstart)

    def search(self, Q: np.ndarray, qids: np.ndarray, salt: int, state: State | None = None,
               how: str = "auto", first_only: bool = False) -> State:
        """Fold this block's candidates into the queries' top-2 state. ``first_only``: the
        nearest only (``d1``, ``n1``, the tie-break exact; ``d2`` is ``d1``, not the second
        distance), which prunes by ``d1`` and so evaluates fewer distances."""
        nq = Q.shape[0]
        st = _start_state(nq, state)
        if nq and self.n_candidates:
            unused = np.zeros(nq, dtype=np.int64)
            mode = NEAREST1 if first_only else NEAREST
            self._traverse(Q, qids, salt, (mode, st.d1, st.d2, st.n1, unused, st.key, st.cid), how)
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
        Position j's are ``[off[j], off[j + 1])``: the groups' hashes without j (``Tuning.code_hashes``),
        sorted, and the groups in that order."""
        if self._wild is None:
            nv, G = self.gcodes.shape
            terms = self.tuning.code_hashes(self.gcodes.T)
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
        if self.plain:
            how = "flat"
        Q = np.ascontiguousarray(np.where(np.isnan(Q), np.nan, Q))
        sq = query_salts(salt, np.asarray(qids, dtype=np.int64))
        is_cat = np.ascontiguousarray(space.is_cat, dtype=np.bool_)
        ranges = np.ascontiguousarray(space.ranges, dtype=np.float64)
        args = (self.P, is_cat, ranges, space.n_vars, self.members, self.moff, *fold)
        QC = query_codes(Q, space.is_cat, self.levels)
        nq = Q.shape[0]
        parts = [np.arange(nq, dtype=np.int64)]
        race = self.tuning
        if how == "auto" and fold[0] == WITHIN and nq >= 2 * race.race_min_queries:
            # counts within a radius: a small radius prunes well through the index, a large one
            # hardly at all (the plain scan, stopped at the cap, is faster): each band of radii
            # races on its own
            order = np.argsort(fold[1], kind="stable")
            bands = min(race.race_bands, nq // race.race_min_queries)
            parts = [np.sort(band) for band in np.array_split(order, bands)]
        for i, rest in enumerate(parts):
            self._race(Q, QC, rest, sq, args, fold, how, cap, key=(fold[0], len(parts), i))

    def _race(self, Q, QC, rest, sq, args, fold, how: str, cap: int, key=None) -> None:
        """Fold the block into the queries ``rest`` by ``how``; "auto": the ways race on a
        sample of them and the fastest takes the others (the index too where it is faster on
        many queries at once, and the walk: ``_at_scale``; ``key``: the kind of call)."""
        race = self.tuning
        if how == "auto" and rest.size >= race.race_min_queries:
            ways = self.ways()
            _warm_up()  # the race must time the searches, not the loading of their compiled code
            self.lookups()  # built before the timing: the sample must not pay for them
            if "mismatch" in ways:  # its tables too (a way's sample that built them would lose the race)
                self.mismatch().tables()
            # (contiguous, as every other array of positions is: a strided view would be a
            # second signature of each entry point, compiled once more in every cold worker)
            sample = np.ascontiguousarray(rest[::race.race_stride])
            # each way folds the sample into its own copy of the state, taken before any way
            # folded it: from another way's result it would skip the work of finding the nearest
            # points (with many tied members, most of it) and win races it should lose
            scratch = {w: (fold[0], *(np.array(x) for x in fold[1:])) for w in ways}
            # the ways on the same queries, 1, 2, 4, ... at a time, until the sample is done or
            # one way is left: a way is dropped once it has cost race_margin times the fastest
            # with race_decide queries done, or race_margin times what the fastest would cost for
            # the whole sample with race_early done (a sample of the slow way costs what it costs)
            done, step, spent, live = 0, 1, dict.fromkeys(ways, 0.0), list(ways)
            while done < sample.size and len(live) > 1:
                part = sample[done : done + step]
                for w in live:
                    t0 = time.thread_time()  # the worker's own time: a core taken by another process does not count
                    self._by(w, Q, QC, part, sq, args, scratch[w], cap)
                    spent[w] += time.thread_time() - t0
                done, step = done + part.size, 2 * step
                fast = min(spent[w] for w in live)
                live = [w for w in live
                        if not (done >= race.race_decide and spent[w] > race.race_margin * fast)
                        and not (done >= race.race_early and spent[w] > race.race_margin * fast / done * sample.size)]
            how = min(live, key=lambda w: spent[w])
            taken = sample[:done]
            for mine, theirs in zip(fold[1:], scratch[how][1:]):  # the sample done: the winner's states
                mine[taken] = theirs[taken]
            rest = np.setdiff1d(rest, taken, assume_unique=True)  # the sample's rest too
            # (the walk before the index: where it is not dropped by far, it is the faster at scale
            # on census-shaped data, and the index's check then times the walk's pick, not the scan's)
            for way in ("mismatch", "index") if fold[0] != WITHIN else ():
                if rest.size and how != way and way in ways and spent[way] <= race.race_explore * spent[how]:
                    rest, how = self._at_scale(way, Q, QC, rest, sq, args, fold, cap, how, key)
        way = how if how in ("flat", "mismatch") else "index"  # "auto" with too few queries to race: the index
        if rest.size:  # (none left when the race's sample was the whole call)
            self.choices[way] = self.choices.get(way, 0) + 1
        self._by(way, Q, QC, rest, sq, args, fold, cap)

    def _at_scale(self, way: str, Q, QC, rest, sq, args, fold, cap: int, how: str, key):
        """``way`` (the index or the walk) where the race dropped it but not by far, for the nearest
        (a count within a radius walks a tree per query, whose cost per query a race measures as it
        is: on census-shaped data, timing it on 2,048 queries of a band cost more than the band). A
        race's sample meets the ways a few queries a call, where the cost of a call weighs most. The
        index visits the groups once per distinct categorical profile of a call's queries, so its
        cost per query falls as a call holds more queries (the default shape, a block of 250,000:
        6.4 us a query in calls of 512, 2.8 in calls of 32,768, where the walk stays at 4 to 4.6).
        The walk's cost per query is uneven: a query whose reach is past its last level costs it the
        scan of the block and the lookups, one more call of the scan, where most cost a few lookups
        (census 200,000: a sample of 15 queries took the walk twice the scan's time, 25,000 queries
        about a seventh of it). A race on a few dozen queries sees neither. So the first time for
        each kind of call (``key``), ``way`` and the race's pick each take race_explore_queries of
        the queries, and ``way`` takes the rest when it was at most race_explore_slack times as slow
        on them; later calls of that kind do what the first decided. Folds the queries it timed;
        returns the others and the way that takes them."""
        race = self.tuning
        m = race.race_explore_queries
        seen = self._seen.get((way, key))
        if seen is None:
            if rest.size < 2 * m:
                return rest, how
            mine, theirs = rest[:m], rest[m:2 * m]
            t_way = self._timed(way, Q, QC, mine, sq, args, fold, cap)
            t_how = self._timed(how, Q, QC, theirs, sq, args, fold, cap)
            seen = self._seen[(way, key)] = t_way <= race.race_explore_slack * t_how
            rest = rest[2 * m:]
        return rest, (way if seen else how)

    def _timed(self, way: str, Q, QC, qs, sq, args, fold, cap: int) -> float:
        """``_by``, and the seconds it took this thread (a core taken by another process does not count)."""
        t0 = time.thread_time()
        self._by(way, Q, QC, qs, sq, args, fold, cap)
        return time.thread_time() - t0

    def ways(self) -> tuple[str, ...]:
        """The ways of this block's race: the categorical walk where there are categoricals to walk."""
        return ("index", "flat", "mismatch") if self.mismatch().levels >= 1 else ("index", "flat")

    def mismatch(self) -> MismatchTables:
        """The categorical walk's groups and tables (``kernels.mismatch``), built at first use."""
        if self._mismatch is None:
            self._mismatch = MismatchTables(self.cols, self.tuning.table_bytes)
        return self._mismatch

    def _by(self, way: str, Q, QC, qs, sq, args, fold, cap: int) -> None:
        """Fold the block into the queries ``qs`` (their state ``fold``) by one way."""
        if qs.size == 0:
            return
        if way == "flat":
            _flat(Q, QC, qs, sq, self.cols, *args[2:6], *fold, cap, 0, self.work)
        elif way == "mismatch":
            tables = self.mismatch()
            rest = walk(tables, Q, QC, qs, sq, args[0], self.cols, args[2], args[3], args[4], args[5], fold, cap, self.work)
            if rest.size:  # past the last level: the plain scan of the points not walked
                _flat(Q, QC, rest, sq, self.cols, *args[2:6], *fold, cap, tables.levels + 1, self.work)
        else:
            self._by_index(Q, qs, sq, (*args[:6], *fold), cap)

    def _by_index(self, Q, qs, sq, args, cap: int = NO_CAP):
        """Visit, for each query of ``qs``, the groups whose bound H/|V| does not exceed its limit
        (counts within a radius: the nodes of the tree over all the groups that cross it, up to
        ``cap``, see ``within``)."""
        if qs.size == 0:
            return
        if args[6] == WITHIN:
            _within_outer(Q, qs, sq, *args[:6], *args[8:], self.boxes, self.tree, self.outer, cap, self.work)
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
        terms = self.tuning.code_hashes(ucodes)
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
                       self.P, self.scan, self.scanvals, *extra, self.work)


_WARMED = False  # set once this process has run every compiled entry point


def _warm_up() -> None:
    """Run every way, nearest and within, once on a tiny block, so that the race of
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
    for how in ("index", "flat", "mismatch"):
        index.search(Q, qids, 0, how=how)
        index.within(Q, qids, 0, np.array([0.5, 1.0]), how=how)
