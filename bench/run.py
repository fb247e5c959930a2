"""Benchmark: the whole job on generated data of a given size. Not a test.

    python bench/run.py --n 100000 [--n 1000000] [--shape default] [--master local[2]] [--brute-sample 2000]
                        [--anonymeter PYTHON]

For each size: generates (once, deterministically, under bench/data/) the
originals, avatar-like avatars (k = 10) and a holdout of the same size, of
the shape named by ``--shape`` (``bench/shapes.py``: default is 10 variables,
integers, continuous numbers, categories of 2 to 40 levels, about 1 % nulls,
4 known variables); runs ``avatar-metrics run`` in a subprocess with a local
Spark; prints one line per step and a total line: wall seconds, records per
second, and the peak memory (RSS) of the driver (JVM + Python) and of the
Python workers, sampled from /proc; the Spark jobs each step started (from
the event log: the library tags its jobs ``avatar-metrics-<step>``); per search, the
distances the kernels evaluated per query and their share of queries x candidates
(the race's samples included); and the share of the run taken by the metrics beyond
the four seed ones.

``--anonymeter PYTHON`` also runs anonymeter 1.1's Linkability on the same
tables with that interpreter (``bench/anonymeter_side.py``; anonymeter is not
a dependency of this project: install it in another virtual environment).

``--brute-sample S`` also times the plain compiled kernel, every candidate for
every query with no index (``kernels.index.plain_search``), on S originals against all avatars, on all the
variables, and extrapolates linearly to n originals, for the speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

KNOWN = ["age", "sex", "region", "children"]
INFERENCE = ("membership_inference_protection", "attribute_inference_protection")  # issue 37's metrics
SEED_METRICS = ("linkability_protection_rate", "closest_rate", "knowledge_protection_rate",
                "column_direct_match_protection")


def local_inputs(n: int, folder: Path, shuffle_partitions: int):
    """For the benches that run in one process: a local[2] Spark session, and the checked
    inputs (originals, avatars) of the default shape at size ``n``, generated under ``folder``."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.driver.memory", "4g")
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from avatar_metrics.configure import as_config
    from avatar_metrics.schema import prepare_inputs

    data = data_for(n, folder)
    return spark, prepare_inputs(spark.read.parquet(str(data / "originals.parquet")),
                                 spark.read.parquet(str(data / "avatars.parquet")), None, as_config({}))


def data_for(n: int, folder: Path, shape: str = "default") -> Path:
    """The three tables of ``shape`` at size n, generated once; the known variables in known.json."""
    out = folder / (f"n{n}" if shape == "default" else f"{shape}-n{n}")
    if (out / "_done").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    if shape == "default":  # the data of the earlier figures, unchanged
        from avatar_metrics.synth import make_avatars_fast, make_originals

        both = make_originals(2 * n, seed=n)
        originals = both.iloc[:n].reset_index(drop=True)
        holdout = both.iloc[n:].reset_index(drop=True)
        avatars = make_avatars_fast(originals, k=10, seed=n + 1)
        known, halves = KNOWN, None
    else:
        from shapes import make

        sh = make(shape, n)
        originals, avatars, holdout, known, halves = sh.originals, sh.avatars, sh.holdout, sh.known, sh.halves
    for name, df in (("originals", originals), ("avatars", avatars), ("holdout", holdout)):
        df.to_parquet(out / f"{name}.parquet", index=False, row_group_size=200_000)
    (out / "known.json").write_text(json.dumps({"known": known, "halves": halves}))
    (out / "_done").write_text("ok")
    return out


def _tree_rss(root_pid: int) -> tuple[int, int]:
    """(driver bytes, python worker bytes) of the process tree under root_pid."""
    children: dict[int, list[int]] = {}
    info: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(d))
        info[int(d)] = cmd
    driver = workers = 0
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/statm") as fh:
                rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
        if "pyspark.daemon" in info.get(pid, "") or "pyspark.worker" in info.get(pid, ""):
            workers += rss
        else:
            driver += rss
    return driver, workers


