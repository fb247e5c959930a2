"""The distributed search against the brute-force reference, under every layout."""

import numpy as np
import pytest
import reference as ref
from conftest import to_spark
from pyspark.errors import PythonException

import avatar_metrics.engine.catalogue as C
from avatar_metrics.config import SearchSettings
from avatar_metrics.configure import as_config
from avatar_metrics.engine.search import nearest
from avatar_metrics.io import ID
from avatar_metrics.schema import Variable, prepare_inputs, release
from avatar_metrics.summaries import ranges_of
from data import KINDS, perturbed, tricky

N = 45
SUBSETS = [list(KINDS), ["i_small", "cat2", "flag"], ["cat3", "const_null"]]


@pytest.fixture(scope="module")
def frames():
    O = tricky(N, 21)
    A = perturbed(O, 22)
    return O, A


@pytest.fixture(scope="module")
def expected(frames):
    O, A = frames
    out = {}
    for i, names in enumerate(SUBSETS):
        ranges = {v: ref.column_range([O, A], v) for v in names if KINDS[v] == "numeric"}
        out[i] = ref.nearest(O, A, names, KINDS, ranges, seed=5, search=f"test/{i}")
    return out


def run_search(spark, O, A, subset, partitions, block_size, query_partitions=None, n_queries=None,
               with_stats=False, strategy=None, plain_below=0, first_only=False, whole=None):
    """(d1, d2, n1, cid) per original from the search; ``with_stats``: and its ``SearchStats``.
    Every block through the index and its race (``plain_below`` 0), unless told otherwise: the
    data here is far smaller than the blocks a run scans plainly."""
    cfg = as_config({"row_key": "rid"})
    o = to_spark(spark, O.assign(rid=np.arange(len(O))), partitions)
    a = to_spark(spark, A.assign(rid=np.arange(len(A))), partitions)
    inputs = prepare_inputs(o, a, None, cfg)
    try:
        names = SUBSETS[subset]
        variables = [Variable(v, KINDS[v]) for v in names]
        ranges = ranges_of([inputs.stats["originals"], inputs.stats["avatars"]], variables)
        held = whole(inputs) if whole is not None else None  # the avatars in the driver (``Whole``)
        res, stats = nearest(inputs.originals, inputs.avatars, variables, ranges, name=f"test/{subset}",
                             search=SearchSettings(seed=5, block_size=block_size, query_partitions=query_partitions,
                                                   plain_below=plain_below),
                             n_queries=n_queries, with_stats=True, strategy=strategy, first_only=first_only,
                             whole=held)
        pdf = res.toPandas().sort_values(ID)
        res.unpersist()
    finally:
        release(inputs)
    assert pdf[ID].tolist() == list(range(len(O)))
    # the largest d1, taken in the job that caches the result (the metrics' histograms' range)
    assert stats.largest == pdf.d1.max()
    got = list(zip(pdf.d1.tolist(), pdf.d2.tolist(), pdf.n1.tolist(), pdf.cid.tolist()))
    return (got, stats) if with_stats else got


@pytest.mark.parametrize("subset", range(len(SUBSETS)))
# one block, and many blocks over many partitions (one block over 2 query partitions is the
# small-blocks test's first layout)
@pytest.mark.parametrize("partitions,block_size", [(1, N), (7, 16)])
def test_matches_reference(spark, frames, expected, subset, partitions, block_size):
    O, A = frames
    assert run_search(spark, O, A, subset, partitions, block_size) == expected[subset]


@pytest.mark.parametrize("partitions,block_size", [(2, N), (3, 16)])
def test_small_blocks_are_scanned_whole(spark, frames, expected, partitions, block_size):
    """Blocks of fewer candidates than search.plain_below: no index, the plain scan of every
    candidate, in a one-block search and in the home job and later passes of a search of
    several; the same states as the index's, bit for bit."""
    O, A = frames
    got, st = run_search(spark, O, A, 0, partitions, block_size, with_stats=True, plain_below=N + 1)
    assert got == expected[0]
    if block_size >= N:  # one block: every pair evaluated
        assert st.evaluated == N * len(A)
    _, by_index = run_search(spark, O, A, 0, partitions, block_size, with_stats=True)
    assert by_index.evaluated < st.evaluated


