"""Plain brute-force references of the metrics, written from the spec alone.

Pure Python/numpy, record by record, no Spark and no code of the package: the
engine must match these bit for bit. Tables are pandas DataFrames whose row i
has id i (positional alignment), unless ids are given.

Where this follows the spec (``shared/spec/METRICS.md``) word for word: the
Gower distance (terms in the order of V, float64, nulls), top-2 with ties,
LPR, Closest Rate (midpoint percentiles, at-risk rule), KPR (U, bins, B1, S),
CDMP. Where it pins this project's own choices, which the spec leaves open:
- the tie key's hash (splitmix64 finaliser, BLAKE2b of the search name,
  ``tie_key`` below) and the search names ("linkability/A", "closest/avatars",
  ...); the approximate holdout's split key (``working_half``, search name
  "holdout-split", candidate id 0, ties by id);
- KPR's mean and standard deviation: the exact mean rounded once, the sample
  standard deviation from the exact sum of float64 squared deviations (scaled
  by a power of two when a square would overflow), and a bin index past
  float64's range kept as the (infinite) quotient;
- the Linkability halves' shuffle is tested through ``split_known`` itself.
"""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

import pandas as pd

M64 = (1 << 64) - 1


def is_null(v) -> bool:
    if v is None or v is pd.NA:
        return True
    return isinstance(v, float) and math.isnan(v)


# ------------------------------------------------------------------ Gower


def column_range(tables, col):
    vals = [float(v) for t in tables for v in t[col].tolist() if not is_null(v)]
    return (max(vals) - min(vals)) if vals else math.nan


def gower(x: dict, y: dict, variables, kinds, ranges) -> float:
    """(sum of the terms, in the order of V, in float64) / |V|."""
    total = 0.0
    for v in variables:
        a, b = x[v], y[v]
        if is_null(a) or is_null(b):
            term = 0.0 if (is_null(a) and is_null(b)) else 1.0
        elif kinds[v] == "categorical":
            term = 0.0 if a == b else 1.0
        else:
            r = ranges[v]
            term = abs(float(a) - float(b)) / r if r > 0 else 0.0
        total += term
    return total / len(variables)


# ------------------------------------------------------------------ tie keys


def _mix(x: int) -> int:
    x &= M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def tie_key(seed: int, search: str, qid: int, cid: int) -> int:
    name = int.from_bytes(hashlib.blake2b(search.encode(), digest_size=8).digest(), "little")
    salt = _mix(_mix(seed & M64) ^ name)
    h = _mix(salt ^ (qid & M64))
    h = _mix(h ^ (cid & M64))
    return h >> 1


# ------------------------------------------------------------------ search


def nearest(queries: pd.DataFrame, candidates: pd.DataFrame, variables, kinds, ranges, seed, search,
            qids=None, cids=None):
    """Per query: (d1, d2, n1, chosen candidate id) by brute force."""
    qids = list(range(len(queries))) if qids is None else list(qids)
    cids = list(range(len(candidates))) if cids is None else list(cids)
    qrecs = queries.to_dict("records")
    crecs = candidates.to_dict("records")
    out = []
    for qi, x in zip(qids, qrecs):
        dists = [gower(x, y, variables, kinds, ranges) for y in crecs]
        srt = sorted(dists)
        d1 = srt[0]
        d2 = srt[1] if len(srt) > 1 else math.inf
        tied = [cid for cid, d in zip(cids, dists) if d == d1]
        chosen = min(tied, key=lambda c: (tie_key(seed, search, qi, c), c))
        out.append((d1, d2, len(tied), chosen))
    return out


def linkability(O, A, half_a, half_b, kinds, seed, sample=None):
    """(LPR, linked); with ``sample`` (positions), over the sampled originals only."""
    ranges = {v: column_range([O, A], v) for v in list(half_a) + list(half_b) if kinds[v] == "numeric"}
    ra = nearest(O, A, half_a, kinds, ranges, seed, "linkability/A")
    rb = nearest(O, A, half_b, kinds, ranges, seed, "linkability/B")
    asked = range(len(O)) if sample is None else sample
    linked = sum(1 for i in asked if ra[i][3] == rb[i][3])
    return 100.0 * (1.0 - linked / len(asked)), linked


