"""Synthetic example data: realistic mixed-type originals and avatar-like avatars.

Not a privacy tool: it makes test and demo data. ``make_originals`` draws
records with integer and continuous numbers, categories of small and large
cardinality and some nulls. ``make_avatars`` follows the idea of the avatar
method: each avatar is a random blend of its original's k nearest originals
(Gower distance, the original itself included), numbers as a weighted mean,
categories drawn from one neighbour by weight. A larger k protects better;
k = 1 copies the originals.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

REGIONS = [
    "Auvergne", "Bretagne", "Bourgogne", "Centre", "Corse", "Grand Est",
    "Hauts-de-France", "Ile-de-France", "Normandie", "Nouvelle-Aquitaine",
    "Occitanie", "Pays de la Loire", "Provence",
]
JOBS = [f"occupation_{i:02d}" for i in range(40)]
BLOOD = ["A+", "A-", "B+", "B-", "AB+", "AB-", "O+", "O-"]


def make_originals(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sex = rng.choice(["F", "M"], size=n)
    age = rng.integers(18, 91, size=n)
    height = np.where(sex == "F", 163.0, 176.0) + rng.normal(0, 7, n)
    bmi = rng.gamma(20, 1.25, n)
    weight = bmi * (height / 100) ** 2
    region = rng.choice(REGIONS, size=n, p=np.linspace(2, 1, len(REGIONS)) / np.linspace(2, 1, len(REGIONS)).sum())
    job_p = 1.0 / np.arange(1, len(JOBS) + 1)
    job = rng.choice(JOBS, size=n, p=job_p / job_p.sum())
    income = np.round(np.exp(rng.normal(10.2, 0.5, n)) * (1 + (age - 18) / 120), 2)
    children = rng.poisson(1.2, n).clip(0, 6)
    smoker = rng.random(n) < 0.22
    blood = rng.choice(BLOOD, size=n, p=[0.36, 0.06, 0.08, 0.02, 0.03, 0.01, 0.37, 0.07])
    df = pd.DataFrame(
        {
            "age": age.astype("int64"),
            "sex": sex,
            "height_cm": np.round(height, 1),
            "weight_kg": np.round(weight, 1),
            "income": income,
            "region": region,
            "job": job,
            "children": children.astype("int64"),
            "smoker": smoker,
            "blood_type": blood,
        }
    )
    # about 1-3 % nulls in a few columns
    for col, rate in (("income", 0.03), ("weight_kg", 0.01), ("job", 0.02), ("smoker", 0.01)):
        mask = rng.random(n) < rate
        df[col] = df[col].astype("object" if df[col].dtype == bool else df[col].dtype)
        df.loc[mask, col] = None
    df["smoker"] = df["smoker"].astype("boolean")
    return df


def _gower_matrix(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cols = list(df.columns)
    X = np.empty((len(df), len(cols)))
    is_cat = np.zeros(len(cols), bool)
    ranges = np.zeros(len(cols))
    for i, c in enumerate(cols):
        s = df[c]
        if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            X[:, i] = s.to_numpy(dtype=float, na_value=np.nan)
            ranges[i] = np.nanmax(X[:, i]) - np.nanmin(X[:, i])
        else:
            codes, _ = pd.factorize(s)
            X[:, i] = np.where(codes < 0, np.nan, codes)
            is_cat[i] = True
    return X, is_cat, ranges


def nearest_originals(df: pd.DataFrame, k: int, chunk: int = 512) -> np.ndarray:
    """Indices of the k nearest originals of each original (itself first)."""
    from .kernels.gower import Space, gower_block

    X, is_cat, ranges = _gower_matrix(df)
    space = Space(is_cat=is_cat, ranges=ranges)
    out = np.empty((len(df), k), dtype=np.int64)
    for s in range(0, len(df), chunk):
        D = gower_block(X[s : s + chunk], X, space)
        rows = np.arange(D.shape[0])
        D[rows, s + rows] = -1.0  # itself first
        idx = np.argpartition(D, k - 1, axis=1)[:, :k] if k < D.shape[1] else np.tile(np.arange(D.shape[1]), (D.shape[0], 1))
        order = np.take_along_axis(D, idx, 1).argsort(axis=1, kind="stable")
        out[s : s + chunk] = np.take_along_axis(idx, order, 1)
    return out


def make_avatars(originals: pd.DataFrame, k: int = 10, seed: int = 1) -> pd.DataFrame:
    """Avatar i is a random blend of original i's k nearest originals."""
    if k < 1:
        raise ValueError("k must be at least 1")
    rng = np.random.default_rng(seed)
    n = len(originals)
    nn = nearest_originals(originals, k)
    w = rng.exponential(1.0, size=(n, k)) / np.arange(1, k + 1)  # nearer neighbours weigh more
    w /= w.sum(axis=1, keepdims=True)
    pick = np.array([rng.choice(k, p=w[i]) for i in range(n)])
    return _blend(originals, nn, w, pick)


