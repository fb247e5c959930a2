"""report.html: every figure and plot present, agreeing with report.json, self-contained."""

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from avatar_metrics.html import render
from avatar_metrics.plots import fmt as _fmt

PLOTS = ["plot-distance", "plot-ratio", "plot-distance-ratio", "plot-cdmp", "plot-linkability", "plot-knowledge",
         "plot-hidden-rate", "plot-local-cloaking", "plot-row-direct-match", "plot-membership-roc",
         "plot-attribute-inference", "plot-dcr-share"]


class Page(HTMLParser):
    """Collects elements by id, svg children with data attributes, and the embedded JSON."""

    def __init__(self):
        super().__init__()
        self.ids, self.svg, self.rects, self.lines, self.cells = set(), None, {}, {}, {}
        self.row, self.field, self.data, self.in_json, self.json = None, None, "", False, ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "svg":
            self.svg = a["id"]
            self.rects[self.svg], self.lines[self.svg] = [], []
        if tag == "rect" and self.svg:
            self.rects[self.svg].append(a)
        if tag == "line" and self.svg:
            self.lines[self.svg].append(a)
        if tag == "tr" and "data-metric" in a:
            self.row = a["data-metric"]
        if tag == "td" and "data-field" in a and self.row:
            self.field, self.data = a["data-field"], ""
        if tag == "script" and a.get("id") == "report-data":
            self.in_json = True

    def handle_endtag(self, tag):
        if tag == "svg":
            self.svg = None
        if tag == "td" and self.field:
            self.cells[(self.row, self.field)] = self.data
            self.field = None
        if tag == "script":
            self.in_json = False

    def handle_data(self, data):
        if self.field:
            self.data += data
        if self.in_json:
            self.json += data


@pytest.fixture(scope="module")
def page(example_report):
    text = render(example_report)
    p = Page()
    p.feed(text)
    return text, p


def test_summary_agrees_with_report(example_report, page):
    _, p = page
    for key, m in example_report["metrics"].items():
        assert p.cells[(key, "value")] == _fmt(m["value"])
        assert p.cells[(key, "target")] == _fmt(m["target"])
        assert f"card-{key}" in p.ids
    assert json.loads(p.json) == example_report


def test_every_plot_is_there_and_agrees(example_report, page):
    _, p = page
    assert set(PLOTS) <= p.ids
    cr = example_report["metrics"]["closest_rate"]["details"]
    h = cr["histograms"]
    counts = lambda svg, series: [int(r["data-count"]) for r in p.rects[svg] if r.get("data-series") == series]
    assert counts("plot-distance", "avatars") == h["distance"]["avatars"]
    assert counts("plot-ratio", "holdout") == h["ratio"]["holdout"]
    assert sum(h["distance"]["avatars"]) == cr["working_originals"]
    assert sum(map(sum, h["distance_ratio"]["counts"])) == cr["n"]
    assert float(p.lines["plot-distance"][-1]["data-marker"]) == cr["tau_d"]
    assert float(p.lines["plot-ratio"][-1]["data-marker"]) == cr["tau_r"]
    assert "plot-distance-ratio-at-risk" in p.ids
    cd = example_report["metrics"]["column_direct_match_protection"]
    bars = {r["data-name"]: float(r["data-value"]) for r in p.rects["plot-cdmp"] if "data-name" in r}
    assert bars == cd["details"]["columns"]
    assert float(p.lines["plot-cdmp"][0]["data-target"]) == cd["target"]
    lp = example_report["metrics"]["linkability_protection_rate"]["details"]
    assert {r["data-name"]: float(r["data-value"]) for r in p.rects["plot-linkability"]} == {
        "linked": lp["linked"], "not linked": lp["n"] - lp["linked"]}
    mi = example_report["metrics"]["membership_inference_protection"]["details"]
    text, _ = page
    assert f'data-auc="{mi["auc"]!r}" data-points="{len(mi["roc"]["members"]) + 1}"' in text
    secrets = example_report["metrics"]["attribute_inference_protection"]["details"]["secrets"]
    bars = {(r["data-name"], r["data-series"]): float(r["data-value"]) for r in p.rects["plot-attribute-inference"]}
    assert bars == {**{(s, "originals"): 100 * v["p_o"] for s, v in secrets.items()},
                    **{(s, "holdout"): 100 * v["p_h"] for s, v in secrets.items()}}
    dcr = example_report["metrics"]["dcr_share_protection"]["details"]
    for series in ("to originals", "to holdout"):
        assert counts("plot-dcr-share", series) == dcr["histograms"][series]
        assert sum(dcr["histograms"][series]) == dcr["avatars"] == example_report["inputs"]["avatars_rows"]


