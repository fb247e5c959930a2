"""Setting a real holdout aside before anonymization.

``split_holdout`` cuts an original table into a working half (ceil(n/2)
records, to be anonymized) and a holdout half (never shown to the generator),
from the seed and the record ids alone: the same split as the approximate
holdout of the Closest Rate.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from .engine.split import working_ids
from .errors import InputError
from .io import ID, RESERVED_PREFIX, check_input_order, persist
from .positions import with_position
from .schema import key_id, key_missing

# Below this many records a holdout half is too small to be a useful reference
# (spec seed 001): the metrics then use the approximate holdout.
MIN_RECORDS = 500


def split_holdout(df: DataFrame, seed: int = 0, row_key: str | None = None) -> tuple[DataFrame, DataFrame, int]:
    """(working half, holdout half, n). Both halves keep the input order."""
    for i, c in enumerate(df.columns):
        if c.lower().startswith(RESERVED_PREFIX):  # Spark compares names without case
            raise InputError(f"originals: column number {i + 1} starts with {RESERVED_PREFIX} (in any case), which "
                             "this tool keeps for its own columns: rename it")
    if row_key is not None:
        if row_key not in df.columns:
            raise InputError(f"originals: row key column {row_key} is missing: check the name, or leave the key out")
        if df.filter(key_missing(df, row_key)).limit(1).count():
            raise InputError(f"originals: row key column {row_key} has null (or NaN) values: every record needs a "
                             "key (the metric run refuses them too)")
        tagged = df.withColumn(ID, key_id(df, row_key))
    else:
        check_input_order(df, "originals")
        tagged = with_position(df)
    tagged = persist(tagged)
    n = tagged.count()
    if n == 0:
        tagged.unpersist()
        raise InputError("originals: the table is empty: check the path or table name")
    if row_key is not None and tagged.select(ID).distinct().count() != n:
        tagged.unpersist()
        raise InputError(f"originals: row key column {row_key} has duplicated values: the key must be unique")
    ids = working_ids(tagged, n, seed)
    working = tagged.join(ids, ID, "left_semi").orderBy(ID).drop(ID)
    holdout = tagged.join(ids, ID, "left_anti").orderBy(ID).drop(ID)
    return working, holdout, n
