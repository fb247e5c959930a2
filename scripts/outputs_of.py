"""The outputs of one version of the package on fixed data, to compare two versions.

    PYTHONPATH=CHECKOUT python scripts/outputs_of.py write OUT [--data DIR] [--block-size N]
    python scripts/outputs_of.py compare OUT_A OUT_B

``write``: for the bundled example data and ``bench/shapes.py``'s eight shapes
at 2,000 records (generated once under DIR, default ``bench/data``), runs
``evaluate`` with the version of ``avatar_metrics`` on the path, in one local
Spark session, with blocks of N avatars (default 1,000: several blocks, so the
searches take their first job and later passes), and writes under OUT/<name>/
``report.json`` (timings and versions left out, keys sorted) and
``records.csv`` (sorted by position). A data set already written is kept.

``compare``: byte for byte, per data set, the metrics both versions report and
the columns of records/ both have (a metric or column only one has is named,
not compared). Exit 1 when anything differs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_KNOWN = ["age", "sex", "region", "children"]
SHAPES = ("default", "census", "highcard", "idlike", "allcat", "numeric", "coarse-halves", "wide")
N = 2000


def data_sets(data: Path):
    """(name, folder with the three parquet tables, known variables, Linkability halves)."""
    yield "example", ROOT / "data" / "example", EXAMPLE_KNOWN, None
    sys.path.insert(0, str(ROOT / "bench"))
    from run import data_for

    for shape in SHAPES:
        folder = data_for(N, data, shape)
        spec = json.loads((folder / "known.json").read_text())
        yield shape, folder, spec["known"], spec["halves"]


def write(out: Path, data: Path, block_size: int) -> None:
    from pyspark.sql import SparkSession

    from avatar_metrics import evaluate

    # (nine runs in one session: room for the driver, and few past plans kept, as in the tests)
    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "4")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
             .config("spark.sql.ui.retainedExecutions", "20").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    for name, folder, known, halves in data_sets(data):
        if (out / name / "records.csv").exists():
            print(name, "already written", flush=True)
            continue
        tables = [spark.read.parquet(str(folder / f"{t}.parquet")) for t in ("originals", "avatars", "holdout")]
        config = {"known_variables": known, "linkability_halves": halves, "seed": 0,
                  "search": {"block_size": block_size}}
        report = evaluate(spark, *tables, config=config)
        d = report.to_dict()
        d.pop("timings")
        d.pop("versions")
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        (target / "report.json").write_text(json.dumps(d, indent=1, sort_keys=True))
        records = report.records.toPandas().sort_values("position").reset_index(drop=True)
        records.to_csv(target / "records.csv", index=False)
        report.records.unpersist()
        print(name, "written", flush=True)
    spark.stop()


def compare(a: Path, b: Path) -> int:
    import pandas as pd

    bad = 0
    for name in sorted(p.name for p in a.iterdir() if p.is_dir()):
        ra, rb = (json.loads((x / name / "report.json").read_text()) for x in (a, b))
        ma, mb = ra.pop("metrics"), rb.pop("metrics")
        common = sorted(set(ma) & set(mb))
        only = sorted(set(ma) ^ set(mb))
        diff = [k for k in common if json.dumps(ma[k], sort_keys=True) != json.dumps(mb[k], sort_keys=True)]
        diff += ["(the rest of report.json)"] if json.dumps(ra, sort_keys=True) != json.dumps(rb, sort_keys=True) else []
        xa, xb = (pd.read_csv(x / name / "records.csv", dtype=str, keep_default_na=False) for x in (a, b))
        cols = [c for c in xa.columns if c in xb.columns]
        same_records = xa[cols].to_csv(index=False) == xb[cols].to_csv(index=False)
        diff += [] if same_records else ["records"]
        print(f"{name}: {len(common)} metrics and {len(cols)} record columns compared, "
              + ("identical" if not diff else "DIFFERENT: " + ", ".join(diff))
              + (f"; in one version only: {', '.join(only)}" if only else "")
              + (f"; columns in one only: {', '.join(sorted(set(xa.columns) ^ set(xb.columns)))}"
                 if set(xa.columns) ^ set(xb.columns) else ""))
        bad += bool(diff)
    return 1 if bad else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    w.add_argument("--data", default=str(ROOT / "bench" / "data"))
    w.add_argument("--block-size", type=int, default=1000)
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.cmd == "write":
        write(Path(args.out), Path(args.data), args.block_size)
    else:
        sys.exit(compare(Path(args.a), Path(args.b)))


if __name__ == "__main__":
    main()
