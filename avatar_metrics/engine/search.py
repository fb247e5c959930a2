"""Exact distributed Gower nearest-neighbour search.

The queries stay partitioned across the executors. The candidates are cut
into blocks of about ``search.block_size`` records; the driver fetches one
block at a time and ships it to the executors inside the closure of a
``mapInPandas`` over the queries (no ``sparkContext``, so Spark Connect
works). The queries carry their state from block to block: a pass folds a
chain of up to ``CHAIN`` blocks into it in turn, one Spark job, with the
exact index of ``kernels.index`` (the state of earlier blocks tightens its
pruning); the states of several such chains are merged exactly in Spark
(``merge_states``). The queries never reach the driver.

Blocks by locality. With more than one block, the blocks are ranges of the
candidates sorted by their values (categories of most levels first, then
numbers), so that the records of a block resemble each other. Each block
carries a summary (``kernels.terms.Summary``: per variable, whether a null
occurs, and the min and max of a number; ``Need``: and the categories it
holds), computed by Spark before any block is fetched, from which a lower
bound on the distance from a query to any of its records follows, safe in
floating point (``kernels.terms.lower_bounds``). The first job gives each
query a home block and folds it, the home job: each query's home is one of
least lower bound, of tied ones the block whose range of the blocks' sort
holds the query's own key; a block's queries split over tasks by a hash of
their id, half as many tasks in all as query partitions or more, each
receiving the block's candidates and its queries in one shuffle. The second distance the home gives a
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

This module owns the driver's loop and what it returns (``SearchStats``); the
pieces are in ``blocks`` (encoding, fetching, slicing), ``folds`` (a pass, the
folds and their merges, the marks), ``catalogue`` (blocks by locality, their
summaries, homes) and ``homes`` (the first job). ``Strategy`` names the choices
that change only the work, which the tests replace.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..config import SearchSettings, block_size_for
from ..io import ID, persist
from ..kernels.gower import Space, search_salt
from ..schema import Variable

from .blocks import (CHAIN, Fetch, HOME, REACH, VISITS, WORK, Whole, _blocks, _materialize, _select, closure_cap,
                     is_connect)
from .catalogue import Need, _by_locality, _homes, _level_counts, _locality_order, _need
from .folds import Fold, NEAREST, NEAREST1, WITHIN, _pass, _within_reach, _within_step
from .homes import _home_job, _home_shares, _spread


log = logging.getLogger(__name__)


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
    first_only: bool = False,
    whole: Whole | None = None,
):
    """For every query: d1, d2, n1 (candidates at d1) and the chosen candidate ``cid``.
    ``first_only``: for a caller that reads no ``d2`` (the nearest only): the search then
    prunes by ``d1`` and evaluates fewer distances; ``d1``, ``n1``, ``cid`` are the same,
    ``d2`` holds ``d1`` and is not the second distance.

    ``queries`` and ``candidates`` have the ``ID`` column and the variables;
    ``name`` names the search in the tie keys (spec: "Randomness"). Runs one
    Spark job per ``CHAIN`` candidate blocks; the returned DataFrame is cached
    (the caller unpersists it). The result is the same whatever the number
    and order of the blocks. ``with_stats``: (the DataFrame, its ``SearchStats``); ``strategy``:
    the choices that change the work, never the result (``Strategy``); ``whole``: ``candidates``
    (the same object) held in the driver, taken instead of a fetch when the search is one block.
    """
    df, stats = _search(queries, candidates, variables, ranges, name, search, n_candidates,
                        NEAREST1 if first_only else NEAREST, n_queries,
                        strategy, whole)
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
    whole: Whole | None = None,
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
    ``lt == 0``. ``with_stats``: (the DataFrame, its ``SearchStats``); ``whole`` as ``nearest``'s.
    """
    fold = WITHIN if cap is None else replace(WITHIN, step=functools.partial(_within_step, cap=cap),
                                              reach=functools.partial(_within_reach, cap=cap))
    df, stats = _search(queries, candidates, variables, ranges, name, search, n_candidates, fold, n_queries,
                        strategy, whole)
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
            n_queries: int | None = None, strategy: "Strategy | None" = None, whole: Whole | None = None):
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
    search = replace(search, block_size=block_size_for(search.block_size, n_candidates))
    n_blocks = max(1, math.ceil(n_candidates / search.block_size))
    fresh = [F.lit(value).cast(kind).alias(column) for column, value, kind in fold.state]
    initial = q.select("*", *fresh, F.lit(math.inf).alias(REACH), F.lit(0).cast("long").alias(VISITS),
                       *[F.lit(0).cast("long").alias(c) for c in WORK])
    run = _Run(name=name, variables=variables, space=space, salt=salt, fold=fold,
               remote=strategy.remote(queries), n_candidates=n_candidates, settings=search, parts=parts,
               n_queries=n_queries, stats=SearchStats(name), strategy=strategy,
               whole=whole if whole is not None and whole.table is candidates else None)
    if run.remote:
        run.cap = strategy.closure_cap(queries.sparkSession)
    if n_blocks == 1:
        chains, cached = _scan(run, initial, c)
    else:
        chains, cached = _local(run, initial, c, n_blocks, fresh)
    st = run.stats
    st.fetched, st.slices, st.fetch_seconds = run.fetch.blocks, run.fetch.pieces - run.fetch.blocks, run.fetch.seconds
    st.evaluated, st.looked_up = run.work
    pairs = st.queries * n_candidates
    log.info("search %s: %d distances evaluated, %.1f per query (%.4f%% of queries x candidates), "
             "%d candidates looked up without one", name, st.evaluated, st.evaluated / max(1, st.queries),
             100.0 * st.evaluated / max(1, pairs), st.looked_up)
    if len(chains) == 1 and n_blocks == 1:
        st.seconds = time.perf_counter() - run.t0
        return chains[0], st
    union = chains[0]
    for other in chains[1:]:
        union = union.unionByName(other)
    top: dict = {}
    merged = _materialize(fold.merge(union), run.remote, largest=top)[0]
    st.largest = top["d1"]
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
    first: str = "scan"  # the first job: "scan" (one block) or "home"
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
    evaluated: int = 0  # distances the kernels evaluated (of queries x candidates)
    looked_up: int = 0  # candidates they looked up without one (tables, counted mismatches, profiles)
    largest: float | None = None  # a nearest search's largest d1, taken in the job that caches the result


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
    work: list = field(default_factory=lambda: [0, 0])  # distances evaluated, candidates looked up
    whole: Whole | None = None  # the candidates in the driver already, for a search of one block

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
    chains, n_pieces, top = [], 0, {}
    pieces = _blocks(c.withColumn("__am_block", F.lit(0)), [0], run.variables, None, run.cap, run.name,
                     run.settings.block_size, run.fetch, run.settings.plain_below, run.whole)
    try:
        while batch := list(itertools.islice(pieces, CHAIN)):
            state = _pass(initial, [(block, b) for block, _, b in batch], run.variables, run.space, run.salt,
                          initial.schema, run.fold)
            run.done += sum(n_rows for _, n_rows, _ in batch)
            # (the kernels' work stays in the chain: a select of a cached frame would be what the
            # caller unpersists, and the cache would stay)
            chain, rows, _ = _materialize(state.select(ID, *WORK, *run.fold.columns), run.remote, run.work, top)
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
    st.largest = top.get("d1")  # the result's when it is one chain (else the merge's, in ``_search``)
    return chains, chains


