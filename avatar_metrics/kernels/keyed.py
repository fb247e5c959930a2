"""Every keyed hash of the project, in one place (spec: "Randomness").

Each random choice is a pure function of the run's seed, a name and record
ids, never of partitioning, order or retries:

- **Tie keys** (the spec's tie-break): ``tie_key(seed, search, q, c)`` =
  ``mix(mix(salt ^ q) ^ c) >> 1``, with ``salt = mix(mix(seed) ^ name64)``,
  ``name64`` the first 8 bytes (little endian) of BLAKE2b(search name) and
  ``mix`` the splitmix64 finaliser. Among the candidates at the minimal
  distance the smallest key wins, then the smallest id. The shift keeps keys
  in [0, 2**63), so that they fit Spark's signed longs.
- **The half split** (approximate holdout, ``avatar-metrics split``): the key
  of record ``i`` is ``tie_key(seed, SPLIT, i, 0)``; the working half is the
  ceil(n/2) records with the smallest (key, id).
- **The query sample** (``query_sample``): the key of original ``i`` is
  ``tie_key(seed, SAMPLE, i, 0)`` (holdout records: ``SAMPLE_HOLDOUT``); the
  sample is the N records with the smallest (key, id).
- **The Linkability halves**: known variables ordered by
  BLAKE2b-128(``"{seed}\\0linkability-split\\0{name}"``), then cut.

The constants are splitmix64's (Steele, Lea and Flood 2014). Numba kernels
use ``mix_jit``; numpy code ``mix``; scalars ``mix_int``: the same function.
"""

from __future__ import annotations

import hashlib

import numpy as np
from numba import njit

from .jit import CACHE as JIT_CACHE  # where numba keeps the compiled kernels

M64 = (1 << 64) - 1
MIX1 = 0xBF58476D1CE4E5B9  # splitmix64 finaliser multipliers
MIX2 = 0x94D049BB133111EB
_M1 = np.uint64(MIX1)
_M2 = np.uint64(MIX2)

SPLIT = "holdout-split"  # the search name of the half split's keys
SAMPLE = "sample"  # the query sample's originals (spec: "Sampled queries")
SAMPLE_HOLDOUT = "sample_holdout"  # the query sample's holdout records
SAMPLE_AVATARS = "sample_avatars"  # the query sample's avatars (DCR Share)
LINKABILITY_SALT = "linkability-split"  # the Linkability halves' shuffle


def mix_int(x: int) -> int:
    """splitmix64 finaliser on a Python int."""
    x &= M64
    x = ((x ^ (x >> 30)) * MIX1) & M64
    x = ((x ^ (x >> 27)) * MIX2) & M64
    return x ^ (x >> 31)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping multiplication)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _M1
        x = x ^ (x >> np.uint64(27))
        x = x * _M2
        return x ^ (x >> np.uint64(31))


@njit(cache=JIT_CACHE, inline="always")
def mix_jit(x):
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def search_salt(seed: int, search: str) -> int:
    """The (seed, search) part of the tie key, as an unsigned 64-bit int."""
    name = int.from_bytes(hashlib.blake2b(search.encode("utf-8"), digest_size=8).digest(), "little")
    return mix_int(mix_int(seed & M64) ^ name)


def query_salts(salt: int, qids: np.ndarray) -> np.ndarray:
    """``mix(salt ^ q)`` per query: the half of the tie key that depends on the query."""
    return mix(np.uint64(salt) ^ np.asarray(qids, dtype=np.int64).view(np.uint64))


def tie_keys(salt: int, qids: np.ndarray, cids: np.ndarray) -> np.ndarray:
    """Keyed hash of (seed, search, query id, candidate id), in [0, 2**63).

    ``qids`` and ``cids`` broadcast against each other (int64 arrays).
    """
    c = np.asarray(cids, dtype=np.int64).view(np.uint64)
    h = mix(query_salts(salt, qids) ^ c)
    return (h >> np.uint64(1)).astype(np.int64)


def record_keys(seed: int, name: str, ids: np.ndarray) -> np.ndarray:
    """The keyed hash of (seed, name, id) of each record id: ``tie_key(seed, name, id, 0)``."""
    return tie_keys(search_salt(seed, name), ids, np.zeros(1, dtype=np.int64))


def split_keys(seed: int, ids: np.ndarray) -> np.ndarray:
    """The half split's key of each record id."""
    return record_keys(seed, SPLIT, ids)


def shuffle_key(seed: int, name: str) -> bytes:
    """The Linkability halves' sort key of a known variable."""
    return hashlib.blake2b(f"{seed}\x00{LINKABILITY_SALT}\x00{name}".encode("utf-8"), digest_size=16).digest()
