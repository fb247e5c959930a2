"""The class archive's builder (``jvm_archive``): ``python -m avatar_metrics.archive_builder``.

A process of its own, started in the background by the command line's first local run with no
archive: a fresh local JVM evaluates every metric on records made up by ``synth.make_example``
(read from files, as a run reads its inputs), writes the classes it loaded to the archive as it
exits, and the archive is moved into place when that JVM exited cleanly. It reads no table,
input path or configuration file of the user's: the archive holds leftovers of this JVM's memory,
which saw made-up records only.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .jvm_archive import PREFIX, QUIET, RECORDS, archive_path, folder, key, turned_off

EXIT_WAIT = 300  # seconds the builder waits for its JVM to write the archive


def build() -> int:
    """The builder: evaluate the metrics on made-up records in a fresh local JVM that writes its
    classes to the archive as it exits. Returns 0 when the archive is in place."""
    k = key()
    if k is None or turned_off():
        return 1
    where = folder()
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = where / f"{PREFIX}{k}.lock"
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return 1
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    scratch = Path(tempfile.mkdtemp(prefix=f"build-{os.getpid()}-", dir=where))
    part = where / f"{PREFIX}{k}.{os.getpid()}.part"
    final = archive_path(k)
    try:
        t0 = time.perf_counter()
        rc = _run_on_made_up_records(scratch, part)
        if rc == 0 and part.is_file() and part.stat().st_size > 0:
            os.replace(part, final)
            for old in where.glob(f"{PREFIX}*.jsa"):
                if old != final:
                    old.unlink(missing_ok=True)  # another installation's (an older pyspark or java)
            print(f"class archive {final}: {final.stat().st_size / 2**20:.0f} MB in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
            return 0
        print(f"no class archive: the JVM exited with code {rc}", flush=True)
        return 1
    finally:
        part.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
        lock.unlink(missing_ok=True)


def _run_on_made_up_records(scratch: Path, part: Path) -> int | None:
    """Every metric on made-up tables, read from files as a run reads them, in a JVM that
    archives its classes at exit. Returns the JVM's exit code."""
    from pyspark import SparkContext

    from .api import evaluate
    from .cli import QUICK_JIT, get_session
    from .configure import build_config
    from .io import read_table
    from .synth import make_example

    originals, avatars, holdout = make_example(RECORDS, RECORDS)
    tables = {"originals": originals, "avatars": avatars, "holdout": holdout}
    for role, df in tables.items():
        df.to_parquet(scratch / f"{role}.parquet")
    originals.to_csv(scratch / "originals.csv", index=False)
    cfg = build_config({
        "originals": {"path": str(scratch / "originals.csv"), "format": "csv"},
        "avatars": {"path": str(scratch / "avatars.parquet"), "format": "parquet"},
        "holdout": {"path": str(scratch / "holdout.parquet"), "format": "parquet"},
        "known_variables": list(originals.columns[:4]),
        "output": str(scratch / "out"),
        "spark": {"master": "local[2]",
                  "conf": {"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={part} {QUIET} {QUICK_JIT}"}},
    })
    spark, _ = get_session(cfg)
    try:
        frames = {role: read_table(spark, spec, role) for role, spec in cfg.tables()}
        report = evaluate(spark, frames["originals"], frames["avatars"], frames.get("holdout"), cfg)
        report.write(scratch / "out")
        if report.records is not None:
            report.records.unpersist()
    finally:
        spark.stop()
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None or proc.stdin is None:
        return None
    proc.stdin.close()  # Spark's gateway exits at the end of its input, writing the archive
    try:
        return proc.wait(timeout=EXIT_WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        return None


if __name__ == "__main__":  # the builder, started by start_builder
    os.nice(10)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("avatar_metrics").setLevel(logging.INFO)
    sys.exit(build())
