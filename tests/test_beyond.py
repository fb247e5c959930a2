"""Hidden Rate, Local Cloaking, Row Direct Match and unaligned avatars against the
brute-force references of tests/reference.py, bit for bit, under several layouts."""

import numpy as np
import pandas as pd
import pytest

import reference as ref
from avatar_metrics import evaluate
from avatar_metrics.errors import InputError
from conftest import to_spark
from data import KINDS, perturbed, tricky

VARS = list(KINDS)


@pytest.fixture(scope="module")
def frames():
    O = tricky(70, 51)
    A = perturbed(O, 52, keep=0.7)
    A.iloc[:6] = O.iloc[:6].to_numpy()  # copied records: Row Direct Match finds them
    A = A.astype(O.dtypes.to_dict())
    return O, A


RADIUS = ["hidden_rate", "local_cloaking"]  # the two metrics of the count within a radius


def run(spark, O, A, partitions=None, H=None, only=None, **config):
    rid = lambda df: df.assign(rid=np.arange(len(df)))
    o, a = to_spark(spark, rid(O), partitions), to_spark(spark, rid(A), partitions)
    h = to_spark(spark, rid(H), partitions) if H is not None else None
    return evaluate(spark, o, a, h, {"row_key": "rid", **config}, only=only)


@pytest.mark.parametrize("partitions,block,cap,target", [(1, 1000, None, 5), (3, 24, 2, 1), (1, 1000, 5, 2), (7, 14, 12, 5)])
def test_hidden_rate_and_local_cloaking(spark, frames, partitions, block, cap, target):
    """Against the references under several layouts: the Hidden Rate exact, and min(LC_i, cap) per
    original and its median (spec: Local Cloaking, Cap; no cap: the default, above every count)."""
    O, A = frames
    capped = {} if cap is None else {"local_cloaking_cap": cap}
    rep = run(spark, O, A, partitions, seed=6, search={"block_size": block}, only=RADIUS,
              targets={"local_cloaking": target}, **capped)
    d = rep.to_dict()["metrics"]
    value, hits, hit_list = ref.hidden_rate(O, A, KINDS, seed=6)
    assert (d["hidden_rate"]["value"], d["hidden_rate"]["details"]["hits"]) == (value, hits)
    median, uncloaked, lc = ref.local_cloaking(O, A, KINDS, cap=cap)
    _, exact_uncloaked, exact = ref.local_cloaking(O, A, KINDS)
    m = d["local_cloaking"]
    assert (m["value"], m["details"]["median"], m["details"]["uncloaked"]) == (median, median, uncloaked)
    assert uncloaked == exact_uncloaked and m["details"]["n"] == len(O)
    assert m["passed"] == (median >= target)
    assert sum(m["details"]["histogram"]["counts"]) == len(O)
    cap = cap or 1000
    assert m["details"]["cap"] == cap and m["details"]["capped"] == sum(c >= cap for c in exact)
    assert m["details"]["median_at_cap"] == (median == cap)
    recs = rep.records.toPandas().set_index("rid").sort_index()
    rep.records.unpersist()
    assert recs.local_cloaking.tolist() == lc
    assert recs.local_cloaking_capped.tolist() == [c >= cap for c in exact]
    assert recs.hidden_hit.tolist() == hit_list
    assert any(c > 0 for c in lc) and 0 < hits < len(O), "the data must exercise both outcomes"
    if cap < 1000:
        assert m["details"]["capped"] > 0, "the cap must be reached"


def test_ties_at_the_radius_count(spark):
    # every avatar is a copy of one of two records: ties everywhere, at distance 0 too
    O = pd.DataFrame({"a": [1.0, 2.0] * 6, "c": ["x", "y"] * 6})
    A = O.iloc[list(range(2, 12)) + [0, 1]].reset_index(drop=True)  # each avatar a copy of its original
    kinds = {"a": "numeric", "c": "categorical"}
    d = run(spark, O, A, 2, only=RADIUS, records=False).to_dict()["metrics"]
    median, uncloaked, lc = ref.local_cloaking(O, A, kinds)
    assert d["local_cloaking"]["value"] == median and lc[0] == 5
    assert d["hidden_rate"]["details"]["hits"] == ref.hidden_rate(O, A, kinds, seed=0)[1]


def test_row_direct_match(spark, frames):
    O, A = frames
    m = run(spark, O, A, 3, only=["row_direct_match_protection"], records=False).to_dict()["metrics"]["row_direct_match_protection"]
    value, present = ref.row_direct_match(O, A, VARS, KINDS)
    assert (m["value"], m["details"]["present"], m["details"]["n"]) == (value, present, len(O))
    assert present >= 6


