"""Inline SVG figures for report.html: pure strings from the report's numbers.

Each figure carries its numbers as data attributes (``data-count``,
``data-value``, ``data-marker``, ``data-target``), so that the tests can
check every plot against report.json.
"""

from __future__ import annotations

import html
from typing import Any

W, H, PAD = 460, 240, 40


def esc(x: Any) -> str:
    return html.escape(str(x))


def fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _svg(id_: str, body: str, w: int = W, h: int = H) -> str:
    return f'<svg id="{esc(id_)}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">{body}</svg>'


def _axes(xlo: float, xhi: float, label: str) -> str:
    y0 = H - PAD
    return (f'<line x1="{PAD}" y1="{y0}" x2="{W - 10}" y2="{y0}" stroke="#999"/>'
            f'<line x1="{PAD}" y1="10" x2="{PAD}" y2="{y0}" stroke="#999"/>'
            f'<text x="{PAD}" y="{H - 22}" font-size="11">{fmt(xlo)}</text>'
            f'<text x="{W - 10}" y="{H - 22}" font-size="11" text-anchor="end">{fmt(xhi)}</text>'
            f'<text x="{(W + PAD) / 2}" y="{H - 6}" font-size="12" text-anchor="middle">{esc(label)}</text>')


SERIES = (("avatars", "#1f77b4"), ("holdout", "#ff7f0e"))


def _vline(x: float, value: float, text: str, color: str, dy: int, attr: str) -> str:
    return (f'<line x1="{x:.1f}" y1="10" x2="{x:.1f}" y2="{H - PAD}" stroke="{color}" stroke-dasharray="4 3" '
            f'{attr}="{value!r}"/><text x="{x + 4:.1f}" y="{dy}" font-size="11" fill="{color}">{esc(text)}</text>')


