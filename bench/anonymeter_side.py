"""anonymeter's Linkability on the benchmark's tables, timed. Not a test, not a dependency.

    python bench/anonymeter_side.py DATA_DIR '[["age", "sex"], ["region", "children"]]'

Runs with any Python that has anonymeter 1.1 (``bench/run.py --anonymeter
PYTHON`` calls it with that interpreter). Every original is attacked
(``n_attacks`` = n), one neighbour, the holdout as control, the default
``n_jobs``; prints one JSON line: the seconds of ``evaluate`` and of the whole
script (reading the tables included).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

t_start = time.perf_counter()

import pandas as pd  # noqa: E402
from anonymeter.evaluators import LinkabilityEvaluator  # noqa: E402


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """anonymeter 1.1 takes numpy dtypes: nullable booleans and strings become text (null stays a value)."""
    out = df.copy()
    for c in out.columns:
        if not pd.api.types.is_numeric_dtype(out[c]) or pd.api.types.is_bool_dtype(out[c]):
            out[c] = out[c].astype(object).where(out[c].notna(), None).astype(str)
        else:
            out[c] = out[c].astype("float64")
    return out


def main() -> None:
    data, halves = Path(sys.argv[1]), json.loads(sys.argv[2])
    ori = _plain(pd.read_parquet(data / "originals.parquet"))
    syn = _plain(pd.read_parquet(data / "avatars.parquet"))
    control = _plain(pd.read_parquet(data / "holdout.parquet"))
    t0 = time.perf_counter()
    ev = LinkabilityEvaluator(ori=ori, syn=syn, aux_cols=(halves[0], halves[1]), n_attacks=len(ori),
                              control=control, n_neighbors=1)
    ev.evaluate()
    t1 = time.perf_counter()
    print(json.dumps({"evaluate": t1 - t0, "script": t1 - t_start, "risk": ev.risk().value}))


if __name__ == "__main__":
    main()
