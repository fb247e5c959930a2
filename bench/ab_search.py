"""Interleaved A/B of the search's two first jobs, in one Spark session. Not a test.

    python bench/ab_search.py [--n 1000000] [--rounds 4] [--block-size 250000]

Runs ``nearest`` of the originals against the avatars of the default shape
(``bench/run.py`` generates the data under bench/data/) with the home job
first (``search.home_from`` 0) and with the sample block first (``home_from``
above the block size), on every variable (the Closest Rate's search) and on
the four known variables (a coarse search, full of ties), alternating which
goes first from round to round, and prints the seconds of each with a check
(sums of d1 and n1) that must agree. Whole runs of ``bench/run.py`` on this
machine vary by 20 % and more over an hour; runs side by side in one session
compare the searches alone.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from run import KNOWN, local_inputs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=250_000)
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data")
    args = ap.parse_args()

    _, inputs = local_inputs(args.n, args.data, shuffle_partitions=4)
    from avatar_metrics.config import SearchSettings
    from avatar_metrics.engine.search import nearest
    from avatar_metrics.schema import Variable, ranges_of

    every = [Variable(k, v) for k, v in inputs.variables.items()]
    searches = {"every": every, "known": [v for v in every if v.name in KNOWN]}
    firsts = {"home job": 0, "sample block": 10**9}
    print(f"n = {args.n:,}, blocks of {args.block_size:,}; round 0 includes the session's warm-up")
    for r in range(args.rounds):
        pair = list(firsts.items())
        for label, home_from in pair if r % 2 == 0 else pair[::-1]:
            settings = SearchSettings(seed=1, block_size=args.block_size, query_partitions=None, home_from=home_from)
            for what, variables in searches.items():
                ranges = ranges_of([inputs.stats["originals"], inputs.stats["avatars"]], variables)
                t = time.perf_counter()
                res = nearest(inputs.originals, inputs.avatars, variables, ranges, name=f"ab/{what}",
                              search=settings, n_candidates=inputs.n_avatars, n_queries=inputs.n_originals)
                row = res.selectExpr("sum(d1)", "sum(n1)").first()
                seconds = time.perf_counter() - t
                res.unpersist()
                print(f"round {r}  {label:<13} {what:<6} {seconds:7.1f} s   check {row[0]:.6f} {row[1]}", flush=True)


if __name__ == "__main__":
    main()
