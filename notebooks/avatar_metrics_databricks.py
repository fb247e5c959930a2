# Databricks notebook source
# MAGIC %md
# MAGIC # avatar-metrics on Databricks
# MAGIC Privacy metrics of synthetic data (avatars) on tables of the metastore.
# MAGIC Build the wheel with `pip wheel --no-deps -w dist .`, upload it to a volume
# MAGIC or the workspace, and install it on the cluster (or with `%pip` below).

# COMMAND ----------

# MAGIC %pip install /Volumes/main/default/wheels/avatar_metrics-0.1.0-py3-none-any.whl

# COMMAND ----------

dbutils.widgets.text("originals", "main.health.patients")  # noqa: F821 - Databricks globals
dbutils.widgets.text("avatars", "main.health.patients_avatars")  # noqa: F821
dbutils.widgets.text("holdout", "")  # noqa: F821
dbutils.widgets.text("known_variables", "age,sex,zip")  # noqa: F821
dbutils.widgets.text("output", "")  # noqa: F821 - a folder such as /dbfs/avatar-metrics/run-1 (empty: none)
dbutils.widgets.text("mlflow_experiment", "")  # noqa: F821 - /Shared/avatar-metrics, say (empty: not logged)

# COMMAND ----------

from avatar_metrics import evaluate

originals = spark.read.table(dbutils.widgets.get("originals"))  # noqa: F821
avatars = spark.read.table(dbutils.widgets.get("avatars"))  # noqa: F821
holdout_name = dbutils.widgets.get("holdout")  # noqa: F821
holdout = spark.read.table(holdout_name) if holdout_name else None  # noqa: F821

report = evaluate(
    spark,  # noqa: F821
    originals,
    avatars,
    holdout,
    config={
        "known_variables": [v.strip() for v in dbutils.widgets.get("known_variables").split(",") if v.strip()],  # noqa: F821
        "seed": 0,
    },
)
print(report.summary())

# COMMAND ----------

# The page of the command line's report.html, in the notebook
displayHTML(report.html())  # noqa: F821

# COMMAND ----------

# report.json, report.html and records/ where the widget says (the same safety
# rules as the command line: a new or empty folder, or an earlier report's)
output = dbutils.widgets.get("output")  # noqa: F821
if output:
    print("written to", report.write(output))

# COMMAND ----------

# The evaluation in MLflow (values, intervals, configuration, report.json and report.html; never
# the records): into this notebook's active run if it has one, else a new run in the experiment
experiment = dbutils.widgets.get("mlflow_experiment")  # noqa: F821
if experiment:
    print("mlflow run", report.log_mlflow(experiment=experiment))

# COMMAND ----------

# Per-original results (no variable values): who is exposed, not who they are
display(report.records)  # noqa: F821