@pytest.mark.parametrize("partitions,block_size", [(2, N), (3, 16)])
def test_the_nearest_only(spark, frames, expected, partitions, block_size):
    """``first_only`` (the searches whose metric reads no second distance): d1, n1 and the chosen
    candidate of the reference, in one block and in the home job and later passes of several;
    d2 holds d1; fewer distances than the top-2 search."""
    O, A = frames
    got, st = run_search(spark, O, A, 0, partitions, block_size, with_stats=True, first_only=True)
    assert [(d1, n1, cid) for d1, _, n1, cid in got] == [(d1, n1, cid) for d1, _, n1, cid in expected[0]]
    assert all(d2 == d1 for d1, d2, _, _ in got)
    _, top2 = run_search(spark, O, A, 0, partitions, block_size, with_stats=True)
    assert st.evaluated < top2.evaluated


@pytest.mark.parametrize("subset", [1])  # some of the variables, in another order than the held table's
def test_a_table_held_in_the_driver_is_taken_whole(spark, frames, expected, subset):
    """A one-block search over a table the driver holds (``Whole``: a run's small tables, fetched
    once) takes its rows instead of fetching them: the same states, for all the variables or some;
    a ``Whole`` of another table is not taken, nor is one in a search of several blocks."""
    from avatar_metrics.engine.blocks import Whole

    O, A = frames
    made = []

    def held(inputs, table=None):
        made.append(Whole(inputs.avatars if table is None else table(inputs),
                          [Variable(v, KINDS[v]) for v in reversed(list(KINDS))]))  # any order of the variables
        return made[-1]

    assert run_search(spark, O, A, subset, 2, block_size=N, whole=held) == expected[subset]
    assert made[-1].pdf is not None and len(made[-1].pdf) == len(A)  # taken: fetched once, whole
    assert run_search(spark, O, A, subset, 2, block_size=16, whole=held) == expected[subset]
    assert made[-1].pdf is None  # several blocks: each fetched by the search
    other = lambda inputs: inputs.avatars.select("*")  # noqa: E731 - the same rows, another DataFrame
    assert run_search(spark, O, A, subset, 2, block_size=N, whole=lambda inputs: held(inputs, other)) == expected[subset]
    assert made[-1].pdf is None


def test_block_of_one_record_and_query_partitions(spark, frames, expected):
    O, A = frames
    O, A = O.iloc[:12].reset_index(drop=True), A.iloc[:12].reset_index(drop=True)
    names = SUBSETS[1]
    ranges = {v: ref.column_range([O, A], v) for v in names if KINDS[v] == "numeric"}
    want = ref.nearest(O, A, names, KINDS, ranges, seed=5, search="test/1")
    assert any(n > 1 for *_, n, _ in [(w[0], w[1], w[2], w[3]) for w in want])
    assert run_search(spark, O, A, 1, 3, block_size=1, query_partitions=5) == want


@pytest.mark.parametrize("first", ["home", "home in 3 shares"])
def test_blocks_by_locality_skip_what_cannot_matter(spark, frames, first):
    """Two clusters apart on a category: blocks by locality hold one cluster each, and the
    queries of the other skip them (fewer visits than a full scan), with the same states;
    the home job's queries of a block in one task (6 query partitions, 4 blocks) or 3."""
    import avatar_metrics.engine.search as S

    O, A = frames
    strategy = S.Strategy(home_shares=lambda parts, n_blocks: 3) if first == "home in 3 shares" else None
    half = np.arange(N) < N // 2
    O = O.assign(cat2=np.where(half, "a", "b"))
    A = A.assign(cat2=np.where(half, "a", "b"))
    names = SUBSETS[1]
    ranges = {v: ref.column_range([O, A], v) for v in names if KINDS[v] == "numeric"}
    want = ref.nearest(O, A, names, KINDS, ranges, seed=5, search="test/1")
    # (adaptive execution off: its coalescing would put every home in one task, where keys of
    # different types still meet)
    old = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        # (the home job's output goes to the queries' 6 partitions: more than its 4 blocks)
        got, st = run_search(spark, O, A, 1, 3, block_size=12, query_partitions=6, with_stats=True,
                             strategy=strategy)
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", old)
    assert got == want
    assert (st.blocks, st.queries, st.full) == (4, N, 4 * N) and st.visits < st.full
    # every query's home holds candidates: one visit each in the first job (with its block's
    # candidates in each share of the home job)
    assert st.first == "home" and st.first_visits == N
    # the later jobs read only the queries the first job marked for their blocks
    assert 0 < st.later_rows < st.later_all_rows
    # the kernels' work comes back from every job: each query evaluated its nearest at least,
    # and no pair more than once per way of the race (three ways)
    assert N <= st.evaluated <= 3 * N * len(A) and st.looked_up >= 0


