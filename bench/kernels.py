"""Benchmark of one search block: the index against the plain compiled kernel, per shape. Not a test.

    python bench/kernels.py [--n 20000] [--queries 20000] [--shape NAME ...] [--plain-sample 2000]
                            [--columns A,B]

For each shape of ``bench/shapes.py``: the originals are the queries, the
avatars the candidates (one block of n), all the variables (the Closest Rate
search, "nearest") and the count within each original's distance to its own
avatar (the Local Cloaking / Hidden Rate search, "within"). Prints, per search,
the size of the index's arrays (MiB, its lookups built), the seconds of the
plain compiled kernel (``index.plain_search``: every candidate for every
query; timed on ``--plain-sample`` queries and scaled to all, its cost is
the same for every query), of the index (build, then the search as the job
runs it: the race picks the index or the plain scan of its points, per band of
radii for a count), of the
index's traversal alone, and the ratio index / plain.
``--queries`` below n times the index on that many queries and scales too.
The states are checked equal to the plain kernel's on the timed queries.
``--columns`` keeps only those variables (a Linkability half, say).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from shapes import SHAPES, make  # noqa: E402

from avatar_metrics.kernels import index as IX  # noqa: E402
from avatar_metrics.kernels.gower import Space, gower_pairs, search_salt  # noqa: E402


def encode(O: pd.DataFrame, A: pd.DataFrame, H: pd.DataFrame | None = None):
    """(Q, C, space): numeric values as they are, categories as shared codes, null as NaN."""
    cols = list(O.columns)
    Q = np.empty((len(O), len(cols)))
    C = np.empty((len(A), len(cols)))
    is_cat = np.zeros(len(cols), bool)
    ranges = np.zeros(len(cols))
    for i, c in enumerate(cols):
        if pd.api.types.is_numeric_dtype(O[c]) and not pd.api.types.is_bool_dtype(O[c]):
            Q[:, i] = O[c].to_numpy(float, na_value=np.nan)
            C[:, i] = A[c].to_numpy(float, na_value=np.nan)
            parts = [Q[:, i], C[:, i]] + ([H[c].to_numpy(float, na_value=np.nan)] if H is not None else [])
            allv = np.concatenate(parts)
            ranges[i] = np.nanmax(allv) - np.nanmin(allv)
        else:
            uniq = pd.Index(pd.unique(pd.concat([O[c], A[c]]).dropna()))
            Q[:, i] = np.where(O[c].isna(), np.nan, uniq.get_indexer(O[c]))
            C[:, i] = np.where(A[c].isna(), np.nan, uniq.get_indexer(A[c]))
            is_cat[i] = True
    return Q, C, Space(is_cat, ranges)


def nbytes(x) -> int:
    """Bytes of the numpy arrays an object holds (its attributes, tuples and lists, recursively)."""
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, (tuple, list)):
        return sum(nbytes(y) for y in x)
    if hasattr(x, "__dict__") and not isinstance(x, type):
        return sum(nbytes(y) for y in vars(x).values())
    return 0


def _equal(a, b, fields) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in fields)


def bench_shape(name: str, n: int, queries: int, plain_sample: int, columns=None) -> list[dict]:
    sh = make(name, n)
    cols = columns or list(sh.originals.columns)
    Q, C, space = encode(sh.originals[cols], sh.avatars[cols], sh.holdout[cols])
    nq = min(queries, n)
    rng = np.random.default_rng(7)
    qs = np.sort(rng.choice(n, nq, replace=False)) if nq < n else np.arange(n)
    ps = qs[: min(plain_sample, nq)]
    qids = np.arange(n, dtype=np.int64)
    cids = np.arange(n, dtype=np.int64) + n
    salt = search_salt(0, "bench")
    radius = gower_pairs(Q, C, space)  # each original's distance to its own avatar
    rows = []
    for what in ("nearest", "within"):
        t0 = time.perf_counter()
        if what == "nearest":
            plain = IX.plain_search(Q[ps], qids[ps], C, cids, space, salt)
        else:
            plain = IX.plain_within(Q[ps], qids[ps], C, cids, space, salt, radius[ps])
        t_plain = (time.perf_counter() - t0) * n / ps.size
        t0 = time.perf_counter()
        index = IX.CandidateIndex(C, cids, space)
        index.lookups()  # the lookups one position away: built once per index (per task)
        t_build = time.perf_counter() - t0
        times = {}
        for how in ("auto", "index"):
            if how == "index":  # the ways the race gave the queries (the bands of a count may differ)
                ways = " and ".join({"mismatch": "walk"}.get(w, w) for w in ("index", "flat", "mismatch")
                                    if w in index.choices)
            t0 = time.perf_counter()
            if what == "nearest":
                got = index.search(Q[qs], qids[qs], salt, how=how)
            else:
                got = index.within(Q[qs], qids[qs], salt, radius[qs], how=how)
            times[how] = (time.perf_counter() - t0) * n / nq
            fields = ("d1", "d2", "n1", "cid", "key") if what == "nearest" else ("le", "lt", "key", "cid")
            head = type(got)(*(getattr(got, f)[: ps.size] for f in got.__dataclass_fields__))
            if not _equal(head, plain, fields):
                raise SystemExit(f"{name} {what} ({how}): the index differs from the plain kernel")
        rows.append({"shape": name, "search": what, "vars": space.n_vars, "points": index.P.shape[0],
                     "groups": index.gprof.shape[0], "mb": nbytes(index) / 2**20,
                     "plain": t_plain, "build": t_build, "auto": times["auto"],
                     "index": times["index"], "choice": ways})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000, help="originals = avatars = block size")
    p.add_argument("--queries", type=int, default=20_000, help="queries timed through the index (scaled to n)")
    p.add_argument("--plain-sample", type=int, default=2_000, help="queries timed through the plain kernel")
    p.add_argument("--shape", action="append", help=f"one of {', '.join(SHAPES)} (repeatable; default all)")
    p.add_argument("--columns", help="comma-separated variables to keep (default: all of the shape's)")
    a = p.parse_args()
    columns = a.columns.split(",") if a.columns else None
    # compile once, outside the timings
    Q, C, space = encode(*(lambda s: (s.originals, s.avatars))(make("default", 300)))
    IX.CandidateIndex(C, np.arange(300), space).search(Q, np.arange(300), 1)
    IX.CandidateIndex(C, np.arange(300), space).within(Q, np.arange(300), 1, np.full(300, 0.1))
    IX.plain_search(Q, np.arange(300), C, np.arange(300), space, 1)
    IX.plain_within(Q, np.arange(300), C, np.arange(300), space, 1, np.full(300, 0.1))
    print(f"one block: n = {a.n:,} queries x {a.n:,} candidates; seconds (index and plain scaled to n queries)")
    head = (f"{'shape':<18}{'search':<9}{'vars':>5}{'points':>8}{'groups':>8}{'MiB':>7}{'plain':>9}{'build':>8}"
            f"{'index+race':>11}{'traversal':>10}{'ratio':>7}{'speed-up':>9}  way")
    print(head)
    for name in a.shape or SHAPES:
        for r in bench_shape(name, a.n, a.queries, a.plain_sample, columns):
            total = r["build"] + r["auto"]
            print(f"{r['shape']:<18}{r['search']:<9}{r['vars']:>5}{r['points']:>8,}{r['groups']:>8,}{r['mb']:>7.0f}"
                  f"{r['plain']:>9.2f}"
                  f"{r['build']:>8.2f}{r['auto']:>11.2f}{r['index']:>10.2f}{total / r['plain']:>7.2f}"
                  f"{r['plain'] / total:>8.1f}x  {r['choice']}", flush=True)


if __name__ == "__main__":
    main()
