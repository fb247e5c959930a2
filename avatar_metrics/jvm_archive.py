"""Spark's classes for the local driver JVM, archived once from made-up records and mapped at each start.

A local run's JVM loads and verifies some fifteen thousand of Spark's classes before its first
query: about 9 s of a 20,000-record report on this project's machines (docs/performance.md,
"Small runs"). Java 13 and later can write the classes a JVM loaded to an archive when it exits
(``-XX:ArchiveClassesAtExit``, dynamic class data sharing) and map them from there at the next
start (``-XX:SharedArchiveFile``). The JVM checks the archive itself (its own build, the class
path, the flags that matter) and runs without it, silently, when it does not fit.

**The archive never comes from a JVM that read the user's data.** A JVM writes leftovers of its
memory into the archive's padding: an archive written at the end of a real run held a region name
of the records it had read. So the archive is written by a builder process of its own
(``python -m avatar_metrics.archive_builder``): a fresh JVM that evaluates the metrics on a few
hundred records made up by ``synth.make_example`` and nothing else, with no path, configuration
or table of the user's. The first local run of the command line with no archive starts it, in
the background and at low priority, after its own report is written; later runs map what it wrote.

Only sessions the command line creates with a local master and no driver Java options from the user
(``cli.get_session``) read it. The key in the file name (the ``java`` binary, pyspark's version and
jars, with their sizes and times: ``key``) keeps one archive per installation. It lives in the
user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``, then ``avatar-metrics``, mode 700); about
190 MB; ``AVATAR_METRICS_JVM_ARCHIVE=off`` reads and writes none. The builder holds a lock (a file
with its process id) while it works, writes under a name of its own and moves the archive into
place only when its JVM exited cleanly (a half-written archive makes the next JVM die of SIGBUS).
The only files deleted are the tool's own, in that folder: here, the lock, unfinished archive and
scratch folder of a builder that no longer runs; in the builder, its own scratch folder and
unfinished archive, and the archives of other installations once its own is in place.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

OFF = "AVATAR_METRICS_JVM_ARCHIVE"  # "off": no archive is read or written
QUIET = "-Xlog:cds=off,cds+dynamic=off"  # the JVM's notes on what it cannot archive go to stdout
PREFIX = "driver-"
RECORDS = 600  # made-up originals (and as many avatars and holdout records) the builder evaluates

_wanted = False  # this process's session found no archive: start the builder after the run


def folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "avatar-metrics"


def turned_off() -> bool:
    return os.environ.get(OFF, "").strip().lower() in ("off", "0", "false", "no")


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def _stamp(path: str) -> str:
    st = os.stat(path)
    return f"{path} {st.st_size} {st.st_mtime_ns}"


def key() -> str | None:
    """What the archive belongs to: the java binary and pyspark's jars, each with its size and time
    (None: no java found). The JVM maps an archive only for the very jar files it was written with,
    and says nothing when it refuses one: pyspark installed again at the same path, same version,
    has new times, hence a new key and a new archive (a key of paths alone kept the old archive,
    which every run then refused)."""
    import pyspark

    java = _java()
    if java is None:
        return None
    jars = sorted(glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "*.jar")))
    try:
        text = "\n".join([_stamp(java), pyspark.__version__, *map(_stamp, jars)])
    except OSError:  # a jar removed meanwhile: no archive this time
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def archive_path(k: str) -> Path:
    return folder() / f"{PREFIX}{k}.jsa"


def options() -> str | None:
    """The driver's Java options that map the archive, when there is one (None otherwise: turned
    off, no java found, or not built yet, in which case ``start_builder`` starts its builder)."""
    global _wanted
    if turned_off():
        return None
    k = key()
    if k is None:
        return None
    archive = archive_path(k)
    try:
        found = archive.is_file()
    except OSError:  # a cache folder this user may not look into: no archive, none built
        return None
    if found:
        log.info("the Spark driver starts from its class archive %s", archive)
        return f"-XX:SharedArchiveFile={archive} {QUIET}"
    _wanted = True
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder(lock: Path) -> int | None:
    """The process id in a builder's lock file (None: no lock, or unreadable)."""
    try:
        return int(lock.read_text().strip())
    except (OSError, ValueError):
        return None


def _forget_dead(where: Path) -> None:
    """What builders that no longer run left behind: their lock, unfinished archive, scratch folder."""
    for lock in where.glob(f"{PREFIX}*.lock"):
        pid = _holder(lock)
        if pid is not None and not _alive(pid):
            lock.unlink(missing_ok=True)
    for f in list(where.glob(f"{PREFIX}*.*.part")) + list(where.glob("build-*")):
        try:
            pid = int(f.name.split(".")[-2] if f.suffix == ".part" else f.name.split("-")[1])
        except (ValueError, IndexError):
            continue
        if not _alive(pid):
            if f.is_dir():
                shutil.rmtree(f, ignore_errors=True)
            else:
                f.unlink(missing_ok=True)


def start_builder() -> bool:
    """After a local run that found no archive: start the builder in the background (True when
    started). It runs on after this process exits, in a session of its own."""
    global _wanted
    wanted, _wanted = _wanted, False
    if not wanted or turned_off():
        return False
    k = key()
    if k is None:
        return False
    where = folder()
    try:
        if archive_path(k).is_file():
            return False
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        _forget_dead(where)
        if (where / f"{PREFIX}{k}.lock").exists():
            return False  # a builder is at work
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"):
            env.pop(name, None)  # the builder starts its own JVM
        with open(where / "build.log", "wb") as out:
            subprocess.Popen([sys.executable, "-m", "avatar_metrics.archive_builder"], cwd=where, env=env,
                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
    except OSError as exc:  # the report is written: an archive is only an extra
        log.info("no class archive for the Spark driver: %s cannot be written (%s)", where, exc.strerror or exc)
        return False
    log.info("the next local runs will start faster: a class archive of Spark's driver is being built in the "
             "background from %d made-up records (once per installation, about 40 s of one core, %s; "
             "%s=off turns it off)", RECORDS, where, OFF)
    return True