def test_row_direct_match_zero_signs_and_nulls(spark):
    O = pd.DataFrame({"x": [0.0, 1.0, None, 2.0] * 3, "c": ["a", None, "b", "b"] * 3})
    A = pd.DataFrame({"x": [-0.0, 1.0, None, 2.5] * 3, "c": ["a", None, "b", "b"] * 3})
    kinds = {"x": "numeric", "c": "categorical"}
    m = evaluate(spark, spark.createDataFrame(O), spark.createDataFrame(A), None, {"records": False},
                 only=["row_direct_match_protection"]).to_dict()["metrics"]
    value, present = ref.row_direct_match(O, A, ["x", "c"], kinds)
    assert present == 9 and m["row_direct_match_protection"]["value"] == value


def test_unaligned_avatars(spark, frames):
    O, A = frames
    A2 = pd.concat([A, A.iloc[:13]], ignore_index=True)  # more avatars, no link
    H = tricky(40, 53)
    known = ["i_small", "cat2", "cont", "flag"]
    halves = [["i_small", "cat2"], ["cont", "flag"]]
    rid = lambda df: df.assign(rid=np.arange(len(df)))
    rep = evaluate(spark, to_spark(spark, rid(O), 2), to_spark(spark, rid(A2), 3), to_spark(spark, rid(H), 2),
                   {"avatars_aligned": False, "known_variables": known, "linkability_halves": halves, "seed": 2,
                    "row_key": "rid"})
    d = rep.to_dict()
    m = d["metrics"]
    for key in ("column_direct_match_protection", "hidden_rate", "local_cloaking"):
        assert m[key]["computed"] is False and "avatars_aligned" in m[key]["reason"], key
    assert m["linkability_protection_rate"]["value"] == ref.linkability(O, A2, *halves, KINDS, seed=2)[0]
    assert m["knowledge_protection_rate"]["value"] == ref.knowledge(O, A2, known, KINDS)[0]
    assert m["row_direct_match_protection"]["value"] == ref.row_direct_match(O, A2, VARS, KINDS)[0]
    assert m["closest_rate"]["value"] == ref.closest(O, A2, H, KINDS, seed=2)["value"]
    assert d["inputs"]["avatars_rows"] == len(A2)
    rep.records.unpersist()
    # without a holdout the Closest Rate would need the link
    m = evaluate(spark, to_spark(spark, O), to_spark(spark, A2), None,
                 {"avatars_aligned": False, "records": False}, only=["closest_rate"]).to_dict()["metrics"]
    assert m["closest_rate"]["computed"] is False and "holdout" in m["closest_rate"]["reason"]


def test_aligned_tables_of_different_sizes_name_the_key(spark, frames):
    O, A = frames
    with pytest.raises(InputError, match="avatars_aligned"):
        evaluate(spark, to_spark(spark, O), to_spark(spark, A.iloc[:50]), None, {})


def test_a_median_at_the_cap_reads_at_least():
    from avatar_metrics.metrics.local_cloaking import reading

    d = {"uncloaked": 0.0, "cap": 10, "median_at_cap": True}
    assert "the median is at that cap, so it is at least that" in reading({"value": 10, "details": d})
    assert "cap" not in reading({"value": 9, "details": {**d, "median_at_cap": False}})


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("sampled", [True, False])
def test_one_tally_serves_both_metrics(spark, monkeypatch, grouped, sampled):
    """The Hidden Rate's and the Local Cloaking's counts from the per-original table, by values
    (one action, a cap below ``GROUPED_BELOW``) or by the aggregate and the counted percentiles (a
    larger cap): both ways give the figures numpy gives, the median a midpoint of two values."""
    from avatar_metrics.metrics import local_cloaking as lc_module
    from avatar_metrics.stats import median_interval

    if not grouped:
        monkeypatch.setattr(lc_module, "GROUPED_BELOW", 0)
    rng = np.random.default_rng(5)
    cap = 25
    lc = np.minimum(rng.geometric(0.08, 400) - 1, cap)  # ties everywhere, some at the cap, values past 19
    lc[:3] = 0
    lc[:200], lc[200:] = np.minimum(lc[:200], 8), np.maximum(lc[200:], 11)  # two middle values apart
    hit = rng.random(400) < 0.3
    per = spark.createDataFrame(pd.DataFrame({"id": np.arange(400), "local_cloaking": lc,
                                              "local_cloaking_capped": lc >= cap, "hidden_hit": hit}))
    t = lc_module.tally(per, cap, sampled=sampled)
    s = np.sort(lc)
    assert (t.n, t.hits, t.zero, t.capped, t.lost) == (400, hit.sum(), (lc == 0).sum(), (lc == cap).sum(), 0)
    assert t.median == (s[199] + s[200]) / 2  # ranks floor and ceil of (400 - 1) / 2
    assert t.bins == [int((np.minimum(lc, lc_module.BINS - 1) == b).sum()) for b in range(lc_module.BINS)]
    if sampled:
        values, counts = np.unique(lc, return_counts=True)
        assert t.by_value == list(zip(values.tolist(), counts.tolist()))
        assert median_interval(t.by_value) == median_interval(list(zip(values.tolist(), counts.tolist())))
    else:
        assert t.by_value is None