@pytest.mark.parametrize("homes", ["none", "farthest"])
def test_any_home(spark, frames, expected, homes):
    """Every query's home empty (so it is marked for every block), or the block of largest lower
    bound: the same states."""
    import avatar_metrics.engine.search as S

    # (defined here, not at the module's top level: the workers get them by value)
    def none(need, pdf, variables, space):
        return np.full(len(pdf), 10**6)  # a block number with no candidates

    def farthest(need, pdf, variables, space):
        return np.asarray(need.blocks)[np.argmax(need.bounds(pdf, variables, space), axis=1)]

    O, A = frames
    got, st = run_search(spark, O, A, 0, 2, block_size=10, with_stats=True,
                         strategy=S.Strategy(homes=none if homes == "none" else farthest))
    assert got == expected[0]
    assert st.first == "home" and 0 < st.visits <= st.full and st.catalogued == 5
    if homes == "none":  # no reach: every query in every later job
        assert (st.first_visits, st.later_rows, st.later_blocks) == (0, st.later_all_rows, st.catalogued)


def test_a_candidate_left_out_of_the_blocks_is_an_error(spark, frames):
    """A blocking that lost a candidate would give a wrong result: the search refuses to return one."""
    import avatar_metrics.engine.search as S

    O, A = frames
    real = S._by_locality
    lose = S.Strategy(by_locality=lambda c, variables, n, **kw: real(c, variables, n, **kw).withColumn(
        "__am_block", S.F.when(S.F.col(ID) == 3, S.F.lit(n)).otherwise(S.F.col("__am_block"))))
    with pytest.raises(RuntimeError, match=f"blocks held {N - 1} candidates of {N}"):
        run_search(spark, O, A, 0, 2, block_size=20, strategy=lose)


@pytest.mark.parametrize("big", [0, 2])
def test_a_block_too_large_goes_in_slices(spark, frames, expected, big):
    """A block of more than twice search.block_size candidates (the first, or one in the middle)
    goes in slices of about block_size in the later jobs, each its own pass (the home job
    takes its home whole): the same states."""
    import avatar_metrics.engine.search as S

    O, A = frames
    real = S._by_locality
    crowd = S.Strategy(by_locality=lambda c, variables, n, **kw: real(c, variables, n, **kw).withColumn(
        "__am_block", S.F.when(S.F.col(ID) < 30, S.F.lit(big)).otherwise(S.F.col("__am_block"))))
    got, st = run_search(spark, O, A, 0, 2, block_size=10, with_stats=True, strategy=crowd)
    assert got == expected[0]
    assert st.first == "home" and st.slices >= 2  # the 30 candidates of one block: 3 slices of 10
    assert st.fetched >= 2 and st.fetch_seconds > 0


def test_default_repartitioning_of_the_queries(spark, frames, expected):
    """query_partitions null: with enough queries per partition they are repartitioned into
    spark.sql.shuffle.partitions (2 in the suite); the states are the same."""
    import avatar_metrics.engine.search as S

    O, A = frames
    assert run_search(spark, O, A, 0, 1, block_size=40, n_queries=len(O),
                      strategy=S.Strategy(min_queries_per_partition=1)) == expected[0]


def test_any_arrow_batch_size(spark, frames, expected):
    O, A = frames
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key)
    spark.conf.set(key, "7")
    try:
        assert run_search(spark, O, A, 0, 3, block_size=20) == expected[0]
    finally:
        spark.conf.set(key, old)


def test_spark_connect_path_slices_blocks_and_checkpoints(spark, frames, expected):
    """The Spark Connect path (blocks over the plan's size cap go in slices, chains and the result
    are local checkpoints), taken here on the classic session: the same states."""
    import avatar_metrics.engine.search as S

    O, A = frames
    remote = S.Strategy(remote=lambda df: True, closure_cap=lambda spark: 600)  # a few records' worth
    got, st = run_search(spark, O, A, 0, 2, block_size=30, with_stats=True, strategy=remote)
    assert got == expected[0]
    assert st.slices > 0


class _Conf:
    def __init__(self, value):
        self.value = value

    def get(self, key, default=None):
        if isinstance(self.value, Exception):
            raise self.value
        return default if self.value is None else self.value


