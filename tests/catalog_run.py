"""records_table against a real metastore: a Hive (Derby) metastore and a warehouse in the
current folder (a temporary one: a subprocess of tests/test_records_table.py). Prints what the
test checks as one JSON line: ``CATALOG {...}``."""

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from avatar_metrics.cli import main

here = Path.cwd()
spark = (SparkSession.builder.master("local[2]").appName("avatar-metrics-catalog-test")
         .config("spark.sql.catalogImplementation", "hive")
         .config("spark.sql.warehouse.dir", str(here / "warehouse"))
         .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                 f"jdbc:derby:;databaseName={here / 'metastore_db'};create=true")
         .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
         .config("spark.log.level", "ERROR").getOrCreate())
config = sys.argv[1]
spark.sql("CREATE DATABASE am")


def run(name, output, *more):
    return main(["run", "--config", config, "--set", f"records_table={name}", "--set", f"output={output}",
                 "--set", "metrics=[knowledge_protection_rate]", *more])


def table(name):
    rows = spark.table(name).orderBy("position").collect()
    props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
    comment = [r for r in spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect() if r[0] == "Comment"]
    return {"rows": [r.asDict() for r in rows], "properties": props,
            "comment": comment[0][1] if comment else None, "columns": spark.table(name).columns}


out = {}
out["first"] = run("am.records", here / "out1")
out["table_first"] = table("am.records")
out["records_first"] = [r.asDict() for r in spark.read.parquet(str(here / "out1" / "records")).orderBy("position").collect()]
out["second"] = run("am.records", here / "out2", "--set", "seed=5")
out["table_second"] = table("am.records")
out["records_second"] = [r.asDict() for r in spark.read.parquet(str(here / "out2" / "records")).orderBy("position").collect()]
# a table and a view this tool did not write: refused, nothing written, left as they were
spark.sql("CREATE TABLE am.theirs USING parquet AS SELECT id AS position FROM range(7)")
spark.sql("CREATE VIEW am.seen AS SELECT 1 AS position")
out["theirs"] = run("am.theirs", here / "out3")
out["seen"] = run("am.seen", here / "out4")
out["theirs_after"] = spark.table("am.theirs").count()
out["seen_after"] = spark.table("am.seen").count()
out["outputs"] = sorted(p.name for p in here.iterdir() if p.name.startswith("out"))
out["tables"] = sorted(r.tableName for r in spark.sql("SHOW TABLES IN am").collect())
print("CATALOG " + json.dumps(out, default=str))
spark.stop()