# ------------------------------------------------------------------ CDMP


def column_direct_match(O, A, variables):
    n = len(O)
    out = {}
    for c in variables:
        m = 0
        for x, y in zip(O[c].tolist(), A[c].tolist()):
            if (is_null(x) and is_null(y)) or (not is_null(x) and not is_null(y) and x == y):
                m += 1
        vals = A[c].tolist()
        distinct = {v for v in vals if not is_null(v)}
        u = len(distinct) + (1 if any(is_null(v) for v in vals) else 0)
        out[c] = 100.0 * (1.0 - (m * u) / (n * n))
    return min(out.values()), out


# ------------------------------------------------------------------ KPR


def _profile(rec, known, kinds, bins=None):
    key = []
    for v in known:
        x = rec[v]
        if is_null(x):
            key.append(None)
        elif kinds[v] == "numeric" and bins is not None:
            lo, step = bins[v]
            if step is None:
                key.append(0)
            else:
                q = (float(x) - lo) / step
                key.append(math.floor(q) if math.isfinite(q) else q)  # this project's choice past overflow
        else:
            key.append(x)
    return tuple(key)


def knowledge_bins(O, known, kinds):
    """U (originals of unique profile), the bins {var: (lo, step)} from U, and the number of
    bins from lo to U's largest value (what the report publishes instead of lo and step)."""
    orecs = O.to_dict("records")
    counts = {}
    for r in orecs:
        p = _profile(r, known, kinds)
        counts[p] = counts.get(p, 0) + 1
    U = [r for r in orecs if counts[_profile(r, known, kinds)] == 1]
    bins, spans = {}, {}
    for v in known:
        if kinds[v] != "numeric":
            continue
        xs = [float(r[v]) for r in U if not is_null(r[v])]
        if not xs:
            bins[v], spans[v] = (None, None), 0
            continue
        if min(xs) == max(xs):
            bins[v], spans[v] = (None, None), 1
            continue
        mean = float(sum(Fraction(x) for x in xs) / len(xs))
        # this project's choice: deviations whose squares would overflow float64 are
        # scaled by an exact power of two first (and the sd scaled back)
        max_dev = max(max(xs) - mean, mean - min(xs))
        k = 0 if max_dev < 2.0**511 else math.frexp(max_dev)[1] - 510
        sq = sum(Fraction(((x - mean) * 2.0**-k) * ((x - mean) * 2.0**-k)) for x in xs)
        sd = math.ldexp(math.sqrt(float(sq / (len(xs) - 1))), k)
        step = 0.05 * abs(mean)
        if step == 0.0:
            step = 0.05 * (max(xs) - min(xs))
        bins[v] = (min(xs) - sd / 10, step)
        span = (max(xs) - bins[v][0]) / step
        spans[v] = math.floor(span) + 1 if math.isfinite(span) and span < 2.0**52 else None
    return U, bins, spans


def knowledge(O, A, known, kinds):
    arecs = A.to_dict("records")
    U, bins, _ = knowledge_bins(O, known, kinds)
    acounts = {}
    for r in arecs:
        p = _profile(r, known, kinds, bins)
        acounts[p] = acounts.get(p, 0) + 1
    S = [r for r in U if acounts.get(_profile(r, known, kinds, bins), 0) == 1]
    return 100.0 * (1.0 - len(S) / len(O)), len(U), len(S)


# ------------------------------------------------------------------ Closest Rate


def midpoint(values, q):
    xs = sorted(values)
    m = len(xs)
    h = (m - 1) * Fraction(repr(float(q))) / 100  # exact: q as the decimal written (spec, Closest Rate)
    return (xs[math.floor(h)] + xs[math.ceil(h)]) / 2


