import os
import subprocess
import sys

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# the command line's runs in the suite build no class archive in the user's cache folder
# (test_jvm_archive builds one in a folder of its own)
os.environ["AVATAR_METRICS_JVM_ARCHIVE"] = "off"


OWN: list = []  # the session the suite started, if it did


def pytest_configure(config):
    """From a fresh clone numba's cache is empty: compile the kernels in a process of their own while
    the first tests (aggregates, bad inputs: no kernel) run, so that the Spark workers load them
    rather than both compile them at once (the cache is beside the sources: ``kernels/jit.py``)."""
    from cluster import WARM_KERNELS

    config._am_warm = subprocess.Popen([sys.executable, "-c", WARM_KERNELS], cwd=ROOT,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # the class archive's run and its builder work in the background while the first modules run
    config._am_archive = None
    if _selected(config, "test_jvm_archive.py"):
        import archive_run

        config._am_archive = archive_run.start()


def _selected(config, module: str) -> bool:
    """Whether the command line names ``module``, or a folder holding it (or nothing: the suite)."""
    args = [Path(a.split("::")[0]).resolve() for a in config.args] or [ROOT]
    target = ROOT / "tests" / module
    return any(a == target or a in target.parents for a in args)


def pytest_unconfigure(config):
    warm = getattr(config, "_am_warm", None)
    if warm is not None and warm.poll() is None:
        warm.wait(timeout=600)
    run = getattr(config, "_am_archive", None)
    if run is not None:
        import archive_run

        archive_run.stop(run)

# Tables of tens or thousands of records: compiling code for each query (whole-stage codegen) and
# re-planning each stage (adaptive execution) cost more than the work (the suite took 876 s with
# them, 653 s without); the results are the same either way. The suite's session, and the cluster
# and Connect runs, which stand for their path, not for Spark's settings; the end-to-end run of
# the command line in a fresh process keeps Spark's defaults (the Databricks entry point runs on
# the session it is given: the suite's). Two shuffle partitions
# (and a default parallelism of two): one wave of tasks on the two cores these runs have, not
# two waves of tiny ones; the tests that need more partitions make their tables so
SMALL_TABLES = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="session")
def spark():
    """A local session for the suite; an active one (Databricks, say) is reused."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    builder = SparkSession.builder
    for k, v in SMALL_TABLES.items():
        builder = builder.config(k, v)
    session = (
        builder.master("local[2]")
        .appName("avatar-metrics-tests")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.log.level", "ERROR")
        .config("spark.sql.debug.maxToStringFields", "200")
        # one session runs the whole suite: keep what it remembers of past queries small (each
        # one's plan text is kept, and the searches' plans are large), and give it room
        .config("spark.driver.memory", "2g")
        .config("spark.sql.ui.retainedExecutions", "20")
        .config("spark.ui.retainedJobs", "50")
        .config("spark.ui.retainedStages", "50")
        .config("spark.sql.maxPlanStringLength", "100000")
        .getOrCreate()
    )
    OWN.append(session)
    yield session
    OWN.clear()
    session.stop()


@pytest.fixture(scope="module", autouse=True)
def _release_caches():
    """After each test module, what a test left cached (a report's records, say) goes: one session runs
    the whole suite, and cached blocks held by finished tests only slow the later ones."""
    yield
    if OWN:  # never a session the suite was given (a notebook's)
        OWN[0].catalog.clearCache()


def to_spark(spark, pdf, partitions=None):
    df = spark.createDataFrame(pdf)
    if partitions:
        # local data in that many partitions, in input order (a repartition would shuffle the rows,
        # which positional alignment refuses: spec, "Inputs")
        df = spark.createDataFrame(spark.sparkContext.parallelize(df.collect(), partitions), df.schema)
    return df


from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def write_example_config(tmp_path: Path, **extra) -> Path:
    """A job configuration on the bundled example data, with absolute paths."""
    import yaml

    data = ROOT / "data" / "example"
    cfg = {
        "originals": {"path": str(data / "originals.parquet"), "format": "parquet"},
        "avatars": {"path": str(data / "avatars.parquet"), "format": "parquet"},
        "holdout": {"path": str(data / "holdout.parquet"), "format": "parquet"},
        "known_variables": ["age", "sex", "region", "children"],
        "seed": 3,
        "output": str(tmp_path / "out"),
        # a run submitted to the test cluster gets no default from the command line
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        **extra,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def comparable(report: dict) -> dict:
    """A report without its timings: what must be equal between two runs."""
    report = dict(report)
    report.pop("timings")
    return report


@pytest.fixture(scope="session")
def local_report(example_report):
    """The example's report without timings: what other runs must reproduce."""
    return comparable(example_report)


@pytest.fixture(scope="session")
def example_report(spark, tmp_path_factory):
    """The example's report from the test session (classic Spark, local), as a dict."""
    from avatar_metrics import evaluate
    from avatar_metrics.configure import load_config
    from avatar_metrics.io import read_table

    cfg = load_config(write_example_config(tmp_path_factory.mktemp("local")))
    tables = [read_table(spark, t, r) for t, r in ((cfg.originals, "originals"), (cfg.avatars, "avatars"), (cfg.holdout, "holdout"))]
    rep = evaluate(spark, *tables, cfg)
    if rep.records is not None:
        rep.records.unpersist()
    return rep.to_dict()
