"""What one pass over each input table tells: its records, and per variable its non-null count,
numeric range and infinite values; the ranges of the Gower distance are taken from them.

The tables are summarised in one action (their union), so that Spark scans them side by side
and, on cached tables, fills their caches together. A table may be summarised per group (its
Spark partitions, for ``positions``): the groups' rows come back with it, and its summary is
merged from them in the driver: counts added, the smallest minimum and the largest maximum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from .io import col

if TYPE_CHECKING:
    from .schema import Variable

INF = float("inf")


@dataclass(frozen=True)
class ColumnStats:
    non_null: int
    min: float | None  # numeric variables only
    max: float | None
    infinite: int = 0  # +inf / -inf values (numeric)


@dataclass(frozen=True)
class TableStats:
    """Rows of a table, and per variable its non-null count and numeric range."""

    rows: int
    columns: dict[str, ColumnStats]

    def __getitem__(self, name: str) -> ColumnStats:
        return self.columns[name]


def ranges_of(stats: Sequence[TableStats], variables: Sequence[Variable]) -> np.ndarray:
    """max - min of each numeric variable over the tables whose stats are given."""
    out = np.zeros(len(variables))
    for i, v in enumerate(variables):
        if v.kind != "numeric":
            continue
        lows = [s[v.name].min for s in stats if s[v.name].min is not None]
        highs = [s[v.name].max for s in stats if s[v.name].max is not None]
        out[i] = (max(highs) - min(lows)) if lows else math.nan
    return out


def table_stats(df: DataFrame, variables: dict[str, str]) -> TableStats:
    """Rows, and per variable: non-null count, min, max and infinite values (numeric)."""
    return summarise({"": df}, variables)[0][""]


def summarise(dfs: dict[str, DataFrame], variables: dict[str, str],
              grouped: Mapping[str, tuple[Column, list[Column]]] | None = None
              ) -> tuple[dict[str, TableStats], dict[str, list[Row]]]:
    """The tables' statistics, and the rows of those ``grouped`` names: ``(key, aggregates)``,
    a row per key with the aggregates and the statistics' own columns (``n`` its records)."""
    grouped = grouped or {}
    aggs = [F.count(F.lit(1)).alias("n")]
    for i, (c, kind) in enumerate(variables.items()):
        aggs.append(F.count(col(c)).alias(f"nn{i}"))
        if kind == "numeric":
            x = col(c).cast("double")
            aggs += [F.min(x).alias(f"lo{i}"), F.max(x).alias(f"hi{i}"),
                     F.count(F.when(F.abs(x) == F.lit(INF), 1)).alias(f"inf{i}")]
    union = None
    for t, (name, df) in enumerate(dfs.items()):
        if name in grouped:
            key, extra = grouped[name]
            row = df.groupBy(key).agg(*aggs, *extra)
        else:
            row = df.agg(*aggs)
        row = row.select(F.lit(t).alias("__am_t"), "*")
        union = row if union is None else union.unionByName(row, allowMissingColumns=True)
    rows: dict[int, list[Row]] = {t: [] for t in range(len(dfs))}
    for r in union.collect():
        rows[r["__am_t"]].append(r)
    out = {}
    for t, name in enumerate(dfs):
        got = rows[t]
        columns = {}
        for i, (c, kind) in enumerate(variables.items()):
            numeric = kind == "numeric"
            lows = [r[f"lo{i}"] for r in got if r[f"lo{i}"] is not None] if numeric else []
            highs = [r[f"hi{i}"] for r in got if r[f"hi{i}"] is not None] if numeric else []
            columns[c] = ColumnStats(
                non_null=sum(r[f"nn{i}"] for r in got),
                min=min(lows) if lows else None,
                max=max(highs) if highs else None,
                infinite=sum(r[f"inf{i}"] for r in got) if numeric else 0,
            )
        out[name] = TableStats(rows=sum(r["n"] for r in got), columns=columns)
    return out, {name: rows[t] for t, name in enumerate(dfs) if name in grouped}
