"""A session that refuses Spark settings, caches and checkpoints (Databricks serverless, shared
clusters): every setting the package makes goes through ``io.set_conf``, every cache through
``io.persist``, every checkpoint through ``io.checkpoint``; a refusal is logged once and the run
carries on to the same report. The refusals are Spark's own: the exception a real session raises
when asked to change a setting it may not change."""

import logging

import numpy as np
import pytest
from pyspark.sql.conf import RuntimeConfig

from avatar_metrics import evaluate
from avatar_metrics import io as amio
from avatar_metrics.errors import error_class
import reference as ref
from conftest import to_spark
from data import KINDS, perturbed, tricky

STATIC = "spark.sql.warehouse.dir"  # a static setting: a running session refuses any change to it


@pytest.fixture()
def refusal(spark):
    """The exception Spark itself raises for a setting it refuses."""
    with pytest.raises(Exception) as got:
        spark.conf.set(STATIC, "/nowhere")
    assert error_class(got.value) in amio.REFUSALS
    return got.value


@pytest.fixture(autouse=True)
def _fresh_log():
    amio._REFUSED.clear()
    yield
    amio._REFUSED.clear()


def test_a_refused_setting_is_logged_once_and_the_run_carries_on(spark, refusal, caplog):
    with caplog.at_level(logging.WARNING, logger="avatar_metrics"):
        assert amio.set_conf(spark, STATIC, "/nowhere") is False
        assert amio.set_conf(spark, STATIC, None) is False  # unset too
        assert amio.set_conf(spark, STATIC, "/elsewhere") is False
    said = [r.getMessage() for r in caplog.records if "refuses" in r.getMessage()]
    assert said == [f"this Spark session refuses the setting {STATIC} (CANNOT_MODIFY_STATIC_CONFIG): "
                    "carrying on without it"]
    assert spark.range(3).count() == 3
    # a setting the session takes is set, and a bad value is an error, not a refusal
    before = spark.conf.get("spark.sql.shuffle.partitions")
    assert amio.set_conf(spark, "spark.sql.shuffle.partitions", before) is True
    with pytest.raises(Exception, match="INVALID_CONF_VALUE"):
        amio.set_conf(spark, "spark.sql.shuffle.partitions", "abc")


def test_a_run_where_every_setting_cache_and_checkpoint_is_refused(spark, refusal, monkeypatch, caplog):
    """The reference's figures and records, with each refusal said once (the inputs' caches, a search
    and its result, the records: each computed again where read)."""
    O = tricky(40, 91)
    A = perturbed(O, 92, keep=0.6)
    rid = lambda df: to_spark(spark, df.assign(rid=np.arange(len(df))), 2)

    def refuse(*args, **kwargs):
        raise refusal

    monkeypatch.setattr(RuntimeConfig, "set", refuse)
    monkeypatch.setattr(RuntimeConfig, "unset", refuse)
    frame = type(spark.range(1))  # the session's own DataFrame class (classic or Connect)
    monkeypatch.setattr(frame, "cache", refuse)
    monkeypatch.setattr(frame, "localCheckpoint", refuse)
    with caplog.at_level(logging.WARNING, logger="avatar_metrics"):
        got = evaluate(spark, rid(O), rid(A), None, {"row_key": "rid", "seed": 5},
                       only=["hidden_rate"])
    said = sorted(r.getMessage() for r in caplog.records if "refuses" in r.getMessage())
    assert said == sorted([
        "this Spark session refuses cache() (CANNOT_MODIFY_STATIC_CONFIG): carrying on without it",
        f"this Spark session refuses the setting {amio.COMPRESSED} (CANNOT_MODIFY_STATIC_CONFIG): "
        "carrying on without it",
    ])
    value, hits, hit = ref.hidden_rate(O, A, KINDS, 5)
    m = got.to_dict()["metrics"]["hidden_rate"]
    assert (m["value"], m["details"]["hits"]) == (value, hits)
    recs = got.records.toPandas().set_index("rid").sort_index()
    assert recs["hidden_hit"].tolist() == hit
