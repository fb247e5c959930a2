"""The categorical walk (``kernels/mismatch.py``) and the plain scan's mismatch filter
(``kernels/flat.py``) against the numpy brute force (``tests/brute.py``), on census-like
layouts: 6 to 12 categoricals of 2 to 3,000 skewed levels, nulls everywhere, duplicated
records, integer-valued numbers (distances exactly on a mismatch bound). No Spark here."""

import numpy as np
import pytest

import brute as B
from avatar_metrics.kernels import gower as K
from avatar_metrics.kernels import index as IX
from avatar_metrics.kernels.index import CandidateIndex

WAYS = ("index", "flat", "mismatch", "auto")
NEAREST_FIELDS = ("d1", "d2", "n1", "cid", "key")
# where the race dropped the walk or the index, it and the race's pick each take one query, then
# it takes the rest (``_at_scale``: the walk, then the index; the pick takes it in tests/test_kernel.py)
RACE_ALWAYS = {"race_min_queries": 1, "race_decide": 1, "race_early": 1, "race_margin": 1.0,
               "race_explore": 1e9, "race_explore_queries": 1, "race_explore_slack": 1e9}


def census_like(seed: int):
    """(Q, C, space): queries and candidates of a census-like layout."""
    rng = np.random.default_rng(seed)
    n_cat = int(rng.integers(6, 13))
    n_num = int(rng.integers(0, 4))
    nq, nc = int(rng.integers(30, 120)), int(rng.integers(50, 400))
    levels = [int(rng.choice([2, 3, 5, 7, 16, 40, 3000])) for _ in range(n_cat)]
    order = rng.permutation(n_cat + n_num)  # categoricals and numbers interleaved in V
    is_cat = np.zeros(n_cat + n_num, dtype=bool)
    is_cat[order[:n_cat]] = True

    def table(n):
        X = np.empty((n, n_cat + n_num))
        k = 0
        for v in range(n_cat + n_num):
            if is_cat[v]:
                p = 1.0 / np.arange(1, levels[k] + 1) ** rng.uniform(0.5, 2.0)  # skewed (Zipf)
                X[:, v] = rng.choice(levels[k], n, p=p / p.sum())
                k += 1
            else:
                X[:, v] = rng.integers(0, 5, n)  # integer-valued: terms of 0, 1/4, ... sums on integers
            X[rng.random(n) < 0.08, v] = np.nan
        return X

    Q, C = table(nq), table(nc)
    C[: nc // 5] = C[nc // 5: 2 * (nc // 5)]  # duplicated records
    Q[: nq // 4] = C[rng.integers(0, nc, nq // 4)]  # queries that are candidates: distance 0
    ranges = np.where(is_cat, 0.0, 4.0)
    return Q, C, K.Space(is_cat=is_cat, ranges=ranges), rng


@pytest.mark.parametrize("table_bytes", [IX.TABLE_BYTES, 40_000, 1])
@pytest.mark.parametrize("seed", range(6))
def test_every_way_gives_the_brute_force_state(seed, table_bytes):
    """Nearest (top-2, ties, the keyed tie-break) and within (caps 1, 2, 5 and above every
    count): every way of the race, the race itself, the walk with every level kept, with few
    (the rest finishes with the scan) and with none, equal the brute force bit for bit; so does
    a later pass started from a first part's reach."""
    Q, C, space, rng = census_like(seed)
    nq, nc = Q.shape[0], C.shape[0]
    qids = rng.integers(-(2**40), 2**40, nq)
    cids = rng.permutation(np.arange(nc)).astype(np.int64) * 13 + 5
    salt = K.search_salt(seed, "mismatch")
    want = B.search(Q, qids, C, cids, space, salt)
    tuning = IX.Tuning(table_bytes=table_bytes, **RACE_ALWAYS)
    idx = CandidateIndex(C, cids, space, tuning)
    for how in WAYS:
        got = idx.search(Q, qids, salt, how=how)
        for f in NEAREST_FIELDS:
            assert np.array_equal(getattr(got, f), getattr(want, f)), (how, f)
    half = nc // 2
    first = CandidateIndex(C[:half], cids[:half], space, tuning).search(Q, qids, salt)
    bound = K.State.empty(nq)
    bound.d2[:] = first.d2
    rest = CandidateIndex(C[half:], cids[half:], space, tuning)
    for how in WAYS:
        merged = B.merge(first, rest.search(Q, qids, salt, bound, how=how))
        for f in NEAREST_FIELDS:
            assert np.array_equal(getattr(merged, f), getattr(want, f)), (how, f)
    # the nearest only (first_only): the same d1, n1 and tie-break, d2 kept at d1, by every way,
    # with no more distances evaluated than the top-2 search of the same way
    for how in WAYS:
        fresh = CandidateIndex(C, cids, space, tuning)
        fresh.search(Q, qids, salt, how=how)
        top2 = int(fresh.work[0])
        fresh = CandidateIndex(C, cids, space, tuning)
        got = fresh.search(Q, qids, salt, how=how, first_only=True)
        for f in ("d1", "n1", "cid", "key"):
            assert np.array_equal(getattr(got, f), getattr(want, f)), (how, f)
        assert np.array_equal(got.d2, got.d1), how
        if how != "auto":  # (the race's samples may fall differently)
            assert int(fresh.work[0]) <= top2, how
    # within: radii at a candidate's distance (ties), on a mismatch count, or at no distance
    radius = K.gower_block(Q, C, space)[np.arange(nq), rng.integers(0, nc, nq)]
    radius[rng.random(nq) < 0.2] = rng.integers(1, 4) / space.n_vars
    le, lt, key, cid = B.within(Q, qids, C, cids, space, salt, radius)
    for how in WAYS:
        got = idx.within(Q, qids, salt, radius, how=how)
        assert np.array_equal(got.le, le) and np.array_equal(got.lt, lt), how
        assert np.array_equal(got.key, key) and np.array_equal(got.cid, cid), how
        for cap in (1, 2, 5, nc + 1):
            got = idx.within(Q, qids, salt, radius, how=how, cap=cap)
            free = ~((le > cap) & (lt > 0))
            assert np.array_equal(np.minimum(got.le, cap + 1), np.minimum(le, cap + 1)), (how, cap)
            assert np.array_equal(got.lt > 0, lt > 0), (how, cap)
            assert np.array_equal(got.le[free], le[free]) and np.array_equal(got.key[free], key[free]), (how, cap)


def test_the_walk_evaluates_the_points_tied_at_its_bound():
    """The walk stops strictly past a query's reach: the points whose distance is exactly the
    limit (a mismatch count, numbers equal) are evaluated. Stopping at the bound (``>=``)
    would miss the third of three candidates tied at d1 = d2 = 1 / |V| (n1 and the tie-break),
    and the candidates exactly at a radius of 2 / |V| (``le``, the winner at the radius)."""
    space = K.Space(is_cat=np.array([True, True, True, False]), ranges=np.array([0.0, 0.0, 0.0, 4.0]))
    Q = np.array([[0, 0, 0, 1.0]])
    C = np.array([[1, 0, 0, 1.0], [0, 1, 0, 1.0], [0, 0, 1, 1.0],  # one mismatch each: tied at 1/4
                  [1, 1, 0, 1.0], [0, 1, 1, 1.0],  # two: at 2/4
                  [1, 1, 1, 1.0], [2, 2, 2, 0.0]])
    cids = np.array([10, 11, 12, 13, 14, 15, 16], dtype=np.int64)
    qids = np.array([7], dtype=np.int64)
    salt = K.search_salt(3, "tied")
    idx = CandidateIndex(C, cids, space)
    assert idx.mismatch().levels >= 2
    want = B.search(Q, qids, C, cids, space, salt)
    assert want.n1[0] == 3 and want.d1[0] == want.d2[0] == 0.25
    got = idx.search(Q, qids, salt, how="mismatch")
    for f in NEAREST_FIELDS:
        assert np.array_equal(getattr(got, f), getattr(want, f)), f
    assert idx.work[0] == 3  # the three at one mismatch, no other (the walk stopped past level 1)
    radius = np.array([0.5])
    le, lt, key, cid = B.within(Q, qids, C, cids, space, salt, radius)
    assert (le[0], lt[0]) == (5, 3)
    w = idx.within(Q, qids, salt, radius, how="mismatch")
    assert (w.le[0], w.lt[0], w.key[0], w.cid[0]) == (le[0], lt[0], key[0], cid[0])


def test_the_scan_after_the_walk_leaves_out_what_the_walk_folded():
    """With one level kept, a query whose reach goes past it finishes with the plain scan of the
    points of two mismatches or more only: each point is counted once (a duplicate fold would
    count the candidates within the radius twice)."""
    rng = np.random.default_rng(4)
    space = K.Space(is_cat=np.array([True] * 6), ranges=np.zeros(6))
    C = rng.integers(0, 2, (300, 6)).astype(float)
    Q = rng.integers(0, 2, (40, 6)).astype(float)
    cids = np.arange(300, dtype=np.int64)
    qids = np.arange(40, dtype=np.int64)
    salt = K.search_salt(0, "scan after walk")
    one = CandidateIndex(C, cids, space).mismatch().bytes_to(1)
    idx = CandidateIndex(C, cids, space, IX.Tuning(table_bytes=one))  # levels 0 and 1 only
    assert idx.mismatch().levels == 1
    radius = np.full(40, 4 / 6)
    le, lt, key, cid = B.within(Q, qids, C, cids, space, salt, radius)
    got = idx.within(Q, qids, salt, radius, how="mismatch")
    assert np.array_equal(got.le, le) and np.array_equal(got.lt, lt) and np.array_equal(got.cid, cid)


@pytest.mark.parametrize("slack,taken", [(1e9, "mismatch"), (0.0, "flat")])
def test_a_race_won_by_the_scan_is_checked_at_scale_against_the_walk(monkeypatch, slack, taken):
    """A race's sample meets the ways a few queries a call, which favours the plain scan on
    census-shaped data (a query of a wide reach costs the walk the scan and its lookups). So
    where the race picks the scan and did not drop the walk by far, the first call of each
    kind times the walk on race_explore_queries queries beside the scan, and the walk takes the
    rest when it was at most race_explore_slack times as slow (here: always, or never); a later
    call does what the first decided, and every state is the brute force's."""
    Q, C, space, _ = census_like(4)
    nq, nc = Q.shape[0], C.shape[0]
    qids = np.arange(nq, dtype=np.int64)
    cids = np.arange(nc, dtype=np.int64) + 10_000
    salt = K.search_salt(4, "at scale")
    want = B.search(Q, qids, C, cids, space, salt)
    clock = [0.0]
    real_by = CandidateIndex._by

    def rigged(self, way, *args):  # the scan wins every race by a little, the index loses by far
        clock[0] += {"flat": 1.0, "mismatch": 1.5, "index": 1e6}[way]
        return real_by(self, way, *args)

    monkeypatch.setattr(CandidateIndex, "_by", rigged)
    monkeypatch.setattr(IX.time, "thread_time", lambda: clock[0])
    tuning = IX.Tuning(race_min_queries=4, race_stride=4, race_decide=3, race_early=1, race_margin=1.2,
                       race_explore=8.0, race_explore_queries=5, race_explore_slack=slack)
    idx = CandidateIndex(C, cids, space, tuning)
    assert idx.ways() == ("index", "flat", "mismatch")
    for _ in range(2):  # the second call: decided by the first, no more timing
        got = idx.search(Q, qids, salt)
        for f in NEAREST_FIELDS:
            assert np.array_equal(getattr(got, f), getattr(want, f)), f
    assert [(way, seen) for (way, _), seen in idx._seen.items()] == [("mismatch", slack > 1)]
    assert set(idx.choices) == {taken}
