"""query_sample (spec: "Sampled queries and confidence intervals"): the keyed sample of
originals, searched against every candidate, against the brute-force references of
tests/reference.py; the intervals against their formulas; a sample of every original is
the exact run."""

import logging

import numpy as np
import pytest

import reference as ref
from avatar_metrics import evaluate
from conftest import to_spark
from data import KINDS, perturbed, tricky

VARS = list(KINDS)
KNOWN = ["i_small", "cat2", "cont", "flag"]
HALVES = [["i_small", "cat2"], ["cont", "flag"]]
SEARCHED = ("linkability_protection_rate", "closest_rate", "hidden_rate", "local_cloaking")
LINEAR = ("knowledge_protection_rate", "column_direct_match_protection", "row_direct_match_protection")


@pytest.fixture(scope="module")
def frames():
    O = tricky(70, 51)
    A = perturbed(O, 52, keep=0.7)
    H = tricky(40, 53)
    return O, A, H


def run(spark, O, A, H, partitions, **config):
    rid = lambda df: df.assign(rid=np.arange(len(df)))
    h = to_spark(spark, rid(H), partitions) if H is not None else None
    return evaluate(spark, to_spark(spark, rid(O), partitions), to_spark(spark, rid(A), partitions), h,
                    {"row_key": "rid", "known_variables": KNOWN, "linkability_halves": HALVES, **config})


@pytest.mark.parametrize("holdout,partitions", [(True, 3), (False, 2)])
def test_a_sampled_run_against_the_references(spark, frames, holdout, partitions):
    O, A, H = frames
    H = H if holdout else None
    size, seed = 25, 4
    # (one block: the sampled searches of several blocks are test_inference's sampled targets)
    rep = run(spark, O, A, H, partitions, seed=seed, query_sample=size)
    d = rep.to_dict()
    m = d["metrics"]
    sample = ref.query_sample(len(O), size, seed)
    recs = rep.records.toPandas().set_index("rid").sort_index()
    rep.records.unpersist()
    assert d["inputs"]["query_sample"] == size
    # the console and the page show each sampled metric's interval and what it was sampled from
    lines = {line.split("  ")[0].strip(): line for line in rep.summary().splitlines()}
    lo, hi = m["hidden_rate"]["details"]["ci95"]
    assert f"95% CI {lo:.2f} to {hi:.2f}; sampled, 25 of 70 originals" in lines["Hidden Rate"]
    assert "CI" not in lines["Knowledge Protection Rate"]
    page = rep.html()
    assert page.count("(sampled, 25 of 70 originals)") >= 3 and "takes the two thresholds" in page
    assert recs.index[recs.sampled].tolist() == sample  # the keyed sample, whatever the layout

    lpr, linked = ref.linkability(O, A, *HALVES, KINDS, seed, sample=sample)
    got = m["linkability_protection_rate"]
    assert (got["value"], got["details"]["linked"], got["details"]["n"]) == (lpr, linked, size)
    assert got["details"]["ci95"] == pytest.approx(ref.rate_interval(linked, size), abs=1e-12)

    hr, hits, hit_list = ref.hidden_rate(O, A, KINDS, seed, sample=sample)
    got = m["hidden_rate"]
    assert (got["value"], got["details"]["hits"], got["details"]["n"]) == (hr, hits, size)
    assert got["details"]["ci95"] == pytest.approx(ref.rate_interval(hits, size), abs=1e-12)
    assert 0 < hits < size, "the data must exercise both outcomes"

    median, uncloaked, lc = ref.local_cloaking(O, A, KINDS, sample=sample)
    got = m["local_cloaking"]
    assert (got["value"], got["details"]["uncloaked"], got["details"]["n"]) == (median, uncloaked, size)
    assert got["details"]["ci95"] == ref.median_interval([lc[i] for i in sample])

    want = ref.closest(O, A, H, KINDS, seed=seed, sample=sample)
    got = m["closest_rate"]
    for key in ("value", "tau_d", "tau_r", "at_risk", "n", "distance_to_closest", "closest_distances_ratio"):
        assert (got["value"] if key == "value" else got["details"][key]) == want[key], key
    asked = [r[0] for r in want["per_record"]]
    assert got["details"]["sampled"] == len(asked) and got["details"]["ci95_thresholds"] == "fixed"
    assert got["details"]["ci95"] == pytest.approx(ref.rate_interval(want["at_risk"], want["n"]), abs=1e-12)
    if not holdout:  # only the sampled originals of the working half are asked about
        assert set(asked) == set(sample) & set(ref.working_half(len(O), seed)) and len(asked) < size

    # the linear metrics stay over every original, exact
    assert m["knowledge_protection_rate"]["value"] == ref.knowledge(O, A, KNOWN, KINDS)[0]
    assert m["row_direct_match_protection"]["value"] == ref.row_direct_match(O, A, VARS, KINDS)[0]
    for key in LINEAR:
        assert m[key]["details"]["ci95"] is None and m[key]["details"]["sampled"] is None, key

    # per original: what an exact run gives for the sampled ones, null for the others
    chosen = recs.loc[sample]
    assert chosen.local_cloaking.tolist() == [lc[i] for i in sample]
    assert chosen.hidden_hit.tolist() == [hit_list[i] for i in sample]
    assert recs.loc[asked, "closest_d_wa"].tolist() == [r[1] for r in want["per_record"]]
    others = recs[~recs.sampled]
    for col in ("lpr_linked", "closest_d_wa", "closest_working", "hidden_hit", "local_cloaking"):
        assert others[col].isna().all(), col
    assert others.kpr_unique.notna().all()  # Knowledge is not sampled


def test_a_sample_of_every_original_is_the_exact_run(spark, frames, caplog):
    """query_sample at least n: the exact run (the references over every original), no interval."""
    O, A, H = frames
    with caplog.at_level(logging.INFO, logger="avatar_metrics"):
        rep = run(spark, O, A, H, 3, seed=4, query_sample=len(O))
    said = [r for r in caplog.records if "query_sample" in r.getMessage()]
    assert len(said) == 1 and "every original is a query" in said[0].getMessage()
    recs = rep.records.toPandas()
    rep.records.unpersist()
    assert recs.sampled.all() and recs.hidden_hit.notna().all()
    d = rep.to_dict()
    m = d["metrics"]
    assert d["inputs"]["query_sample"] is None
    assert all(x["details"]["ci95"] is None and x["details"]["sampled"] is None for x in m.values())
    assert m["linkability_protection_rate"]["value"] == ref.linkability(O, A, *HALVES, KINDS, 4)[0]
    assert m["hidden_rate"]["value"] == ref.hidden_rate(O, A, KINDS, 4)[0]
    assert m["local_cloaking"]["value"] == ref.local_cloaking(O, A, KINDS)[0]
    assert m["closest_rate"]["value"] == ref.closest(O, A, H, KINDS, seed=4)["value"]