def histogram_svg(id_: str, hist: dict, label: str, marker: float | None, marker_label: str,
                  series=SERIES, target: float | None = None) -> str:
    """Bars of ``hist[s]`` for each series over [lo, hi]; ``marker`` (and ``target``) as dashed lines."""
    lo, hi = hist["lo"], hist["hi"]
    top = max([1] + [c for s, _ in series for c in hist[s]])
    n = len(hist[series[0][0]])
    bw = (W - PAD - 10) / n
    parts = [_axes(lo, hi, label)]
    for s, color in series:
        for i, c in enumerate(hist[s]):
            h = (H - PAD - 10) * c / top
            parts.append(f'<rect x="{PAD + i * bw:.1f}" y="{H - PAD - h:.1f}" width="{bw:.1f}" height="{h:.1f}" '
                         f'fill="{color}" fill-opacity="0.5" data-series="{s}" data-count="{c}"/>')

    def at(v: float) -> float:
        return PAD + (W - PAD - 10) * min(max((v - lo) / (hi - lo), 0), 1)

    if marker is not None and hi > lo:
        parts.append(_vline(at(marker), marker, f"{marker_label} = {fmt(marker)}", "#c62828", 22, "data-marker"))
    if target is not None and hi > lo:
        parts.append(_vline(at(target), target, f"target {target:g}", "#1a7f37", 36, "data-target"))
    for k, (s, color) in enumerate(series):
        parts.append(f'<text x="{W - 14}" y="{22 + 14 * k}" font-size="11" text-anchor="end" fill="{color}">{s}</text>')
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
    parts.append(f'<rect id="{esc(id_)}-at-risk" x="{PAD}" y="{H - PAD - yr:.1f}" width="{xd:.1f}" height="{yr:.1f}" '
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
        parts.append(f'<text x="{left - 6}" y="{y + 14}" font-size="12" text-anchor="end">{esc(name)}</text>'
                     f'<rect x="{left}" y="{y}" width="{bw:.1f}" height="{rowh - 6}" fill="{color}" '
                     f'data-name="{esc(name)}" data-value="{v!r}"/>'
                     f'<text x="{left + bw + 4:.1f}" y="{y + 14}" font-size="11">{fmt(v)}</text>')
    if target is not None:
        x = left + span * target / vmax
        parts.append(f'<line x1="{x:.1f}" y1="6" x2="{x:.1f}" y2="{h - 24}" stroke="#c62828" stroke-dasharray="4 3" '
                     f'data-target="{target!r}"/><text x="{x:.1f}" y="{h - 10}" font-size="11" fill="#c62828" '
                     f'text-anchor="middle">target {target:g}</text>')
    parts.append(f'<text x="{left}" y="{h - 10}" font-size="11">{esc(label)}</text>')
    return _svg(id_, "".join(parts), w, h)


def figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{esc(caption)}</figcaption></figure>"


def roc_svg(id_: str, curve: list[tuple[float, float]], auc: float, point: tuple[float, float] | None) -> str:
    """A ROC curve (false positive rate across, true positive rate up, both in [0, 1]), the
    diagonal of a guess, the AUC written in, and ``point`` marked (the 1 % false positive rate)."""
    side = H - PAD - 10
    x0, y0 = PAD, H - PAD

    def at(fpr: float, tpr: float) -> str:
        return f"{x0 + side * fpr:.1f},{y0 - side * tpr:.1f}"

    parts = [f'<rect x="{x0}" y="{y0 - side}" width="{side}" height="{side}" fill="none" stroke="#999"/>',
             f'<line x1="{x0}" y1="{y0}" x2="{x0 + side}" y2="{y0 - side}" stroke="#999" stroke-dasharray="4 3"/>',
             f'<polyline points="{" ".join(at(f, t) for f, t in curve)}" fill="none" stroke="#1f77b4" '
             f'stroke-width="2" data-auc="{auc!r}" data-points="{len(curve)}"/>',
             f'<text x="{x0}" y="{H - 22}" font-size="11">0</text>',
             f'<text x="{x0 + side}" y="{H - 22}" font-size="11" text-anchor="end">1</text>',
             f'<text x="{x0 + side / 2}" y="{H - 6}" font-size="12" text-anchor="middle">false positive rate</text>',
             f'<text x="{x0 + side + 12}" y="{y0 - 16}" font-size="11" fill="#555">false positives: holdout records '
             'called members</text>',
             f'<text x="{x0 + side + 12}" y="{y0 - 2}" font-size="11" fill="#555">true positives: originals called '
             'members</text>',
             f'<text x="12" y="{y0 - side / 2}" font-size="12" transform="rotate(-90 12 {y0 - side / 2})" '
             'text-anchor="middle">true positive rate</text>',
             f'<text x="{x0 + side + 12}" y="{y0 - side + 14}" font-size="12">AUC = {auc:.4f}</text>',
             f'<text x="{x0 + side + 12}" y="{y0 - side + 30}" font-size="11" fill="#999">diagonal: a guess '
             '(AUC 0.5)</text>']
    if point is not None:
        fpr, tpr = point
        parts.append(f'<circle cx="{x0 + side * fpr:.1f}" cy="{y0 - side * tpr:.1f}" r="4" fill="#c62828" '
                     f'data-marker="{tpr!r}"/><text x="{x0 + side + 12}" y="{y0 - side + 46}" font-size="11" '
                     f'fill="#c62828">at 1% false positives: {100 * tpr:.2f}% found</text>')
    return _svg(id_, "".join(parts), W + 140)


def pairs_svg(id_: str, items: list[tuple[str, float, float]], labels: tuple[str, str], label: str) -> str:
    """Two bars per item (percent, 0 to 100), the first of ``labels`` above the second."""
    rowh = 16
    h = 20 + 2 * rowh * len(items) + 6 * len(items) + 30
    w = W + 140
    left = 150
    span = w - left - 70
    parts = []
    for k, (name, a, b) in enumerate(items):
        y = 14 + k * (2 * rowh + 6)
        parts.append(f'<text x="{left - 6}" y="{y + rowh + 4}" font-size="12" text-anchor="end">{esc(name)}</text>')
        for j, (v, color) in enumerate(((a, "#c62828"), (b, "#1f77b4"))):
            bw = span * min(max(v, 0), 100) / 100
            parts.append(f'<rect x="{left}" y="{y + j * rowh}" width="{bw:.1f}" height="{rowh - 3}" fill="{color}" '
                         f'data-name="{esc(name)}" data-series="{esc(labels[j])}" data-value="{v!r}"/>'
                         f'<text x="{left + bw + 4:.1f}" y="{y + j * rowh + 11}" font-size="11">{v:.1f}%</text>')
    parts.append(f'<text x="{left}" y="{h - 10}" font-size="11">{esc(label)}: '
                 f'<tspan fill="#c62828">{esc(labels[0])}</tspan>, <tspan fill="#1f77b4">{esc(labels[1])}</tspan>'
                 '</text>')
    return _svg(id_, "".join(parts), w, h)
