"""Exact distributed Gower nearest-neighbour search.

The queries stay partitioned across the executors. The candidates are cut
into blocks (``search.block_size`` records, assigned by a hash of their id);
the driver fetches one block at a time and ships it to the executors inside
the closure of a ``mapInPandas`` over the queries (no ``sparkContext``, so
Spark Connect works). The queries carry their top-2 state from pass to pass:
each pass folds one block into it with the exact index of ``kernels.index``
(the state of earlier blocks tightens its pruning). Up to ``CHAIN`` passes are
pipelined in one Spark job; the states of several such chains are merged
exactly in Spark (``merge_states``). The queries never reach the driver.

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

from ..config import SearchSettings
from ..io import ID, col
from ..kernels.gower import NO_KEY, Space, State, search_salt
from ..kernels.index import CandidateIndex
from ..schema import Variable

log = logging.getLogger(__name__)

def _select(df: DataFrame, variables: Sequence[Variable]) -> DataFrame:
    """ID and the variables as v0, v1, ...: numbers as float64, categories as they are
    (strings or booleans: ``schema`` turns numeric categories into exact text)."""
    cols = [F.col(ID)]
    for i, v in enumerate(variables):
        c = col(v.name)
        if v.kind == "numeric":
            c = c.cast("double")
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


STATE_COLUMNS = ("d1", "d2", "n1", "cid", "key")
# Blocks folded in one Spark job, one pass after the other, each pass carrying
# the queries' state to the next (tighter pruning). Each pass of a chain runs
# in its own Python worker holding its block and index, so a chain costs
# memory; longer chains of cached steps would make Spark's plans grow without
# bound. Chains are merged exactly.
CHAIN = 2

# Queries searched at once: Arrow batches are gathered up to this many rows,
# so that queries sharing a categorical profile are met together.
QUERY_CHUNK = 50_000


def _rechunk(batches, rows: int):
    buf, n = [], 0
    for pdf in batches:
        buf.append(pdf)
        n += len(pdf)
        if n >= rows:
            yield pd.concat(buf, ignore_index=True)
            buf, n = [], 0
    if buf:
        yield pd.concat(buf, ignore_index=True)


def _pass(queries: DataFrame, block: Block, variables, space: Space, salt: int, schema) -> DataFrame:
    """One pass: fold a block of candidates into the state carried by the queries."""
    def run(batches):
        # built per task, and dropped with it: idle reused workers keep no index
        index = CandidateIndex(block.C, block.cids, space)
        for pdf in _rechunk(batches, QUERY_CHUNK):
            qids = pdf[ID].to_numpy(dtype=np.int64)
            Q = encode_queries(pdf, variables, block)
            prior = State(*(pdf[c].to_numpy() for c in STATE_COLUMNS))
            st = index.search(Q, qids, salt, prior)
            for c in STATE_COLUMNS:
                pdf[c] = getattr(st, c)
            yield pdf

    return queries.mapInPandas(run, schema)


def nearest(
    queries: DataFrame,
    candidates: DataFrame,
    variables: Sequence[Variable],
    ranges: np.ndarray,
    *,
    name: str,
    search: SearchSettings,
    n_candidates: int | None = None,
) -> DataFrame:
    """For every query: d1, d2, n1 (candidates at d1) and the chosen candidate ``cid``.

    ``queries`` and ``candidates`` have the ``ID`` column and the variables;
    ``name`` names the search in the tie keys (spec: "Randomness"). Runs one
    Spark job per ``CHAIN`` candidate blocks; the returned DataFrame is cached
    (the caller unpersists it). The result is the same whatever the number
    and order of the blocks.
    """
    variables = list(variables)
    space = Space(is_cat=np.array([v.kind == "categorical" for v in variables]), ranges=np.asarray(ranges, float))
    salt = search_salt(search.seed, name)
    q = _select(queries, variables)
    if search.query_partitions:
        q = q.repartition(search.query_partitions, ID)
    c = _select(candidates, variables)
    if n_candidates is None:
        n_candidates = c.count()
    n_blocks = max(1, math.ceil(n_candidates / search.block_size))
    c = c.withColumn("__am_block", F.pmod(F.xxhash64(F.col(ID)), F.lit(n_blocks)))
    if n_blocks > 1:
        c = c.cache()

    initial = q.select(
        "*",
        F.lit(math.inf).alias("d1"),
        F.lit(math.inf).alias("d2"),
        F.lit(0).cast("long").alias("n1"),
        F.lit(-1).cast("long").alias("cid"),
        F.lit(NO_KEY).cast("long").alias("key"),
    )
    schema = initial.schema
    t0 = time.perf_counter()
    done = 0
    chains: list[DataFrame] = []
    try:
        for first in range(0, n_blocks, CHAIN):
            # one Spark job folds up to CHAIN blocks, pipelined, into the state
            state = initial
            last = min(first + CHAIN, n_blocks)
            for b in range(first, last):
                pdf = c.filter(F.col("__am_block") == b).drop("__am_block").toPandas()
                if len(pdf) == 0:
                    continue
                pdf = pdf.sort_values(ID, kind="stable").reset_index(drop=True)
                state = _pass(state, encode_block(pdf, variables), variables, space, salt, schema)
                done += len(pdf)
            if state is initial:
                continue
            state = state.select(ID, *STATE_COLUMNS).cache()
            state.count()
            chains.append(state)
            elapsed = time.perf_counter() - t0
            rate = done / elapsed if elapsed > 0 else float("inf")
            left = (n_candidates - done) / rate if rate > 0 else 0.0
            log.info(
                "search %s: block %d of %d done, %d of %d candidates, %.1f s so far, "
                "%.0f candidates/s, about %.0f s left",
                name, last, n_blocks, done, n_candidates, elapsed, rate, max(0.0, left),
            )
    finally:
        if n_blocks > 1:
            c.unpersist()
    if not chains:
        raise ValueError(f"search {name}: no candidates")
    if len(chains) == 1:
        return chains[0]
    union = chains[0]
    for other in chains[1:]:
        union = union.unionByName(other)
    merged = merge_states(union).cache()
    merged.count()
    for other in chains:
        other.unpersist()
    return merged


def merge_states(parts: DataFrame) -> DataFrame:
    """Exact merge, per query, of the states of disjoint sets of blocks."""
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
