"""How much would candidate blocks cut by locality prune? A simulation for issue 14. Not a test.

    python bench/locality.py [--shape default] [--n 200000] [--blocks 8 ...] [--queries 20000]

The avatars of a shape (``bench/shapes.py``, every variable: the Closest Rate
search) are sorted by a key and cut into equal blocks; each block keeps, per
variable, the summary a block of issue 14 would carry (numeric: min, max and
whether nulls occur; categorical: the set of its codes and whether nulls
occur), and the lower bound of the Gower distance from a query to any record
of the block that the index's tree over the groups computes for a node
(``_outer_bounds``). For a sample of originals, prints the blocks
each would visit, on average, out of all of them:

- "ideal": the blocks whose bound does not exceed the query's true second
  distance d2 (no exact search can visit fewer);
- "after home": the home block (least bound) searched first, then the other
  blocks whose bound does not exceed the d2 found there (what a home pass and
  a second pass would visit).

Keys: a hash of the id (today's blocks: every block is visited), the
categorical variables by increasing or decreasing number of levels then the
numeric ones, and the numeric ones first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from numba import njit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kernels import encode  # noqa: E402
from shapes import SHAPES, make  # noqa: E402

from avatar_metrics.kernels import index as IX  # noqa: E402
from avatar_metrics.kernels.gower import search_salt  # noqa: E402


@njit
def _node_bounds(Q, outer, is_cat, ranges, nv):
    out = np.empty(Q.shape[0])
    for q in range(Q.shape[0]):
        out[q] = IX._outer_bounds(Q, q, 0, outer, is_cat, ranges, nv)[0]
    return out


def lower_bounds(Q: np.ndarray, B: np.ndarray, space) -> np.ndarray:
    """Per query, the index's own lower bound (``_outer_bounds``, safe in floating point) of its
    distance to every row of the block B, taken as one node. The categories are coded within the
    block, as a block's candidates are in the job: a query's category the block lacks is -1, out
    of the block's codes, and its term is 1."""
    Q, B = Q.copy(), B.copy()
    for v in np.flatnonzero(space.is_cat):
        values = np.unique(B[:, v][~np.isnan(B[:, v])])
        for X in (Q, B):
            x = X[:, v].copy()
            code = np.full(x.shape, -1.0)
            if values.size:
                at = np.minimum(np.searchsorted(values, x), values.size - 1)
                code = np.where(values[at] == x, at, -1.0)
            X[:, v] = np.where(np.isnan(x), np.nan, code)
    one = np.zeros(1, dtype=np.int64)
    ns, ne = one, np.array([B.shape[0]], dtype=np.int64)
    lo, hi, nnull = IX._outer_summaries(np.ascontiguousarray(B), ns, ne)
    outer = (ns, ne, one, one, one, one, lo, hi, nnull, one)
    return _node_bounds(np.ascontiguousarray(Q), outer, np.ascontiguousarray(space.is_cat, dtype=np.bool_),
                        np.ascontiguousarray(space.ranges, dtype=np.float64), space.n_vars)


def visits(Q, qids, C, cids, space, salt, order, n_blocks, truth_d2) -> tuple[float, float]:
    blocks = np.array_split(order, n_blocks)
    LB = np.stack([lower_bounds(Q, C[b], space) for b in blocks], axis=1)
    home = np.argmin(LB, axis=1)
    d2_home = np.empty(Q.shape[0])
    for b, rows in enumerate(blocks):
        sel = np.flatnonzero(home == b)
        if sel.size:
            d2_home[sel] = IX.CandidateIndex(C[rows], cids[rows], space).search(Q[sel], qids[sel], salt).d2
    ideal = (LB <= truth_d2[:, None]).sum(axis=1).mean()
    others = (LB <= d2_home[:, None]) & (np.arange(n_blocks)[None, :] != home[:, None])
    return float(ideal), float(1 + others.sum(axis=1).mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="default", help=f"one of {', '.join(SHAPES)}")
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--blocks", type=int, action="append", help="numbers of blocks (repeatable; default 8)")
    p.add_argument("--queries", type=int, default=20_000, help="originals sampled as queries")
    a = p.parse_args()
    sh = make(a.shape, a.n)
    Q, C, space = encode(sh.originals, sh.avatars, sh.holdout)
    n = C.shape[0]
    cids = np.arange(n, dtype=np.int64) + n
    qs = np.sort(np.random.default_rng(3).choice(Q.shape[0], min(a.queries, Q.shape[0]), replace=False))
    qids = qs.astype(np.int64)
    salt = search_salt(0, "locality")
    truth = IX.CandidateIndex(C, cids, space).search(Q[qs], qids, salt)
    levels = {v: np.unique(C[:, v][~np.isnan(C[:, v])]).size for v in range(space.n_vars) if space.is_cat[v]}
    numeric = [v for v in range(space.n_vars) if not space.is_cat[v] and space.ranges[v] > 0]

    def by(variables):
        return np.lexsort([np.nan_to_num(C[:, v], nan=-1.0) for v in variables][::-1])

    ascending = sorted(levels, key=lambda v: levels[v])
    keys = {
        "hash of the id (today)": np.random.default_rng(0).permutation(n),
        "categories, fewest levels first": by(ascending + numeric),
        "categories, most levels first": by(ascending[::-1] + numeric),
        "numeric variables first": by(numeric + ascending),
    }
    print(f"shape {a.shape}, {n:,} avatars, {qs.size:,} originals as queries; blocks visited per query")
    print(f"{'key':<34}{'blocks':>8}{'ideal':>8}{'after home':>12}")
    for n_blocks in a.blocks or [8]:
        for name, order in keys.items():
            ideal, real = visits(Q[qs], qids, C, cids, space, salt, order, n_blocks, truth.d2)
            print(f"{name:<34}{n_blocks:>8}{ideal:>8.2f}{real:>12.2f}")


if __name__ == "__main__":
    main()
