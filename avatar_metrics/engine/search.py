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

Two searches share this machinery, each a ``Fold``: ``nearest`` carries the
top-2 state; ``within`` carries counts of the candidates within a per-query
radius (and the tie-break winner at it), which add up from block to block
(``merge_within``). ``pair_distances`` gives such radii: the distance of each
query to the candidate with its own id, by the kernel's own terms.

Categorical values are compared as values: each block factorizes its own
values, and a query value absent from the block gets a code no candidate has.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..config import SearchSettings
from ..io import ID, col
from ..kernels.gower import NO_KEY, Space, State, gower_pairs, search_salt
from ..kernels.index import CandidateIndex
from ..schema import Variable

log = logging.getLogger(__name__)

def _select(df: DataFrame, variables: Sequence[Variable], carry=()) -> DataFrame:
    """ID, the carried columns and the variables as v0, v1, ...: numbers as float64,
    categories as they are (strings or booleans: ``schema`` turns numeric
    categories into exact text)."""
    cols = [F.col(ID), *[F.col(c) for c in carry]]
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
    token: str = field(default_factory=lambda: uuid.uuid4().hex)  # names this block in the workers' cache


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


@dataclass(frozen=True)
class Fold:
    """What a search carries per query from block to block, and how blocks combine.

    ``state``: (column, initial value, Spark type); ``step(index, Q, qids,
    salt, pdf)`` folds one block into the state columns of ``pdf``;
    ``merge(df)`` combines, per query, the states of disjoint sets of blocks;
    ``carry``: query columns the fold reads besides the variables.
    """

    state: tuple[tuple[str, Any, str], ...]
    step: Callable
    merge: Callable[[DataFrame], DataFrame]
    carry: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c for c, _, _ in self.state)


def _nearest_step(index: CandidateIndex, Q, qids, salt, pdf) -> None:
    prior = State(*(pdf[c].to_numpy() for c in ("d1", "d2", "n1", "cid", "key")))
    st = index.search(Q, qids, salt, prior)
    for c in ("d1", "d2", "n1", "cid", "key"):
        pdf[c] = getattr(st, c)


def _within_step(index: CandidateIndex, Q, qids, salt, pdf) -> None:
    w = index.within(Q, qids, salt, pdf["radius"].to_numpy(dtype=np.float64))
    pdf["le"] = pdf["le"].to_numpy() + w.le
    pdf["lt"] = pdf["lt"].to_numpy() + w.lt
    key, cid = pdf["key"].to_numpy(), pdf["cid"].to_numpy()
    take = (w.key < key) | ((w.key == key) & (w.cid < cid))
    pdf["key"] = np.where(take, w.key, key)
    pdf["cid"] = np.where(take, w.cid, cid)


def merge_within(parts: DataFrame) -> DataFrame:
    """Exact merge of counts within radii: counts add up, the smallest (key, id) wins."""
    best = F.min(F.struct(F.col("key").alias("key"), F.col("cid").alias("cid")))
    g = parts.groupBy(ID).agg(F.sum("le").alias("le"), F.sum("lt").alias("lt"), best.alias("b"))
    return g.select(ID, "le", "lt", F.col("b.key").alias("key"), F.col("b.cid").alias("cid"))


_LAST_INDEX: dict = {}  # in a Python worker: the index of the last block it searched


def _index_of(block: Block, space: Space) -> CandidateIndex:
    """The block's index, built once per Python worker: the tasks of one pass that a
    reused worker runs one after another share it. Only the last block's is kept."""
    key = (block.token, space.is_cat.tobytes(), space.ranges.tobytes())
    if _LAST_INDEX.get("key") != key:
        _LAST_INDEX.clear()
        _LAST_INDEX["index"] = CandidateIndex(block.C, block.cids, space)
        _LAST_INDEX["key"] = key
    return _LAST_INDEX["index"]


def _pass(queries: DataFrame, block: Block, variables, space: Space, salt: int, schema, fold: Fold) -> DataFrame:
    """One pass: fold a block of candidates into the state carried by the queries."""
    def run(batches):
        index = _index_of(block, space)
        for pdf in _rechunk(batches, QUERY_CHUNK):
            qids = pdf[ID].to_numpy(dtype=np.int64)
            fold.step(index, encode_queries(pdf, variables, block), qids, salt, pdf)
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
    n_queries: int | None = None,
) -> DataFrame:
    """For every query: d1, d2, n1 (candidates at d1) and the chosen candidate ``cid``.

    ``queries`` and ``candidates`` have the ``ID`` column and the variables;
    ``name`` names the search in the tie keys (spec: "Randomness"). Runs one
    Spark job per ``CHAIN`` candidate blocks; the returned DataFrame is cached
    (the caller unpersists it). The result is the same whatever the number
    and order of the blocks.
    """
    return _search(queries, candidates, variables, ranges, name, search, n_candidates, NEAREST, n_queries)