class _Session:
    def __init__(self, value):
        self.conf = _Conf(value)


@pytest.mark.parametrize("value,limit", [
    ("2m", 2 * 2**20), ("2MiB", 2 * 2**20), ("134217728", 2**27), ("512k", 2**19), ("1g", 2**30),
    (None, 2**27), ("lots", 2**27), (RuntimeError("no such key"), 2**27),
])
def test_closure_cap_follows_the_servers_message_limit(value, limit):
    import avatar_metrics.engine.blocks as B

    assert B.closure_cap(_Session(value)) == int(limit * B.CLOSURE_SHARE / B.CHAIN)


@pytest.mark.parametrize("max_levels,trim", [(20_000, False), (1, False), (20_000, True)])
def test_marks_cover_every_candidate_within_reach(spark, frames, max_levels, trim):
    """The first job's marks (``Need.bits``, from summaries Spark computes over blocks cut as the
    engine cuts them): a query is marked for every block holding a candidate at or within its
    reach, with nulls, constant variables, categories a block lacks, and (max_levels 1) the
    categoricals left out of the summaries, or (trim) left out to hold the summaries under a size
    (the categorical with most values first); and some blocks are left unmarked."""
    import avatar_metrics.engine.search as S
    from avatar_metrics.kernels.gower import Space

    O, A = frames
    cfg = as_config({"row_key": "rid"})
    inputs = prepare_inputs(to_spark(spark, O.assign(rid=np.arange(len(O))), 2),
                            to_spark(spark, A.assign(rid=np.arange(len(A))), 3), None, cfg)
    try:
        names = list(KINDS)
        variables = [Variable(v, KINDS[v]) for v in names]
        ranges = ranges_of([inputs.stats["originals"], inputs.stats["avatars"]], variables)
        space = Space(is_cat=np.array([v.kind == "categorical" for v in variables]), ranges=np.asarray(ranges, float))
        c = S._by_locality(S._select(inputs.avatars, variables), variables, 6).cache()
        need = S._need(c, variables, 6, max_levels=max_levels)
        if trim:
            full, unions = C.need_bytes(need), [None if u is None else len(u) for u in need.unions]
            biggest = int(np.argmax([-1 if n is None else n for n in unions]))  # the first of the largest
            need = C.trimmed(need, full - 1)
            assert need.unions[biggest] is None and C.need_bytes(need) < full
            assert [u is None for u in need.unions] == [u is None or i == biggest for i, u in enumerate(unions)]
        blocks = c.select(ID, "__am_block").toPandas().set_index(ID)["__am_block"]
        queries = S._select(inputs.originals, variables).toPandas()
        c.unpersist()
    finally:
        release(inputs)
    refr = {v: ref.column_range([O, A], v) for v in names if KINDS[v] == "numeric"}
    orecs, arecs = O.to_dict("records"), A.to_dict("records")
    D = np.array([[ref.gower(orecs[int(i)], a, names, KINDS, refr) for a in arecs] for i in queries[ID]])
    rng = np.random.default_rng(max_levels)
    reach = np.sort(D, axis=1)[np.arange(len(D)), rng.integers(0, len(A) // 3, len(D))]  # a distance: ties at it
    bits = need.bits(queries, variables, reach, space)
    marked = (bits[:, [b // C.NEED_BITS for b in range(6)]] >> np.array([b % C.NEED_BITS for b in range(6)])) & 1
    of = blocks.loc[np.arange(len(A))].to_numpy()
    within = D <= reach[:, None]
    assert within.sum() > len(D)
    assert all(marked[i, of[j]] for i, j in zip(*np.nonzero(within)))
    assert (marked == 0).sum() > 0
    # each query's home: a block of least lower bound
    lb = need.bounds(queries, variables, space)
    home = S._homes(need, queries, variables, space)
    assert (lb[np.arange(len(lb)), [need.blocks.index(b) for b in home]] == lb.min(axis=1)).all()


def test_a_block_of_too_many_values_is_counted_before_any_is_collected(spark):
    """``collect_set`` holds every distinct value of a block before its slice to max_levels + 1:
    the blocks of too many values are found first by an approximate count (``_many_levels``)
    and left out of it (no list: any value may occur); a block of a few values more than
    max_levels, under the count's margin, is sliced as before (no list either); the lists of the
    others are whole, an all-null column's empty."""
    variables = [Variable("a", "categorical"), Variable("b", "categorical")]
    rows = ([(i, 0, f"id{i}", "x") for i in range(400)] + [(1000 + i, 1, f"c{i % 3}", None) for i in range(50)]
            + [(2000 + i, 2, f"m{i % 15}", "y") for i in range(60)])
    c = spark.createDataFrame(rows, f"{ID} long, __am_block int, v0 string, v1 string")
    assert C._many_levels(c, variables, 10) == {0: [0], 1: []}
    # with the counts over all the candidates: a categorical of few values needs no count per block
    levels = C._level_counts(c, variables)
    assert levels["v1"] <= 20 < levels["v0"]
    assert C._many_levels(c, variables, 10, levels) == {0: [0], 1: []}
    assert C._many_levels(c, variables, 10, {"v0": 20, "v1": 2}) == {0: [], 1: []}  # (told: no job)
    need = C._need(c, variables, 3, max_levels=10)
    assert need.blocks == [0, 1, 2]
    assert need.values[0] == [None, ["x"]]
    assert sorted(need.values[1][0]) == ["c0", "c1", "c2"] and need.values[1][1] == []
    assert need.values[2] == [None, ["y"]]


@pytest.mark.parametrize("subset,n_blocks", [(0, 6), (1, 4), (2, 3)])
def test_a_record_ranges_into_its_own_block(spark, frames, subset, n_blocks):
    """``Need.ranged``, from each block's least sort key: every candidate, taken as a query, is
    placed in its own block, with nulls, NaN, booleans, ties and a constant variable among the
    keys (a comparison of the keys other than the sort's would place some elsewhere); and
    ``_homes`` takes that block when it is one of least lower bound, else a tied one."""
    import avatar_metrics.engine.search as S
    from avatar_metrics.kernels.gower import Space

    O, A = frames
    cfg = as_config({"row_key": "rid"})
    inputs = prepare_inputs(to_spark(spark, O.assign(rid=np.arange(len(O))), 2),
                            to_spark(spark, A.assign(rid=np.arange(len(A))), 3), None, cfg)
    try:
        variables = [Variable(v, KINDS[v]) for v in SUBSETS[subset]]
        ranges = ranges_of([inputs.stats["originals"], inputs.stats["avatars"]], variables)
        space = Space(is_cat=np.array([v.kind == "categorical" for v in variables]), ranges=np.asarray(ranges, float))
        a = S._select(inputs.avatars, variables)
        order = S._locality_order(a, variables)
        c = S._by_locality(a, variables, n_blocks, order=order).cache()
        need = S._need(c, variables, n_blocks, order=order)
        placed = need.ranged(c).toPandas()
        queries = need.ranged(S._select(inputs.originals, variables)).toPandas()
        c.unpersist()
    finally:
        release(inputs)
    assert len(need.blocks) > 1
    assert (placed[C.RANGED].to_numpy() == [need.blocks.index(b) for b in placed["__am_block"]]).all()
    assert (S._homes(need, placed, variables, space) == placed["__am_block"].to_numpy()).all()
    home = S._homes(need, queries, variables, space)
    lb = need.bounds(queries, variables, space)
    rows = np.arange(len(lb))
    assert (lb[rows, [need.blocks.index(b) for b in home]] == lb.min(axis=1)).all()
    own = queries[C.RANGED].to_numpy()
    tied = lb[rows, own] == lb.min(axis=1)
    assert ((home == np.asarray(need.blocks)[own]) | ~tied).all()


def test_a_query_twice_in_the_first_job_is_an_error(spark, frames):
    """A first job that returned a query twice would count its candidates twice (or fold a
    stale state): with the number of queries known, as the metrics pass it, the search stops."""
    import avatar_metrics.engine.search as S

    O, A = frames
    twice = S.Strategy(ranged=lambda need, q: need.ranged(q).unionByName(need.ranged(q).limit(1)))
    with pytest.raises(RuntimeError, match=f"first job returned {N + 1} queries of {N}"):
        run_search(spark, O, A, 0, 2, block_size=12, n_queries=N, strategy=twice)


def test_a_block_beyond_its_summary_is_an_error(spark, frames):
    """Marks from a summary that does not cover its block could skip a candidate that matters:
    the search stops instead."""
    import avatar_metrics.engine.search as S

    O, A = frames
    real = S._need

    def narrow(c, variables, n, **kw):
        need = real(c, variables, n, **kw)
        for s in need.summaries:
            s.nulls[:] = False
            s.hi[:] = s.lo - 1.0
        return need

    # (raised in the home job's tasks: Spark passes it on, the message in its text)
    with pytest.raises((RuntimeError, PythonException), match="summary does not cover"):
        run_search(spark, O, A, 0, 2, block_size=12, strategy=S.Strategy(need=narrow))


@pytest.mark.parametrize("n", [1, 4, 7, 45])
def test_the_home_job_gives_each_block_its_own_task(spark, n):
    """``_spread``: the key of block b lands in partition b of Spark's hash partitioning into n."""
    from pyspark.sql import functions as F

    import avatar_metrics.engine.search as S

    keys = S._spread(spark, n)
    df = spark.createDataFrame([(b, keys[b]) for b in range(n)], "b long, k long")
    placed = df.repartition(n, "k").select("b", F.spark_partition_id().alias("p")).toPandas()
    assert sorted(placed.values.tolist()) == [[b, b] for b in range(n)]


def test_spark_hash_of_a_long_is_sparks(spark):
    """``spark_hash``, which places the home job's rows in their tasks with no Spark
    job, gives Spark SQL's own ``hash`` of a long, negative and 64-bit values too."""
    from avatar_metrics.engine.homes import spark_hash

    values = [0, 1, -1, 7, 42, 2**31 - 1, 2**31, -2**31, 2**32 + 5, 2**63 - 1, -2**63, 123456789012345]
    values += np.random.default_rng(3).integers(-2**63, 2**63 - 1, 50, dtype=np.int64).tolist()
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(v,) for v in values], "x long")
    got = [r[0] for r in df.select(F.hash("x")).collect()]
    assert got == [spark_hash(v) for v in values]


@pytest.mark.parametrize("parts,n_blocks,shares", [(None, 4, 1), (8, 4, 1), (9, 4, 2), (8, 20, 1), (400, 4, 50)])
def test_the_home_job_has_a_task_per_two_query_partitions(parts, n_blocks, shares):
    """The home job splits each block's queries into shares, so that it has at least half as
    many tasks as the queries' partitions (2 to 4 per core, as advised: a task per core or
    more): with one task per block, a cluster of many more cores than blocks would wait on
    a few."""
    import avatar_metrics.engine.search as S

    assert S._home_shares(parts, n_blocks) == shares
    assert 2 * n_blocks * shares >= (parts or 0)


def test_the_home_job_with_blocks_sharing_a_task(spark, frames, expected):
    """Every block in one task (as when ``_spread`` finds no key for a block), its queries in
    Arrow batches of 7: the blocks' candidates and queries come one block after another and
    stream through each block's index, with the same states."""
    import avatar_metrics.engine.search as S

    O, A = frames
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key)
    spark.conf.set(key, "7")
    try:
        got, st = run_search(spark, O, A, 2, 2, block_size=10, with_stats=True,
                             strategy=S.Strategy(spread=lambda spark, n: {b: 0 for b in range(n)}))
    finally:
        spark.conf.set(key, old)
    assert got == expected[2]
    # each query found its home's candidates before it (one visit each in the home job)
    assert st.first == "home" and st.first_visits == N


def test_progress_tells_time_left_only_once_a_block_is_done(caplog):
    """After the home job no block is done, so there is no rate to tell the time left by: the
    line must not say "about 0 s left" (it did), and must say it once a block is done."""
    import logging
    import re

    from avatar_metrics.engine.search import _Run

    run = _Run(name="t", variables=[], space=None, salt=0, fold=None, remote=False, n_candidates=100,
               settings=SearchSettings(seed=0, block_size=10, query_partitions=None))
    with caplog.at_level(logging.INFO, logger="avatar_metrics.engine.search"):
        run.visits = 10
        run.progress("home blocks (4)", 40)
        run.done, run.visits = 50, 20
        run.progress("block 2 of 4", 40)
    home, later = [r.getMessage() for r in caplog.records]
    assert "home blocks (4) done, 0 of 100 candidates, 10 of 40 query visits (25%)" in home
    assert "no rate yet" in home and "left" not in home
    assert re.search(r"50 of 100 candidates, 20 of 40 query visits \(50%\), [\d.]+ s so far, \d+ candidates/s, "
                     r"about \d+ s left$", later)