def working_half(n, seed):
    """Positions of the approximate holdout's working half (ceil(n/2) records)."""
    order = sorted(range(n), key=lambda i: (tie_key(seed, "holdout-split", i, 0), i))
    return sorted(order[: (n + 1) // 2])


def closest(O, A, H, kinds, q=5, seed=0, sample=None):
    """Closest Rate details by brute force; H None: approximate holdout. With ``sample``
    (positions of originals), only the sampled working originals are asked about."""
    if H is None:
        wo_idx = working_half(len(O), seed)
        rest = sorted(set(range(len(O))) - set(wo_idx))
        WO, WA, HO = O.iloc[wo_idx], A.iloc[wo_idx], O.iloc[rest]
        ids = (wo_idx, wo_idx, rest)
    else:
        WO, WA, HO = O, A, H
        ids = (range(len(O)), range(len(A)), range(len(H)))
    variables = list(kinds)
    ranges = {v: column_range([WO, WA, HO], v) for v in variables if kinds[v] == "numeric"}
    wa = nearest(WO, WA, variables, kinds, ranges, seed, "closest/avatars", ids[0], ids[1])
    ho = nearest(WO, HO, variables, kinds, ranges, seed, "closest/holdout", ids[0], ids[2])
    if sample is not None:
        keep = [k for k, i in enumerate(ids[0]) if i in set(sample)]
        wa, ho = [wa[k] for k in keep], [ho[k] for k in keep]
        ids = ([list(ids[0])[k] for k in keep], ids[1], ids[2])
    ratio = lambda d1, d2: d1 / d2 if d2 > 0 else None
    d_wa = [r[0] for r in wa]
    r_wa = [ratio(r[0], r[1]) for r in wa]
    d_ho = [r[0] for r in ho]
    r_ho = [ratio(r[0], r[1]) for r in ho]
    tau_d = midpoint(d_ho, q)
    tau_r = midpoint([r for r in r_ho if r is not None], q)
    n = sum(r is not None for r in r_wa)
    at_risk = sum(1 for d, r in zip(d_wa, r_wa) if r is not None and d <= tau_d and r <= tau_r)
    return {
        "value": 100.0 * (1.0 - at_risk / n),
        "tau_d": tau_d,
        "tau_r": tau_r,
        "at_risk": at_risk,
        "n": n,
        "distance_to_closest": midpoint(d_wa, 50),
        "closest_distances_ratio": midpoint([r for r in r_wa if r is not None], 50),
        "holdout_distance_to_closest": midpoint(d_ho, 50),
        "holdout_closest_distances_ratio": midpoint([r for r in r_ho if r is not None], 50),
        "per_record": list(zip(ids[0], d_wa, r_wa, d_ho, r_ho)),
    }


# ------------------------------------------------------------------ beyond the seeds


def _all_ranges(O, A, variables, kinds):
    return {v: column_range([O, A], v) for v in variables if kinds[v] == "numeric"}


def hidden_rate(O, A, kinds, seed, sample=None):
    """Hits: original i's nearest avatar (search "hidden_rate", ties by the keyed hash) is avatar i.
    With ``sample`` (positions), over the sampled originals only."""
    variables = list(kinds)
    res = nearest(O, A, variables, kinds, _all_ranges(O, A, variables, kinds), seed, "hidden_rate")
    asked = range(len(O)) if sample is None else sample
    hits = sum(1 for i in asked if res[i][3] == i)
    return 100.0 * (1.0 - hits / len(asked)), hits, [r[3] == i for i, r in enumerate(res)]


def local_cloaking(O, A, kinds, cap=None, sample=None):
    """(median, uncloaked percent, LC_i list): LC_i = #{j != i : G(x_i, a_j) <= G(x_i, a_i)},
    each taken as min(LC_i, cap) when a cap is given (the median is that of the capped counts).
    With ``sample`` (positions), the median and share are over the sampled originals; the list
    stays one count per original."""
    variables = list(kinds)
    ranges = _all_ranges(O, A, variables, kinds)
    orecs, arecs = O.to_dict("records"), A.to_dict("records")
    lc = []
    for i, x in enumerate(orecs):
        own = gower(x, arecs[i], variables, kinds, ranges)
        lc.append(sum(1 for j, y in enumerate(arecs) if j != i and gower(x, y, variables, kinds, ranges) <= own))
    if cap is not None:
        lc = [min(c, cap) for c in lc]
    asked = [lc[i] for i in (range(len(O)) if sample is None else sample)]
    return midpoint(asked, 50), 100.0 * sum(1 for c in asked if c == 0) / len(asked), lc


def row_direct_match(O, A, variables, kinds):
    """(RDMP, present): originals equal to some avatar on every variable (null = null, -0.0 = 0.0)."""
    def key(rec):
        out = []
        for v in variables:
            x = rec[v]
            if is_null(x):
                out.append(("null",))
            elif kinds[v] == "numeric":
                out.append(("num", float(x) + 0.0))  # -0.0 + 0.0 is 0.0
            else:
                out.append(("cat", x))
        return tuple(out)

    avatars = {key(r) for r in A.to_dict("records")}
    present = sum(1 for r in O.to_dict("records") if key(r) in avatars)
    return 100.0 * (1.0 - present / len(O)), present


# ------------------------------------------------------------------ query sample


Z95 = 1.959964


def query_sample(n, size, seed, name="sample"):
    """Positions of the ``min(size, n)`` records of smallest (keyed hash of (seed, name, id), id)."""
    order = sorted(range(n), key=lambda i: (tie_key(seed, name, i, 0), i))
    return sorted(order[: min(size, n)])


def wilson(k, n, z=Z95):
    """The Wilson score interval of k/n, written from its textbook form."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = (z / (1 + z * z / n)) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def rate_interval(k, n):
    lo, hi = wilson(k, n)
    return [100 * (1 - hi), 100 * (1 - lo)]


def median_interval(values, z=Z95):
    """The order statistics of ranks floor(m/2 - z sqrt(m)/2) and ceil(1 + m/2 + z sqrt(m)/2), clipped."""
    xs = sorted(values)
    m = len(xs)
    lo = min(max(math.floor(m / 2 - z * math.sqrt(m) / 2), 1), m)
    hi = min(max(math.ceil(1 + m / 2 + z * math.sqrt(m) / 2), 1), m)
    return [float(xs[lo - 1]), float(xs[hi - 1])]


# ------------------------------------------------------------------ membership and attribute inference


def membership(O, A, H, kinds, sample=None, sample_h=None):
    """Membership Inference by brute force: scores (distance to the nearest avatar, all variables,
    ranges over O, A, H), the Mann-Whitney AUC over every pair (ties half), the advantage, MIP and
    the true positive rate at 1 % false positives over the thresholds {-inf} and every score.
    ``sample``/``sample_h``: positions of the originals/holdout records asked about."""
    variables = list(kinds)
    ranges = {v: column_range([O, A, H], v) for v in variables if kinds[v] == "numeric"}
    arecs = A.to_dict("records")

    def scores(T, asked):
        recs = T.to_dict("records")
        return [min(gower(recs[i], y, variables, kinds, ranges) for y in arecs) for i in asked]

    s_o = scores(O, range(len(O)) if sample is None else sample)
    s_h = scores(H, range(len(H)) if sample_h is None else sample_h)
    wins = Fraction(0)
    for so in s_o:
        for sh in s_h:
            wins += 1 if so < sh else Fraction(1, 2) if so == sh else 0
    auc = float(wins / (len(s_o) * len(s_h)))
    advantage = max(0.0, 2 * auc - 1)
    allowed = [t for t in [-math.inf] + s_o + s_h if 100 * sum(1 for sh in s_h if sh <= t) <= len(s_h)]
    tpr = max(sum(1 for so in s_o if so <= t) for t in allowed) / len(s_o)
    return {"auc": auc, "advantage": advantage, "value": 100 * (1 - advantage), "tpr_at_1pct_fpr": 100 * tpr,
            "members": len(s_o), "non_members": len(s_h), "scores": (s_o, s_h)}


def hanley_mcneil_interval(auc, n_pos, n_neg, z=Z95):
    """AUC +- z SE, SE from Hanley and McNeil (1982), clipped to [0, 1]."""
    q1, q2 = auc / (2 - auc), 2 * auc ** 2 / (1 + auc)
    se = math.sqrt((auc * (1 - auc) + (n_pos - 1) * (q1 - auc ** 2) + (n_neg - 1) * (q2 - auc ** 2)) / (n_pos * n_neg))
    return max(0.0, auc - z * se), min(1.0, auc + z * se)


def _risk(p_o, p_h):
    return 0.0 if p_h == 1 else min(1.0, max(0.0, (p_o - p_h) / (1 - p_h)))


def attribute_inference(O, A, H, known, secrets, kinds, seed, sample=None, sample_h=None):
    """Attribute Inference by brute force: each target's nearest avatar on the known variables
    (searches "attribute" and "attribute_control", ties by the keyed hash), each secret guessed
    right when equal (categorical, null = null) or within 5 % of its range over O, A, H
    (numeric; null against null right, against a value wrong)."""
    ranges = {v: column_range([O, A, H], v) for v in kinds if kinds[v] == "numeric"}
    arecs = A.to_dict("records")

    def right(x, a, s):
        if is_null(x) or is_null(a):
            return is_null(x) and is_null(a)
        if kinds[s] == "categorical":
            return x == a
        return abs(float(a) - float(x)) <= 0.05 * ranges[s]

    out = {}
    for T, name, asked in ((O, "attribute", sample), (H, "attribute_control", sample_h)):
        res = nearest(T, A, known, kinds, ranges, seed, name)
        recs = T.to_dict("records")
        asked = range(len(T)) if asked is None else asked
        out[name] = {
            "n": len(asked),
            "right": {s: sum(1 for i in asked if right(recs[i][s], arecs[res[i][3]][s], s)) for s in secrets},
        }
    o, h = out["attribute"], out["attribute_control"]
    per = {}
    for s in secrets:
        p_o, p_h = o["right"][s] / o["n"], h["right"][s] / h["n"]
        per[s] = {"p_o": p_o, "p_h": p_h, "protection": 100 * (1 - _risk(p_o, p_h)),
                  "right_o": o["right"][s], "right_h": h["right"][s]}
    return {"value": min(v["protection"] for v in per.values()), "secrets": per, "n": o["n"], "n_control": h["n"]}


def risk_protection_interval(right_o, n_o, right_h, n_h, z=Z95):
    """The protection's interval from the widest risk over the Wilson intervals of p_O and p_H."""
    o_lo, o_hi = wilson(right_o, n_o, z)
    h_lo, h_hi = wilson(right_h, n_h, z)
    clip = lambda p: min(max(p, 0.0), 1.0)
    lo_risk, hi_risk = _risk(clip(o_lo), clip(h_hi)), _risk(clip(o_hi), clip(h_lo))
    return [100 * (1 - hi_risk), 100 * (1 - lo_risk)]


# ------------------------------------------------------------------ the synthetic side


def dcr_share(O, A, H, kinds, sample=None):
    """DCR Share by brute force: each avatar's distance to the nearest original and to the nearest
    holdout record (all variables, ranges over O, A, H), the share closer to the originals with ties
    weighted by e = n / (n + |H|), the protection, the identical match shares, and, with ``sample``
    (positions of the avatars asked about), the Wilson interval of the weighted count mapped through
    the protection. The share and the protection in exact fractions, rounded once (this project's
    choice; the spec gives the formulas)."""
    variables = list(kinds)
    ranges = {v: column_range([O, A, H], v) for v in variables if kinds[v] == "numeric"}
    orecs, hrecs, arecs = O.to_dict("records"), H.to_dict("records"), A.to_dict("records")
    asked = range(len(A)) if sample is None else sample
    d_o = [min(gower(arecs[j], y, variables, kinds, ranges) for y in orecs) for j in asked]
    d_h = [min(gower(arecs[j], y, variables, kinds, ranges) for y in hrecs) for j in asked]
    m = len(d_o)
    closer = sum(1 for a, b in zip(d_o, d_h) if a < b)
    ties = sum(1 for a, b in zip(d_o, d_h) if a == b)
    e = Fraction(len(O), len(O) + len(H))

    def protection(share):
        return 100 * (1 - max(Fraction(0), share - e) / (1 - e))

    share = (closer + e * ties) / m
    out = {"value": float(protection(share)), "share": float(share), "expected": float(e),
           "closer_to_originals": closer, "ties": ties, "avatars": m,
           "ims_originals": float(Fraction(sum(1 for a in d_o if a == 0), m)),
           "ims_holdout": float(Fraction(sum(1 for b in d_h if b == 0), m)), "distances": (d_o, d_h)}
    if sample is not None:
        lo, hi = wilson(float(closer + e * ties), m)
        out["ci95"] = [float(protection(Fraction(min(hi, 1.0)))), float(protection(Fraction(max(lo, 0.0))))]
    return out
