"""The seeded half split of a table (approximate holdout, ``avatar-metrics split``).

Each record gets the keyed hash of (seed, "holdout-split", id, 0), the same
hash family as the tie-breaks; the working half is the ceil(n/2) records with
the smallest (key, id), the rest is the holdout. It depends on the seed and
the record ids only.
"""

from __future__ import annotations

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..io import ID
from ..kernels.keyed import split_keys as keys_of
from .aggregate import kth_smallest_pairs


def split_keys(ids: DataFrame, seed: int) -> DataFrame:
    """``ID, key`` for the records of ``ids``."""

    def keys(batches):
        for pdf in batches:
            pdf["key"] = keys_of(seed, pdf[ID].to_numpy(dtype=np.int64))
            yield pdf

    return ids.select(ID).mapInPandas(keys, f"{ID} long, key long")


def working_ids(df: DataFrame, n: int, seed: int) -> DataFrame:
    """The ids of the working half (ceil(n/2) records) of ``df``; cached."""
    keyed = split_keys(df, seed).cache()
    k_last, id_last = kth_smallest_pairs(keyed, "key", ID, (n + 1) // 2 - 1)
    key = F.col("key")
    working = (key < F.lit(k_last)) | ((key == F.lit(k_last)) & (F.col(ID) <= F.lit(id_last)))
    out = keyed.filter(working).select(ID).cache()
    out.count()
    keyed.unpersist()
    return out
