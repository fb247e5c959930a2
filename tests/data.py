"""Small generated tables full of ties, nulls, duplicated records and constant columns."""

from __future__ import annotations

import numpy as np
import pandas as pd

KINDS = {
    "i_small": "numeric",
    "f_small": "numeric",
    "const": "numeric",
    "const_null": "numeric",
    "cat2": "categorical",
    "cat3": "categorical",
    "flag": "categorical",
    "cont": "numeric",
}


def tricky(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)

    def nulls(a, rate):
        a = pd.array(a)
        mask = rng.random(len(a)) < rate
        a[mask] = None
        return a

    df = pd.DataFrame(
        {
            "i_small": nulls(rng.integers(0, 4, n), 0.1).astype("Int64"),
            "f_small": np.where(rng.random(n) < 0.1, np.nan, rng.choice([0.1, 0.2, 0.3, 0.7], n)),
            "const": np.full(n, 5.0),
            "const_null": nulls(np.full(n, 2), 0.2).astype("Int64"),
            "cat2": pd.array(nulls(rng.choice(["a", "b"], n), 0.1), dtype="string").astype(object),
            "cat3": rng.choice(["x", "y", "z"], n),
            "flag": nulls(rng.random(n) < 0.3, 0.1).astype("boolean"),
            "cont": np.round(rng.normal(10, 3, n), 1),
        }
    )
    # duplicated records
    k = max(1, n // 8)
    src = rng.choice(n, k, replace=False)
    dst = rng.choice(n, k, replace=False)
    df.iloc[dst] = df.iloc[src].to_numpy()
    df = df.astype({"i_small": "Int64", "const_null": "Int64", "flag": "boolean", "f_small": "float64",
                    "const": "float64", "cont": "float64"})
    df["cat2"] = df["cat2"].astype(object).where(df["cat2"].notna(), None)
    return df


def perturbed(O: pd.DataFrame, seed: int, keep: float = 0.5) -> pd.DataFrame:
    """Avatars: each value kept from its original with probability ``keep``, else from another record."""
    rng = np.random.default_rng(seed)
    n = len(O)
    out = {}
    for c in O.columns:
        other = rng.integers(0, n, n)
        take = rng.random(n) < keep
        vals = O[c].to_numpy(dtype=object)
        out[c] = pd.array(np.where(take, vals, vals[other]), dtype=O[c].dtype)
    A = pd.DataFrame(out)
    # duplicated avatars: exact ties on every variable set
    k = max(1, n // 8)
    src, dst = rng.choice(n, k, replace=False), rng.choice(n, k, replace=False)
    A.iloc[dst] = A.iloc[src].to_numpy()
    return A.astype(O.dtypes.to_dict())
