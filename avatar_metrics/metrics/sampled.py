"""What a metric computed from ``query_sample`` adds to its details (spec: "Sampled
queries and confidence intervals"): ``sampled`` (its number of queries) and
``ci95``."""

from __future__ import annotations

from ..kernels.intervals import rate_interval
from ..schema import Inputs


def rate_details(inputs: Inputs, k: int, n: int) -> dict:
    """``sampled`` and ``ci95`` of a rate ``100 * (1 - k/n)`` over the queries (Wilson);
    nothing without a sample (the run then fills both with null)."""
    if inputs.n_sampled is None:
        return {}
    return {"sampled": n, "ci95": rate_interval(k, n) if n else None}

