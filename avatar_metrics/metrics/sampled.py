"""What a metric computed from ``query_sample`` adds to its details (spec: "Sampled
queries and confidence intervals"): ``sampled`` (its number of queries) and
``ci95``."""

from __future__ import annotations

from ..stats import rate_estimate
from ..schema import Inputs


def sampled_sides(details: dict, inputs: dict) -> str:
    """What a metric's queries were sampled from, in words, for exactly the sides that were
    ("sampled, 25 of 40 originals and 30 of 60 holdout records"); "" when none was."""
    sides = []
    if details.get("sampled") is not None:
        sides.append(f"{details['sampled']:,} of {inputs['originals_rows']:,} originals")
    if details.get("sampled_holdout") is not None:
        sides.append(f"{details['sampled_holdout']:,} of {inputs['holdout_rows']:,} holdout records")
    if details.get("sampled_avatars") is not None:
        sides.append(f"{details['sampled_avatars']:,} of {inputs['avatars_rows']:,} avatars")
    return "sampled, " + " and ".join(sides) if sides else ""


def rate_details(inputs: Inputs, k: int, n: int) -> dict:
    """``sampled`` and ``ci95`` of a rate ``100 * (1 - k/n)`` over the queries (Wilson);
    nothing without a sample (the run then fills both with null)."""
    if inputs.n_sampled is None:
        return {}
    return rate_estimate(k, n).details() if n else {"sampled": n, "ci95": None}

