"""report.html: a self-contained page (inline SVG, no network) from the report.

Every figure comes from the report's own numbers (``Report.to_dict()``), and
the plots from aggregates Spark computed (histograms), never from records.
"""

from __future__ import annotations

import html
import json
from typing import Any

from .config import METRIC_KEYS
from .report import TITLES

ADVICE = {
    "linkability_protection_rate": (
        "Increase k, the number of neighbours each avatar is made from: avatars blended from more "
        "individuals cannot be linked back through two separate sources."
    ),
    "closest_rate": (
        "Increase k in the avatar generation: it moves avatars away from their originals and makes "
        "an original/avatar pair harder to tell apart from the other avatars."
    ),
    "knowledge_protection_rate": (
        "Increase k, and remove or coarsen the known variables that single people out "
        "(exact ages, rare categories): fewer unique profiles, fewer unique matches."
    ),
    "column_direct_match_protection": (
        "A column copies original values row by row: make sure no identifier or quasi-identifier "
        "is left in the avatars, and that every column goes through the anonymization."
    ),
}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1000px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6rem 0}td,th{padding:.3rem .7rem;border-bottom:1px solid #eee;text-align:left}
.met{color:#1a7f37;font-weight:600}.missed{color:#c62828;font-weight:600}.na{color:#777}
.card{border:1px solid #ddd;border-radius:6px;padding:.8rem 1rem;margin:.8rem 0}
.value{font-size:1.5rem;font-weight:700}.advice{background:#fff4e5;padding:.5rem .8rem;border-radius:4px}
svg{background:#fff;border:1px solid #eee;margin:.4rem 0}figure{margin:1rem 0}figcaption{color:#555;font-size:.9rem}
"""

W, H, PAD = 460, 240, 40


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def reading(key: str, m: dict) -> str:
    """One sentence in plain words."""
    if not m["computed"]:
        return f"Not computed: {m['reason']}."
    d, v = m["details"], m["value"]
    if key == "linkability_protection_rate":
        return (f"{v:.2f}% of the originals are not linked to the same avatar from two halves of the "
                f"attacker's knowledge ({d['linked']} of {d['n']} are).")
    if key == "closest_rate":
        return (f"{v:.2f}% of the originals have avatars no closer to them than records never seen by the "
                f"generator are ({d['at_risk']} of {d['n']} at risk, against the {d['reference'].replace('_', ' ')}).")
    if key == "knowledge_protection_rate":
        return (f"{v:.2f}% of the originals cannot be singled out by their known variables: "
                f"{d['matched']} of {d['n']} have a unique profile that matches a unique avatar.")
    worst = d["under_target"][0] if d["under_target"] else min(d["columns"], key=d["columns"].get)
    return (f"The most revealing column, {worst}, keeps {v:.2f}% protection against direct matches; "
            f"{len(d['under_target'])} column(s) are under the target.")


def _svg(id_: str, body: str, w: int = W, h: int = H) -> str:
    return f'<svg id="{_esc(id_)}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">{body}</svg>'


def _axes(xlo: float, xhi: float, label: str) -> str:
    y0 = H - PAD
    return (f'<line x1="{PAD}" y1="{y0}" x2="{W - 10}" y2="{y0}" stroke="#999"/>'
            f'<line x1="{PAD}" y1="10" x2="{PAD}" y2="{y0}" stroke="#999"/>'
            f'<text x="{PAD}" y="{H - 22}" font-size="11">{_fmt(xlo)}</text>'
            f'<text x="{W - 10}" y="{H - 22}" font-size="11" text-anchor="end">{_fmt(xhi)}</text>'
            f'<text x="{(W + PAD) / 2}" y="{H - 6}" font-size="12" text-anchor="middle">{_esc(label)}</text>')


def histogram_svg(id_: str, hist: dict, label: str, marker: float | None, marker_label: str) -> str:
    lo, hi = hist["lo"], hist["hi"]
    series = [("avatars", "#1f77b4"), ("holdout", "#ff7f0e")]
    top = max([1] + [c for s, _ in series for c in hist[s]])
    n = len(hist["avatars"])
    bw = (W - PAD - 10) / n
    parts = [_axes(lo, hi, label)]
    for s, color in series:
        for i, c in enumerate(hist[s]):
            h = (H - PAD - 10) * c / top
            parts.append(f'<rect x="{PAD + i * bw:.1f}" y="{H - PAD - h:.1f}" width="{bw:.1f}" height="{h:.1f}" '
                         f'fill="{color}" fill-opacity="0.5" data-series="{s}" data-count="{c}"/>')
    if marker is not None and hi > lo:
        x = PAD + (W - PAD - 10) * min(max((marker - lo) / (hi - lo), 0), 1)
        parts.append(f'<line x1="{x:.1f}" y1="10" x2="{x:.1f}" y2="{H - PAD}" stroke="#c62828" stroke-dasharray="4 3" '
                     f'data-marker="{marker!r}"/><text x="{x + 4:.1f}" y="22" font-size="11" fill="#c62828">'
                     f'{_esc(marker_label)} = {_fmt(marker)}</text>')
    parts.append(f'<text x="{W - 14}" y="22" font-size="11" text-anchor="end" fill="#1f77b4">avatars</text>'
                 f'<text x="{W - 14}" y="36" font-size="11" text-anchor="end" fill="#ff7f0e">holdout</text>')
    return _svg(id_, "".join(parts))


def heatmap_svg(id_: str, h2: dict, tau_d: float, tau_r: float) -> str:
    counts = h2["counts"]
    n = len(counts)
    top = max([1] + [c for row in counts for c in row])
    cw, ch = (W - PAD - 10) / n, (H - PAD - 10) / n
    parts = [_axes(0.0, h2["d_hi"], "distance to the closest avatar (d)")]
    for i, row in enumerate(counts):
        for j, c in enumerate(row):
            if c:
                shade = 0.15 + 0.85 * c / top
                parts.append(f'<rect x="{PAD + i * cw:.1f}" y="{H - PAD - (j + 1) * ch:.1f}" width="{cw:.1f}" '
                             f'height="{ch:.1f}" fill="#1f77b4" fill-opacity="{shade:.2f}" data-count="{c}"/>')
    xd = (W - PAD - 10) * min(tau_d / h2["d_hi"], 1) if h2["d_hi"] > 0 else 0
    yr = (H - PAD - 10) * min(tau_r / h2["r_hi"], 1)
    parts.append(f'<rect id="{_esc(id_)}-at-risk" x="{PAD}" y="{H - PAD - yr:.1f}" width="{xd:.1f}" height="{yr:.1f}" '
                 f'fill="#c62828" fill-opacity="0.18" stroke="#c62828"/>'
                 f'<text x="{PAD + 4}" y="{H - PAD - yr - 4:.1f}" font-size="11" fill="#c62828">at risk</text>'
                 f'<text x="12" y="{(H - PAD) / 2}" font-size="12" transform="rotate(-90 12 {(H - PAD) / 2})" '
                 f'text-anchor="middle">ratio r = d1/d2</text>')
    return _svg(id_, "".join(parts))


def bars_svg(id_: str, items: list[tuple[str, float]], vmax: float, target: float | None, label: str) -> str:
    rowh = 22
    h = 20 + rowh * len(items) + 30
    w = W + 140
    left = 150
    span = w - left - 70  # room for the value after the longest bar
    parts = []
    for k, (name, v) in enumerate(items):
        y = 14 + k * rowh
        bw = span * max(v, 0) / vmax if vmax else 0
        color = "#c62828" if target is not None and v < target else "#1f77b4"
        parts.append(f'<text x="{left - 6}" y="{y + 14}" font-size="12" text-anchor="end">{_esc(name)}</text>'
                     f'<rect x="{left}" y="{y}" width="{bw:.1f}" height="{rowh - 6}" fill="{color}" '
                     f'data-name="{_esc(name)}" data-value="{v!r}"/>'
                     f'<text x="{left + bw + 4:.1f}" y="{y + 14}" font-size="11">{_fmt(v)}</text>')
    if target is not None:
        x = left + span * target / vmax
        parts.append(f'<line x1="{x:.1f}" y1="6" x2="{x:.1f}" y2="{h - 24}" stroke="#c62828" stroke-dasharray="4 3" '
                     f'data-target="{target!r}"/><text x="{x:.1f}" y="{h - 10}" font-size="11" fill="#c62828" '
                     f'text-anchor="middle">target {target:g}</text>')
    parts.append(f'<text x="{left}" y="{h - 10}" font-size="11">{_esc(label)}</text>')
    return _svg(id_, "".join(parts), w, h)


def render(report: dict) -> str:
    m = report["metrics"]
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>avatar-metrics report</title><style>{CSS}</style></head><body>",
           "<h1>Privacy of the avatars: avatar-metrics report</h1>"]
    # summary
    out.append('<h2 id="summary">Summary</h2><table id="summary-table"><tr><th>metric</th><th>value</th>'
               "<th>target</th><th>result</th></tr>")
    for k in METRIC_KEYS:
        r = m[k]
        verdict = ('<span class="na">not computed</span>' if not r["computed"]
                   else '<span class="met">met</span>' if r["passed"] else '<span class="missed">missed</span>')
        out.append(f'<tr data-metric="{k}"><td>{TITLES[k]}</td><td data-field="value">{_fmt(r["value"])}</td>'
                   f'<td data-field="target">{_fmt(r["target"])}</td><td>{verdict}</td></tr>')
    out.append("</table>")
    for k in METRIC_KEYS:
        r = m[k]
        out.append(f'<div class="card" id="card-{k}"><div>{TITLES[k]}</div>'
                   f'<div class="value">{_fmt(r["value"]) + " %" if r["computed"] else "not computed"}</div>'
                   f"<p>{_esc(reading(k, r))}</p>")
        if r["passed"] is False:
            out.append(f'<p class="advice">Below the target of {r["target"]:g}. {_esc(ADVICE[k])}</p>')
        out.append("</div>")

    # plots
    out.append('<h2 id="plots">Plots</h2>')
    cr = m["closest_rate"]
    if cr["computed"] and "histograms" in cr["details"]:
        d = cr["details"]
        hs = d["histograms"]
        out.append("<figure>" + histogram_svg("plot-distance", hs["distance"], "distance to the closest record (d1)",
                                               d["tau_d"], "tau_d")
                   + "<figcaption>Distance of each original to its closest avatar and to its closest holdout "
                     "record; tau_d is the holdout's q-th percentile.</figcaption></figure>")
        out.append("<figure>" + histogram_svg("plot-ratio", hs["ratio"], "closest distances ratio (d1/d2)",
                                               d["tau_r"], "tau_r")
                   + "<figcaption>Ratio of the closest to the second-closest distance; tau_r is the holdout's "
                     "q-th percentile.</figcaption></figure>")
        out.append("<figure>" + heatmap_svg("plot-distance-ratio", hs["distance_ratio"], d["tau_d"], d["tau_r"])
                   + f"<figcaption>Originals by distance and ratio against the avatars; the shaded corner holds "
                     f"the {d['at_risk']} originals at risk.</figcaption></figure>")
    cd = m["column_direct_match_protection"]
    if cd["computed"]:
        cols = sorted(cd["details"]["columns"].items(), key=lambda kv: kv[1])
        out.append("<figure>" + bars_svg("plot-cdmp", cols, 100.0, cd["target"], "P_c, percent")
                   + "<figcaption>Column Direct Match Protection of each column, most revealing first.</figcaption></figure>")
    lp = m["linkability_protection_rate"]
    if lp["computed"]:
        d = lp["details"]
        out.append("<figure>" + bars_svg("plot-linkability", [("linked", d["linked"]), ("not linked", d["n"] - d["linked"])],
                                          max(d["n"], 1), None, "originals")
                   + "<figcaption>Originals linked to the same avatar from both halves of the known variables."
                     "</figcaption></figure>")
    kp = m["knowledge_protection_rate"]
    if kp["computed"]:
        d = kp["details"]
        out.append("<figure>" + bars_svg("plot-knowledge", [("originals", d["n"]), ("unique profiles", d["unique_originals"]),
                                                            ("matched", d["matched"])], max(d["n"], 1), None, "originals")
                   + "<figcaption>Originals, those with a unique profile on the known variables, and those matched "
                     "by a unique avatar.</figcaption></figure>")

    # run facts
    inp = report["inputs"]
    out.append('<h2 id="facts">Run facts</h2><table id="facts-table">')
    facts = [("originals", inp["originals_rows"]), ("avatars", inp["avatars_rows"]),
             ("holdout", inp["holdout_rows"] if inp["holdout_rows"] is not None else "none"),
             ("reference", inp.get("reference")), ("row key", inp.get("row_key") or "input order"),
             ("known variables", ", ".join(inp["known_variables"]) or "none"),
             ("linkability halves", " | ".join(", ".join(h) for h in lp["details"].get("halves", [])) or "—"),
             ("seed", report["seed"])]
    facts += [(f"version of {k}", v) for k, v in report["versions"].items()]
    for name, v in facts:
        out.append(f"<tr><th>{_esc(name)}</th><td>{_esc(_fmt(v))}</td></tr>")
    out.append('</table><table id="variables-table"><tr><th>variable</th><th>type</th></tr>')
    for name, kind in inp["variables"].items():
        out.append(f"<tr><td>{_esc(name)}</td><td>{_esc(kind)}</td></tr>")
    out.append('</table><table id="timings-table"><tr><th>step</th><th>seconds</th></tr>')
    for step, sec in report["timings"].items():
        out.append(f"<tr><td>{_esc(step)}</td><td>{sec:.1f}</td></tr>")
    out.append("</table>")
    data = json.dumps(report).replace("</", "<\\/")
    out.append(f'<script type="application/json" id="report-data">{data}</script></body></html>')
    return "".join(out)
