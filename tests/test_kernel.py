"""The numpy kernel against the brute-force reference: no Spark here."""

import math

import numpy as np
import pandas as pd
import pytest

import brute as B
import reference as ref
from avatar_metrics.kernels import gower as K
from avatar_metrics.kernels import terms as T
from avatar_metrics.kernels.keyed import tie_keys
from data import KINDS, perturbed, tricky

VARS = list(KINDS)


def encode(df, cats):
    """Encode like the engine: numbers as float64, categories as codes, null as NaN."""
    X = np.empty((len(df), len(VARS)))
    for i, v in enumerate(VARS):
        s = df[v]
        if KINDS[v] == "numeric":
            X[:, i] = s.to_numpy(dtype=float, na_value=np.nan)
        else:
            codes = pd.Index(cats[v]).get_indexer(s.astype(object))
            X[:, i] = np.where(s.isna().to_numpy(), np.nan, codes)
    return X


@pytest.fixture(scope="module")
def tables():
    O = tricky(60, 3)
    A = perturbed(O, 4)
    cats = {v: pd.unique(pd.concat([O[v], A[v]]).dropna().astype(object)) for v in VARS if KINDS[v] == "categorical"}
    ranges = {v: ref.column_range([O, A], v) for v in VARS if KINDS[v] == "numeric"}
    space = K.Space(
        is_cat=np.array([KINDS[v] == "categorical" for v in VARS]),
        ranges=np.array([ranges.get(v, 0.0) for v in VARS]),
    )
    return O, A, encode(O, cats), encode(A, cats), space, ranges


def test_tie_key_matches_reference():
    salt = K.search_salt(7, "linkability/A")
    q = np.array([0, 1, 2**40, -5], dtype=np.int64)
    c = np.array([3, 0, 17, 2**62], dtype=np.int64)
    got = tie_keys(salt, q, c)
    want = [ref.tie_key(7, "linkability/A", int(a), int(b)) for a, b in zip(q, c)]
    assert got.tolist() == want
    assert all(0 <= k < 2**63 for k in want)
    # another search or seed gives other keys
    assert tie_keys(K.search_salt(7, "linkability/B"), q, c).tolist() != want
    assert tie_keys(K.search_salt(8, "linkability/A"), q, c).tolist() != want


@pytest.mark.parametrize("seed", range(8))
def test_block_lower_bound_never_exceeds_a_distance(tables, seed):
    """The summary bound that lets a query skip a block: at most the distance to each row
    of the block, bit for bit, on blocks of neighbouring values (as the engine cuts them)
    and with the queries' categories the block lacks encoded as -1."""
    O, A, Q, C, space, _ = tables
    rng = np.random.default_rng(seed)
    order = np.argsort(C[:, rng.integers(C.shape[1])], kind="stable")
    positive = reached = 0
    for rows in np.array_split(order, int(rng.integers(1, 9))):
        if rows.size == 0:
            continue
        Cb = C[rows]
        Qb = Q.copy()
        for v in np.flatnonzero(space.is_cat):
            present = np.isin(Qb[:, v], Cb[:, v])
            Qb[:, v] = np.where(np.isnan(Qb[:, v]) | present, Qb[:, v], -1.0)
        lb = T.lower_bounds(Qb, T.summarize(Cb, space), space)
        nearest = K.gower_block(Q, Cb, space).min(axis=1)
        assert (lb <= nearest).all()
        positive += int((lb > 0).sum())
        reached += int((lb == nearest).sum())
    assert positive > 0 and reached > 0


def test_block_lower_bound_of_nulls_and_extremes():
    space = K.Space(is_cat=np.array([False, True, False]), ranges=np.array([4.0, 0.0, 0.0]))
    C = np.array([[1.0, 0.0, np.nan], [2.0, np.nan, np.nan]])
    s = T.summarize(C, space)
    Q = np.array([
        [1.5, 0.0, np.nan],  # inside the box: 0
        [6.0, -1.0, 3.0],  # 4/4 + absent category 1 + a number where every row is null 1
        [np.nan, np.nan, np.nan],  # the first variable has no null: 1
        [np.inf, 0.0, np.nan],
    ])
    lb = T.lower_bounds(Q, s, space)
    assert lb[:3].tolist() == [0.0, 3.0 / 3, 1.0 / 3]
    assert lb[3] == np.inf
    assert (lb <= K.gower_block(np.where(Q < 0, 5.0, Q), C, space).min(axis=1)).all()