def cards(text: str) -> dict[str, str]:
    """Each metric's card, by key: the page from its opening tag to the next card or section."""
    parts = re.split(r'(?=<div class="card" id="card-)|(?=<h2 )', text)
    return {m.group(1): part for part in parts for m in [re.match(r'<div class="card" id="card-([a-z_]+)"', part)] if m}


def test_run_facts_and_advice(example_report, page):
    from avatar_metrics import metrics
    from avatar_metrics.plots import esc

    text, p = page
    assert {"facts-table", "variables-table", "timings-table"} <= p.ids
    for name, kind in example_report["inputs"]["variables"].items():
        assert f"<td>{name}</td><td>{kind}</td>" in text
    by_card = cards(text)
    missed = [m.key for m in metrics.REGISTRY if example_report["metrics"][m.key]["passed"] is False]
    assert missed, "the example must miss a target for the advice to be seen"
    for m in metrics.REGISTRY:  # the metric's own advice in its own card, exactly where its target is missed
        assert (esc(m.advice) in by_card[m.key]) == (m.key in missed), m.key
        assert ('class="advice"' in by_card[m.key]) == (m.key in missed), m.key
    seed = re.search(r"<tr><th>seed</th><td>([^<]*)</td></tr>", text)
    assert seed and seed.group(1) == str(example_report["seed"])


def test_each_plot_sits_in_its_metric_card(example_report, page):
    """A plot is read beside the sentence it illustrates: each metric's figures are inside its own
    card, after its reading, and the run facts come after every card."""
    from avatar_metrics import metrics

    text, _ = page
    by_card = cards(text)
    placed = 0
    for m in metrics.REGISTRY:
        r = example_report["metrics"][m.key]
        for fig in (m.figures(r) if r["computed"] else []):
            svg_id = re.search(r'<svg[^>]* id="([^"]+)"', fig).group(1)
            card = by_card[m.key]
            assert f'id="{svg_id}"' in card, (m.key, svg_id)
            assert card.index(f'id="{svg_id}"') > card.index("<p>"), (m.key, svg_id)
            placed += 1
    assert placed >= len(PLOTS) and "id=\"plots\"" not in text
    assert text.index('id="facts"') > max(text.index(f'id="card-{m.key}"') for m in metrics.REGISTRY)


def test_the_embedded_report_survives_any_column_name(example_report):
    """Names that would close the script element or open a comment in it stay data."""
    report = json.loads(json.dumps(example_report))
    hostile = ["<!--<script>", "</script><b>x</b>", "a & b", "-->"]
    report["inputs"]["variables"] = {**report["inputs"]["variables"], **{h: "categorical" for h in hostile}}
    text = render(report)
    p = Page()
    p.feed(text)
    assert json.loads(p.json) == report
    inside = text.split('id="report-data">', 1)[1].rsplit("</script>", 1)[0]
    assert "<" not in inside and ">" not in inside


def test_self_contained(page):
    text, _ = page
    assert not re.search(r"<(link|img|iframe)\b", text) and "src=" not in text
    assert re.findall(r"https?://[^\"' ]+", text) == ["http://www.w3.org/2000/svg"] * text.count("<svg")


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")), reason="no headless Chromium installed")
def test_renders_in_a_headless_browser(page, tmp_path):
    text, _ = page
    f = tmp_path / "report.html"
    f.write_text(text)
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    proc = subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         "--enable-logging=stderr", "--v=0", "--dump-dom", f.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert 'id="summary-table"' in proc.stdout and "plot-distance-ratio" in proc.stdout
    assert "Uncaught" not in proc.stderr
