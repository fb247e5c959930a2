"""Exact distributed Gower nearest-neighbour search.

The queries stay partitioned across the executors. The candidates are cut
into blocks (``search.block_size`` records, assigned by a hash of their id);
the driver fetches one block at a time and ships it to the executors inside
the closure of a ``mapInPandas`` over the queries (no ``sparkContext``, so
Spark Connect works). Each pass gives a partial top-2 state per query; the
states of all blocks are merged exactly in Spark. Nothing here builds a
query-by-candidate matrix larger than the kernel's bound, and the queries never
reach the driver.

Categorical values are compared as values: each block factorizes its own
values, and a query value absent from the block gets a code no candidate has.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..io import ID
from ..kernels.gower import Space, State, search, search_salt

log = logging.getLogger(__name__)

RESULT_SCHEMA = f"{ID} long, d1 double, d2 double, n1 long, cid long, key long"


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str  # "numeric" | "categorical"


def ranges_of(stats: Sequence[dict], variables: Sequence[Variable]) -> np.ndarray:
    """max - min of each numeric variable over the tables whose stats are given."""
    out = np.zeros(len(variables))
    for i, v in enumerate(variables):
        if v.kind != "numeric":
            continue
        lows = [s[v.name]["min"] for s in stats if s[v.name]["min"] is not None]
        highs = [s[v.name]["max"] for s in stats if s[v.name]["max"] is not None]
        out[i] = (max(highs) - min(lows)) if lows else math.nan
    return out


def _select(df: DataFrame, variables: Sequence[Variable]) -> DataFrame:
    cols = [F.col(ID)]
    for i, v in enumerate(variables):
        c = F.col(f"`{v.name}`")
        if v.kind == "numeric":
            c = c.cast("double")
        elif dict(df.dtypes)[v.name] not in ("string", "boolean"):
            c = c.cast("double")  # a numeric column compared as categories
        cols.append(c.alias(f"v{i}"))
    return df.select(*cols)


@dataclass
class Block:
    """One block of candidates, encoded for the kernel."""

    C: np.ndarray
    cids: np.ndarray
    uniques: list  # per variable: pandas Index of the block's categories (None for numeric)


def encode_block(pdf: pd.DataFrame, variables: Sequence[Variable]) -> Block:
    n = len(pdf)
    C = np.empty((n, len(variables)))
    uniques = []
    for i, v in enumerate(variables):
        col = pdf[f"v{i}"]
        if v.kind == "numeric":
            C[:, i] = col.to_numpy(dtype="float64", na_value=np.nan)
            uniques.append(None)
        else:
            codes, uniq = pd.factorize(col, use_na_sentinel=True)
            C[:, i] = np.where(codes < 0, np.nan, codes.astype(np.float64))
            uniques.append(pd.Index(uniq))
    return Block(C=C, cids=pdf[ID].to_numpy(dtype=np.int64), uniques=uniques)


def encode_queries(pdf: pd.DataFrame, variables: Sequence[Variable], block: Block) -> np.ndarray:
    n = len(pdf)
    Q = np.empty((n, len(variables)))
    for i, v in enumerate(variables):
        col = pdf[f"v{i}"]
        if v.kind == "numeric":
            Q[:, i] = col.to_numpy(dtype="float64", na_value=np.nan)
        else:
            # -1: a value no candidate of the block has (queries are never compared with each other)
            codes = block.uniques[i].get_indexer(col)
            Q[:, i] = np.where(col.isna().to_numpy(), np.nan, codes.astype(np.float64))
    return Q


def _state_frame(qids: np.ndarray, st: State) -> pd.DataFrame:
    return pd.DataFrame({ID: qids, "d1": st.d1, "d2": st.d2, "n1": st.n1, "cid": st.cid, "key": st.key})


def _pass(queries: DataFrame, block: Block, variables, space: Space, salt: int) -> DataFrame:
    def run(batches):
        for pdf in batches:
            qids = pdf[ID].to_numpy(dtype=np.int64)
            Q = encode_queries(pdf, variables, block)
            st = search(Q, qids, block.C, block.cids, space, salt)
            yield _state_frame(qids, st)

    return queries.mapInPandas(run, RESULT_SCHEMA)


def merge_states(parts: DataFrame) -> DataFrame:
    """Exact merge, per query, of the partial states of several blocks."""
    g = parts.groupBy(ID).agg(
        F.min("d1").alias("d1"),
        F.collect_list(F.struct("d1", "d2", "n1", "key", "cid")).alias("s"),
    )
    at_min = F.filter("s", lambda x: x["d1"] == F.col("d1"))
    both = F.array_sort(F.flatten(F.transform("s", lambda x: F.array(x["d1"], x["d2"]))))
    best = F.array_min(F.transform(at_min, lambda x: F.struct(x["key"].alias("key"), x["cid"].alias("cid"))))
    return g.select(
        ID,
        "d1",
        F.element_at(both, 2).alias("d2"),
        F.aggregate(at_min, F.lit(0).cast("long"), lambda acc, x: acc + x["n1"]).alias("n1"),
        best["cid"].alias("cid"),
        best["key"].alias("key"),
    )


def nearest(
    queries: DataFrame,
    candidates: DataFrame,
    variables: Sequence[Variable],
    ranges: np.ndarray,
    *,
    search_name: str,
    seed: int,
    block_size: int,
    n_candidates: int | None = None,
    query_partitions: int | None = None,
) -> DataFrame:
    """For every query: d1, d2, n1 (candidates at d1) and the chosen candidate ``cid``.

    ``queries`` and ``candidates`` have the ``ID`` column and the variables.
    Runs one Spark pass per candidate block; the returned DataFrame is cached
    (the caller unpersists it).
    """
    variables = list(variables)
    space = Space(is_cat=np.array([v.kind == "categorical" for v in variables]), ranges=np.asarray(ranges, float))
    salt = search_salt(seed, search_name)
    q = _select(queries, variables)
    if query_partitions:
        q = q.repartition(query_partitions, ID)
    c = _select(candidates, variables)
    if n_candidates is None:
        n_candidates = c.count()
    n_blocks = max(1, math.ceil(n_candidates / block_size))
    c = c.withColumn("__am_block", F.pmod(F.xxhash64(F.col(ID)), F.lit(n_blocks)))
    if n_blocks > 1:
        c = c.cache()

    t0 = time.perf_counter()
    parts = []
    try:
        for b in range(n_blocks):
            pdf = c.filter(F.col("__am_block") == b).drop("__am_block").toPandas()
            if len(pdf) == 0:
                continue
            pdf = pdf.sort_values(ID, kind="stable").reset_index(drop=True)
            block = encode_block(pdf, variables)
            part = _pass(q, block, variables, space, salt).cache()
            part.count()
            parts.append(part)
            log.info(
                "search %s: block %d of %d done (%d candidates), %.1f s so far",
                search_name, b + 1, n_blocks, len(pdf), time.perf_counter() - t0,
            )
    finally:
        if n_blocks > 1:
            c.unpersist()
    if not parts:
        raise ValueError(f"search {search_name}: no candidates")
    if len(parts) == 1:
        return parts[0]
    union = parts[0]
    for p in parts[1:]:
        union = union.unionByName(p)
    merged = merge_states(union).cache()
    merged.count()
    for p in parts:
        p.unpersist()
    log.info("search %s: %d blocks merged, %.1f s", search_name, len(parts), time.perf_counter() - t0)
    return merged
