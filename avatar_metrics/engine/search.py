"""Exact distributed Gower nearest-neighbour search.

The queries stay partitioned across the executors. The candidates are cut
into blocks of about ``search.block_size`` records; the driver fetches one
block at a time and ships it to the executors inside the closure of a
``mapInPandas`` over the queries (no ``sparkContext``, so Spark Connect
works). The queries carry their state from pass to pass: each pass folds one
block into it with the exact index of ``kernels.index`` (the state of earlier
blocks tightens its pruning). Up to ``CHAIN`` passes are pipelined in one
Spark job; the states of several such chains are merged exactly in Spark
(``merge_states``). The queries never reach the driver.

Blocks by locality. With more than one block, the blocks are ranges of the
candidates sorted by their values (categories of most levels first, then
numbers), so that the records of a block resemble each other. Each block
carries a summary (``kernels.gower.Summary``: per variable, whether a null
occurs, and the min and max of a number; ``Need``: and the categories it
holds), computed by Spark before any block is fetched, from which a lower
bound on the distance from a query to any of its records follows, safe in
floating point (``kernels.gower.lower_bounds``). The first job gives each
query a home block and folds it: with blocks of ``search.home_from``
candidates or more it is the home job (each query's home one of least lower
bound, of tied ones the block whose range of the blocks' sort holds the
query's own key; a block's queries split over tasks by a hash of their id, half as
many tasks in all as query partitions or more, each receiving the block's
candidates and its queries in one shuffle); with smaller blocks, block 0 is
a sample (a hash of the id picks one candidate in ``n_blocks``), every
query's home, folded in one pass over the queries. The second distance the home gives a
query bounds its final one from above, so a later block whose lower bound
exceeds that (or the query's second distance so far) cannot change the
query's result; a count within a radius needs only the blocks within its
radius. The first job marks, per query, the other blocks it must search
(``Need``), the later jobs fetch only the blocks some query is marked for,
and each reads only the queries marked for its blocks: a query costs
nothing in the passes it skips. The result is the same whatever the
blocking and the homes; only the work changes, and the log says how many
(query, block) visits were made of the full scan's, and how many query rows
the later jobs read.

Two searches share this machinery, each a ``Fold``: ``nearest`` carries the
top-2 state; ``within`` carries counts of the candidates within a per-query
radius (and the tie-break winner at it), which add up from block to block
(``merge_within``). ``pair_distances`` gives such radii: the distance of each
query to the candidate with its own id, by the kernel's own terms.

Under Spark Connect, the chains and the result are local checkpoints rather
than caches, and a block too large for the server's message limit goes in
slices (``_materialize``, ``closure_cap``).

Categorical values are compared as values: each block factorizes its own
values, and a query value absent from the block gets a code no candidate has.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import pickle
import re
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from ..config import SearchSettings
from ..io import ID, col
from ..kernels.gower import NO_KEY, Space, State, Summary, gower_pairs, lower_bounds, search_salt, summarize
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
    summary: Summary | None = None  # set: queries it cannot matter to skip the block
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
    ``reach(pdf)``: per query, a distance beyond which no candidate can change
    its final result (a block whose lower bound exceeds it is skipped), which
    may read ``REACH``, set after the first job by ``first_reach()``;
    ``carry``: query columns the fold reads besides the variables.
    """

    state: tuple[tuple[str, Any, str], ...]
    step: Callable
    merge: Callable[[DataFrame], DataFrame]
    reach: Callable[[pd.DataFrame], np.ndarray]
    first_reach: Callable[[], Any] = lambda: F.lit(math.inf)  # the REACH column after the first job
    carry: tuple[str, ...] = ()
    # the state column that the later passes start at the first job's reach instead of its
    # initial value ("d2": the index prunes from the first candidate on, not once it has two)
    bounded: str | None = None
    # (column, state column): copies of the first job's state that the later passes read
    # (the counts within a radius, for the cap), not merged
    first_state: tuple[tuple[str, str], ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c for c, _, _ in self.state)


def _nearest_step(index: CandidateIndex, Q, qids, salt, pdf) -> None:
    prior = State(*(pdf[c].to_numpy() for c in ("d1", "d2", "n1", "cid", "key")))
    st = index.search(Q, qids, salt, prior)
    for c in ("d1", "d2", "n1", "cid", "key"):
        pdf[c] = getattr(st, c)


def _counted(pdf) -> tuple[np.ndarray, np.ndarray]:
    """(le, lt) a query has counted so far: in this chain, and in the first job (``FIRST_LE``)."""
    le, lt = pdf["le"].to_numpy(), pdf["lt"].to_numpy()
    if FIRST_LE in pdf.columns:
        le, lt = le + pdf[FIRST_LE].to_numpy(), lt + pdf[FIRST_LT].to_numpy()
    return le, lt


def _within_step(index: CandidateIndex, Q, qids, salt, pdf, cap: int | None = None) -> None:
    base = _counted(pdf) if cap is not None else None  # the cap counts what other blocks found
    w = index.within(Q, qids, salt, pdf["radius"].to_numpy(dtype=np.float64), cap=cap, base=base)
    pdf["le"] = pdf["le"].to_numpy() + w.le
    pdf["lt"] = pdf["lt"].to_numpy() + w.lt
    key, cid = pdf["key"].to_numpy(), pdf["cid"].to_numpy()
    take = (w.key < key) | ((w.key == key) & (w.cid < cid))
    pdf["key"] = np.where(take, w.key, key)
    pdf["cid"] = np.where(take, w.cid, cid)


def _within_reach(pdf, cap: int) -> np.ndarray:
    """The radius; -1 (below every lower bound: no block is searched) for a query already
    past the cap, with one candidate strictly inside its radius."""
    le, lt = _counted(pdf)
    return np.where((le > cap) & (lt > 0), -1.0, pdf["radius"].to_numpy(dtype=np.float64))


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


