"""The registry is the one place a metric is declared: a new declaration reaches
the configuration, evaluate, report.json, the summary, records/ and the page."""

import pandas as pd
from pyspark.sql import functions as F

from avatar_metrics import evaluate, metrics
from avatar_metrics.configure import build_config
from avatar_metrics.io import ID
from avatar_metrics.metrics.base import COUNT, Metric
from avatar_metrics.report import MetricResult


def compute(inputs, cfg):
    result = MetricResult.ok(float(inputs.n_originals), cfg.targets["toy_count"], {"n": inputs.n_originals})
    result.records = inputs.originals.select(ID, F.lit(7).alias("toy_column")).cache()
    return result


TOY = Metric(key="toy_count", title="Toy Count", target=1000, unit=COUNT, compute=compute,
             reading=lambda m: f"{m['details']['n']} records counted.", advice="Count more records.",
             records=("toy_column",),
             figures=lambda m: ['<figure><svg id="plot-toy"></svg><figcaption>toy</figcaption></figure>'])


def test_a_new_declaration_reaches_every_output(spark, monkeypatch):
    monkeypatch.setattr(metrics, "REGISTRY", metrics.REGISTRY + (TOY,))
    assert build_config({"targets": {"toy_count": 5}}, require_inputs=False).targets["toy_count"] == 5
    O = pd.DataFrame({"a": [1, 2, 3, 4] * 3, "b": list("xyxz") * 3})
    rep = evaluate(spark, spark.createDataFrame(O), spark.createDataFrame(O), None, {"known_variables": ["a", "b"]},
                   only=["toy_count"])
    d = rep.to_dict()
    assert list(d["metrics"])[-1] == "toy_count" and "toy_count" in d["timings"]
    assert d["metrics"]["toy_count"]["value"] == 12.0 and d["metrics"]["toy_count"]["passed"] is False
    assert "Toy Count" in rep.summary() and "toy_count" in rep.missed_targets()
    page = rep.html()
    assert 'id="card-toy_count"' in page and "12 records counted." in page and "Count more records." in page
    assert 'id="plot-toy"' in page
    assert rep.records.select("toy_column").distinct().collect()[0][0] == 7
    rep.records.unpersist()


def test_every_metric_is_defined_for_users():
    """docs/metrics.md, the users' definitions, has a section per declared metric and names its
    default target: a metric added to the registry without its definition fails here."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    headings = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]
    targets = text[text.index("## Targets"):]
    for m in metrics.REGISTRY:
        assert any(h.startswith(m.title) for h in headings), m.title
        short = m.title.replace(" Protection Rate", "").replace(" Protection", "")
        assert f"{short} {m.target:g}" in " ".join(targets.split()), (m.title, m.target)