def test_gower_block_bit_for_bit(tables):
    O, A, Q, C, space, ranges = tables
    D = K.gower_block(Q, C, space)
    orecs, arecs = O.to_dict("records"), A.to_dict("records")
    for i in range(0, len(O), 7):
        for j in range(len(A)):
            assert D[i, j] == ref.gower(orecs[i], arecs[j], VARS, KINDS, ranges), (i, j)


SUBSETS = [VARS, ["i_small", "cat2", "flag"], ["const", "const_null", "f_small"]]


@pytest.mark.parametrize("subset", range(len(SUBSETS)))
@pytest.mark.parametrize("sub_block,max_elements", [(1, 1), (7, 20), (13, 10**6), (4096, 1 << 21)])
def test_search_matches_reference(tables, subset, sub_block, max_elements):
    O, A, Q, C, space, ranges = tables
    names = SUBSETS[subset]
    cols = [VARS.index(v) for v in names]
    space = K.Space(is_cat=space.is_cat[cols], ranges=space.ranges[cols])
    Q, C = Q[:, cols], C[:, cols]
    want = ref.nearest(O, A, names, KINDS, ranges, seed=11, search="s")
    qids = np.arange(len(O), dtype=np.int64)
    cids = np.arange(len(A), dtype=np.int64)
    st = B.search(Q, qids, C, cids, space, K.search_salt(11, "s"), sub_block=sub_block, max_elements=max_elements)
    got = list(zip(st.d1.tolist(), st.d2.tolist(), st.n1.tolist(), st.cid.tolist()))
    assert got == want
    assert any(n > 1 for _, _, n, _ in want), "the data must hold ties"
    assert any(d1 == d2 for d1, d2, _, _ in want)


def test_merge_is_order_free(tables):
    O, A, Q, C, space, ranges = tables
    salt = K.search_salt(0, "s")
    qids = np.arange(len(O), dtype=np.int64)
    cids = np.arange(len(A), dtype=np.int64)
    rng = np.random.default_rng(0)
    whole = B.search(Q, qids, C, cids, space, salt)
    for _ in range(3):
        perm = rng.permutation(len(A))
        pieces = np.array_split(perm, 5)
        states = [B.search(Q, qids, C[p], cids[p], space, salt) for p in pieces]
        rng.shuffle(states)
        acc = K.State.empty(len(O))
        for s in states:
            acc = B.merge(s, acc) if rng.random() < 0.5 else B.merge(acc, s)
        for f in ("d1", "d2", "n1", "cid", "key"):
            assert np.array_equal(getattr(acc, f), getattr(whole, f)), f


def test_single_candidate_has_no_second_distance(tables):
    O, A, Q, C, space, _ = tables
    st = B.search(Q[:3], np.arange(3), C[:1], np.array([9]), space, 1)
    assert np.all(np.isinf(st.d2)) and st.cid.tolist() == [9, 9, 9] and st.n1.tolist() == [1, 1, 1]


def test_null_rules():
    space = K.Space(is_cat=np.array([False, True, False]), ranges=np.array([2.0, 0.0, 0.0]))
    nan = math.nan
    Q = np.array([[nan, nan, nan], [1.0, 0.0, 3.0]])
    C = np.array([[nan, nan, nan], [nan, 1.0, 3.0]])
    D = K.gower_block(Q, C, space)
    # null = null adds 0; null against a value adds 1; a constant column adds 0 between values
    assert D[0, 0] == 0.0
    assert D[0, 1] == (0.0 + 1.0 + 1.0) / 3
    assert D[1, 0] == 3.0 / 3
    assert D[1, 1] == (1.0 + 1.0 + 0.0) / 3


# ------------------------------------------------------------------ the index (fast path)

