"""Keyed choices of records: the seeded half split of a table (approximate
holdout, ``avatar-metrics split``) and the query sample (``query_sample``).

Each record gets the keyed hash of (seed, name, id, 0), the same hash family
as the tie-breaks; the chosen records are the k with the smallest (key, id):
the working half (name "holdout-split", k = ceil(n/2), the rest is the
holdout), or the sample (name "sample", k = N; the holdout records asked
about: "sample_holdout"; the avatars asked about: "sample_avatars"). It depends on the seed and
the record ids only, never on partitioning.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..io import ID, persist
from ..kernels.keyed import SAMPLE, SAMPLE_AVATARS, SAMPLE_HOLDOUT, SPLIT, record_keys
from ..schema import Inputs
from .aggregate import kth_smallest_pairs
from .carried import carry

log = logging.getLogger("avatar_metrics")


def split_keys(ids: DataFrame, seed: int, name: str = SPLIT) -> DataFrame:
    """``ID, key`` for the records of ``ids``."""

    def keys(batches):
        for pdf in batches:
            pdf["key"] = record_keys(seed, name, pdf[ID].to_numpy(dtype=np.int64))
            yield pdf

    return ids.select(ID).mapInPandas(keys, f"{ID} long, key long")


def smallest_ids(df: DataFrame, k: int, seed: int, name: str) -> DataFrame:
    """The ids of the ``k`` records of ``df`` (1 <= k) with the smallest (key, id); cached."""
    keyed = persist(split_keys(df, seed, name))
    k_last, id_last = kth_smallest_pairs(keyed, "key", ID, k - 1)
    key = F.col("key")
    # the last id may be a row key's value: carried as data (engine.carried), not in the plan
    with_last, last = carry(keyed, {"key": k_last, "id": id_last})
    chosen = (key < last["key"]) | ((key == last["key"]) & (F.col(ID) <= last["id"]))
    out = persist(with_last.filter(chosen).select(ID))
    out.count()
    keyed.unpersist()
    return out


def working_ids(df: DataFrame, n: int, seed: int) -> DataFrame:
    """The ids of the working half (ceil(n/2) records) of ``df``; cached."""
    return smallest_ids(df, (n + 1) // 2, seed, SPLIT)


def keyed_mark(seed: int, name: str, k: int, last: tuple[int, int]):
    """A boolean column, of any table with ID: whether the record is among the ``k`` of
    smallest (key, id), ``last`` being the k-th pair. Computed where it is used (a pandas
    UDF on the id), so that it adds no cache, and no id list, to the plans that use it."""
    k_last, id_last = last

    @F.pandas_udf("boolean")
    def chosen(ids: pd.Series) -> pd.Series:
        ids = ids.to_numpy(dtype=np.int64)
        keys = record_keys(seed, name, ids)
        return pd.Series((keys < k_last) | ((keys == k_last) & (ids <= id_last)))

    return chosen(F.col(ID))


def draw_sample(inputs: Inputs, size: int | None, seed: int) -> None:
    """Set the inputs' query sample: the ``min(size, n)`` originals of smallest keyed hash
    of (seed, "sample", id), and likewise the holdout records asked about (Membership, the
    control of Attribute Inference) with "sample_holdout". ``size`` None, or at least the
    table's records: every record of it."""
    if size is None:
        return
    n = inputs.n_originals
    holdout_sampled = inputs.holdout is not None and size < inputs.n_holdout
    if size >= n:
        log.info("query_sample: %d is at least the %d originals: every original is a query%s", size, n,
                 "" if holdout_sampled else "; no table is sampled, the run is exact")
    else:
        inputs.sample_mark, inputs.n_sampled = _keyed_sample(inputs.originals, size, seed, SAMPLE, "originals")
        log.info("query_sample: %d of %d originals are the queries of every search, against all candidates; "
                 "the search-based metrics carry a 95%% confidence interval", size, n)
    if holdout_sampled:
        inputs.holdout_mark, inputs.n_holdout_sampled = _keyed_sample(inputs.holdout, size, seed, SAMPLE_HOLDOUT,
                                                                      "holdout records")
        log.info("query_sample: %d of %d holdout records are the queries of the searches that ask about them "
                 "(Membership, Attribute Inference); every holdout record stays a candidate elsewhere",
                 size, inputs.n_holdout)


def draw_avatar_sample(inputs: Inputs, size: int | None, seed: int) -> None:
    """The avatars asked about by the searches that take them as queries (DCR Share): the
    ``min(size, m)`` avatars of smallest keyed hash of (seed, "sample_avatars", id). Drawn by the
    metric that needs it, once (a run without that metric draws nothing); ``size`` None, or at
    least the avatars: every avatar."""
    if size is None or size >= inputs.n_avatars or inputs.avatars_mark is not None:
        return
    inputs.avatars_mark, inputs.n_avatars_sampled = _keyed_sample(inputs.avatars, size, seed, SAMPLE_AVATARS,
                                                                  "avatars")
    log.info("query_sample: %d of %d avatars are the queries of the searches that ask about them (DCR Share), "
             "against every original and holdout record", size, inputs.n_avatars)


def _keyed_sample(df: DataFrame, size: int, seed: int, name: str, what: str):
    """The mark of the ``size`` records of ``df`` of smallest (keyed hash of (seed, name, id), id), and ``size``."""
    last = kth_smallest_pairs(split_keys(df, seed, name), "key", ID, size - 1)
    mark = keyed_mark(seed, name, size, last)
    got = df.filter(mark).count()
    if got != size:  # one id per record: a count off means a lost or doubled record
        raise RuntimeError(f"query sample: {got} {what} drawn, {size} wanted: this is a bug")
    return mark, size
