"""The local driver JVM's classes, saved once and mapped at each later start (class data sharing).

A local run's JVM loads and verifies some fifteen thousand of Spark's classes before its first
query: about 6 s of a 20,000-record report on this project's machines (docs/performance.md,
"Small runs"). Java 13 and later can write the classes a JVM loaded to an archive when it exits
(``-XX:ArchiveClassesAtExit``) and map them from there at the next start
(``-XX:SharedArchiveFile``), skipping that work. The JVM checks the archive itself (its own
build, the class path, the flags that matter) and runs without it, silently, when it does not
fit; the key in the file name (the ``java`` binary, pyspark's version and jars) keeps one archive
per installation, so that an upgrade makes a new one rather than an unused one.

Only for a local session the command line starts itself, when the configuration gives the driver
no Java options of its own (``cli.get_session``). The first such run writes the archive as its
JVM exits (about 160 MB; 10 to 15 s after the report, once), under a name of its own (the
process id), and moves it into place only when the JVM exited cleanly, so that a run never maps
a half-written archive. It lives in the user's cache folder (``$XDG_CACHE_HOME`` or
``~/.cache``, then ``avatar-metrics``; ``AVATAR_METRICS_JVM_ARCHIVE=off`` turns it off). The
only files this module deletes are its own unfinished archives: the one of this process when its
JVM failed, and those of processes that no longer run.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import shutil
import time
from pathlib import Path

log = logging.getLogger(__name__)

OFF = "AVATAR_METRICS_JVM_ARCHIVE"  # "off": no archive is read or written
QUIET = "-Xlog:cds=off,cds+dynamic=off"  # the JVM's notes on what it cannot archive go to stdout
PREFIX = "driver-"
EXIT_WAIT = 300  # seconds the command line waits for its JVM to write the archive

_pending: Path | None = None  # this process's archive being written, until finish()


def folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "avatar-metrics"


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def key() -> str | None:
    """What the archive belongs to: the java binary and pyspark's jars (None: no java found)."""
    import pyspark

    java = _java()
    if java is None:
        return None
    jars = sorted(glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "*.jar")))
    st = os.stat(java)
    text = "\n".join([java, str(st.st_size), str(int(st.st_mtime)), pyspark.__version__, *jars])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def options() -> str | None:
    """The driver's Java options for this run: map the archive, or write it at exit (None:
    neither: turned off, no java found, or no cache folder to write in)."""
    global _pending
    if os.environ.get(OFF, "").lower() in ("off", "0", "false", "no"):
        return None
    k = key()
    if k is None:
        return None
    where = folder()
    archive = where / f"{PREFIX}{k}.jsa"
    if archive.is_file():
        log.info("the driver JVM starts from its class archive %s", archive)
        return f"-XX:SharedArchiveFile={archive} {QUIET}"
    try:
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        _forget_dead(where)
    except OSError as exc:
        log.info("no JVM class archive: %s cannot be written (%s)", where, exc.strerror)
        return None
    _pending = where / f"{PREFIX}{k}.{os.getpid()}.part"
    return f"-XX:ArchiveClassesAtExit={_pending} {QUIET}"


def _forget_dead(where: Path) -> None:
    """Unfinished archives of processes that no longer run (a run killed while its JVM wrote)."""
    for f in where.glob(f"{PREFIX}*.*.part"):
        try:
            pid = int(f.suffixes[-2].lstrip("."))
            os.kill(pid, 0)
        except ProcessLookupError:
            f.unlink(missing_ok=True)
        except (ValueError, IndexError, PermissionError):
            continue


def finish() -> None:
    """After the session stopped: end its JVM (which writes the archive as it exits) and move the
    archive into place when the JVM exited cleanly. Nothing to do unless ``options`` asked for one."""
    global _pending
    part, _pending = _pending, None
    if part is None:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None or proc.stdin is None:
        return
    t0 = time.perf_counter()
    log.info("the driver JVM saves its classes for faster starts (once per installation)")
    try:
        proc.stdin.close()  # Spark's gateway exits at the end of its input
        rc = proc.wait(timeout=EXIT_WAIT)
    except Exception:  # noqa: BLE001 - the report is written: an archive is only an extra
        rc = None
    # a later session in this process starts a JVM of its own
    SparkContext._gateway = None
    SparkContext._jvm = None
    # (a JVM that cannot write the whole archive removes it and exits with an error: a part
    # cut short is never moved into place, where the next JVM would map it and crash)
    if rc == 0 and part.is_file() and part.stat().st_size > 0:
        final = part.with_name(part.name.split(".")[0] + ".jsa")
        os.replace(part, final)
        log.info("JVM class archive: %s (%.0f MB, %.1f s)", final, final.stat().st_size / 2**20,
                 time.perf_counter() - t0)
    else:
        part.unlink(missing_ok=True)
