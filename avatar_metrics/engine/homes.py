"""The first job of a search with several blocks (``engine.search``): the home job (each
query folds its home block, the blocks' queries split into shares over tasks, one
shuffle: ``_home_job``, ``_home_shares``, ``_spread``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import itertools
import math

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..io import ID
from ..kernels.index import CandidateIndex

from .blocks import Block, HOME, QUERY_CHUNK, REACH, VISITS, WORK, _encoded, _rechunk, encode_queries
from .catalogue import Need, RANGED
from .folds import _mark, add_work

if TYPE_CHECKING:
    from .search import _Run


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
    plain_below = run.settings.plain_below
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
        for column in WORK:
            pdf[column] = 0
        if index is not None:
            before = index.work.copy()
            fold.step(index, encode_queries(pdf, variables, block), pdf[ID].to_numpy(dtype=np.int64), salt, pdf)
            pdf[VISITS] = 1
            add_work(pdf, index, before)
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
                    block = _encoded(cpdf, variables, space, plain_below)
                    need.check(b, block)
                    index = CandidateIndex(block.C, block.cids, space, plain=block.plain)
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
    Computed here with Spark's own hash of a long (``spark_hash``), so no Spark job
    (``spark`` is unused: ``Strategy.spread``'s signature); a residue not found maps to
    itself (any placement gives the same result, only the tasks' shares of the work change)."""
    found: dict[int, int] = {}
    for x in range(64 * n):
        found.setdefault(spark_hash(x) % n, x)  # (Python's % is Spark's pmod for n > 0)
        if len(found) == n:
            break
    return {b: found.get(b, b) for b in range(n)}


_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix(h1: int, k1: int) -> int:
    k1 = _rotl((k1 * 0xCC9E2D51) & _M32, 15) * 0x1B873593 & _M32
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _M32


def spark_hash(x: int, seed: int = 42) -> int:
    """Spark SQL's ``hash`` of a long (``Murmur3_x86_32.hashLong``, seed 42: what hash
    partitioning by a long column uses), as a signed 32-bit integer."""
    x &= 0xFFFFFFFFFFFFFFFF
    h1 = _mix(_mix(seed, x & _M32), x >> 32) ^ 8
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & _M32
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


GROUP = "__am_candidate"


GROUP_KEY = "__am_where"


SHARE = "__am_share"  # which of its block's tasks a row goes to
