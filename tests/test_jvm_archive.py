"""The driver JVM's class archive (``jvm_archive``): where it goes, when it is read, written and
moved into place, and what of it is ever deleted. No Spark: the JVM is a stand-in process."""

import os
import subprocess
import sys

import pytest
from pyspark import SparkContext

from avatar_metrics import jvm_archive


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(jvm_archive.OFF, raising=False)
    monkeypatch.setattr(jvm_archive, "_pending", None)
    return tmp_path / "avatar-metrics"


class StandIn:
    """A gateway whose 'JVM' writes ``data`` to the archive it was asked for when its input ends."""

    def __init__(self, part, data: bytes, code: int):
        script = (f"import sys; sys.stdin.read(); open({str(part)!r}, 'wb').write({data!r}); "
                  f"sys.exit({code})")
        self.proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


def test_turned_off_reads_and_writes_nothing(cache, monkeypatch):
    monkeypatch.setenv(jvm_archive.OFF, "off")
    assert jvm_archive.options() is None
    assert not cache.exists() and jvm_archive._pending is None


def test_first_run_writes_under_its_own_name_then_moves_it_into_place(cache, monkeypatch):
    opts = jvm_archive.options()
    part = jvm_archive._pending
    assert opts == f"-XX:ArchiveClassesAtExit={part} {jvm_archive.QUIET}"
    assert part.parent == cache and part.name.endswith(f".{os.getpid()}.part")
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    monkeypatch.setattr(SparkContext, "_gateway", StandIn(part, b"archive", 0))
    monkeypatch.setattr(SparkContext, "_jvm", object())
    jvm_archive.finish()
    (final,) = cache.iterdir()
    assert final.name == f"{jvm_archive.PREFIX}{jvm_archive.key()}.jsa" and final.read_bytes() == b"archive"
    # a later session in the process starts a JVM of its own; the next run maps the archive
    assert SparkContext._gateway is None and SparkContext._jvm is None
    assert jvm_archive.options() == f"-XX:SharedArchiveFile={final} {jvm_archive.QUIET}"
    assert jvm_archive._pending is None


def test_a_jvm_that_failed_leaves_no_archive(cache, monkeypatch):
    jvm_archive.options()
    part = jvm_archive._pending
    monkeypatch.setattr(SparkContext, "_gateway", StandIn(part, b"cut sh", 1))
    monkeypatch.setattr(SparkContext, "_jvm", object())
    jvm_archive.finish()
    assert list(cache.iterdir()) == []
    jvm_archive.finish()  # nothing pending: nothing done


def test_only_unfinished_archives_of_dead_processes_are_deleted(cache):
    cache.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = cache / f"{jvm_archive.PREFIX}abc.{int(done.stdout)}.part"
    alive = cache / f"{jvm_archive.PREFIX}abc.{os.getpid()}.part"
    other = [cache / f"{jvm_archive.PREFIX}abc.jsa", cache / "notes.part", cache / f"{jvm_archive.PREFIX}x.y.part"]
    for f in (dead, alive, *other):
        f.write_bytes(b"x")
    jvm_archive.options()
    assert not dead.exists() and alive.exists() and all(f.exists() for f in other)
