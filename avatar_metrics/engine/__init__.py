"""Spark orchestration: everything here takes a SparkSession/DataFrames and
uses only the DataFrame API (no sparkContext, no RDDs), so it runs under
Spark Connect too."""
