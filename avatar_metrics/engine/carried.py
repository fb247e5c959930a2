"""Values computed from the data that a query needs, carried as data, never as literals.

Spark prints every query's plan: in the Spark UI's SQL tab, in each event of the
event log (which a History Server keeps, through ``spark-defaults.conf``, with no
key of ours), and in the plan-change log. A literal is printed with its value,
so a threshold, a bin's start or a mean written as ``F.lit(x)`` would publish a
statistic of the originals, one person's value when it is taken over one or
two (spec: "Small groups", the last point).

``carry`` joins a one-row table made from local data (a ``LocalRelation``: its
plan names the columns and never prints the rows) and hands back its columns.
Each value is a float64 or an int64 as given, so an expression using the column
computes exactly what it computed with the literal.
"""

from __future__ import annotations

import itertools
from typing import Mapping

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..io import RESERVED_PREFIX

_counter = itertools.count()  # each carry's columns are new names: one plan can join several


def carry(df: DataFrame, values: Mapping[str, float | int]) -> tuple[DataFrame, dict[str, Column]]:
    """``df`` with one column per value (joined from a one-row table), and those columns by name.

    Integers become long columns, every other value a double. With no value, ``df`` as it is.
    """
    if not values:
        return df, {}
    tag = f"{RESERVED_PREFIX}v{next(_counter)}_"
    names = {name: f"{tag}{i}" for i, name in enumerate(values)}
    data = {}
    for name, v in values.items():
        is_int = isinstance(v, (int, np.integer)) and not isinstance(v, bool)
        data[names[name]] = np.array([v], dtype=np.int64 if is_int else np.float64)
    one = df.sparkSession.createDataFrame(pd.DataFrame(data))
    return df.crossJoin(F.broadcast(one)), {name: F.col(c) for name, c in names.items()}