def _pass(queries: DataFrame, block: Block, b: int, variables, space: Space, salt: int, schema,
          fold: Fold, need: Need | None = None) -> DataFrame:
    """One pass: fold a block (or a slice of block ``b``) of candidates into the state carried by the queries.

    With a block summary, only the queries whose reach the block's lower bound
    does not exceed search it (``VISITS`` counts them), and not those whose
    home block it is (the first job folded it); the block cannot change the
    others' results, so skipping it is exact. With ``need`` (the last pass of
    the sample block's job), block ``b`` becomes every query's home and each
    query's reach marks the other blocks it must search (``Need.bits``).
    """
    def run(batches):
        for pdf in _rechunk(batches, QUERY_CHUNK):
            qids = pdf[ID].to_numpy(dtype=np.int64)
            Q = encode_queries(pdf, variables, block)
            if block.summary is None:
                keep = np.ones(len(pdf), dtype=bool)
            else:
                keep = ~(lower_bounds(Q, block.summary, space) > fold.reach(pdf)) & (pdf[HOME].to_numpy() != b)
            if keep.all():
                fold.step(_index_of(block, space), Q, qids, salt, pdf)
            elif keep.any():
                # only what the fold reads and writes, not the variables
                read = [*fold.carry, *(c for c, _ in fold.first_state if c in pdf.columns)]
                sub = pdf.loc[keep, [*fold.columns, *read]].reset_index(drop=True)
                fold.step(_index_of(block, space), Q[keep], qids[keep], salt, sub)
                for c in fold.columns:
                    pdf.loc[keep, c] = sub[c].to_numpy()
            pdf[VISITS] = pdf[VISITS].to_numpy() + keep
            if need is not None:
                _mark(need, pdf, variables, fold.reach(pdf), space, b)
            yield pdf

    return queries.mapInPandas(run, schema)


