"""What a pass does with a block (``engine.search``): the ``Fold`` of a search (``NEAREST``:
the top-2 state; ``WITHIN``: counts within a radius), one pass of a chain of blocks over
the queries in a ``mapInPandas`` (``_pass``, the blocks in turn, their indexes kept per Python worker),
the marks of the blocks a query must search next (``_mark``), the exact merges of the
states of several chains (``merge_states``, ``merge_within``), and the radii
(``pair_distances``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..io import ID
from ..kernels.gower import NO_KEY, Space, State, gower_pairs
from ..kernels.terms import lower_bounds
from ..kernels.index import CandidateIndex
from ..schema import Variable

from .blocks import (Block, FIRST_LE, FIRST_LT, HOME, QUERY_CHUNK, REACH, VISITS, WORK, _rechunk, _select, encode,
                     encode_queries)
from .catalogue import NEED_BITS, Need, need_column

RADIUS = "__am_radius"  # a query's radius (the count within it): an internal name, never a variable's


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


def _nearest_step(index: CandidateIndex, Q, qids, salt, pdf, first_only: bool = False) -> None:
    prior = State(*(pdf[c].to_numpy() for c in ("d1", "d2", "n1", "cid", "key")))
    st = index.search(Q, qids, salt, prior, first_only=first_only)
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
    w = index.within(Q, qids, salt, pdf[RADIUS].to_numpy(dtype=np.float64), cap=cap, base=base)
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
    return np.where((le > cap) & (lt > 0), -1.0, pdf[RADIUS].to_numpy(dtype=np.float64))


def merge_within(parts: DataFrame) -> DataFrame:
    """Exact merge of counts within radii: counts add up, the smallest (key, id) wins."""
    best = F.min(F.struct(F.col("key").alias("key"), F.col("cid").alias("cid")))
    g = parts.groupBy(ID).agg(F.sum("le").alias("le"), F.sum("lt").alias("lt"), best.alias("b"))
    return g.select(ID, "le", "lt", F.col("b.key").alias("key"), F.col("b.cid").alias("cid"))


_INDEXES: dict = {}  # in a Python worker: the indexes of the blocks of the last chain it searched


def _index_of(block: Block, space: Space, keep: frozenset = frozenset()) -> CandidateIndex:
    """The block's index, built once per Python worker: the tasks of one chain that a
    reused worker runs one after another share it. The worker keeps the indexes of the
    blocks whose tokens are in ``keep`` (its chain's) and of this one; any other is dropped
    before this one is built."""
    key = (block.token, block.plain, space.is_cat.tobytes(), space.ranges.tobytes())
    if key not in _INDEXES:
        for other in [k for k in _INDEXES if k[0] not in keep]:
            del _INDEXES[other]
        _INDEXES[key] = CandidateIndex(block.C, block.cids, space, plain=block.plain)
    return _INDEXES[key]


def add_work(pdf: pd.DataFrame, index: CandidateIndex, before: np.ndarray) -> None:
    """Add what the index did since ``before`` (its ``work`` then) to the chunk's first row."""
    if len(pdf) and WORK[0] in pdf.columns:
        for column, done in zip(WORK, index.work - before):
            pdf.loc[pdf.index[0], column] = pdf[column].iat[0] + int(done)


def _pass(queries: DataFrame, blocks: Sequence[tuple[Block, int]], variables, space: Space, salt: int, schema,
          fold: Fold) -> DataFrame:
    """One pass: fold blocks (or slices of blocks) of candidates, ``(block, its number)`` in
    turn, into the state carried by the queries; each block sees the state the blocks before
    it left, as chained passes would.

    One ``mapInPandas`` for the chain, so one Python worker per task holds the chain's
    blocks and indexes (one worker per block, taken from Spark's pool in any order, would
    each keep one index and build it again whenever a task handed it another block).

    With a block summary, only the queries whose reach the block's lower bound
    does not exceed search it (``VISITS`` counts them), and not those whose
    home block it is (the first job folded it); the block cannot change the
    others' results, so skipping it is exact.
    """
    blocks = list(blocks)
    chain = frozenset(block.token for block, _ in blocks)

    def fold_block(pdf, block, b):
        qids = pdf[ID].to_numpy(dtype=np.int64)
        Q = encode_queries(pdf, variables, block)
        if block.summary is None:
            keep = np.ones(len(pdf), dtype=bool)
        else:
            keep = ~(lower_bounds(Q, block.summary, space) > fold.reach(pdf)) & (pdf[HOME].to_numpy() != b)
        if keep.any():  # (the index only for a block some query searches)
            index = _index_of(block, space, chain)
            before = index.work.copy()
            if keep.all():
                fold.step(index, Q, qids, salt, pdf)
            else:
                # only what the fold reads and writes, not the variables
                read = [*fold.carry, *(c for c, _ in fold.first_state if c in pdf.columns)]
                sub = pdf.loc[keep, [*fold.columns, *read]].reset_index(drop=True)
                fold.step(index, Q[keep], qids[keep], salt, sub)
                for c in fold.columns:
                    pdf.loc[keep, c] = sub[c].to_numpy()
            add_work(pdf, index, before)
        pdf[VISITS] = pdf[VISITS].to_numpy() + keep

    def run(batches):
        for pdf in _rechunk(batches, QUERY_CHUNK):
            for block, b in blocks:
                fold_block(pdf, block, b)
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
            both = {i: pd.factorize(pd.concat([pdf[f"v{i}"], pdf[f"w{i}"]], ignore_index=True))[0]
                    for i, v in enumerate(variables) if v.kind != "numeric"}
            X = encode(pdf, variables, lambda i, col: both[i][:n])
            Y = encode(pdf, variables, lambda i, col: both[i][n:], prefix="w")
            yield pd.DataFrame({ID: pdf[ID].to_numpy(dtype=np.int64), RADIUS: gower_pairs(X, Y, space)})

    return pairs.mapInPandas(run, f"{ID} long, {RADIUS} double")


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


# the nearest only: the same state, with d2 kept at d1 by the kernels (so the searches,
# the blocks' bounds and the later passes all prune by d1); d1, n1, cid exact, d2 is not
# the second distance. The merge and the reach are NEAREST's: with d2 = d1 in every part,
# the merged d2 is the merged d1 and the reach is d1
NEAREST1 = replace(NEAREST, step=partial(_nearest_step, first_only=True))


WITHIN = Fold(
    state=(("le", 0, "long"), ("lt", 0, "long"), ("key", int(NO_KEY), "long"), ("cid", -1, "long")),
    step=_within_step,
    merge=merge_within,
    reach=lambda pdf: pdf[RADIUS].to_numpy(dtype=np.float64),
    carry=(RADIUS,),
    first_state=((FIRST_LE, "le"), (FIRST_LT, "lt")),
)
