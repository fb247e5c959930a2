"""Two lanes (api): a small run computes the Closest Rate's lane in a second thread; the report is the
one a run in turn gives, and a failure raises the error a run in turn would have met first."""

import threading
from types import SimpleNamespace

import pytest

from avatar_metrics import api, evaluate
from avatar_metrics.configure import load_config
from avatar_metrics.io import read_table
from conftest import comparable, write_example_config


def _fakes(spark, n=10):
    inputs = SimpleNamespace(n_originals=n, n_avatars=n, n_holdout=None, originals=spark.range(1))
    return inputs, SimpleNamespace()  # (the configuration goes to the metrics alone)


def _metric(key, lane, ran, fails=False):
    def compute(inputs, cfg):
        ran[key] = threading.current_thread().name
        if fails:
            raise ValueError(key)
        return SimpleNamespace(key=key)

    return SimpleNamespace(key=key, lane=lane, compute=compute)


def test_a_small_run_takes_two_threads_and_raises_the_first_failure_in_the_registry_order(spark):
    inputs, cfg = _fakes(spark)
    ran, computed = {}, {}
    # registry order a, c, b, d: b fails in lane 0, c in lane 1; a run in turn stops at c
    todo = [_metric("a", 0, ran), _metric("c", 1, ran, fails=True), _metric("b", 0, ran, fails=True),
            _metric("d", 1, ran)]
    with pytest.raises(ValueError, match="^c$"):
        api._compute(spark, inputs, cfg, todo, api._Timer(spark), computed)
    assert ran == {"a": "MainThread", "b": "MainThread", "c": "avatar-metrics-lane-1"}  # c stopped its lane
    assert list(computed) == ["a"]
    ran.clear(), computed.clear()
    with pytest.raises(ValueError, match="^c$"):  # in turn: the same error
        api._compute(spark, *_fakes(spark, api.LANES_BELOW + 1), todo, api._Timer(spark), computed)
    assert ran == {"a": "MainThread", "c": "MainThread"} and list(computed) == ["a"]


def test_a_lane_alone_or_a_large_run_goes_in_turn(spark):
    for n, todo in ((api.LANES_BELOW + 1, [("a", 0), ("b", 1)]), (10, [("a", 1), ("b", 1)])):
        ran = {}
        inputs, cfg = _fakes(spark, n)
        api._compute(spark, inputs, cfg, [_metric(k, lane, ran) for k, lane in todo], api._Timer(spark), {})
        assert set(ran.values()) == {"MainThread"}


def test_the_example_in_turn_is_the_report_of_two_lanes(spark, tmp_path, local_report, monkeypatch):
    """The suite's example report took two lanes (3,000 records each); the same run with every metric in
    turn gives the same report, bit for bit."""
    cfg = load_config(write_example_config(tmp_path))
    tables = [read_table(spark, t, r) for t, r in ((cfg.originals, "originals"), (cfg.avatars, "avatars"),
                                                   (cfg.holdout, "holdout"))]
    assert max(local_report["inputs"][k] for k in ("originals_rows", "avatars_rows", "holdout_rows")) <= api.LANES_BELOW
    monkeypatch.setattr(api, "LANES_BELOW", 0)
    rep = evaluate(spark, *tables, cfg)
    if rep.records is not None:
        rep.records.unpersist()
    assert comparable(rep.to_dict()) == local_report
    assert list(rep.to_dict()["timings"]) == ["inputs", *local_report["metrics"], "records", "total"]