def run_job(n: int, data: Path, master: str, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        cfg = Path(tmp) / "bench.yaml"
        known = json.loads((data / "known.json").read_text()) if (data / "known.json").exists() else {"known": KNOWN}
        cfg.write_text(json.dumps({
            "originals": {"path": str(data / "originals.parquet"), "format": "parquet"},
            "avatars": {"path": str(data / "avatars.parquet"), "format": "parquet"},
            "holdout": {"path": str(data / "holdout.parquet"), "format": "parquet"},
            "known_variables": known["known"],
            "linkability_halves": known.get("halves"),
            "output": str(out),
            "spark": {"master": master, "conf": {"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "8",
                                                 "spark.eventLog.enabled": "true",
                                                 "spark.eventLog.dir": Path(tmp).as_uri() + "/events",
                                                 "spark.eventLog.compress": "false"}},
        }))
        (Path(tmp) / "events").mkdir()
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        cmd = [sys.executable, "-m", "avatar_metrics", "run", "--config", str(cfg), *extra]
        t0 = time.perf_counter()
        log = open(Path(tmp) / "log", "w")
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        peak = [0, 0]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                d, w = _tree_rss(proc.pid)
                peak[0], peak[1] = max(peak[0], d), max(peak[1], w)
                time.sleep(0.5)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        rc = proc.wait()
        wall = time.perf_counter() - t0
        stop.set()
        th.join()
        log.close()
        if rc != 0:
            print((Path(tmp) / "log").read_text()[-4000:], file=sys.stderr)
            raise SystemExit(f"job failed with exit code {rc}")
        report = json.loads((out / "report.json").read_text())
        progress = [line for line in (Path(tmp) / "log").read_text().splitlines() if "avatar-metrics" in line]
        jobs = spark_jobs(Path(tmp) / "events")
    return {"report": report, "wall": wall, "peak_driver": peak[0], "peak_workers": peak[1], "log": progress,
            "jobs": jobs}


def search_visits(lines: list[str]) -> list[tuple[str, int, int, int, int]]:
    """(search, visits, full scan's visits, blocks, queries) from each search's closing log
    line (searches of one block have none: every query visits it)."""
    import re

    pattern = re.compile(r"search (\S+): (\d+) of (\d+) query visits \(\d+%\): (\d+) blocks, (\d+) queries")
    return [(m.group(1), *map(int, m.group(2, 3, 4, 5))) for m in map(pattern.search, lines) if m]


def search_work(lines: list[str]) -> list[tuple[str, int, float, float, int]]:
    """(search, distances evaluated, per query, share of queries x candidates in %, candidates
    looked up without one) from each search's work log line."""
    import re

    pattern = re.compile(r"search (\S+): (\d+) distances evaluated, ([\d.]+) per query \(([\d.]+)% of queries x "
                         r"candidates\), (\d+) candidates looked up")
    return [(m.group(1), int(m.group(2)), float(m.group(3)), float(m.group(4)), int(m.group(5)))
            for m in map(pattern.search, lines) if m]


def spark_jobs(events: Path) -> dict[str, int]:
    """Spark jobs started, per step (the tag ``avatar-metrics-<step>`` of the library), from the event log."""
    out: dict[str, int] = {}
    ends = {}
    for f in sorted(p for p in events.rglob("*") if p.is_file()):
        with open(f) as fh:
            for line in fh:
                if '"SparkListenerJobEnd"' in line:
                    ev = json.loads(line)
                    ends[ev["Job ID"]] = ev["Completion Time"]
    for f in sorted(p for p in events.rglob("*") if p.is_file()):  # Spark 4: a folder of rolled files
        with open(f) as fh:
            for line in fh:
                if '"SparkListenerJobStart"' not in line:
                    continue
                ev = json.loads(line)
                tags = ev.get("Properties", {}).get("spark.job.tags", "")
                if os.environ.get("AM_BENCH_JOBS"):  # where each job comes from
                    stages = ev.get("Stage Infos") or [{}]
                    print("job", ev.get("Job ID"), [t.split("avatar-metrics-")[1] for t in tags.split(",") if "avatar-metrics-" in t],
                          ev.get("Submission Time"), ends.get(ev.get("Job ID"), 0) - ev.get("Submission Time", 0),
                          sum(s.get("Number of Tasks", 0) for s in stages), stages[-1].get("Stage Name"), file=sys.stderr)
                steps = [t.split("avatar-metrics-", 1)[1] for t in tags.split(",") if "avatar-metrics-" in t]
                step = steps[0] if steps else "(outside the steps: writing the outputs)"
                out[step] = out.get(step, 0) + 1
    return out


def brute_force(n: int, data: Path, sample: int) -> float:
    """Seconds the plain kernel would take for n originals (timed on ``sample``)."""
    import numpy as np
    import pandas as pd

    from avatar_metrics.kernels.gower import search_salt
    from avatar_metrics.kernels.index import plain_search

    O = pd.read_parquet(data / "originals.parquet").iloc[:sample]
    A = pd.read_parquet(data / "avatars.parquet")
    H = pd.read_parquet(data / "holdout.parquet")
    from kernels import encode

    Q, C, space = encode(O, A, H)
    t0 = time.perf_counter()
    plain_search(Q, np.arange(len(O)), C, np.arange(len(A)), space, search_salt(0, "bench"))
    per_query = (time.perf_counter() - t0) / len(O)
    # the job runs two searches over all variables (avatars, holdout) and two
    # over the halves of the known variables (a lower cost, ignored here)
    return 2 * per_query * n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, action="append", help="originals (repeatable); default 100000")
    p.add_argument("--shape", default="default", help="shape of the data (bench/shapes.py)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--brute-sample", type=int, default=0, help="time the plain kernel on this many originals")
    p.add_argument("--data", default=str(ROOT / "bench" / "data"))
    p.add_argument("--set", action="append", default=[], help="passed to avatar-metrics run --set")
    p.add_argument("--anonymeter", metavar="PYTHON",
                   help="also time anonymeter's Linkability on the same tables, with this Python (it has anonymeter 1.1)")
    a = p.parse_args()
    sizes = a.n or [100_000]
    rows = []
    for n in sizes:
        data = data_for(n, Path(a.data), a.shape)
        res = run_job(n, data, a.master, [x for s in a.set for x in ("--set", s)])
        rep = res["report"]
        t = rep["timings"]
        print(f"\n== shape {a.shape}, n = {n:,} originals, {n:,} avatars, {n:,} holdout; master {a.master}")
        print(f"{'step':<34}{'seconds':>10}{'records/s':>12}{'Spark jobs':>12}")
        jobs = res["jobs"]
        for step, sec in t.items():
            if step == "total":
                continue
            if not rep["metrics"].get(step, {}).get("computed", True):  # no rate for a step that did no work
                print(f"{step:<34}{sec:>10.1f}{'-':>12}{jobs.get(step, 0):>12}  (not computed)")
            else:
                print(f"{step:<34}{sec:>10.1f}{n / max(sec, 1e-9):>12,.0f}{jobs.get(step, 0):>12}")
        for step, k in jobs.items():
            if step not in t:
                print(f"{step:<34}{'':>10}{'':>12}{k:>12}")
        print(f"{'total (job, in the library)':<34}{t['total']:>10.1f}{n / t['total']:>12,.0f}{sum(jobs.values()):>12}")
        print(f"{'total (wall, with Spark start)':<34}{res['wall']:>10.1f}{n / res['wall']:>12,.0f}")
        gib = 1024 ** 3
        print(f"peak memory: driver (JVM + Python) {res['peak_driver'] / gib:.2f} GiB, "
              f"Python workers {res['peak_workers'] / gib:.2f} GiB, "
              f"together {(res['peak_driver'] + res['peak_workers']) / gib:.2f} GiB")
        for k, m in rep["metrics"].items():
            d = m.get("details") or {}
            extra = ""
            if d.get("ci95") is not None:
                lo, hi = d["ci95"]
                # (sampled: originals; a metric whose queries are avatars or holdout records says so)
                n_q, side = next(((d[k], w) for k, w in (("sampled", ""), ("sampled_avatars", " avatars"),
                                                       ("sampled_holdout", " holdout records"))
                                  if d.get(k) is not None), (None, ""))
                extra += f"  ci95 [{lo:.4g}, {hi:.4g}] (width {hi - lo:.3g}), sampled {n_q or 0:,}{side}"
            if "auc" in d:
                extra += f"  auc {d['auc']:.4f}, tpr at 1% fpr {d['tpr_at_1pct_fpr']:.2f}%"
            if "cap" in d:
                extra += f"  cap {d['cap']:,}, capped {d['capped']:,}, median at cap: {d['median_at_cap']}"
            print(f"  {k}: {m['value']}{extra}")
        for name, visits, full, blocks, queries in search_visits(res["log"]):
            print(f"  search {name}: {visits / max(1, queries):.2f} block visits per query of {blocks} blocks "
                  f"({visits:,} of a full scan's {full:,})")
        for name, evaluated, per_query, share, looked in search_work(res["log"]):
            print(f"  search {name}: {per_query:,.1f} distances per query ({share:.4f} % of n x m), "
                  f"{looked / max(1, evaluated):.1f} candidates looked up per distance")
        beyond = sum(sec for step, sec in t.items() if step in rep["metrics"] and step not in SEED_METRICS)
        print(f"metrics beyond the seeds: {beyond:.1f} s, {100 * beyond / (t['total'] - beyond):.0f} % added "
              f"to the rest of the run ({t['total'] - beyond:.1f} s)")
        inference = sum(t.get(step, 0.0) for step in INFERENCE)
        print(f"membership and attribute inference: {inference:.1f} s, "
              f"{100 * inference / (t['total'] - inference):.0f} % added to the rest of the run "
              f"({t['total'] - inference:.1f} s)")
        row = {"n": n, "wall": res["wall"], "peak_gib": (res["peak_driver"] + res["peak_workers"]) / gib}
        if a.brute_sample:
            est = brute_force(n, data, a.brute_sample)
            row["brute"] = est
            print(f"plain brute-force kernel (two full searches, extrapolated from {a.brute_sample} originals): "
                  f"{est:,.0f} s, {est / t['closest_rate']:.0f}x the indexed Closest Rate step")
        if a.anonymeter:
            halves = rep["metrics"]["linkability_protection_rate"]["details"]["halves"]
            t0 = time.perf_counter()
            out = subprocess.run([a.anonymeter, str(ROOT / "bench" / "anonymeter_side.py"), str(data), json.dumps(halves)],
                                 capture_output=True, text=True, check=True)
            wall = time.perf_counter() - t0
            am = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"anonymeter 1.1 Linkability on the same tables (halves {halves}, every original attacked, "
                  f"holdout as control): evaluate {am['evaluate']:.1f} s, process {wall:.1f} s")
            print(f"this whole report (wall, Spark start included) / anonymeter's Linkability evaluate: "
                  f"{res['wall'] / am['evaluate']:.2f}; / its whole process: {res['wall'] / wall:.2f}")
        rows.append(row)
    if len(rows) > 1:
        base = rows[0]
        for r in rows[1:]:
            print(f"time ratio n={r['n']:,} / n={base['n']:,}: {r['wall'] / base['wall']:.1f} "
                  f"(size ratio {r['n'] / base['n']:.0f}, its square {(r['n'] / base['n']) ** 2:.0f})")


if __name__ == "__main__":
    main()