import avatar_metrics.kernels.index as IX  # noqa: E402
from avatar_metrics.kernels.index import CandidateIndex  # noqa: E402

# the three ways of the index: its traversal, the plain scan of its points, and the
# race between them (forced on every call here: the sample is one query in 32)
HOWS = ("index", "flat", "mismatch", "auto")


@pytest.fixture
def race_always():
    # and stopped after its first query whenever the two ways' times differ: the rest of the
    # sample must still be searched by the winner. Where the race dropped the walk or the index,
    # it and the race's pick each take one query, and the pick takes the rest (``_at_scale``; the
    # walk or the index takes it in tests/test_mismatch.py): each query searched once, by one way
    return {"race_min_queries": 1, "race_decide": 1, "race_early": 1, "race_margin": 1.0,
            "race_explore": 1e9, "race_explore_queries": 1, "race_explore_slack": 0.0}


# the trees of boxes over large groups: as the job builds them (groups of 64 points or more, none in
# these small layouts), or over every group of 2 points or more, down to leaves of 1 or 2 points; the
# tree over all the groups (counts within a radius) down to leaves of 8 points, or of 1 or 2
TREES = {"none": None, "leaf1": (2, 1), "leaf2": (2, 2)}


@pytest.fixture(params=list(TREES))
def trees(request):
    if not TREES[request.param]:
        return {}
    least, leaf = TREES[request.param]
    return {"tree_min": least, "tree_leaf": leaf, "outer_leaf": leaf}


def built(C, cids, space, tuning=IX.TUNING):
    idx = CandidateIndex(C, cids, space, tuning)
    # a tree over every group of tree_min points or more with values on two numeric variables or
    # more, and over no other (with one, the sorted scan meets the points in order of distance)
    numeric = ~space.is_cat & (space.ranges > 0)
    valued = (~np.isnan(idx.P[idx.gstart][:, numeric])).sum(axis=1) if idx.gstart.size else np.zeros(0)
    assert np.array_equal(idx.tree[6] >= 0, (idx.gstop - idx.gstart >= tuning.tree_min) & (valued >= 2))
    return idx


def index_search(Q, qids, C, cids, space, salt, state=None, how="auto", tuning=IX.TUNING, first_only=False):
    return built(C, cids, space, tuning).search(Q, qids, salt, state, how=how, first_only=first_only)


def assert_nearest_only(st, plain, what):
    """The nearest only (``first_only``): d1, n1 and the tie-break of the top-2 search, d2 kept at d1."""
    for f in ("d1", "n1", "cid", "key"):
        assert np.array_equal(getattr(st, f), getattr(plain, f)), (what, f)
    assert np.array_equal(st.d2, st.d1), what


@pytest.mark.parametrize("subset", range(len(SUBSETS)))
def test_index_matches_reference(tables, subset):
    O, A, Q, C, space, ranges = tables
    names = SUBSETS[subset]
    cols = [VARS.index(v) for v in names]
    space = K.Space(is_cat=space.is_cat[cols], ranges=space.ranges[cols])
    want = ref.nearest(O, A, names, KINDS, ranges, seed=11, search="s")
    st = index_search(Q[:, cols], np.arange(len(O)), C[:, cols], np.arange(len(A)), space, K.search_salt(11, "s"))
    assert list(zip(st.d1.tolist(), st.d2.tolist(), st.n1.tolist(), st.cid.tolist())) == want


def random_space(rng, nv):
    is_cat = rng.random(nv) < 0.5
    return is_cat


