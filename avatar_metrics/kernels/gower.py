"""Exact Gower distances in numpy, and the types the kernels share.

Owns the encoded layout, ``Space`` (the variables' kinds and ranges), the
distance of every query to every candidate (``gower_block``) or of pairs
(``gower_pairs``), and ``State``, the result of a nearest-neighbour search.
The compiled search is ``kernels.index``; the numpy brute-force searches it
is tested against are in ``tests/brute.py``. Knows nothing of Spark.

A table is encoded as a float64 matrix, one column per variable in the order
of V: numeric values as they are, categorical values as integer codes (exact
in float64), null as NaN. ``is_cat`` says which columns are categorical and
``ranges`` holds ``max_v - min_v`` of the numeric ones.

Distances follow ``docs/metrics.md`` to the bit: each term is
``|x - y| / range`` (or 0/1), the terms are summed in float64 in the order of
V, starting from the first, and the sum is divided by |V|.

A search result per query is a *state*: ``d1`` (smallest distance), ``d2``
(second smallest, ``d1`` again on ties, ``inf`` when fewer than two
candidates), ``n1`` (candidates at ``d1``), ``cid`` and ``key`` (the chosen
candidate at ``d1``: the one with the smallest keyed hash, then smallest id).
States of disjoint candidate sets merge exactly and in any order
(``engine.folds.merge_states``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .keyed import search_salt  # noqa: F401 - imported by callers of the kernel

NO_KEY = np.iinfo(np.int64).max


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
