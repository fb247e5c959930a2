"""report.html: a self-contained page (inline SVG, no network) from the report.

Every figure comes from the report's own numbers (``Report.to_dict()``), and
the plots from aggregates Spark computed (histograms), never from records.
Titles, readings, advice and figures come from each metric's declaration
(``metrics.REGISTRY``).
"""

from __future__ import annotations

import json

from . import metrics as declared
from .metrics.sampled import sampled_sides
from .plots import esc, fmt

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1000px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6rem 0}td,th{padding:.3rem .7rem;border-bottom:1px solid #eee;text-align:left}
.met{color:#1a7f37;font-weight:600}.missed{color:#c62828;font-weight:600}.na{color:#777}
.card{border:1px solid #ddd;border-radius:6px;padding:.8rem 1rem;margin:.8rem 0}
.value{font-size:1.5rem;font-weight:700}.ci{color:#555}.advice{background:#fff4e5;padding:.5rem .8rem;border-radius:4px}
svg{background:#fff;border:1px solid #eee;margin:.4rem 0}figure{margin:1rem 0}figcaption{color:#555;font-size:.9rem}
"""


def _interval(r: dict) -> str | None:
    """"lo to hi" of a metric computed from a query sample, else None."""
    ci = r["details"].get("ci95") if r["computed"] else None
    return None if ci is None else f"{fmt(ci[0])} to {fmt(ci[1])}"


def _summary(report: dict) -> list[str]:
    m = report["metrics"]
    any_ci = any(_interval(m[metric.key]) for metric in declared.REGISTRY)
    out = ['<h2 id="summary">Summary</h2><table id="summary-table"><tr><th>metric</th><th>value</th>'
           + ("<th>95% interval</th>" if any_ci else "") + "<th>target</th><th>result</th></tr>"]
    for metric in declared.REGISTRY:
        r = m[metric.key]
        verdict = ('<span class="na">not computed</span>' if not r["computed"]
                   else '<span class="met">met</span>' if r["passed"] else '<span class="missed">missed</span>')
        ci = f'<td data-field="ci95">{esc(_interval(r) or "exact")}</td>' if any_ci else ""
        out.append(f'<tr data-metric="{metric.key}"><td>{esc(metric.title)}</td><td data-field="value">'
                   f'{fmt(r["value"])}</td>{ci}<td data-field="target">{fmt(r["target"])}</td><td>{verdict}</td></tr>')
    out.append("</table>")
    for metric in declared.REGISTRY:
        r = m[metric.key]
        unit = " %" if metric.unit == "percent" else ""
        out.append(f'<div class="card" id="card-{metric.key}"><div>{esc(metric.title)}</div>'
                   f'<div class="value">{fmt(r["value"]) + unit if r["computed"] else "not computed"}</div>'
                   f"<p>{esc(metric.reading(r) if r['computed'] else 'Not computed: ' + r['reason'] + '.')}</p>")
        if _interval(r):
            out.append(f'<p class="ci" data-field="ci95">95% confidence interval: {esc(_interval(r))}{unit} '
                       f'({sampled_sides(r["details"], report["inputs"])})'
                       + ('; it takes the two thresholds, tau_d and tau_r, as fixed.'
                          if r["details"].get("ci95_thresholds") == "fixed" else ".") + "</p>")
        if r["computed"]:  # each plot in its metric's card, under the sentence it illustrates
            out += metric.figures(r)
        if r["passed"] is False:
            out.append(f'<p class="advice">Below the target of {r["target"]:g}. {esc(metric.advice)}</p>')
        out.append("</div>")
    return out


def _queries(inp: dict) -> str:
    """Which records the searches asked about: every one (exact), or the sides sampled."""
    sides = {"sampled": inp.get("query_sample"), "sampled_holdout": inp.get("query_sample_holdout"),
             "sampled_avatars": inp.get("query_sample_avatars")}
    said = sampled_sides(sides, inp)
    return f"{said} (query_sample), against every candidate" if said else "every record (exact)"


def _facts(report: dict) -> list[str]:
    inp = report["inputs"]
    halves = report["metrics"]["linkability_protection_rate"]["details"].get("halves", [])
    out = ['<h2 id="facts">Run facts</h2><table id="facts-table">']
    facts = [("originals", inp["originals_rows"]), ("avatars", inp["avatars_rows"]),
             ("holdout", inp["holdout_rows"] if inp["holdout_rows"] is not None else "none"),
             ("reference", inp.get("reference")), ("row key", inp.get("row_key") or "input order"),
             ("avatars aligned", "yes" if inp.get("avatars_aligned", True) else "no: no link to the originals"),
             ("queries", _queries(inp)),
             ("known variables", ", ".join(inp["known_variables"]) or "none"),
             ("linkability halves", " | ".join(", ".join(h) for h in halves) or "—"),
             ("seed", report["seed"])]
    facts += [(f"version of {k}", v) for k, v in report["versions"].items()]
    for name, v in facts:
        out.append(f"<tr><th>{esc(name)}</th><td>{esc(fmt(v))}</td></tr>")
    out.append('</table><table id="variables-table"><tr><th>variable</th><th>type</th></tr>')
    for name, kind in inp["variables"].items():
        out.append(f"<tr><td>{esc(name)}</td><td>{esc(kind)}</td></tr>")
    out.append('</table><table id="timings-table"><tr><th>step</th><th>seconds</th></tr>')
    for step, sec in report["timings"].items():
        out.append(f"<tr><td>{esc(step)}</td><td>{sec:.1f}</td></tr>")
    out.append("</table>")
    return out


def render(report: dict) -> str:
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>avatar-metrics report</title><style>{CSS}</style></head><body>",
           "<h1>Privacy of the avatars: avatar-metrics report</h1>"]
    out += _summary(report)
    out += _facts(report)
    # every < as \u003c (and > and & alike): no text in the data (a column named "<!--<script>") can close
    # the element or open a comment in it; JSON.parse reads the same string back
    data = json.dumps(report).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    out.append(f'<script type="application/json" id="report-data">{data}</script></body></html>')
    return "".join(out)
