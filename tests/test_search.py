"""The distributed search against the brute-force reference, under every layout."""

import numpy as np
import pytest

import reference as ref
from avatar_metrics.config import SearchSettings, as_config
from avatar_metrics.engine.search import nearest
from avatar_metrics.schema import Variable, ranges_of
from avatar_metrics.io import ID
from avatar_metrics.schema import prepare_inputs, release
from conftest import to_spark
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


def run_search(spark, O, A, subset, partitions, block_size, query_partitions=None, n_queries=None):
    cfg = as_config({"row_key": "rid"})
    o = to_spark(spark, O.assign(rid=np.arange(len(O))), partitions)
    a = to_spark(spark, A.assign(rid=np.arange(len(A))), partitions)
    inputs = prepare_inputs(o, a, None, cfg)
    try:
        names = SUBSETS[subset]
        variables = [Variable(v, KINDS[v]) for v in names]
        ranges = ranges_of([inputs.stats["originals"], inputs.stats["avatars"]], variables)
        res = nearest(inputs.originals, inputs.avatars, variables, ranges, name=f"test/{subset}",
                      search=SearchSettings(seed=5, block_size=block_size, query_partitions=query_partitions),
                      n_queries=n_queries)
        pdf = res.toPandas().sort_values(ID)
        res.unpersist()
    finally:
        release(inputs)
    assert pdf[ID].tolist() == list(range(len(O)))
    return list(zip(pdf.d1.tolist(), pdf.d2.tolist(), pdf.n1.tolist(), pdf.cid.tolist()))


@pytest.mark.parametrize("subset", range(len(SUBSETS)))
@pytest.mark.parametrize("partitions,block_size", [(1, N), (2, 300), (7, 16)])
def test_matches_reference(spark, frames, expected, subset, partitions, block_size):
    O, A = frames
    assert run_search(spark, O, A, subset, partitions, block_size) == expected[subset]


def test_block_of_one_record_and_query_partitions(spark, frames, expected):
    O, A = frames
    O, A = O.iloc[:12].reset_index(drop=True), A.iloc[:12].reset_index(drop=True)
    names = SUBSETS[1]
    ranges = {v: ref.column_range([O, A], v) for v in names if KINDS[v] == "numeric"}
    want = ref.nearest(O, A, names, KINDS, ranges, seed=5, search="test/1")
    assert any(n > 1 for *_, n, _ in [(w[0], w[1], w[2], w[3]) for w in want])
    assert run_search(spark, O, A, 1, 3, block_size=1, query_partitions=5) == want


def test_default_repartitioning_of_the_queries(spark, frames, expected, monkeypatch):
    """query_partitions null: with enough queries per partition they are repartitioned into
    spark.sql.shuffle.partitions (4 in the suite); the states are the same."""
    import avatar_metrics.engine.search as S

    O, A = frames
    monkeypatch.setattr(S, "MIN_QUERIES_PER_PARTITION", 1)
    assert run_search(spark, O, A, 0, 1, block_size=40, n_queries=len(O)) == expected[0]


def test_any_arrow_batch_size(spark, frames, expected):
    O, A = frames
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key)
    spark.conf.set(key, "7")
    try:
        assert run_search(spark, O, A, 0, 3, block_size=20) == expected[0]
    finally:
        spark.conf.set(key, old)
