"""Exact, partitioning-independent aggregates that Spark's own do not give.

Spark's ``avg`` and ``stddev`` sum doubles in partition order, so their last
bits depend on partitioning. Here each partition sums the integer parts of
its values (``kernels.exact``) and Spark adds those integers: exact.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..kernels.exact import decompose, recompose

_PARTS_SCHEMA = "var int, e long, hi long, lo long, n long"


def exact_sums(df: DataFrame, columns: Mapping[str, Column]) -> dict[str, tuple[Fraction, int]]:
    """Exact sum and count of the non-null values of each column expression."""
    names = list(columns)
    if not names:
        return {}
    sel = df.select(*[columns[n].cast("double").alias(f"c{i}") for i, n in enumerate(names)])
    k = len(names)

    def parts(batches):
        import pandas as pd

        for pdf in batches:
            rows = {"var": [], "e": [], "hi": [], "lo": [], "n": []}
            for i in range(k):
                x = pdf[f"c{i}"].to_numpy(dtype="float64", na_value=float("nan"))
                e, hi, lo = decompose(x)
                cnt = int((~pd.isna(pdf[f"c{i}"])).sum())
                if cnt == 0:
                    continue
                # the count rides on the first exponent's row
                for j in range(len(e)):
                    rows["var"].append(i)
                    rows["e"].append(int(e[j]))
                    rows["hi"].append(int(hi[j]))
                    rows["lo"].append(int(lo[j]))
                    rows["n"].append(cnt if j == 0 else 0)
            yield pd.DataFrame(rows).astype({"var": "int32", "e": "int64", "hi": "int64", "lo": "int64", "n": "int64"})

    agg = (
        sel.mapInPandas(parts, _PARTS_SCHEMA)
        .groupBy("var", "e")
        .agg(F.sum("hi").alias("hi"), F.sum("lo").alias("lo"), F.sum("n").alias("n"))
        .collect()
    )
    out: dict[str, tuple[Fraction, int]] = {}
    for i, name in enumerate(names):
        rows = [r for r in agg if r["var"] == i]
        total = recompose((r["e"], r["hi"], r["lo"]) for r in rows)
        out[name] = (total, int(sum(r["n"] for r in rows)))
    return out