def _blend(originals: pd.DataFrame, nn: np.ndarray, w: np.ndarray, pick: np.ndarray) -> pd.DataFrame:
    """Numbers: weighted mean of the neighbours; categories: the picked neighbour's."""
    n = len(originals)
    out = {}
    for c in originals.columns:
        s = originals[c]
        if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            vals = s.to_numpy(dtype=float, na_value=np.nan)[nn]  # n x k
            present = ~np.isnan(vals)
            ww = np.where(present, w, 0.0)
            tot = ww.sum(axis=1)
            blend = np.where(tot > 0, np.nansum(np.nan_to_num(vals) * ww, axis=1) / np.where(tot > 0, tot, 1), np.nan)
            # null where the drawn neighbour is null
            blend = np.where(np.isnan(vals[np.arange(n), pick]), np.nan, blend)
            if pd.api.types.is_integer_dtype(s):
                out[c] = pd.array(np.round(blend), dtype="Int64")
            else:
                decimals = 2 if c == "income" else 1
                out[c] = np.round(blend, decimals)
        else:
            vals = s.to_numpy(dtype=object)[nn]
            out[c] = pd.array(vals[np.arange(n), pick], dtype=s.dtype)
    return pd.DataFrame(out)[list(originals.columns)]


def make_example(n: int = 3000, n_holdout: int = 3000, k: int = 10, seed: int = 0):
    """Originals, avatars and a holdout drawn from the same population."""
    both = make_originals(n + n_holdout, seed)
    originals = both.iloc[:n].reset_index(drop=True)
    holdout = both.iloc[n:].reset_index(drop=True)
    avatars = make_avatars(originals, k=k, seed=seed + 1)
    return originals, avatars, holdout


def make_avatars_fast(originals: pd.DataFrame, k: int = 10, seed: int = 1) -> pd.DataFrame:
    """An avatar-like generator for large tables (benchmarks).

    The k neighbours of a record are taken as its k nearest in the order of
    (categories, then numbers): records that share most categories and have
    close numbers. Blending is as in ``make_avatars``. Linear in n.
    """
    rng = np.random.default_rng(seed)
    n = len(originals)
    cats = [c for c in originals.columns if not (pd.api.types.is_numeric_dtype(originals[c]) and not pd.api.types.is_bool_dtype(originals[c]))]
    nums = [c for c in originals.columns if c not in cats]
    keys = [pd.factorize(originals[c])[0] for c in cats] + [originals[c].to_numpy(dtype=float, na_value=np.nan) for c in nums]
    order = np.lexsort(tuple(reversed(keys)))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    offsets = np.arange(k) - k // 2
    offsets = offsets[np.argsort(np.abs(offsets), kind="stable")]  # itself first
    nn = order[np.clip(pos[:, None] + offsets[None, :], 0, n - 1)]
    w = rng.exponential(1.0, size=(n, k)) / np.arange(1, k + 1)
    w /= w.sum(axis=1, keepdims=True)
    pick = (rng.random(n)[:, None] > np.cumsum(w, axis=1)).sum(axis=1).clip(0, k - 1)
    return _blend(originals, nn, w, pick)
