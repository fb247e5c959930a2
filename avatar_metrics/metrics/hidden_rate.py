"""Hidden Rate (spec: "Beyond the seeds", "Hidden Rate").

Needs row alignment. All variables; ranges over O and A together.
For each original x_i: j(i), its nearest avatar over all of A, ties broken
by the keyed hash (search name ``hidden_rate``). A hit: j(i) = i.
Hidden Rate = 100 * (1 - hits / n).

The search is the one of the Local Cloaking (``local_cloaking.cloaking``):
j(i) = i exactly when no avatar is closer than a_i and a_i has the smallest
(key, id) among the avatars at its distance.
"""

from __future__ import annotations

from ..config import Config
from ..io import ID
from ..plots import bars_svg, figure
from .base import MetricResult
from ..schema import Inputs
from .base import Metric
from .local_cloaking import cloaking, not_aligned
from .sampled import rate_details

KEY_NAME = "hidden_rate"


def compute(inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets[KEY_NAME]
    if not inputs.aligned:
        return not_aligned(target)
    per = cloaking(inputs, cfg)
    n = inputs.n_queries
    hits = inputs.shared["cloaking_tally"].hits
    result = MetricResult.ok(100.0 * (1.0 - hits / n), target, {"hits": hits, "n": n, **rate_details(inputs, hits, n)})
    if cfg.records:
        result.records = per.select(ID, "hidden_hit")  # from the cached table, released with the inputs
    return result


def reading(m: dict) -> str:
    d = m["details"]
    return (f"{m['value']:.2f}% of the originals are hidden: their closest avatar is not their own "
            f"({d['hits']} of {d['n']} are found by linking each original to its closest avatar).")


def figures(m: dict) -> list[str]:
    d = m["details"]
    bars = bars_svg("plot-hidden-rate", [("found (hit)", d["hits"]), ("hidden (miss)", d["n"] - d["hits"])],
                    max(d["n"], 1), None, "originals")
    return [figure(bars, "Originals whose closest avatar is their own (found) and the others (hidden).")]


METRIC = Metric(
    key=KEY_NAME,
    title="Hidden Rate",
    target=90,
    compute=compute,
    reading=reading,
    advice=("Many originals have their own avatar as their closest one: increase k, or add noise to the "
            "variables an attacker could match on, so that an avatar stops pointing back to its original."),
    needs=frozenset({"alignment"}),
    records=("hidden_hit",),
    figures=figures,
)
