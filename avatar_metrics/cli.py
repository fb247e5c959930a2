"""Command line: ``avatar-metrics run --config FILE [--set k=v ...] [--fail-on-target]``.

Parses arguments, gets a Spark session, calls the library, writes the outputs
and turns the outcome into an exit code:
0 computed, 2 bad configuration or input, 3 a computed metric missed its
target with ``--fail-on-target``, 1 anything else.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

from . import jvm_archive
from .errors import AvatarMetricsError, describe

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_TARGET_MISSED = 0, 1, 2, 3
MIN_SPLIT = 500  # = holdout.MIN_RECORDS, kept here so that --help needs no Spark import

log = logging.getLogger("avatar_metrics")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avatar-metrics", description="Privacy metrics of synthetic data (avatars) on Spark.")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="compute the metrics and write report.json")
    run.add_argument("--config", default=None, help="YAML configuration file (or give every key with --set)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key (dotted, YAML value)")
    run.add_argument("--fail-on-target", action="store_true", help="exit 3 when a computed metric misses its target")
    run.add_argument("--debug", action="store_true", help="print tracebacks of unexpected errors (may show data)")
    split = sub.add_parser("split", help="set a holdout aside before anonymization")
    src = split.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", help="the original table's path")
    src.add_argument("--table", help="the original table's metastore name")
    split.add_argument("--format", default="parquet", choices=["parquet", "csv", "delta"], help="format of --input")
    split.add_argument("--working", required=True, help="where to write the working half (parquet)")
    split.add_argument("--holdout", required=True, help="where to write the holdout half (parquet)")
    split.add_argument("--seed", type=int, default=0)
    split.add_argument("--row-key", default=None, help="unique key column (default: input order)")
    split.add_argument("--force", action="store_true", help=f"split even below {MIN_SPLIT} records")
    split.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    split.add_argument("--master", default="local[*]", help="Spark master when not under spark-submit")
    split.add_argument("--debug", action="store_true", help="print tracebacks of unexpected errors (may show data)")
    return p


# Inputs this small (all of them files on this machine) make a short run, whose driver JVM
# compiles with C1 only: a 20,000-record report then takes about 39 s instead of 46 to 52 s
# (the C2 compiler's work never pays back in so short a run). Past this size C2's faster code
# wins: the input checks of 1,000,000 census-shaped records take 25.5 s with C1 only, 9.5 s
# with both (bench/steps.py). README, "Small runs".
SMALL_INPUT_BYTES = 4 * 2**20
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def local_input_bytes(specs) -> int | None:
    """Total size of the files of these tables when each is a path on this machine, else None
    (a metastore table, a URL, a path that matches nothing)."""
    import glob

    from .outputs import local_pattern

    total = 0
    for spec in specs:
        path = local_pattern(spec.path) if spec.path else None
        if path is None:
            return None
        found = glob.glob(path)
        if not found:
            return None
        for f in found:
            if os.path.isdir(f):
                for root, _, files in os.walk(f):
                    total += sum(os.path.getsize(os.path.join(root, x)) for x in files)
            else:
                total += os.path.getsize(f)
    return total


def _java_options_given(cfg) -> bool:
    """Whether the user gives the driver JVM's options anywhere Spark would read them: the
    configuration's ``spark.conf``, ``PYSPARK_SUBMIT_ARGS``, or a ``spark-defaults.conf``
    (which the quick JIT's setting would override)."""
    if "spark.driver.extraJavaOptions" in cfg.spark_conf:
        return True
    submit = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    if "java-options" in submit or "extraJavaOptions" in submit:
        return True
    folders = [os.environ.get("SPARK_CONF_DIR")]
    if os.environ.get("SPARK_HOME"):
        folders.append(os.path.join(os.environ["SPARK_HOME"], "conf"))
    for folder in filter(None, folders):
        try:
            with open(os.path.join(folder, "spark-defaults.conf"), encoding="utf-8", errors="replace") as f:
                if "spark.driver.extraJavaOptions" in f.read():
                    return True
        except OSError:
            continue
    return False


# Small inputs on this machine also run without adaptive query execution, unless ``spark.conf``
# sets it or sets more shuffle partitions than ``ADAPTIVE_MOST_PARTITIONS`` per core: adaptive
# execution submits each shuffle stage of a query as a Spark job of its own and plans the rest
# again after it, which on tables this small costs more than it saves (the 20,000-record bench
# run: 77 Spark jobs instead of 158, 0.98 of the wall time). Its coalescing of small partitions is
# what a run with Spark's 200 shuffle partitions would miss: hence the bound.
ADAPTIVE = "spark.sql.adaptive.enabled"
ADAPTIVE_MOST_PARTITIONS = 8


def _without_adaptive(conf: dict, cores: int) -> bool:
    """Whether a small local run turns adaptive query execution off (``ADAPTIVE``)."""
    if ADAPTIVE in conf:
        return False
    try:
        partitions = int(conf.get("spark.sql.shuffle.partitions", 0))
    except (TypeError, ValueError):  # "auto", say: Spark's to choose, adaptively
        return False
    if partitions > ADAPTIVE_MOST_PARTITIONS * cores:
        return False
    log.info("small inputs: adaptive query execution off (each query one Spark job; spark.sql.adaptive.enabled "
             "in spark.conf decides otherwise)")
    return True


# Spark keeps each query's plan as text (the SQL tab, and each event of the event log). A
# search's plans are deep, each pass built on the blocks before it: uncapped, a census-shaped
# run of 10,000,000 records had its 4 GB driver run out of memory writing one to the event log,
# after every step was done. A session built here caps them, unless ``spark.conf`` sets the key.
PLAN_STRING_LENGTH = "10000"


def get_session(cfg, debug: bool = False, inputs=()):
    """The active session, spark-submit's, or an embedded local one.

    Returns (session, created_here). A session built here keeps Spark's own
    console logging at FATAL unless ``--debug``: Spark logs malformed records
    and failed tasks with their data. A local one serves no Spark UI unless
    ``spark.conf`` asks for it. With a local master and ``inputs`` (the
    TableSpecs to be read) of at most SMALL_INPUT_BYTES on this machine,
    adaptive query execution is off (``_without_adaptive``) and the
    driver JVM compiles with C1 only (QUICK_JIT); with any local master it maps
    Spark's classes from an archive built from made-up records
    (``jvm_archive``; ``main`` starts its builder after a run that found none).
    Neither when the user sets the driver's Java options
    (``_java_options_given``). Plan strings are capped
    (``PLAN_STRING_LENGTH``) unless the configuration sets the key.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    builder = SparkSession.builder.appName("avatar-metrics")
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # the driver of spark-submit
    if not submitted:
        # workers must start this interpreter, which has the package
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.master(cfg.spark_master).config("spark.ui.showConsoleProgress", "false")
        cores = local_cores(cfg.spark_master)
        if cores and "spark.sql.shuffle.partitions" not in cfg.spark_conf:
            # Spark's 200 shuffle partitions make every aggregation of a small run 200 tasks
            builder = builder.config("spark.sql.shuffle.partitions", str(max(4, 2 * cores)))
        size = local_input_bytes(inputs) if cores and inputs else None
        small = size is not None and size <= SMALL_INPUT_BYTES
        if small and _without_adaptive(cfg.spark_conf, cores):
            builder = builder.config(ADAPTIVE, "false")
        java = []
        if cores and not _java_options_given(cfg):
            if small:
                log.info("small inputs (%.1f MB): the Spark driver compiles with C1 only, which starts faster",
                         size / 2**20)
                java.append(QUICK_JIT)
            java.append(jvm_archive.options())
        if any(java):
            builder = builder.config("spark.driver.extraJavaOptions", " ".join(filter(None, java)))
    if "spark.sql.maxPlanStringLength" not in cfg.spark_conf:
        log.info("Spark keeps query plans as text up to %s characters (spark.sql.maxPlanStringLength)",
                 f"{int(PLAN_STRING_LENGTH):,}")
        builder = builder.config("spark.sql.maxPlanStringLength", PLAN_STRING_LENGTH)
    if not submitted and "spark.ui.enabled" not in cfg.spark_conf:
        # the UI serves every query's plan and every task's error, on all interfaces: asked for, or off
        # (under spark-submit, its --conf and spark-defaults.conf decide, as for every setting of the cluster)
        builder = builder.config("spark.ui.enabled", "false")
    for k, v in cfg.spark_conf.items():
        if k == "spark.log.level" and not debug:
            log.warning("spark.conf sets spark.log.level: ignored without --debug (Spark's own messages "
                        "may quote records); Spark's console logging stays at FATAL")
            continue
        builder = builder.config(k, v)
    # after the user's settings: without --debug, Spark's console logging is off whatever they say
    builder = builder.config("spark.log.level", "WARN" if debug else "FATAL")
    return builder.getOrCreate(), not submitted


def local_cores(master: str) -> int | None:
    """The cores of a ``local``, ``local[N]`` or ``local[*]`` master (None for a cluster)."""
    import re

    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if not m:
        return None
    if m.group(1) is None:
        return 1
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is now (notebooks and test captures swap it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _setup_logging() -> None:
    root = logging.getLogger("avatar_metrics")
    if not root.handlers:
        h = _StderrHandler()
        h.setFormatter(logging.Formatter("%(asctime)s avatar-metrics %(levelname)s %(message)s", "%H:%M:%S"))
        root.addHandler(h)
    root.setLevel(logging.INFO)
    root.propagate = False


def cmd_run(args) -> int:
    from .configure import load_config
    from .io import read_table
    from .outputs import check_destination, destination, locked

    # everything that can be checked without Spark, before any file is touched
    cfg = load_config(args.config, args.set)
    if cfg.mlflow is not None:
        from .tracking import require

        require()
    dest = destination(cfg.output, "output")
    sources = [(role, spec.path) for role, spec in cfg.tables() if spec.path]
    check_destination(dest, sources, "output")

    with locked(dest, "output"):
        spark, created = get_session(cfg, args.debug, [spec for _, spec in cfg.tables()])
        try:
            from .api import evaluate

            tables = {role: read_table(spark, spec, role) for role, spec in cfg.tables()}
            report = evaluate(spark, tables["originals"], tables["avatars"], tables.get("holdout"), cfg)
            report.sources = sources + report.sources
            report.write(dest)
            if report.records is not None:
                report.records.unpersist()
        finally:
            if created:
                spark.stop()
    print(report.summary())
    print(f"report: {dest / 'report.json'} (and report.html{', records/' if report.records is not None else ''})")
    if cfg.records_table is not None:
        print(f"records table: {cfg.records_table}")
    if report.mlflow_run is not None:
        print(f"mlflow run: {report.mlflow_run}")
    missed = report.missed_targets()
    if args.fail_on_target and missed:
        log.warning("targets missed: %s", ", ".join(missed))
        return EXIT_TARGET_MISSED
    return EXIT_OK


def cmd_split(args) -> int:
    from .config import TableSpec
    from .configure import as_config
    from .errors import InputError
    from .holdout import split_holdout
    from .io import input_files, read_table
    from .outputs import check_destination, destination, expand, locked, publish

    if args.input and "\x00" in args.input:
        raise InputError("--input holds a NUL character, which no file system takes: check the path")
    spec = TableSpec(table=args.table) if args.table else TableSpec(path=expand(args.input), format=args.format)
    sources = [("originals", spec.path)] if spec.path else []
    names = ("--working", "--holdout")
    outputs = [destination(args.working, names[0]), destination(args.holdout, names[1])]
    if outputs[0] == outputs[1] or outputs[0] in outputs[1].parents or outputs[1] in outputs[0].parents:
        raise InputError("--working and --holdout must be two separate folders, neither inside the other")
    for what, dest in zip(names, outputs):
        if dest.exists() and not args.overwrite:
            raise InputError(f"{what} {dest} exists already: remove it or pass --overwrite")
        check_destination(dest, sources, what)
    cfg = as_config({"spark": {"master": args.master}})
    with locked(outputs[0], names[0]), locked(outputs[1], names[1]):
        spark, created = get_session(cfg, args.debug, [spec])
        try:
            df = read_table(spark, spec, "originals")
            for what, dest in zip(names, outputs):
                check_destination(dest, [("originals", f) for f in input_files(df)], what)
            working, holdout, n = split_holdout(df, args.seed, args.row_key)
            if n < MIN_SPLIT and not args.force:
                print(
                    f"avatar-metrics: not split: {n} records, fewer than {MIN_SPLIT}: a holdout half this small is "
                    "no useful reference, so the metrics will use the approximate holdout (split at metric time). "
                    "Pass --force to split anyway.",
                    file=sys.stderr,
                )
                return EXIT_BAD_INPUT
            for half, what, dest in zip((working, holdout), names, outputs):
                publish(dest, _parquet_writer(half), what)
            n_work = (n + 1) // 2
            print(f"working half: {n_work} records -> {outputs[0]}")
            print(f"holdout half: {n - n_work} records -> {outputs[1]}")
        finally:
            if created:
                spark.stop()
    return EXIT_OK


def _parquet_writer(df):
    """A ``publish`` builder: the table as a Parquet folder; returns what it holds."""

    def build(stage):
        # the staging folder exists (empty, with the destination's permissions): append keeps it,
        # where Spark's default mode refuses an existing path and overwrite deletes and remakes it
        df.write.mode("append").parquet(str(stage))
        return os.listdir(stage)

    return build


def main(argv: list[str] | None = None) -> int:
    _setup_logging()
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "split":
            return cmd_split(args)
        return EXIT_ERROR  # pragma: no cover - argparse refuses other commands
    except AvatarMetricsError as exc:
        print(f"avatar-metrics: error: {exc}", file=sys.stderr)
        if getattr(args, "debug", False) and exc.__context__ is not None:
            # the cause kept out of the message (Spark's text may quote records): shown on request only
            traceback.print_exception(exc.__context__)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("avatar-metrics: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001
        print(f"avatar-metrics: unexpected error: {describe(exc)}", file=sys.stderr)
        if getattr(args, "debug", False):
            traceback.print_exc()
        else:
            print("avatar-metrics: rerun with --debug for the traceback (it may show data values)", file=sys.stderr)
        return EXIT_ERROR
    finally:
        # after the summary and on every exit: a local run that found no class archive has one built
        # in the background, from made-up records (never from this run's JVM, which saw the data)
        jvm_archive.start_builder()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def main_exit() -> None:
    """Console-script entry point: exit with ``main``'s code."""
    sys.exit(main())
