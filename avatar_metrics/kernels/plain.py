"""The plain compiled kernel as a function of whole arrays: every candidate for every query,
no index (``plain_search``, ``plain_within``; the benchmark's baseline, and what every way of
``kernels.index`` is checked against), and the state of a count within a radius (``Within``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .flat import _flat, columns, query_codes
from .gower import NO_KEY, Space, State
from .keyed import query_salts
from .terms import NEAREST, NEAREST1, NO_CAP, WITHIN


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


def plain_search(Q: np.ndarray, qids: np.ndarray, C: np.ndarray, cids: np.ndarray, space: Space, salt: int,
                 state: State | None = None, first_only: bool = False) -> State:
    """The plain compiled kernel: every candidate for every query, no index (the
    benchmark's baseline, and what the index is checked against)."""
    nq = Q.shape[0]
    st = _start_state(nq, state)
    if nq and C.shape[0]:
        cols, QC, members, moff, sq, ranges, Q = _plain_args(Q, qids, C, cids, space, salt)
        _flat(Q, QC, np.arange(nq, dtype=np.int64), sq, cols, ranges, space.n_vars, members, moff,
              NEAREST1 if first_only else NEAREST, st.d1, st.d2, st.n1, np.zeros(nq, dtype=np.int64), st.key, st.cid, NO_CAP, 0, np.zeros(2, dtype=np.int64))
    return st


def plain_within(Q: np.ndarray, qids: np.ndarray, C: np.ndarray, cids: np.ndarray, space: Space, salt: int,
                 radius: np.ndarray) -> Within:
    """``CandidateIndex.within`` by the plain compiled kernel."""
    nq = Q.shape[0]
    out = Within.empty(nq)
    if nq and C.shape[0]:
        cols, QC, members, moff, sq, ranges, Q = _plain_args(Q, qids, C, cids, space, salt)
        r = np.ascontiguousarray(radius, dtype=np.float64)
        _flat(Q, QC, np.arange(nq, dtype=np.int64), sq, cols, ranges, space.n_vars, members, moff,
              WITHIN, r, r, out.le, out.lt, out.key, out.cid, NO_CAP, 0, np.zeros(2, dtype=np.int64))
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
    cols, levels = columns(P, space.is_cat, space.ranges)
    Q = np.ascontiguousarray(np.where(np.isnan(Q), np.nan, Q), dtype=np.float64)
    return (cols, query_codes(Q, space.is_cat, levels), members, moff, sq,
            np.ascontiguousarray(space.ranges, dtype=np.float64), Q)
