"""Shapes of data for the benchmark: what real tables look like, each generated
deterministically from (n, seed). Not a test.

Each shape gives originals, avatars (the avatar-like blend of
``synth.make_avatars_fast``, k = 10), a holdout from the same population, the
known variables and, where the shape is about them, the Linkability halves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from avatar_metrics.synth import make_avatars_fast, make_originals


@dataclass
class Shape:
    originals: pd.DataFrame
    avatars: pd.DataFrame
    holdout: pd.DataFrame
    known: list[str]
    halves: list[list[str]] | None = None


def _zipf_choice(rng, levels: int, n: int, a: float = 1.0) -> np.ndarray:
    p = 1.0 / np.arange(1, levels + 1) ** a
    return rng.choice(levels, size=n, p=p / p.sum())


def _cat(codes: np.ndarray, prefix: str) -> pd.Categorical:
    """Codes as the strings prefix + code, kept as a pandas categorical (codes and one string per
    level): 20,000,000 records of object strings would take about 1.2 GB a column. Parquet stores
    them dictionary-encoded; Spark reads them as strings."""
    levels = int(codes.max()) + 1 if len(codes) else 0
    return pd.Categorical.from_codes(codes, categories=[f"{prefix}{i}" for i in range(levels)])


def _population(name: str, m: int, rng) -> pd.DataFrame:
    if name in ("default", "coarse-halves"):
        return make_originals(m, seed=int(rng.integers(1 << 30)))
    if name == "census":
        age = rng.integers(17, 91, m)
        postcode = _zipf_choice(rng, 3000, m, 0.6)
        return pd.DataFrame({
            "age": age,
            "sex": rng.choice(["F", "M"], m),
            "postcode": _cat(postcode, "P"),
            "region": _cat(postcode % 13, "R"),
            "education": _cat(_zipf_choice(rng, 16, m, 0.8), "E"),
            "marital": _cat(_zipf_choice(rng, 7, m), "M"),
            "occupation": _cat(_zipf_choice(rng, 40, m, 0.7), "O"),
            "workclass": _cat(_zipf_choice(rng, 8, m), "W"),
            "race": _cat(_zipf_choice(rng, 5, m, 1.5), "X"),
            "relationship": _cat(_zipf_choice(rng, 6, m), "L"),
            "hours_per_week": np.clip(np.round(rng.normal(40, 12, m)), 1, 99).astype(np.int64),
            "income": np.round(np.exp(rng.normal(10.3, 0.6, m)), 0),
            "capital_gain": np.where(rng.random(m) < 0.92, 0.0, np.round(np.exp(rng.normal(8, 1.2, m)))),
            "capital_loss": np.where(rng.random(m) < 0.95, 0.0, np.round(rng.normal(1900, 300, m))),
            "children": rng.poisson(1.1, m).astype(np.int64),
            "native_country": _cat(_zipf_choice(rng, 40, m, 2.0), "C"),
        })
    if name == "census-correlated":
        return _correlated_census(m, rng)
    if name in ("highcard", "idlike"):
        levels = 5000 if name == "highcard" else max(2, m // 4)  # n/2 levels for the originals' half
        return pd.DataFrame({
            "code": _cat(rng.integers(0, levels, m), "K"),
            "age": rng.integers(18, 91, m),
            "score": np.round(rng.normal(50, 12, m), 2),
            "flag": rng.choice(["y", "n"], m),
        })
    if name == "allcat":
        return pd.DataFrame({f"c{i}": _cat(rng.integers(0, 2 + i % 5, m), f"v{i}_") for i in range(8)})
    if name == "numeric":
        base = rng.normal(0, 1, (m, 3))
        cols = {f"x{i}": np.round(base[:, i % 3] * (1 + i) + rng.normal(0, 0.5 + i / 10, m), 3) for i in range(12)}
        return pd.DataFrame(cols)
    if name == "wide":
        cols = {}
        for i in range(30):
            cols[f"n{i}"] = np.round(rng.normal(i, 1 + i % 7, m), 2)
            cols[f"c{i}"] = _cat(_zipf_choice(rng, 2 + (i * 7) % 19, m), f"v{i}_")
        return pd.DataFrame(cols)
    raise ValueError(f"unknown shape {name}: choose one of {', '.join(SHAPES)}")


def _correlated_census(m: int, rng) -> pd.DataFrame:
    """The census shape with its categoricals drawn from each other, as in a real census: marital
    status from age, relationship from sex and marital status (a husband is a married man),
    occupation from sex and education, workclass from occupation, race from the native country,
    region from the postcode; the numbers from age, education and sex."""
    age = rng.integers(17, 91, m)
    sex = rng.integers(0, 2, m)  # 0: F, 1: M
    married_p = np.clip((age - 17) / 30, 0, 1) * 0.6
    marital = np.where(rng.random(m) < married_p, 0, 1 + _zipf_choice(rng, 6, m))  # 0: married
    old = age > 60
    marital = np.where(old & (rng.random(m) < 0.3), 6, marital)  # widowed
    # relationship: 0 husband, 1 wife, 2 own child, 3 not in family, 4 unmarried, 5 other relative
    single = np.where(age < 25, np.where(rng.random(m) < 0.7, 2, 3), _zipf_choice(rng, 3, m) + 3)
    relationship = np.where(marital == 0, np.where(sex == 1, 0, 1), np.minimum(single, 5))
    education = _zipf_choice(rng, 16, m, 0.8)
    occupation = (education * 2 + sex * 7 + _zipf_choice(rng, 12, m, 1.0)) % 40
    workclass = np.where(occupation % 5 == 0, 1, _zipf_choice(rng, 8, m))
    country = _zipf_choice(rng, 40, m, 2.0)
    race = np.where(country == 0, _zipf_choice(rng, 5, m, 2.0), (country % 4) + 1)
    postcode = _zipf_choice(rng, 3000, m, 0.6)
    hours = np.clip(np.round(rng.normal(36 + 6 * sex, 11, m)), 1, 99).astype(np.int64)
    return pd.DataFrame({
        "age": age,
        "sex": np.where(sex == 1, "M", "F"),
        "postcode": _cat(postcode, "P"),
        "region": _cat(postcode % 13, "R"),
        "education": _cat(education, "E"),
        "marital": _cat(marital, "M"),
        "occupation": _cat(occupation, "O"),
        "workclass": _cat(workclass, "W"),
        "race": _cat(race, "X"),
        "relationship": _cat(relationship, "L"),
        "hours_per_week": hours,
        "income": np.round(np.exp(rng.normal(9.9 + 0.05 * education + 0.2 * sex, 0.5, m)), 0),
        "capital_gain": np.where(rng.random(m) < 0.92, 0.0, np.round(np.exp(rng.normal(8, 1.2, m)))),
        "capital_loss": np.where(rng.random(m) < 0.95, 0.0, np.round(rng.normal(1900, 300, m))),
        "children": np.where(marital == 0, rng.poisson(1.8, m), rng.poisson(0.4, m)).astype(np.int64),
        "native_country": _cat(country, "C"),
    })


KNOWN = {
    "default": ["age", "sex", "region", "children"],
    "census": ["age", "sex", "postcode", "region", "education", "marital", "occupation", "race", "relationship",
               "hours_per_week"],
    "highcard": ["code", "age", "flag"],
    "idlike": ["code", "age", "flag"],
    "allcat": ["c0", "c1", "c2", "c3"],
    "numeric": ["x0", "x1", "x2", "x3"],
    "coarse-halves": ["sex", "smoker"],
    "wide": ["n0", "c0", "n1", "c1", "n2", "c2"],
    "census-correlated": ["age", "sex", "postcode", "region", "education", "marital", "occupation", "race",
                          "relationship", "hours_per_week"],
}
HALVES = {"coarse-halves": [["sex"], ["smoker"]]}
SHAPES = tuple(KNOWN)


def make(name: str, n: int, seed: int = 0) -> Shape:
    rng = np.random.default_rng([seed, n, SHAPES.index(name)])
    both = _population(name, 2 * n, rng)
    originals = both.iloc[:n].reset_index(drop=True)
    holdout = both.iloc[n:].reset_index(drop=True)
    avatars = make_avatars_fast(originals, k=10, seed=seed + 1)
    return Shape(originals, avatars, holdout, KNOWN[name], HALVES.get(name))
