"""Row Direct Match Protection (spec: "Beyond the seeds", "Row Direct Match Protection").

Link-free. An original is present when some avatar equals it on every
variable: null equals null, numbers compared as float64 values (so -0.0
equals 0.0), categories as values. RDMP = 100 * (1 - present / n).
A semi join of the originals with the avatars' distinct records, null-safe.
"""

from __future__ import annotations


from ..config import Config
from ..io import ID, col
from ..plots import bars_svg, figure
from ..report import MetricResult
from ..schema import Inputs
from .base import Metric

KEY_NAME = "row_direct_match_protection"


def compute(inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets[KEY_NAME]
    names = inputs.names

    def values(df, prefix):
        out = []
        for i, c in enumerate(names):
            x = col(c).cast("double") if inputs.variables[c] == "numeric" else col(c)
            out.append(x.alias(f"{prefix}{i}"))
        return out

    o = inputs.originals.select(ID, *values(inputs.originals, "o"))
    a = inputs.avatars.select(*values(inputs.avatars, "a")).distinct()
    same = [o[f"o{i}"].eqNullSafe(a[f"a{i}"]) for i in range(len(names))]
    present = o.join(a, same, "left_semi").count()
    n = inputs.n_originals
    return MetricResult.ok(100.0 * (1.0 - present / n), target, {"present": int(present), "n": n})


def reading(m: dict) -> str:
    d = m["details"]
    return (f"{m['value']:.2f}% of the originals are not copied whole into the avatars: {d['present']} of "
            f"{d['n']} have an avatar equal to them on every variable.")


def figures(m: dict) -> list[str]:
    d = m["details"]
    bars = bars_svg("plot-row-direct-match", [("copied whole", d["present"]), ("not copied", d["n"] - d["present"])],
                    max(d["n"], 1), None, "originals")
    return [figure(bars, "Originals that some avatar equals on every variable.")]


METRIC = Metric(
    key=KEY_NAME,
    title="Row Direct Match Protection",
    target=90,
    compute=compute,
    reading=reading,
    advice=("Some avatars are exact copies of originals: check that the generator does not copy records "
            "through, and increase k or the noise so that no avatar reproduces a whole record."),
    figures=figures,
)