@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("AM_RANDOM_LAYOUTS", "24"))))
def test_index_equals_plain_kernel_on_random_layouts(seed, race_always, trees):
    """Every path: exact and one-off profiles, far profiles, scans, null scan values, duplicates, negative ids;
    the index's traversal, its plain scan and the race between them; the plain compiled kernel."""
    rng = np.random.default_rng(seed)
    nv = int(rng.integers(1, 7))
    is_cat = rng.random(nv) < 0.5
    nq, nc = int(rng.integers(1, 60)), int(rng.integers(1, 80))
    # every fifth layout has many levels: long lists of groups one position away, many far groups
    levels = int(rng.integers(1, 6)) if seed % 5 else int(rng.integers(20, 60))

    def table(n):
        X = np.empty((n, nv))
        for v in range(nv):
            if is_cat[v]:
                X[:, v] = rng.integers(-1 if seed % 3 == 0 else 0, levels, n)  # -1: a value the block lacks
            else:
                X[:, v] = np.round(rng.normal(0, 2, n), int(rng.integers(0, 3)))
            X[rng.random(n) < 0.15, v] = np.nan
        return X

    Q, C = table(nq), table(nc)
    C[: nc // 4] = C[nc // 4 : 2 * (nc // 4)]  # duplicated candidates
    ranges = np.array([0.0 if is_cat[v] else (np.nanmax(np.r_[Q[:, v], C[:, v], 0]) - np.nanmin(np.r_[Q[:, v], C[:, v], 0])) for v in range(nv)])
    if seed % 4 == 1 and nv > 1:
        ranges[0] = 0.0  # a constant variable
    space = K.Space(is_cat=is_cat, ranges=ranges)
    qids = rng.integers(-(2**62), 2**62, nq)
    cids = rng.permutation(np.arange(-nc, nc))[:nc].astype(np.int64) * 7919
    salt = K.search_salt(seed, "x")
    plain = B.search(Q, qids, C, cids, space, salt)
    compiled = IX.plain_search(Q, qids, C, cids, space, salt)
    for f in ("d1", "d2", "n1", "cid", "key"):
        assert np.array_equal(getattr(compiled, f), getattr(plain, f)), f
    tuning = IX.Tuning(**race_always, **trees)
    for how in HOWS:
        fast = index_search(Q, qids, C, cids, space, salt, how=how, tuning=tuning)
        for f in ("d1", "d2", "n1", "cid", "key"):
            assert np.array_equal(getattr(fast, f), getattr(plain, f)), (how, f)
        # a state carried in from another block merges exactly too
        half = nc // 2
        first = index_search(Q, qids, C[:half], cids[:half], space, salt, how=how, tuning=tuning)
        both = index_search(Q, qids, C[half:], cids[half:], space, salt, first, how=how, tuning=tuning)
        for f in ("d1", "d2", "n1", "cid", "key"):
            assert np.array_equal(getattr(both, f), getattr(plain, f)), (how, f)
        # a later pass started from the first part's reach (d1 = inf, d2 = its second distance),
        # as the engine's later chains start: merged with the first part, exact
        bound = K.State.empty(nq)
        bound.d2[:] = first.d2
        rest = index_search(Q, qids, C[half:], cids[half:], space, salt, bound, how=how, tuning=tuning)
        assert (rest.d2 <= first.d2).all() and (np.isinf(rest.d1) | (rest.d1 <= first.d2)).all(), how
        merged = B.merge(first, rest)
        for f in ("d1", "d2", "n1", "cid", "key"):
            assert np.array_equal(getattr(merged, f), getattr(plain, f)), (how, f)
        # the nearest only, whole, in two parts, and from the first part's reach: it prunes by d1,
        # and the points tied at d1 all count
        one = index_search(Q, qids, C, cids, space, salt, how=how, tuning=tuning, first_only=True)
        assert_nearest_only(one, plain, how)
        first = index_search(Q, qids, C[:half], cids[:half], space, salt, how=how, tuning=tuning, first_only=True)
        both = index_search(Q, qids, C[half:], cids[half:], space, salt, first, how=how, tuning=tuning,
                            first_only=True)
        assert_nearest_only(both, plain, how)
        bound = K.State.empty(nq)
        bound.d2[:] = first.d2
        rest = index_search(Q, qids, C[half:], cids[half:], space, salt, bound, how=how, tuning=tuning,
                            first_only=True)
        merged = B.merge(first, rest)
        for f in ("d1", "n1", "cid", "key"):
            assert np.array_equal(getattr(merged, f), getattr(plain, f)), (how, f)
    assert_nearest_only(IX.plain_search(Q, qids, C, cids, space, salt, first_only=True), plain, "plain")


# ------------------------------------------------------------------ counts within a radius


def within_reference(Q, qids, C, cids, space, salt, radius):
    """Record by record: counts at most / less than the radius, smallest (key, id) at it."""
    D = K.gower_block(Q, C, space)  # the plain kernel's distances are checked against the reference above
    out = []
    for i in range(Q.shape[0]):
        at = [(tie_keys(salt, qids[i : i + 1], cids[j : j + 1])[0], cids[j]) for j in range(C.shape[0])
              if D[i, j] == radius[i]]
        best = min(at) if at else (K.NO_KEY, -1)
        out.append((int((D[i] <= radius[i]).sum()), int((D[i] < radius[i]).sum()), int(best[0]), int(best[1])))
    return out


@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("AM_RANDOM_LAYOUTS", "24"))))
def test_within_index_equals_plain_kernel(seed, race_always, trees):
    """The count primitive: index against the plain kernel, radii at a candidate's distance (ties) or not."""
    rng = np.random.default_rng(1000 + seed)
    nv = int(rng.integers(1, 6))
    is_cat = rng.random(nv) < 0.5
    nq, nc = int(rng.integers(1, 40)), int(rng.integers(1, 60))
    levels = 3 if seed % 5 else 40

    def table(n):
        X = np.where(is_cat, rng.integers(0, levels, (n, nv)), np.round(rng.normal(0, 2, (n, nv)), 1)).astype(float)
        X[rng.random((n, nv)) < 0.15] = np.nan
        return X

    Q, C = table(nq), table(nc)
    C[: nc // 3] = C[nc // 3 : 2 * (nc // 3)]  # duplicated candidates: ties at the radius
    ranges = np.array([0.0 if is_cat[v] else 4.0 for v in range(nv)])
    if seed % 4 == 1:
        ranges[0] = 0.0
    space = K.Space(is_cat=is_cat, ranges=ranges)
    qids = rng.integers(-(2**40), 2**40, nq)
    cids = rng.permutation(np.arange(nc)).astype(np.int64) * 31 - 7
    salt = K.search_salt(seed, "hidden_rate")
    own = rng.integers(0, nc, nq)
    radius = K.gower_block(Q, C, space)[np.arange(nq), own]
    radius[rng.random(nq) < 0.2] = rng.random() * 0.8  # some radii at no candidate's distance
    want = within_reference(Q, qids, C, cids, space, salt, radius)
    plain = B.within(Q, qids, C, cids, space, salt, radius, max_elements=int(rng.integers(1, 200)))
    assert list(zip(*(a.tolist() for a in plain))) == want
    got = IX.plain_within(Q, qids, C, cids, space, salt, radius)
    assert list(zip(got.le.tolist(), got.lt.tolist(), got.key.tolist(), got.cid.tolist())) == want
    tuning = IX.Tuning(**race_always, **trees)
    idx = built(C, cids, space, tuning)
    for how in HOWS:
        got = idx.within(Q, qids, salt, radius, how=how)
        assert list(zip(got.le.tolist(), got.lt.tolist(), got.key.tolist(), got.cid.tolist())) == want, how
    # the cap (spec: Local Cloaking, Cap): a query may be left once le > cap and lt > 0; then only
    # min(le, cap + 1) and lt > 0 are exact, every other query's result is exact whole; blocks add up
    half = nc // 2
    want_le, want_lt = np.array([w[0] for w in want]), np.array([w[1] for w in want])
    for cap in (1, 2, 5, nc + 1):
        free = ~((want_le > cap) & (want_lt > 0))
        for how in HOWS:
            got = idx.within(Q, qids, salt, radius, how=how, cap=cap)
            assert np.array_equal(np.minimum(got.le, cap + 1), np.minimum(want_le, cap + 1)), (how, cap)
            assert np.array_equal(got.lt > 0, want_lt > 0), (how, cap)
            rows = list(zip(got.le.tolist(), got.lt.tolist(), got.key.tolist(), got.cid.tolist()))
            assert [r for r, f in zip(rows, free) if f] == [w for w, f in zip(want, free) if f], (how, cap)
        parts = [CandidateIndex(C[s], cids[s], space, tuning).within(Q, qids, salt, radius, cap=cap)
                 for s in (slice(0, half), slice(half, nc)) if C[s].shape[0]]
        assert np.array_equal(np.minimum(sum(p.le for p in parts), cap + 1), np.minimum(want_le, cap + 1)), cap
        # the counts of earlier blocks count toward the cap (``base``), as the engine's later passes
        # give them: a query already past its cap counts nothing more, the others as before
        if half:
            first = CandidateIndex(C[:half], cids[:half], space, tuning).within(Q, qids, salt, radius, cap=cap)
            rest = CandidateIndex(C[half:], cids[half:], space, tuning)
            for how in HOWS:
                second = rest.within(Q, qids, salt, radius, how=how, cap=cap, base=(first.le, first.lt))
                le, lt = first.le + second.le, first.lt + second.lt
                assert np.array_equal(np.minimum(le, cap + 1), np.minimum(want_le, cap + 1)), (how, cap)
                assert np.array_equal(lt > 0, want_lt > 0), (how, cap)
                assert np.array_equal(le[free], want_le[free]) and np.array_equal(lt[free], want_lt[free])
                done = (first.le > cap) & (first.lt > 0)
                assert (second.le[done] == 0).all() and (second.lt[done] == 0).all(), (how, cap)
    # counts of two blocks add up, winners take the smallest
    a = CandidateIndex(C[:half], cids[:half], space, tuning).within(Q, qids, salt, radius) if half else None
    b = CandidateIndex(C[half:], cids[half:], space, tuning).within(Q, qids, salt, radius)
    if a is not None:
        take = (a.key < b.key) | ((a.key == b.key) & (a.cid < b.cid))
        merged = list(zip((a.le + b.le).tolist(), (a.lt + b.lt).tolist(), np.where(take, a.key, b.key).tolist(),
                          np.where(take, a.cid, b.cid).tolist()))
        assert merged == want


def test_the_cap_leaves_a_query_early():
    """Past its cap (and with a candidate strictly inside), the index stops counting a query:
    half of 3,000 candidates lie within each radius, a cap of 10 stops after a few nodes (a node
    wholly inside the radius is counted at once, so a query may pass its cap by a node)."""
    rng = np.random.default_rng(0)
    n = 3000
    C = np.column_stack([rng.integers(0, 300, n), rng.integers(0, 5, n), rng.normal(0, 1, n)]).astype(float)
    space = K.Space(is_cat=np.array([True, True, False]), ranges=np.array([0.0, 0.0, 8.0]))
    Q, qids, cids = C[:50].copy(), np.arange(50), np.arange(n)
    radius = np.sort(K.gower_block(Q, C, space), axis=1)[:, n // 2]
    idx = CandidateIndex(C, cids, space)
    full = idx.within(Q, qids, 1, radius, how="index")
    capped = idx.within(Q, qids, 1, radius, how="index", cap=10)
    assert (full.le > 1000).all() and (capped.le > 10).all() and (capped.le < full.le // 3).all()


def test_empty_block_changes_nothing():
    space = K.Space(is_cat=np.array([False, True]), ranges=np.array([1.0, 0.0]))
    idx = built(np.zeros((0, 2)), np.zeros(0, dtype=np.int64), space)
    Q = np.array([[0.5, 1.0], [np.nan, 0.0]])
    carried = IX.plain_search(Q, np.arange(2), np.array([[0.1, 1.0]]), np.array([7]), space, 3)
    got = idx.search(Q, np.arange(2), 3, carried)
    for f in ("d1", "d2", "n1", "cid", "key"):
        assert np.array_equal(getattr(got, f), getattr(carried, f)), f
    w = idx.within(Q, np.arange(2), 3, np.array([1.0, 0.0]))
    assert w.le.tolist() == [0, 0] and w.lt.tolist() == [0, 0] and w.cid.tolist() == [-1, -1]


def test_race_times_the_plain_scan_from_the_state_before_the_sample(monkeypatch):
    """The plain scan of the race must do the work it would do in the index's place: start from
    the state the queries had before the index folded the sample, not from the index's result
    (from there it skips the search for the nearest points and wins races it should lose)."""
    rng = np.random.default_rng(5)
    space = K.Space(is_cat=np.array([True, False]), ranges=np.array([0.0, 1.0]))
    C = np.c_[rng.integers(0, 3, 2000), rng.integers(0, 5, 2000) / 4]
    Q = np.c_[rng.integers(0, 3, 600), rng.random(600)]
    idx = built(C, np.arange(2000, dtype=np.int64), space, IX.Tuning(race_min_queries=1))
    seen = []
    real = IX._flat

    def recording(Qa, QC, qsel, sq, cols, ranges, nv, members, moff, mode, a, lim, *rest):
        if Qa.shape[0] == Q.shape[0] and rest[-2] == 0:  # the plain scan (not the walk's finish)
            seen.append((qsel.copy(), a[qsel].copy(), lim[qsel].copy()))
        return real(Qa, QC, qsel, sq, cols, ranges, nv, members, moff, mode, a, lim, *rest)

    monkeypatch.setattr(IX, "_flat", recording)  # (a spy: it records the plain scan's calls)
    IX._warm_up()
    carried = IX.plain_search(Q, np.arange(600), C[:50], np.arange(50, dtype=np.int64) + 10**6, space, 9)
    before = (carried.d1.copy(), carried.d2.copy())
    got = idx.search(Q, np.arange(600), 9, carried, how="auto")
    races = [s for s in seen if s[0].size < Q.shape[0] // IX.TUNING.race_stride + 1]
    assert races  # the race ran the plain scan on the sample
    for qsel, d1, d2 in races:
        assert np.array_equal(d1, before[0][qsel]) and np.array_equal(d2, before[1][qsel])
    want = IX.plain_search(Q, np.arange(600), C, np.arange(2000, dtype=np.int64), space, 9, carried)
    for f in ("d1", "d2", "n1", "cid", "key"):
        assert np.array_equal(getattr(got, f), getattr(want, f)), f


@pytest.mark.parametrize("seed", range(3))
def test_trees_at_their_real_size(seed):
    """Groups of thousands of points, searched through trees of the job's own sizes (leaves of
    tree_leaf points, many levels): nearest and within equal the plain compiled kernel, with
    rounded values (ties), nulls in a numeric variable, and a state carried from another block."""
    rng = np.random.default_rng(50 + seed)
    nq, nc, nv = 400, 6000, 7
    is_cat = np.array([False, False, False, False, True, False, False])

    def table(n):
        base = rng.normal(0, 1, (n, 1))
        X = np.round(base * np.arange(1, nv + 1) + rng.normal(0, 1, (n, nv)), 1)
        X[:, 4] = rng.integers(0, 2, n)
        X[rng.random(n) < 0.05, 2] = np.nan
        return X

    Q, C = table(nq), table(nc)
    C[:500] = C[500:1000]
    ranges = np.where(is_cat, 0.0, np.nanmax(np.r_[Q, C], 0) - np.nanmin(np.r_[Q, C], 0))
    space = K.Space(is_cat=is_cat, ranges=ranges)
    qids = np.arange(nq, dtype=np.int64) * 3
    cids = rng.permutation(nc).astype(np.int64) + 10**6
    salt = K.search_salt(seed, "t")
    idx = built(C, cids, space)
    assert (idx.tree[6] >= 0).sum() == 4 and idx.tree[0].shape[0] > 500  # 2 levels x null or not; many nodes
    want = IX.plain_search(Q, qids, C, cids, space, salt)
    carried = IX.plain_search(Q, qids, C[:300], cids[:300], space, salt)
    rest = built(C[300:], cids[300:], space).search(Q, qids, salt, carried, how="index")
    got = idx.search(Q, qids, salt, how="index")
    for f in ("d1", "d2", "n1", "cid", "key"):
        assert np.array_equal(getattr(got, f), getattr(want, f)), f
        assert np.array_equal(getattr(rest, f), getattr(want, f)), f
    radius = K.gower_pairs(Q, C[:nq], space)
    radius[::7] = want.d1[::7]  # at a candidate's distance: ties at the radius
    a = IX.plain_within(Q, qids, C, cids, space, salt, radius)
    b = idx.within(Q, qids, salt, radius, how="index")
    for f in ("le", "lt", "key", "cid"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.le.sum() > nq * 50  # large counts: whole nodes counted at once


def test_profiles_of_many_levels_walk_far_groups_exactly():
    """More than 2**15 levels on one position: the groups' dense codes are 32-bit, not 16
    (``CandidateIndex.gcodes``); few ties with the queries' own codes, so most searches walk
    the groups two positions away and more (``_hamming``, ``_scan_far``), some query codes
    absent from the block. Equal to the plain compiled kernel."""
    rng = np.random.default_rng(3)
    nc, nq = 40_000, 300
    is_cat = np.array([True, True, True, False])

    def table(n, lo):
        return np.c_[rng.integers(lo, 40_000, n), rng.integers(0, 400, n), rng.integers(0, 400, n),
                     np.round(rng.normal(0, 1, n), 1)].astype(float)

    C, Q = table(nc, 0), table(nq, -100)  # codes below 0: values the block lacks
    C[:, 0] = rng.permutation(nc)  # every level once: 40,000 levels
    Q[::5, 1] = np.nan
    space = K.Space(is_cat=is_cat, ranges=np.array([0.0, 0.0, 0.0, 8.0]))
    qids = np.arange(nq, dtype=np.int64)
    cids = np.arange(nc, dtype=np.int64) + 10**6
    salt = K.search_salt(4, "m")
    idx = built(C, cids, space)
    assert idx.gcodes.dtype == np.int32 and np.unique(C[:, 0]).size > 2**15
    want = IX.plain_search(Q, qids, C, cids, space, salt)
    got = idx.search(Q, qids, salt, how="index")
    for f in ("d1", "d2", "n1", "cid", "key"):
        assert np.array_equal(getattr(got, f), getattr(want, f)), f
    assert (want.d2 * 4 >= 2).mean() > 0.5  # most queries reach the groups two positions away


@pytest.mark.parametrize("weak", ["zero", "parity"])
def test_lookups_one_position_away_survive_hash_collisions(weak):
    """The lookups one position away match 64-bit hashes of the profiles without a position
    (``Tuning.code_hashes``); the walk checks the codes of each group it takes from them. With a
    hash that collides everywhere (every group in every lookup) or often (codes' parity), the
    index still equals the plain compiled kernel."""
    hashes = {"zero": lambda codes: np.zeros(codes.shape, dtype=np.uint64),
              "parity": lambda codes: (codes.astype(np.int64) % 2).astype(np.uint64)}[weak]
    rng = np.random.default_rng(11)
    nc, nq = 3000, 200
    is_cat = np.array([True, True, False, True, False])

    def table(n):
        X = np.c_[rng.integers(0, 6, n), rng.integers(-1, 12, n), np.round(rng.normal(0, 1, n), 1),
                  rng.integers(0, 3, n), rng.integers(0, 4, n)].astype(float)
        X[rng.random((n, 5)) < 0.1] = np.nan
        return X

    C, Q = table(nc), table(nq)
    space = K.Space(is_cat=is_cat, ranges=np.array([0.0, 0.0, 8.0, 0.0, 3.0]))
    qids = np.arange(nq, dtype=np.int64)
    cids = np.arange(nc, dtype=np.int64) + 10**6
    salt = K.search_salt(5, "h")
    idx = built(C, cids, space, IX.Tuning(code_hashes=hashes))
    want = IX.plain_search(Q, qids, C, cids, space, salt)
    got = idx.search(Q, qids, salt, how="index")
    for f in ("d1", "d2", "n1", "cid", "key"):
        assert np.array_equal(getattr(got, f), getattr(want, f)), f


def test_gower_pairs_equal_the_block_diagonal(tables):
    O, A, Q, C, space, ranges = tables
    assert np.array_equal(K.gower_pairs(Q, C[: len(Q)], space), np.diag(K.gower_block(Q, C[: len(Q)], space)))
