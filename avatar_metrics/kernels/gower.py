"""Exact Gower distances and nearest-neighbour top-2 in pure numpy.

Knows nothing of Spark. A table is encoded as a float64 matrix, one column per
variable in the order of V: numeric values as they are, categorical values as
integer codes (exact in float64), null as NaN. ``is_cat`` says which columns
are categorical and ``ranges`` holds ``max_v - min_v`` of the numeric ones.

Distances follow ``shared/spec/METRICS.md`` to the bit: each term is
``|x - y| / range`` (or 0/1), the terms are summed in float64 in the order of
V, starting from the first, and the sum is divided by |V|.

A search result per query is a *state*: ``d1`` (smallest distance), ``d2``
(second smallest, ``d1`` again on ties, ``inf`` when fewer than two
candidates), ``n1`` (candidates at ``d1``), ``cid`` and ``key`` (the chosen
candidate at ``d1``: the one with the smallest keyed hash, then smallest id).
States of disjoint candidate sets merge exactly and in any order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .keyed import search_salt, tie_keys  # noqa: F401 - search_salt: imported by callers of the kernel

NO_KEY = np.iinfo(np.int64).max
# Distance-matrix elements computed at once (x 8 bytes, a few temporaries).
MAX_BLOCK_ELEMENTS = 1 << 21
# Candidates compared with one chunk of queries at a time.
SUB_BLOCK = 4096


# ---------------------------------------------------------------- distances


@dataclass(frozen=True)
class Space:
    """The variables of one distance: kinds and numeric ranges, in the order of V."""

    is_cat: np.ndarray  # bool, one per variable
    ranges: np.ndarray  # float64, max - min of numeric variables (NaN: all null)

    @property
    def n_vars(self) -> int:
        return int(self.is_cat.shape[0])


def gower_block(Q: np.ndarray, C: np.ndarray, space: Space) -> np.ndarray:
    """Gower distances between every row of Q and every row of C (float64)."""
    nq, nc = Q.shape[0], C.shape[0]
    total = None
    for v in range(space.n_vars):
        q = Q[:, v]
        c = C[:, v]
        if space.is_cat[v]:
            term = (q[:, None] != c[None, :]).astype(np.float64)
        else:
            r = space.ranges[v]
            if r > 0:
                term = np.abs(q[:, None] - c[None, :]) / r
            else:  # constant (or all-null) variable: its values add 0
                term = np.zeros((nq, nc))
        qn = np.isnan(q)
        cn = np.isnan(c)
        if qn.any() or cn.any():
            either = qn[:, None] | cn[None, :]
            term = np.where(either, (qn[:, None] != cn[None, :]).astype(np.float64), term)
        if total is None:
            total = term
        else:
            total += term
    if total is None:
        raise ValueError("a Gower distance needs at least one variable")
    return total / space.n_vars


def gower_pairs(X: np.ndarray, Y: np.ndarray, space: Space) -> np.ndarray:
    """G(X[i], Y[i]) for each row i: the terms, order and rounding of ``gower_block``."""
    total = None
    for v in range(space.n_vars):
        x, y = X[:, v], Y[:, v]
        if space.is_cat[v]:
            term = (x != y).astype(np.float64)
        else:
            r = space.ranges[v]
            term = np.abs(x - y) / r if r > 0 else np.zeros(x.shape[0])
        xn, yn = np.isnan(x), np.isnan(y)
        term = np.where(xn | yn, (xn != yn).astype(np.float64), term)
        total = term if total is None else total + term
    if total is None:
        raise ValueError("a Gower distance needs at least one variable")
    return total / space.n_vars


def within(Q: np.ndarray, qids: np.ndarray, C: np.ndarray, cids: np.ndarray, space: Space, salt: int,
           radius: np.ndarray, max_elements: int = MAX_BLOCK_ELEMENTS):
    """The plain count within per-query radii: (le, lt, key, cid) per query.

    ``le``/``lt``: candidates at distance <= / < the radius; ``key``, ``cid``:
    the smallest (tie key, id) among those exactly at the radius (``NO_KEY``,
    -1 when none). Counts of disjoint candidate sets add up.
    """
    nq = Q.shape[0]
    le = np.zeros(nq, dtype=np.int64)
    lt = np.zeros(nq, dtype=np.int64)
    key = np.full(nq, NO_KEY, dtype=np.int64)
    cid = np.full(nq, -1, dtype=np.int64)
    step = max(1, max_elements // max(1, C.shape[0]))
    for s in range(0, nq, step):
        D = gower_block(Q[s : s + step], C, space)
        r = np.asarray(radius[s : s + step], dtype=np.float64)[:, None]
        le[s : s + step] = (D <= r).sum(axis=1)
        lt[s : s + step] = (D < r).sum(axis=1)
        rows, cols = np.nonzero(D == r)
        if rows.size:
            keys = tie_keys(salt, qids[s + rows], cids[cols])
            order = np.lexsort((cids[cols], keys, rows))
            first = np.ones(order.size, dtype=bool)
            first[1:] = rows[order][1:] != rows[order][:-1]
            pick = order[first]
            key[s + rows[pick]] = keys[pick]
            cid[s + rows[pick]] = cids[cols][pick]
    return le, lt, key, cid


# ---------------------------------------------------------------- top-2 states


@dataclass
class State:
    d1: np.ndarray
    d2: np.ndarray
    n1: np.ndarray
    cid: np.ndarray
    key: np.ndarray

    @classmethod
    def empty(cls, n: int) -> "State":
        return cls(
            d1=np.full(n, np.inf),
            d2=np.full(n, np.inf),
            n1=np.zeros(n, dtype=np.int64),
            cid=np.full(n, -1, dtype=np.int64),
            key=np.full(n, NO_KEY, dtype=np.int64),
        )

    def __len__(self) -> int:
        return int(self.d1.shape[0])


def block_state(D: np.ndarray, qids: np.ndarray, cids: np.ndarray, salt: int) -> State:
    """Top-2 state of each row of D (queries x candidates of one block)."""
    nq, nc = D.shape
    if nc == 0:
        return State.empty(nq)
    if nc == 1:
        d1 = D[:, 0].copy()
        d2 = np.full(nq, np.inf)
    else:
        part = np.partition(D, 1, axis=1)
        d1 = part[:, 0].copy()
        d2 = part[:, 1].copy()
    at_min = D == d1[:, None]
    n1 = at_min.sum(axis=1).astype(np.int64)
    rows, cols = np.nonzero(at_min)  # row-major: rows ascending
    keys = tie_keys(salt, qids[rows], cids[cols])
    cand = cids[cols]
    # order by (row, key, candidate id); the first of each row wins
    order = np.lexsort((cand, keys, rows))
    first = np.ones(order.shape[0], dtype=bool)
    first[1:] = rows[order][1:] != rows[order][:-1]
    pick = order[first]
    return State(d1=d1, d2=d2, n1=n1, cid=cand[pick], key=keys[pick])


def merge(a: State, b: State) -> State:
    """Exact merge of the states of two disjoint candidate sets (commutative)."""
    d1 = np.minimum(a.d1, b.d1)
    # the two smallest of {a.d1, a.d2, b.d1, b.d2}
    lo = np.maximum(a.d1, b.d1)
    d2 = np.minimum(lo, np.minimum(a.d2, b.d2))
    a_at = a.d1 == d1
    b_at = b.d1 == d1
    n1 = np.where(a_at, a.n1, 0) + np.where(b_at, b.n1, 0)
    # candidate: smallest (key, cid) among the sides at d1
    a_key = np.where(a_at, a.key, NO_KEY)
    b_key = np.where(b_at, b.key, NO_KEY)
    take_b = (b_key < a_key) | ((b_key == a_key) & b_at & (~a_at | (b.cid < a.cid)))
    return State(
        d1=d1,
        d2=d2,
        n1=n1,
        cid=np.where(take_b, b.cid, a.cid),
        key=np.where(take_b, b_key, a_key),
    )


def search(
    Q: np.ndarray,
    qids: np.ndarray,
    C: np.ndarray,
    cids: np.ndarray,
    space: Space,
    salt: int,
    state: State | None = None,
    sub_block: int = SUB_BLOCK,
    max_elements: int = MAX_BLOCK_ELEMENTS,
) -> State:
    """Fold the candidates ``C`` into the queries' state, exactly.

    Candidates are taken ``sub_block`` at a time and queries in chunks, so
    that no distance matrix holds more than ``max_elements`` elements.
    """
    nq = Q.shape[0]
    state = State.empty(nq) if state is None else state
    for c0 in range(0, C.shape[0], sub_block):
        Cb, cb = C[c0 : c0 + sub_block], cids[c0 : c0 + sub_block]
        step = max(1, max_elements // Cb.shape[0])
        parts = [
            block_state(gower_block(Q[s : s + step], Cb, space), qids[s : s + step], cb, salt)
            for s in range(0, nq, step)
        ]
        if parts:
            state = merge(state, _concat(parts))
    return state


def _concat(parts: list[State]) -> State:
    if len(parts) == 1:
        return parts[0]
    return State(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("d1", "d2", "n1", "cid", "key")))


# ---------------------------------------------------------------- block summaries


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

    ``Q`` is encoded against the block (``-1``: a category the block lacks).
    Per variable the bound takes the least term any row can give: 0 or 1 for a
    category and for nulls, the gap to ``[lo, hi]`` over the range for a
    number. A float difference is monotone in each operand, so ``fl(lo - x)``
    is at most ``fl(y - x)`` for every ``y >= lo``, and likewise the division,
    the sum in the order of V and the division by |V|: the bound is at most
    the distance ``gower_block`` computes, bit for bit.
    """
    nq = Q.shape[0]
    total = np.zeros(nq)
    for v in range(space.n_vars):
        q = Q[:, v]
        qn = np.isnan(q)
        if space.is_cat[v]:
            term = (q < 0).astype(np.float64)  # a category no row has (NaN < 0 is False)
        elif np.isnan(s.lo[v]):
            term = np.ones(nq)  # every row null here: a number differs from each
        else:
            r = space.ranges[v]
            if r > 0:
                with np.errstate(invalid="ignore"):
                    gap = np.where(q < s.lo[v], s.lo[v] - q, np.where(q > s.hi[v], q - s.hi[v], 0.0)) / r
            else:
                gap = np.zeros(nq)
            term = np.minimum(gap, 1.0) if s.nulls[v] else gap
        # a null query: 0 where a row is null too, else 1
        term = np.where(qn, 0.0 if s.nulls[v] else 1.0, term)
        total = total + term
    return total / space.n_vars