def within(
    queries: DataFrame,
    candidates: DataFrame,
    variables: Sequence[Variable],
    ranges: np.ndarray,
    *,
    name: str,
    search: SearchSettings,
    n_candidates: int | None = None,
    n_queries: int | None = None,
) -> DataFrame:
    """For every query with a ``radius`` column: ``le`` and ``lt``, the candidates at
    distance at most and less than its radius, and ``key``/``cid``, the tie-break
    winner (smallest keyed hash, then id) among those exactly at the radius.

    The radius must be a distance the kernel computes bit for bit (the
    distance to one candidate, say). Same blocks, passes and caching as
    ``nearest``; counts of blocks add up exactly.
    """
    return _search(queries, candidates, variables, ranges, name, search, n_candidates, WITHIN, n_queries)


def shuffle_partitions(spark) -> int | None:
    """``spark.sql.shuffle.partitions`` when it is a number (Databricks may say "auto")."""
    try:
        n = int(spark.conf.get("spark.sql.shuffle.partitions"))
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


# queries per partition below which a search does not repartition them by default
MIN_QUERIES_PER_PARTITION = 10_000


def _search(queries, candidates, variables, ranges, name, search, n_candidates, fold: Fold,
            n_queries: int | None = None) -> DataFrame:
    variables = list(variables)
    space = Space(is_cat=np.array([v.kind == "categorical" for v in variables]), ranges=np.asarray(ranges, float))
    salt = search_salt(search.seed, name)
    q = _select(queries, variables, fold.carry)
    parts = search.query_partitions
    if not parts and n_queries is not None:
        # a table read from one file is often one partition: one core would do the whole
        # search; small tables stay as they are (a shuffle costs more than it saves there)
        parts = min(shuffle_partitions(queries.sparkSession) or 0, n_queries // MIN_QUERIES_PER_PARTITION)
        parts = parts if parts >= 2 else None
    if parts:
        q = q.repartition(parts, ID)
    c = _select(candidates, variables)
    if n_candidates is None:
        n_candidates = c.count()
    n_blocks = max(1, math.ceil(n_candidates / search.block_size))
    c = c.withColumn("__am_block", F.pmod(F.xxhash64(F.col(ID)), F.lit(n_blocks)))
    if n_blocks > 1:
        c = c.cache()

    initial = q.select("*", *[F.lit(v).cast(t).alias(c) for c, v, t in fold.state])
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
                state = _pass(state, encode_block(pdf, variables), variables, space, salt, schema, fold)
                done += len(pdf)
            if state is initial:
                continue
            state = state.select(ID, *fold.columns).cache()
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
    merged = fold.merge(union).cache()
    merged.count()
    for other in chains:
        other.unpersist()
    return merged


def pair_distances(left: DataFrame, right: DataFrame, variables: Sequence[Variable], ranges: np.ndarray) -> DataFrame:
    """``ID, radius``: G(left_i, right_i) for the records of both tables with the same id.

    Computed with the kernel's own terms and order (``gower_pairs``), so that
    a search meets right_i at exactly this distance. Categories are compared
    as values: each batch codes the two sides' values together.
    """
    variables = list(variables)
    space = Space(is_cat=np.array([v.kind == "categorical" for v in variables]), ranges=np.asarray(ranges, float))
    other = _select(right, variables).select(ID, *[F.col(f"v{i}").alias(f"w{i}") for i in range(len(variables))])
    pairs = _select(left, variables).join(other, ID)

    def run(batches):
        for pdf in batches:
            n = len(pdf)
            X, Y = np.empty((n, len(variables))), np.empty((n, len(variables)))
            for i, v in enumerate(variables):
                if v.kind == "numeric":
                    X[:, i] = pdf[f"v{i}"].to_numpy(dtype="float64", na_value=np.nan)
                    Y[:, i] = pdf[f"w{i}"].to_numpy(dtype="float64", na_value=np.nan)
                else:
                    codes, _ = pd.factorize(pd.concat([pdf[f"v{i}"], pdf[f"w{i}"]], ignore_index=True))
                    codes = np.where(codes < 0, np.nan, codes.astype(np.float64))
                    X[:, i], Y[:, i] = codes[:n], codes[n:]
            yield pd.DataFrame({ID: pdf[ID].to_numpy(dtype=np.int64), "radius": gower_pairs(X, Y, space)})

    return pairs.mapInPandas(run, f"{ID} long, radius double")


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


NEAREST = Fold(
    state=(("d1", math.inf, "double"), ("d2", math.inf, "double"), ("n1", 0, "long"), ("cid", -1, "long"),
           ("key", int(NO_KEY), "long")),
    step=_nearest_step,
    merge=merge_states,
)
WITHIN = Fold(
    state=(("le", 0, "long"), ("lt", 0, "long"), ("key", int(NO_KEY), "long"), ("cid", -1, "long")),
    step=_within_step,
    merge=merge_within,
    carry=("radius",),
)
