"""The numpy reference kernels, test-only: the top-2 state and the count within a radius by
brute force (every distance of a block as a matrix, ``gower_block``), exact, to check the
compiled kernels of ``avatar_metrics.kernels`` against, and what a state's exact merge is."""

from __future__ import annotations

import numpy as np

from avatar_metrics.kernels.gower import NO_KEY, Space, State, gower_block
from avatar_metrics.kernels.keyed import tie_keys

# Distance-matrix elements computed at once (x 8 bytes, a few temporaries).
MAX_BLOCK_ELEMENTS = 1 << 21
# Candidates compared with one chunk of queries at a time.
SUB_BLOCK = 4096


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