def _mark(need: Need, pdf: pd.DataFrame, variables, reach: np.ndarray, space: Space, home: int) -> None:
    """Set the marks of the first job in ``pdf``: the blocks whose lower bound does not exceed
    each query's reach, but its home (``home``, folded whole; -1: none)."""
    words = need.bits(pdf, variables, reach, space)
    if home >= 0:
        words[:, home // NEED_BITS] &= ~np.int64(1 << (home % NEED_BITS))
    pdf[HOME] = home
    for k, word in enumerate(words.T):
        pdf[need_column(k)] = word


def _home_job(run: _Run, start: DataFrame, c: DataFrame, need: Need, n_blocks: int) -> DataFrame:
    """The first job of a search by blocks: each query folds its home block (``_homes``: one
    of least lower bound), and marks the other blocks it must search later (``Need.bits``),
    from its reach after its home. A query whose home holds no candidate keeps an infinite
    reach and is marked for every block.

    A block's queries are split into shares by a hash of their id (``_home_shares``: half
    as many tasks in all as the queries' partitions or more, one per block at least), and
    every share receives the block's candidates. The queries and the candidates go to their
    (block, share)'s task in one shuffle, a partition each (``_spread``; Spark's own
    grouping would hash several into one task, and adaptive execution would merge
    tasks), sorted so that a block's candidates come before its queries, which then
    stream through the block's index: a task holds one block and a chunk of queries,
    however many queries have that home."""
    variables, space, fold, salt = run.variables, run.space, run.fold, run.salt
    homes_of = run.strategy.homes
    columns = start.columns
    fresh = {column: value for column, value, _ in fold.state}

    def assign(batches):
        for pdf in batches:
            pdf[HOME] = homes_of(need, pdf, variables, space)
            yield pdf.drop(columns=RANGED)

    def fold_chunk(b: int, block: Block | None, index: CandidateIndex | None, qpdf: pd.DataFrame) -> pd.DataFrame:
        pdf = qpdf.reset_index(drop=True)
        for column, value in fresh.items():
            pdf[column] = value
        pdf[REACH], pdf[VISITS] = math.inf, 0
        if index is not None:
            fold.step(index, encode_queries(pdf, variables, block), pdf[ID].to_numpy(dtype=np.int64), salt, pdf)
            pdf[VISITS] = 1
        # (a home with no candidates folded nothing: no home to skip later)
        _mark(need, pdf, variables, fold.reach(pdf), space, b if index is not None else -1)
        return pdf[columns]

    def fold_homes(batches):
        # each task's rows come sorted by (home, share), a block's candidates before its
        # queries: build the block's index, then stream its queries through it, QUERY_CHUNK
        # at a time, so that a task holds one block and a chunk of queries, however many
        # queries share a home
        for (b, _), rows in itertools.groupby(_runs(batches), key=lambda r: r[0]):
            cands = []
            for candidate, group in itertools.groupby(rows, key=lambda r: r[1]):
                parts = (part for _, _, part in group)
                if candidate:
                    cands = list(parts)
                    continue
                # the queries: the block's index is built only for a home some query has
                block = index = None
                if cands:
                    cpdf = pd.concat(cands, ignore_index=True).sort_values(ID, kind="stable").reset_index(drop=True)
                    block = _encoded(cpdf, variables, space)
                    need.check(b, block)
                    index = CandidateIndex(block.C, block.cids, space)
                for qpdf in _rechunk(parts, QUERY_CHUNK):
                    yield fold_chunk(b, block, index, qpdf)

    # only what the home job reads goes through the shuffle; it adds the state. A block's
    # queries go to `shares` tasks by a hash of their id, and its candidates to each of
    # them: the home job then has at least half as many tasks as the queries have
    # partitions, not one per block, which would leave the cores of a cluster idle
    shares = run.strategy.home_shares(run.parts, n_blocks)
    ours = [ID, *[f"v{i}" for i in range(len(variables))], *fold.carry]
    kinds = dict(start.dtypes)
    queries = start.select(*ours, F.lit(-1).cast("long").alias(HOME))
    homed = (run.strategy.ranged(need, queries).mapInPandas(assign, queries.schema)
             .withColumns({SHARE: F.pmod(F.xxhash64(ID), F.lit(shares)), GROUP: F.lit(0)}))
    cands = c.select(ID, *ours[1:len(variables) + 1], *[F.lit(0).cast(kinds[x]).alias(x) for x in fold.carry],
                     F.col("__am_block").cast("long").alias(HOME),
                     F.explode(F.sequence(F.lit(0).cast("long"), F.lit(shares - 1).cast("long"))).alias(SHARE),
                     F.lit(1).alias(GROUP))
    both = homed.unionByName(cands)
    tasks = n_blocks * shares
    spread = run.strategy.spread(start.sparkSession, tasks)
    where = F.coalesce(F.create_map(*itertools.chain.from_iterable(
        (F.lit(t), F.lit(k).cast("long")) for t, k in spread.items()))[F.col(HOME) * shares + F.col(SHARE)],
        F.lit(0).cast("long"))
    # a partition per (block, share), each block's candidates first (a partition may hold
    # several when _spread found no key for one: sorted, they come one after another)
    placed = (both.withColumn(GROUP_KEY, where).repartition(tasks, GROUP_KEY)
              .sortWithinPartitions(HOME, SHARE, F.desc(GROUP)))
    return placed.mapInPandas(fold_homes, start.schema)


def _home_shares(parts: int | None, n_blocks: int) -> int:
    """Tasks per block in the home job: enough for half as many tasks as the queries'
    partitions or more. Set as advised, 2 to 4 partitions per core, that is a task per core
    or more; not all of them, because every share of a block receives its candidates and
    builds its index (measured on 2 cores, 8 partitions, 4 blocks: two shares a block were
    no faster than one)."""
    return max(1, -(-(parts or 0) // (2 * n_blocks)))


def _runs(batches):
    """The home job's rows as runs alike: ((home, share), a candidates' run?, rows), in order."""
    for pdf in batches:
        if len(pdf) == 0:
            continue
        home, share, group = (pdf[x].to_numpy() for x in (HOME, SHARE, GROUP))
        cuts = np.flatnonzero((home[1:] != home[:-1]) | (share[1:] != share[:-1]) | (group[1:] != group[:-1])) + 1
        for lo, hi in itertools.pairwise([0, *cuts, len(pdf)]):
            yield (int(home[lo]), int(share[lo])), bool(group[lo] == 1), pdf.iloc[lo:hi]


def _spread(spark, n: int) -> dict[int, int]:
    """For each b < n, a number that Spark's hash partitioning into n partitions puts in
    partition b (its pmod(hash(x), n)): the blocks' tasks then hold a block each, where
    hashing the block numbers would put several in one task and leave others empty.
    A residue not found maps to itself (any placement gives the same result)."""
    rows = (spark.range(0, 64 * n).select("id", F.pmod(F.hash("id"), F.lit(n)).alias("p"))
            .groupBy("p").agg(F.min("id").alias("id")).collect())
    found = {int(r["p"]): int(r["id"]) for r in rows}
    return {b: found.get(b, b) for b in range(n)}


# in the home job: 1 for a candidate's row, 0 for a query's; where a row goes; the
# position of the block whose range holds a query's sort key (``Need.ranged``)
RANGED = "__am_ranged"
GROUP = "__am_candidate"
GROUP_KEY = "__am_where"
SHARE = "__am_share"  # which of its block's tasks a row goes to


def _homes(need: Need, pdf: pd.DataFrame, variables, space: Space) -> np.ndarray:
    """Per query, its home block: one of least lower bound, the block whose range of the
    blocks' sort holds the query's own key when it is one of them (``RANGED``, from
    ``Need.ranged``), else one picked by a hash of its id (queries alike spread over the
    blocks alike). Any choice gives the same result; a near one gives a small first reach,
    so that few blocks are left to search. Many queries tie at a lower bound of 0 (at
    5,000,000 default-shape records, 61 %), and a hash pick among the tied blocks often
    lands on one far from the query (``bench/homes.py``)."""
    lb = np.nan_to_num(need.bounds(pdf, variables, space), nan=np.inf)
    tied = lb <= lb.min(axis=1, keepdims=True)
    count = tied.sum(axis=1).astype(np.uint64)
    mixed = pdf[ID].to_numpy(dtype=np.int64).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    pick = (mixed >> np.uint64(32)) % np.maximum(count, np.uint64(1))
    j = np.argmax(tied & (np.cumsum(tied, axis=1) - 1 == pick[:, None].astype(np.int64)), axis=1)
    if RANGED in pdf.columns and len(pdf):
        own = pdf[RANGED].to_numpy(dtype=np.float64, na_value=np.nan)
        ok = (own >= 0) & (own < len(need.blocks))  # (NaN: not known)
        at = np.where(ok, own, 0).astype(np.int64)
        j = np.where(ok & tied[np.arange(len(pdf)), at], at, j)
    return np.asarray(need.blocks, dtype=np.int64)[j]


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
    with_stats: bool = False,
    strategy: "Strategy | None" = None,
):
    """For every query: d1, d2, n1 (candidates at d1) and the chosen candidate ``cid``.

    ``queries`` and ``candidates`` have the ``ID`` column and the variables;
    ``name`` names the search in the tie keys (spec: "Randomness"). Runs one
    Spark job per ``CHAIN`` candidate blocks; the returned DataFrame is cached
    (the caller unpersists it). The result is the same whatever the number
    and order of the blocks. ``with_stats``: (the DataFrame, its ``SearchStats``); ``strategy``:
    the choices that change the work, never the result (``Strategy``).
    """
    df, stats = _search(queries, candidates, variables, ranges, name, search, n_candidates, NEAREST, n_queries,
                        strategy)
    return (df, stats) if with_stats else df


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
    cap: int | None = None,
    with_stats: bool = False,
    strategy: "Strategy | None" = None,
):
    """For every query with a ``radius`` column: ``le`` and ``lt``, the candidates at
    distance at most and less than its radius, and ``key``/``cid``, the tie-break
    winner (smallest keyed hash, then id) among those exactly at the radius.

    The radius must be a distance the kernel computes bit for bit (the
    distance to one candidate, say). Same blocks, passes and caching as
    ``nearest``; counts of blocks add up exactly. With ``cap``, a block may stop
    counting for a query once it has found more than ``cap`` candidates within the
    radius and one strictly inside (``CandidateIndex.within``), counting what the blocks
    before it found; a query past its cap searches no further block (its reach is -1):
    ``min(le, cap + 1)`` and ``lt > 0`` stay exact, and so does everything of a query with
    ``lt == 0``. ``with_stats``: (the DataFrame, its ``SearchStats``).
    """
    fold = WITHIN if cap is None else replace(WITHIN, step=functools.partial(_within_step, cap=cap),
                                              reach=functools.partial(_within_reach, cap=cap))
    df, stats = _search(queries, candidates, variables, ranges, name, search, n_candidates, fold, n_queries,
                        strategy)
    return (df, stats) if with_stats else df


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
            n_queries: int | None = None, strategy: "Strategy | None" = None):
    variables = list(variables)
    strategy = strategy or Strategy()
    space = Space(is_cat=np.array([v.kind == "categorical" for v in variables]), ranges=np.asarray(ranges, float))
    salt = search_salt(search.seed, name)
    q = _select(queries, variables, fold.carry)
    parts = search.query_partitions
    if not parts and n_queries is not None:
        # a table read from one file is often one partition: one core would do the whole
        # search; small tables stay as they are (a shuffle costs more than it saves there)
        parts = min(shuffle_partitions(queries.sparkSession) or 0, n_queries // strategy.min_queries_per_partition)
        parts = parts if parts >= 2 else None
    if parts:
        q = q.repartition(parts, ID)
    c = _select(candidates, variables)
    if n_candidates is None:
        n_candidates = c.count()
    n_blocks = max(1, math.ceil(n_candidates / search.block_size))
    fresh = [F.lit(value).cast(kind).alias(column) for column, value, kind in fold.state]
    initial = q.select("*", *fresh, F.lit(math.inf).alias(REACH), F.lit(0).cast("long").alias(VISITS))
    run = _Run(name=name, variables=variables, space=space, salt=salt, fold=fold,
               remote=strategy.remote(queries), n_candidates=n_candidates, settings=search, parts=parts,
               n_queries=n_queries, stats=SearchStats(name), strategy=strategy)
    if run.remote:
        run.cap = strategy.closure_cap(queries.sparkSession)
    if n_blocks == 1:
        chains, cached = _scan(run, initial, c)
    else:
        chains, cached = _local(run, initial, c, n_blocks, fresh)
    st = run.stats
    st.fetched, st.slices, st.fetch_seconds = run.fetch.blocks, run.fetch.pieces - run.fetch.blocks, run.fetch.seconds
    if len(chains) == 1 and n_blocks == 1:
        st.seconds = time.perf_counter() - run.t0
        return chains[0], st
    union = chains[0]
    for other in chains[1:]:
        union = union.unionByName(other)
    merged = _materialize(fold.merge(union), run.remote)[0]
    for other in cached:
        other.unpersist()
    st.seconds = time.perf_counter() - run.t0
    return merged, st


@dataclass
class SearchStats:
    """What one search did, as its log lines say it: returned by ``nearest`` and ``within``
    with ``with_stats=True`` (tests and benchmarks read it here, not in the log)."""

    name: str
    blocks: int = 0  # candidate blocks
    first: str = "scan"  # the first job: "scan" (one block), "home" or "sample"
    queries: int = 0  # queries the first job returned
    first_visits: int = 0  # (query, block) visits of the first job
    visits: int = 0  # (query, block) visits in all
    full: int = 0  # a full scan's visits: queries x blocks
    later_rows: int = 0  # query rows the later jobs read
    later_all_rows: int = 0  # what they would read with every query in every job
    later_blocks: int = 0  # blocks the later jobs searched
    catalogued: int = 0  # blocks holding candidates
    fetched: int = 0  # blocks the driver fetched
    slices: int = 0  # pieces fetched beyond one per block (a block too large goes in slices)
    fetch_seconds: float = 0.0
    seconds: float = 0.0


@dataclass
class _Run:
    """What the jobs of one search share, and its progress."""

    name: str
    variables: list
    space: Space
    salt: int
    fold: Fold
    remote: bool
    n_candidates: int
    settings: SearchSettings
    cap: int | None = None  # Spark Connect: bytes a block's closure may take
    parts: int | None = None  # the queries' partitions, when the search set them
    n_queries: int | None = None  # when the caller knows it
    fetch: Fetch = field(default_factory=lambda: Fetch())
    t0: float = field(default_factory=time.perf_counter)
    done: int = 0  # candidates folded (or known to need no later pass)
    visits: int = 0
    stats: SearchStats | None = None
    strategy: "Strategy | None" = None

    def progress(self, what: str, full: int) -> None:
        elapsed = time.perf_counter() - self.t0
        tail, rest = ", no rate yet", ()  # after the home job no block is done: no rate to tell the rest by
        if self.done:
            rate = self.done / elapsed if elapsed > 0 else float("inf")
            left = max(0.0, (self.n_candidates - self.done) / rate)
            tail, rest = ", %.0f candidates/s, about %.0f s left", (rate, left)
        log.info("search %s: %s done, %d of %d candidates, %d of %d query visits (%.0f%%), %.1f s so far" + tail,
                 self.name, what, self.done, self.n_candidates, self.visits, full,
                 100.0 * self.visits / max(1, full), elapsed, *rest)

    def check_count(self) -> None:
        if self.done != self.n_candidates:
            # every candidate must be in exactly one block: a result from fewer would be wrong
            raise RuntimeError(f"search {self.name}: the blocks held {self.done} candidates of {self.n_candidates}; "
                               "this is a bug, please report it with the log")


def _scan(run: _Run, initial: DataFrame, c: DataFrame):
    """One block: every query folds every piece of it (a piece: the block, or a slice under
    Spark Connect), ``CHAIN`` pieces per job. The chains' states, and what to unpersist."""
    chains, n_pieces = [], 0
    pieces = _blocks(c.withColumn("__am_block", F.lit(0)), [0], run.variables, None, run.cap, run.name,
                     run.settings.block_size, run.fetch)
    try:
        while batch := list(itertools.islice(pieces, CHAIN)):
            state = initial
            for block, n_rows, b in batch:
                state = _pass(state, block, b, run.variables, run.space, run.salt, initial.schema, run.fold)
                run.done += n_rows
            chain, rows, _ = _materialize(state.select(ID, *run.fold.columns), run.remote)
            chains.append(chain)
            n_pieces += len(batch)
            run.visits = rows * n_pieces
            run.progress("block 1 of 1", run.visits)
    finally:
        pieces.close()
    if not chains:
        raise ValueError(f"search {run.name}: no candidates")
    run.check_count()
    st = run.stats
    st.blocks, st.first, st.catalogued = 1, "scan", 1
    st.queries = rows
    st.visits = st.first_visits = st.full = run.visits
    return chains, chains


def _local(run: _Run, initial: DataFrame, c: DataFrame, n_blocks: int, fresh):
    """Blocks by locality: a first job gives each query a home block and marks the other
    blocks it must search; the later jobs fetch only the blocks some query is marked for,
    and read only the queries marked for them. The first job is the home job (each query
    its block of least lower bound) when blocks hold ``search.home_from`` candidates or
    more, else the sample block's (every query's home the sample block): a home job costs
    a shuffle and a task per block, more than it saves on small blocks. The chains' states
    (the first job's first), and what to unpersist."""
    home = run.n_candidates / n_blocks >= run.settings.home_from
    order = _locality_order(c, run.variables)
    c = run.strategy.by_locality(c, run.variables, n_blocks, sample=not home, order=order,
                                 in_sample=run.strategy.in_sample).cache()
    try:
        # (the home job picks, among a query's blocks of least bound, the one whose range holds it)
        need = run.strategy.need(c, run.variables, n_blocks, order=order if home else None)
        run.done = sum(need.rows)
        run.check_count()  # before any work: a candidate in no block
        start = initial.select("*", F.lit(-1).cast("long").alias(HOME),
                               *[F.lit(0).cast("long").alias(x) for x in need.columns])
        if home:
            # the later jobs run on the first job's partitions: by a hash of the id, not by
            # home (the queries marked for a block mostly share a few homes, so partitions by
            # home leave one task with a later job's work: seen at 5,000,000 in the event log)
            first = _home_job(run, start, c, need, n_blocks).repartition(run.parts or n_blocks, ID)
            what = f"home blocks ({len(need.blocks)})"
        else:
            first, what = _sample_job(run, start, c, need), f"sample block of {n_blocks}"
        first, rows, run.visits = _materialize(first, run.remote)
        run.stats.first, run.stats.first_visits = ("home" if home else "sample"), run.visits
        if run.n_queries is not None and rows != run.n_queries:
            # a query twice (or lost) in the first job would give a wrong result
            raise RuntimeError(f"search {run.name}: the first job returned {rows} queries of {run.n_queries}; "
                               "this is a bug, please report it with the log")
        chains, cached = [first.select(ID, *run.fold.columns)], [first]
        full = rows * len(need.blocks)  # a full scan's visits
        wanted = need.counts(first)
        todo = [b for b, k in zip(need.blocks, wanted) if k > 0]
        run.done = sum(r for b, r in zip(need.blocks, need.rows) if b not in todo)
        run.progress(what, full)
        start = [run.fold.first_reach().alias(c) if c == run.fold.bounded else col
                 for (c, _, _), col in zip(run.fold.state, fresh)]
        later = first.select(*[x for x in initial.columns if x not in (REACH, VISITS, *run.fold.columns)],
                             *start, run.fold.first_reach().alias(REACH), F.lit(0).cast("long").alias(VISITS),
                             *[F.col(src).alias(name) for name, src in run.fold.first_state],
                             HOME, *need.columns)
        read = 0
        pieces = _blocks(c, todo, run.variables, run.space, run.cap, run.name, run.settings.block_size, run.fetch)
        try:
            while batch := list(itertools.islice(pieces, CHAIN)):
                # only the queries the first job marked for one of these blocks (the passes check
                # each query's bound again, against its reach so far, and skip its home)
                state = later.filter(need.wanted(sorted({b for _, _, b in batch})))
                for block, n_rows, b in batch:
                    need.check(b, block)
                    state = _pass(state, block, b, run.variables, run.space, run.salt, later.schema, run.fold)
                    run.done += n_rows
                chain, marked, v = _materialize(state.select(ID, VISITS, *run.fold.columns), run.remote)
                read += marked
                run.visits += v
                cached.append(chain)
                chains.append(chain.select(ID, *run.fold.columns))
                run.progress(f"block {batch[-1][2] + 1} of {n_blocks}", full)
        finally:
            pieces.close()
        run.check_count()
    finally:
        c.unpersist()
    jobs = rows * math.ceil(len(need.blocks) / CHAIN)  # what jobs of every query would read
    st = run.stats
    st.blocks, st.queries, st.visits, st.full = n_blocks, rows, run.visits, full
    st.later_rows, st.later_all_rows, st.later_blocks, st.catalogued = read, jobs, len(todo), len(need.blocks)
    log.info("search %s: %d of %d query visits (%.0f%%): %d blocks, %d queries",
             run.name, run.visits, full, 100.0 * run.visits / max(1, full), n_blocks, rows)
    log.info("search %s: the later jobs read %d of %d query rows (%.0f%%), %d of %d blocks",
             run.name, read, jobs, 100.0 * read / max(1, jobs), len(todo), len(need.blocks))
    log.info("search %s: the driver fetched and encoded %d blocks in %.1f s of the search's %.1f s",
             run.name, run.fetch.blocks, run.fetch.seconds, time.perf_counter() - run.t0)
    return chains, cached


def _sample_job(run: _Run, start: DataFrame, c: DataFrame, need: Need) -> DataFrame:
    """The first job of a search by small blocks: every query folds the sample block (block 0,
    in one or more slices), which becomes its home, and marks the other blocks it must
    search from its reach there (on the last slice's pass)."""
    state = start
    pieces = list(_blocks(c, [0], run.variables, run.space, run.cap, run.name, run.settings.block_size, run.fetch))
    for k, (block, n_rows, b) in enumerate(pieces):
        need.check(b, block)
        state = _pass(state, block, b, run.variables, run.space, run.salt, start.schema, run.fold,
                      need if k == len(pieces) - 1 else None)
    if not pieces:  # an empty sample block: no home, every query marked for every block
        state = state.select(*[F.lit(-1).cast("long").alias(HOME) if x == HOME else
                               F.lit((1 << NEED_BITS) - 1).cast("long").alias(x) if x in need.columns else x
                               for x in start.columns])
    return state


# columns the passes carry besides the state: a query's reach from the first
# job (``Fold.reach``), the blocks it searched, and its home block
REACH = "__am_reach"
VISITS = "__am_visits"
HOME = "__am_home"
FIRST_LE = "__am_first_le"  # the first job's counts within a radius, read by the later passes' cap
FIRST_LT = "__am_first_lt"


def _locality_order(c: DataFrame, variables) -> list[str]:
    """The variables' columns in the order the blocks sort the candidates: categories of
    most levels first (one Spark job counts them, approximately), then numbers."""
    cats = [f"v{i}" for i, v in enumerate(variables) if v.kind == "categorical"]
    nums = [f"v{i}" for i, v in enumerate(variables) if v.kind != "categorical"]
    if cats:
        row = c.agg(*[F.approx_count_distinct(x).alias(x) for x in cats]).first()
        cats = sorted(cats, key=lambda x: -row[x])
    return [*cats, *nums]


HASHED = "__am_hashed"


def _sort_key(order: Sequence[str]):
    """A record's place in the blocks' sort: its ``order`` columns, then a hash of its id
    (so that equal records spread over blocks), as one struct (Spark's ordering of structs
    is that of the sort: field by field, nulls first, NaN last)."""
    return F.struct(*[F.col(x).alias(x) for x in order], F.xxhash64(F.col(ID)).alias(HASHED))


def _by_locality(c: DataFrame, variables, n_blocks: int, sample: bool = False,
                 order: Sequence[str] | None = None, in_sample=None) -> DataFrame:
    """The candidates with ``__am_block``: ranges of the candidates sorted by their
    categories, those of most levels first, then their numbers (then a hash of
    the id, so that equal records spread over blocks): ``_locality_order``, unless
    ``order`` is given. Records of a block share
    values, so a block's summary bounds the distance of a query far from them
    well. With ``sample``, block 0 is a sample instead (a hash of the id picks
    one candidate in ``n_blocks``) and the ranges are blocks 1 on. Which block
    a record lands in never changes a result, only the work."""
    order = _locality_order(c, variables) if order is None else order
    hashed = F.xxhash64(F.col(ID))
    keys = [_sort_key(order)]  # (one struct: ``Need.ranged`` compares it with each block's least)
    # (Spark may make fewer ranges than asked, never more; the least() keeps every id among the blocks)
    if not sample:
        return c.repartitionByRange(n_blocks, *keys).withColumn(
            "__am_block", F.least(F.spark_partition_id(), F.lit(n_blocks - 1)))
    return c.repartitionByRange(n_blocks - 1, *keys).withColumn(
        "__am_block", F.when((in_sample or _in_sample)(hashed, n_blocks), F.lit(0))
        .otherwise(F.least(F.spark_partition_id() + 1, F.lit(n_blocks - 1))))


def _in_sample(hashed, n_blocks: int):
    """Whether a candidate goes to the sample block (tests empty it)."""
    return F.pmod(hashed, F.lit(n_blocks)) == 0


# The blocks each query must search after its home, as bits of long columns
NEED = "__am_need"
NEED_BITS = 62
# A block's categorical of more values than this has no value list in its summary (no bound
# from it); nor has one whose values over all blocks are more than MAX_UNION
MAX_LEVELS = 20_000
MAX_UNION = 200_000


def need_column(k: int) -> str:
    return f"{NEED}{k}"


@dataclass
class Need:
    """What the home job needs to pick each query's home and mark the blocks it must search later.

    Per block: its summary, its number of candidates and, per categorical, the
    values it holds (``None``: not recorded, any value may occur), computed by
    Spark over every block before any is fetched (``_need``). A query must
    search block b when b's lower bound does not exceed its reach after its
    home; the later jobs read only the queries marked for their blocks, so a
    query's unneeded blocks cost it nothing, not even a pass. Each block, in
    the home job and when fetched, is checked against its summary (``check``):
    a mark from a summary that did not cover the block could drop a candidate
    that matters.
    """

    blocks: list[int]
    summaries: list[Summary]
    values: list[list]  # per block, per variable: a list of values, or None
    unions: list  # per variable: pd.Index of every recorded value, or None
    present: list[list]  # per block, per variable: bool over the union and a last False, or None
    words: int
    rows: list[int] = field(default_factory=list)  # per block, its candidates
    order: list | None = None  # the blocks' sort (``_locality_order``), when they are ranges of it
    lows: list | None = None  # per block, its least sort key (a tuple), with ``order``

    @property
    def columns(self) -> list[str]:
        return [need_column(k) for k in range(self.words)]

    def bits(self, pdf: pd.DataFrame, variables, reach: np.ndarray, space: Space) -> np.ndarray:
        """Per query, the bits of the blocks whose lower bound does not exceed ``reach``."""
        out = np.zeros((len(pdf), self.words), dtype=np.int64)
        for j, lb in enumerate(self.bounds(pdf, variables, space).T):
            b = self.blocks[j]
            out[:, b // NEED_BITS] |= (~(lb > reach)).astype(np.int64) << np.int64(b % NEED_BITS)
        return out

    def bounds(self, pdf: pd.DataFrame, variables, space: Space) -> np.ndarray:
        """Per query and block (in the order of ``blocks``), the block's lower bound."""
        n = len(pdf)
        out = np.empty((n, len(self.blocks)))
        base = np.empty((n, len(variables)))
        codes = {}
        for i, v in enumerate(variables):
            col = pdf[f"v{i}"]
            if v.kind == "numeric":
                base[:, i] = col.to_numpy(dtype="float64", na_value=np.nan)
            else:
                # 0: a value the block may hold; -1 (below): one it lacks; NaN: null
                base[:, i] = np.where(col.isna().to_numpy(), np.nan, 0.0)
                if self.unions[i] is not None:
                    codes[i] = self.unions[i].get_indexer(col)  # -1: in no block's list
        for j in range(len(self.blocks)):
            Q = base
            for i, g in codes.items():
                held = self.present[j][i]
                if held is not None:
                    Q = Q.copy() if Q is base else Q
                    Q[:, i] = np.where(held[g] | np.isnan(base[:, i]), base[:, i], -1.0)  # a null stays NaN
            out[:, j] = lower_bounds(Q, self.summaries[j], space)
        return out

    def ranged(self, queries: DataFrame) -> DataFrame:
        """``queries`` with ``RANGED``: per query, the position in ``blocks`` of the block whose
        range of the blocks' sort holds the query's own sort key (``_sort_key``), from each
        block's least key (below them all: the block of least key). Spark compares the keys, by
        the ordering that cut the blocks: it sorts the blocks' least keys, and the query meets
        the ranges between them in a broadcast join (a small table, not literals: the plan
        shows no record value). The ranges come from that sort, not from the block numbers,
        so that they never overlap (a query joined twice would be searched twice), whatever
        the blocks. Null without ``order``."""
        if self.order is None:
            return queries.withColumn(RANGED, F.lit(None).cast("long"))
        key = _sort_key(self.order)
        kind = queries.select(key.alias("k")).schema["k"].dataType
        spark, lo, hi = queries.sparkSession, "__am_lo", "__am_hi"
        schema = [StructField(RANGED, LongType(), False), StructField(lo, kind)]
        least = spark.createDataFrame(list(enumerate(self.lows)), StructType(schema))
        order = [int(r[0]) for r in least.orderBy(lo, RANGED).select(RANGED).collect()]
        rows = [(j, None if k == 0 else self.lows[j], self.lows[order[k + 1]] if k + 1 < len(order) else None)
                for k, j in enumerate(order)]
        ranges = spark.createDataFrame(rows, StructType([*schema, StructField(hi, kind)]))
        inside = (F.col(lo).isNull() | (key >= F.col(lo))) & (F.col(hi).isNull() | (key < F.col(hi)))
        return queries.join(F.broadcast(ranges), inside, "left").drop(lo, hi)

    @staticmethod
    def marked(b: int):
        """Whether a query is marked for block ``b`` (a Spark column)."""
        return F.col(need_column(b // NEED_BITS)).bitwiseAND(F.lit(1 << (b % NEED_BITS)).cast("long")) != 0

    def wanted(self, blocks):
        """The queries marked for any of ``blocks``."""
        cond = F.lit(False)
        for b in blocks:
            cond = cond | self.marked(b)
        return cond

    def counts(self, df: DataFrame) -> list[int]:
        """Per block (in the order of ``blocks``), the queries of ``df`` marked for it: one Spark job."""
        row = df.agg(*[F.sum(self.marked(b).cast("long")) for b in self.blocks]).first()
        return [int(x or 0) for x in row]

    def check(self, b: int, block: Block) -> None:
        """Stop when the fetched block (or slice) ``b`` holds what its summary does not."""
        j = self.blocks.index(b) if b in self.blocks else None
        ok = j is not None
        if ok:
            s, mine = self.summaries[j], block.summary
            ok = not (mine.nulls & ~s.nulls).any()
            for i, values in enumerate(self.values[j]):
                if block.uniques[i] is not None:
                    ok = ok and (values is None or bool(block.uniques[i].isin(values).all()))
                elif not np.isnan(mine.lo[i]):
                    ok = ok and bool(s.lo[i] <= mine.lo[i]) and bool(mine.hi[i] <= s.hi[i])
        if not ok:
            raise RuntimeError(f"search: block {b} holds candidates its summary does not cover; "
                               "this is a bug, please report it with the log")


def _need(c: DataFrame, variables, n_blocks: int, order: Sequence[str] | None = None,
          max_levels: int | None = None) -> Need:
    """Every block's summary and categorical values, in one Spark job over the candidates;
    with ``order`` (the blocks' sort, ``_locality_order``), each block's least sort key.
    ``max_levels``: ``MAX_LEVELS`` unless given."""
    max_levels = MAX_LEVELS if max_levels is None else max_levels
    aggs = [F.min(_sort_key(order)).alias("__low")] if order is not None else []
    for i, v in enumerate(variables):
        x = F.col(f"v{i}")
        if v.kind == "numeric":
            value = F.when(~F.isnan(x), x)
            aggs += [F.max((x.isNull() | F.isnan(x)).cast("int")).alias(f"n{i}"),
                     F.min(value).alias(f"lo{i}"), F.max(value).alias(f"hi{i}")]
        else:
            aggs += [F.max(x.isNull().cast("int")).alias(f"n{i}"),
                     F.slice(F.collect_set(x), 1, max_levels + 1).alias(f"s{i}")]
    aggs.append(F.count(F.lit(1)).alias("__rows"))
    rows = sorted(c.groupBy("__am_block").agg(*aggs).collect(), key=lambda r: r["__am_block"])
    nv = len(variables)
    blocks, summaries, values, counts, lows = [], [], [], [], []
    for r in rows:
        b = int(r["__am_block"])
        if not 0 <= b < n_blocks:
            continue  # never fetched: the search's count of candidates stops it
        lo, hi, vals = np.full(nv, np.nan), np.full(nv, np.nan), []
        for i, v in enumerate(variables):
            if v.kind == "numeric":
                vals.append(None)
                if r[f"lo{i}"] is not None:
                    lo[i], hi[i] = float(r[f"lo{i}"]), float(r[f"hi{i}"])
            else:
                held = r[f"s{i}"]
                vals.append(None if len(held) > max_levels else list(held))
        blocks.append(b)
        counts.append(int(r["__rows"]))
        lows.append(tuple(r["__low"]) if order is not None else None)
        summaries.append(Summary(nulls=np.array([bool(r[f"n{i}"]) for i in range(nv)]), lo=lo, hi=hi))
        values.append(vals)
    unions = []
    for i in range(nv):
        lists = [vals[i] for vals in values if vals[i] is not None]
        union = pd.Index(list(dict.fromkeys(itertools.chain.from_iterable(lists))), dtype=object) if lists else None
        if union is not None and len(union) > MAX_UNION:
            union = None
            for vals in values:
                vals[i] = None
        unions.append(union)
    present = [[None if vals[i] is None or unions[i] is None else np.append(unions[i].isin(vals[i]), False)
                for i in range(nv)] for vals in values]
    return trimmed(Need(blocks=blocks, summaries=summaries, values=values, unions=unions, present=present,
                        words=max(1, math.ceil(n_blocks / NEED_BITS)), rows=counts,
                        order=None if order is None else list(order), lows=lows if order is not None else None))


# The most bytes the marks' summaries (a ``Need``, pickled) may take: they travel in the
# closures of the first job and of each chain's last pass, beside the blocks, and under
# Spark Connect the blocks already take ``CLOSURE_SHARE`` of the message limit
NEED_BYTES = 8 * 2**20


def need_bytes(need: Need) -> int:
    return len(pickle.dumps(need, protocol=5))


def trimmed(need: Need, most: int = NEED_BYTES) -> Need:
    """``need`` within ``most`` bytes: while over, the categorical with the most recorded values
    loses its lists (any value may then occur in any block). Exact: a block's lower bound only
    drops, so a query is marked for more blocks, never fewer."""
    while need_bytes(need) > most:
        sizes = [len(u) if u is not None else -1 for u in need.unions]
        i = int(np.argmax(sizes)) if sizes else -1
        if i < 0 or sizes[i] < 0:
            break  # no lists left: the numeric summaries alone
        need.unions[i] = None
        for j in range(len(need.blocks)):
            need.values[j][i] = None
            need.present[j][i] = None
    return need


def is_connect(df: DataFrame) -> bool:
    """Whether ``df`` belongs to a Spark Connect session."""
    return type(df).__module__.startswith("pyspark.sql.connect")


def _materialize(df: DataFrame, remote: bool) -> tuple[DataFrame, int, int]:
    """``df`` computed once and kept on the executors, its number of rows, and
    the sum of its ``VISITS`` column (0 without one): one job on classic Spark
    (the aggregate fills the cache), two under Spark Connect.

    Classic Spark: cached, so a lost executor's part is recomputed from the
    plan. Spark Connect: a local checkpoint. A Connect plan travels whole with
    every request, and a search's plan holds every block of candidates it
    shipped (the closures of its passes): after a few blocks it would exceed
    the server's message limit (``spark.connect.grpc.maxInboundMessageSize``,
    128 MiB by default). The checkpoint is referred to by an id instead; the
    price is that a lost executor's part of it cannot be recomputed.
    """
    df = df.localCheckpoint(eager=True) if remote else df.cache()
    visits = F.sum(VISITS) if VISITS in df.columns else F.lit(0)
    row = df.agg(F.count(F.lit(1)), visits).first()
    return df, int(row[0]), int(row[1] or 0)


# Under Spark Connect, the part of the server's message limit that the blocks
# of one chain (their closures) may take together; the rest is for the plan of
# the queries
CLOSURE_SHARE = 0.75
CONNECT_MESSAGE_LIMIT = 128 * 1024 * 1024  # the server's default
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def closure_cap(spark) -> int:
    """Bytes one block's closure may take under Spark Connect: a share of the
    server's message limit (its configured value when the server tells it),
    divided among the ``CHAIN`` blocks of a job."""
    limit = CONNECT_MESSAGE_LIMIT
    try:
        text = spark.conf.get("spark.connect.grpc.maxInboundMessageSize", None)
    except Exception:  # a server that does not say: its default
        text = None
    m = _SIZE.match(str(text)) if text is not None else None
    if m:
        unit = m.group(2).lower()
        limit = int(m.group(1)) * (1024 ** ("kmgt".index(unit) + 1) if unit else 1)
    return max(1, int(limit * CLOSURE_SHARE / CHAIN))


def _closure_bytes(block: Block) -> int:
    return len(pickle.dumps(block, protocol=5))


# A block of more than this many times ``search.block_size`` candidates (Spark made
# fewer ranges than asked, say) goes in slices of about ``block_size``
MOST_PER_BLOCK = 2


@dataclass
class Fetch:
    """The driver's fetching of blocks: the seconds it took (``toPandas``, encoding) and how many."""

    seconds: float = 0.0
    blocks: int = 0
    pieces: int = 0  # passes the blocks took (a block in slices takes several)


def _blocks(c: DataFrame, numbers: Sequence[int], variables, space: Space | None, cap: int | None, name: str,
            block_size: int, fetch: Fetch):
    """The candidates' blocks of these numbers in order, each encoded, as (block, rows, block
    number); with ``space``, each carries its summary.

    A block of more than ``MOST_PER_BLOCK`` x ``block_size`` rows, or whose
    closure would exceed ``cap`` bytes, goes as several slices of its rows,
    each its own pass (exact: the passes may cut the candidates in any way).
    ``fetch`` adds up the driver's time.
    """
    for b in numbers:
        t = time.perf_counter()
        pdf = c.filter(F.col("__am_block") == b).drop("__am_block").toPandas()
        if len(pdf) == 0:
            fetch.seconds += time.perf_counter() - t
            continue
        fetch.blocks += 1
        pdf = pdf.sort_values(ID, kind="stable").reset_index(drop=True)
        rows_k = 1 if len(pdf) <= MOST_PER_BLOCK * block_size else math.ceil(len(pdf) / block_size)
        bytes_k = 1
        if rows_k == 1 or cap is not None:
            block = _encoded(pdf, variables, space)
            size = 0 if cap is None else _closure_bytes(block)
            if cap is not None and size > cap and len(pdf) > 1:
                bytes_k = min(len(pdf), math.ceil(size / cap) + 1)
                log.info("search %s: block %d goes in %d slices (%.0f MiB, over the %.0f MiB a Spark Connect plan "
                         "may carry per block)", name, b + 1, bytes_k, size / 2**20, cap / 2**20)
            if rows_k == bytes_k == 1:
                fetch.seconds += time.perf_counter() - t
                fetch.pieces += 1
                yield block, len(pdf), b
                continue
            del block
        if rows_k > 1:
            log.info("search %s: block %d holds %d candidates, more than %d times search.block_size: it goes in %d "
                     "slices", name, b + 1, len(pdf), MOST_PER_BLOCK, rows_k)
        k = max(rows_k, bytes_k)
        fetch.seconds += time.perf_counter() - t
        cuts = np.linspace(0, len(pdf), k + 1).astype(int)
        for lo, hi in itertools.pairwise(cuts):
            if hi > lo:
                t = time.perf_counter()
                piece = _encoded(pdf.iloc[lo:hi].reset_index(drop=True), variables, space)
                fetch.seconds += time.perf_counter() - t
                fetch.pieces += 1
                yield piece, int(hi - lo), b


def _encoded(pdf: pd.DataFrame, variables, space: Space | None) -> Block:
    block = encode_block(pdf, variables)
    if space is not None:
        block.summary = summarize(block.C, space)
    return block


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
    # the second distance so far, or that of the home job: both at least the final one
    reach=lambda pdf: np.minimum(pdf["d2"].to_numpy(), pdf[REACH].to_numpy()),
    first_reach=lambda: F.col("d2"),
    # a later chain's state starts as (inf, the home's d2): exact, as the home's two distances are
    # real and at most that bound, so the merge's second distance never takes a bound for one
    bounded="d2",
)
WITHIN = Fold(
    state=(("le", 0, "long"), ("lt", 0, "long"), ("key", int(NO_KEY), "long"), ("cid", -1, "long")),
    step=_within_step,
    merge=merge_within,
    reach=lambda pdf: pdf["radius"].to_numpy(dtype=np.float64),
    carry=("radius",),
    first_state=((FIRST_LE, "le"), (FIRST_LT, "lt")),
)


@dataclass(frozen=True)
class Strategy:
    """The choices of a search that change its work, never its result: where the candidates'
    blocks are cut, each query's home, how the home job's tasks are spread, which path
    (Spark Connect or classic) it takes. ``nearest`` and ``within`` take one; the default is
    what every run uses, and the tests pass others to force the unusual cases (an empty
    home, a block out of order, a summary that does not cover its block, one task for all)."""

    homes: Callable = _homes  # (need, queries, variables, space) -> each query's home block
    by_locality: Callable = _by_locality  # the candidates with their block
    in_sample: Callable = _in_sample  # (hashed id, blocks) -> whether it goes to the sample block
    need: Callable = _need  # the blocks' summaries
    ranged: Callable = Need.ranged  # (need, queries) -> the queries with the block their sort key falls in
    spread: Callable = _spread  # (spark, tasks) -> a shuffle key per home job task
    home_shares: Callable = _home_shares  # (query partitions, blocks) -> shares per block
    remote: Callable = is_connect  # (queries) -> whether to take the Spark Connect path
    closure_cap: Callable = closure_cap  # (spark) -> the bytes a block's closure may take (Spark Connect)
    min_queries_per_partition: int = MIN_QUERIES_PER_PARTITION