def _local(run: _Run, initial: DataFrame, c: DataFrame, n_blocks: int, fresh):
    """Blocks by locality: a first job gives each query a home block and marks the other
    blocks it must search; the later jobs fetch only the blocks some query is marked for,
    and read only the queries marked for them. The first job is the home job: each query
    folds its block of least lower bound. The chains' states (the first job's first), and
    what to unpersist."""
    levels = _level_counts(c, run.variables)
    order = _locality_order(c, run.variables, levels)
    c = persist(run.strategy.by_locality(c, run.variables, n_blocks, order=order))
    try:
        # (the home job picks, among a query's blocks of least bound, the one whose range holds it)
        need = run.strategy.need(c, run.variables, n_blocks, order=order, levels=levels)
        run.done = sum(need.rows)
        run.check_count()  # before any work: a candidate in no block
        start = initial.select("*", F.lit(-1).cast("long").alias(HOME),
                               *[F.lit(0).cast("long").alias(x) for x in need.columns])
        # the later jobs run on the first job's partitions: by a hash of the id, not by
        # home (the queries marked for a block mostly share a few homes, so partitions by
        # home leave one task with a later job's work: seen at 5,000,000 in the event log)
        first = _home_job(run, start, c, need, n_blocks).repartition(run.parts or n_blocks, ID)
        what = f"home blocks ({len(need.blocks)})"
        first, rows, run.visits = _materialize(first, run.remote, run.work)
        run.stats.first, run.stats.first_visits = "home", run.visits
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
        later = first.select(*[x for x in initial.columns if x not in (REACH, VISITS, *WORK, *run.fold.columns)],
                             *start, run.fold.first_reach().alias(REACH), F.lit(0).cast("long").alias(VISITS),
                             *[F.lit(0).cast("long").alias(c) for c in WORK],
                             *[F.col(src).alias(name) for name, src in run.fold.first_state],
                             HOME, *need.columns)
        read = 0
        pieces = _blocks(c, todo, run.variables, run.space, run.cap, run.name, run.settings.block_size, run.fetch,
                         run.settings.plain_below)
        try:
            while batch := list(itertools.islice(pieces, CHAIN)):
                # only the queries the first job marked for one of these blocks (the passes check
                # each query's bound again, against its reach so far, and skip its home)
                state = later.filter(need.wanted(sorted({b for _, _, b in batch})))
                for block, n_rows, b in batch:
                    need.check(b, block)
                    run.done += n_rows
                state = _pass(state, [(block, b) for block, _, b in batch], run.variables, run.space, run.salt,
                              later.schema, run.fold)
                chain, marked, v = _materialize(state.select(ID, VISITS, *WORK, *run.fold.columns), run.remote,
                                                run.work)
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


@dataclass(frozen=True)
class Strategy:
    """The choices of a search that change its work, never its result: where the candidates'
    blocks are cut, each query's home, how the home job's tasks are spread, which path
    (Spark Connect or classic) it takes. ``nearest`` and ``within`` take one; the default is
    what every run uses, and the tests pass others to force the unusual cases (an empty
    home, a block out of order, a summary that does not cover its block, one task for all)."""

    homes: Callable = _homes  # (need, queries, variables, space) -> each query's home block
    by_locality: Callable = _by_locality  # the candidates with their block
    need: Callable = _need  # the blocks' summaries
    ranged: Callable = Need.ranged  # (need, queries) -> the queries with the block their sort key falls in
    spread: Callable = _spread  # (spark, tasks) -> a shuffle key per home job task
    home_shares: Callable = _home_shares  # (query partitions, blocks) -> shares per block
    remote: Callable = is_connect  # (queries) -> whether to take the Spark Connect path
    closure_cap: Callable = closure_cap  # (spark) -> the bytes a block's closure may take (Spark Connect)
    min_queries_per_partition: int = MIN_QUERIES_PER_PARTITION
