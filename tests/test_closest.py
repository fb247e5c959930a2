"""Closest Rate against the brute-force reference, for both references."""

import numpy as np
import pandas as pd
import pytest

import reference as ref
from avatar_metrics import evaluate
from avatar_metrics.engine.aggregate import midpoint_percentiles
from avatar_metrics.errors import InputError
from conftest import to_spark
from data import KINDS, perturbed, tricky

FIELDS = ["tau_d", "tau_r", "at_risk", "n", "distance_to_closest", "closest_distances_ratio",
          "holdout_distance_to_closest", "holdout_closest_distances_ratio"]


@pytest.fixture(scope="module")
def frames():
    O = tricky(50, 41)
    A = perturbed(O, 42, keep=0.7)
    H = tricky(40, 43)
    return O, A, H


def run(spark, O, A, H=None, partitions=None, **config):
    rid = lambda df: df.assign(rid=np.arange(len(df)))
    o = to_spark(spark, rid(O), partitions)
    a = to_spark(spark, rid(A), partitions)
    h = to_spark(spark, rid(H), partitions) if H is not None else None
    return evaluate(spark, o, a, h, {"row_key": "rid", "records": False, **config}, only=["closest_rate"]).to_dict()


def check(m, want):
    assert m["computed"], m["reason"]
    assert m["value"] == want["value"]
    for f in FIELDS:
        assert m["details"][f] == want[f], f


@pytest.mark.parametrize("q", [5, 50, 37.5])
def test_with_holdout(spark, frames, q):
    O, A, H = frames
    m = run(spark, O, A, H, 3, quantile=q)["metrics"]["closest_rate"]
    check(m, ref.closest(O, A, H, KINDS, q=q))
    assert m["details"]["reference"] == "holdout"
    assert m["details"]["holdout_records"] == len(H)


@pytest.mark.parametrize("seed", [0, 7])
def test_approximate_holdout(spark, frames, seed):
    O, A, _ = frames
    rep = run(spark, O, A, None, 2, seed=seed)
    m = rep["metrics"]["closest_rate"]
    check(m, ref.closest(O, A, None, KINDS, seed=seed))
    assert m["details"]["reference"] == "approximate_holdout" and rep["inputs"]["reference"] == "approximate_holdout"
    assert m["details"]["working_originals"] == 25 and m["details"]["holdout_records"] == 25


def test_ties_and_zero_second_distance(spark):
    # duplicated avatars give d2 = 0, so some records have no ratio
    O = pd.DataFrame({"a": [1, 1, 2, 2, 3, 4, 5, 6, 7, 9, 12, 15] * 2, "c": list("xxyyzxyzxyzx") * 2})
    A = O.copy()
    A.loc[12:, "a"] += 1  # the second copy moves: some records keep d2 = 0, others not
    H = O.iloc[::2].reset_index(drop=True)
    kinds = {"a": "numeric", "c": "categorical"}
    m = run(spark, O, A, H)["metrics"]["closest_rate"]
    want = ref.closest(O, A, H, kinds)
    assert want["n"] < len(O) and want["at_risk"] > 0
    check(m, want)


def test_a_holdout_under_min_group_is_refused(spark):
    """A holdout of one record would make every holdout figure that person's (spec: "Small groups")."""
    O = pd.DataFrame({"a": np.arange(12.0), "c": list("xyx") * 4})
    with pytest.raises(InputError) as err:
        run(spark, O, O, O.iloc[:1])
    assert "holdout" in str(err.value) and "min_group" in str(err.value)


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6, 7, 10, 21, 22])
def test_midpoint_percentile_small_sizes(spark, m):
    rng = np.random.default_rng(m)
    xs = rng.integers(0, 5, m).astype(float) / 7
    df = spark.createDataFrame(pd.DataFrame({"x": xs}))
    qs = [0, 5, 25, 37.5, 50, 95, 100]
    got, count = midpoint_percentiles(df, "x", qs)
    assert count == m
    assert got == [ref.midpoint(xs, q) for q in qs]
    if m == 4:  # where midpoint and linear interpolation differ
        assert got[1] != float(np.percentile(xs, 5, method="linear")) or len(set(xs)) == 1


def test_per_record_results(spark, frames):
    O, A, H = frames
    rid = lambda df: df.assign(rid=np.arange(len(df)))
    halves = [["i_small", "cat2"], ["flag", "cat3"]]
    cached = lambda: set(spark.sparkContext._jsc.getPersistentRDDs().keySet().toArray())
    before = cached()
    rep = evaluate(spark, to_spark(spark, rid(O), 2), to_spark(spark, rid(A), 3), None,
                   {"row_key": "rid", "linkability_halves": halves, "seed": 3},
                   only=["closest_rate", "linkability_protection_rate"])
    assert len(cached() - before) == 1  # the records alone: what they were built from is released
    recs = rep.records.toPandas().set_index("rid").sort_index()
    rep.records.unpersist()
    assert cached() <= before
    assert set(recs.columns).isdisjoint(KINDS)  # no variable values
    assert len(recs) == len(O)
    want = ref.closest(O, A, None, KINDS, seed=3)
    working = recs[recs.closest_working]
    assert len(working) == 25 and recs.closest_d_wa.isna().sum() == 25
    for i, d_wa, r_wa, d_ho, r_ho in want["per_record"]:
        row = working.loc[i]
        assert row.closest_d_wa == d_wa and row.closest_d_ho == d_ho
        assert (pd.isna(row.closest_r_wa) and r_wa is None) or row.closest_r_wa == r_wa
        assert (pd.isna(row.closest_r_ho) and r_ho is None) or row.closest_r_ho == r_ho
    assert int(working.closest_at_risk.sum()) == want["at_risk"]
    ranges = {v: ref.column_range([O, A], v) for v in KINDS if KINDS[v] == "numeric"}
    la = ref.nearest(O, A, halves[0], KINDS, ranges, 3, "linkability/A")
    lb = ref.nearest(O, A, halves[1], KINDS, ranges, 3, "linkability/B")
    assert recs.lpr_linked.tolist() == [a[3] == b[3] for a, b in zip(la, lb)]
    assert int(recs.lpr_linked.sum()) == rep.metrics["linkability_protection_rate"].details["linked"]


def test_records_name_originals_by_their_key_and_no_avatar(spark):
    O = pd.DataFrame({"pid": [f"p{i}" for i in range(12)], "a": np.arange(12) % 4, "b": list("xyz") * 4,
                      "c": np.arange(12) * 1.5})
    A = O.copy()
    A["c"] = A["c"][::-1].to_numpy()
    rep = evaluate(spark, spark.createDataFrame(O), spark.createDataFrame(A.iloc[::-1]), None,
                   {"row_key": "pid", "known_variables": ["a", "b"], "linkability_halves": [["a"], ["b"]]},
                   only=["linkability_protection_rate", "knowledge_protection_rate"])
    recs = rep.records.toPandas()
    rep.records.unpersist()
    assert set(recs.pid) == set(O.pid)
    # whether an original was linked, never which avatar (it carries the original's known values)
    assert set(recs.columns) == {"pid", "sampled", "lpr_linked", "kpr_unique", "kpr_matched"}
    assert recs.kpr_unique.dtype == bool


def test_records_can_be_turned_off(spark, frames):
    O, A, H = frames
    rep = evaluate(spark, spark.createDataFrame(O), spark.createDataFrame(A), None, {"records": False},
                   only=["closest_rate"])
    assert rep.records is None
