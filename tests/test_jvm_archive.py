"""The local driver JVM's class archive (``jvm_archive``): built by a process of its own from made-up
records, never from a JVM that read the user's data; read by later runs; what of it is ever deleted."""

import os
import subprocess
import sys
import time

import pytest

import archive_run
from avatar_metrics import jvm_archive


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(jvm_archive.OFF, raising=False)
    monkeypatch.setattr(jvm_archive, "_wanted", False)
    return tmp_path / "cache" / "avatar-metrics"


def test_turned_off_reads_and_writes_nothing(cache, monkeypatch):
    monkeypatch.setenv(jvm_archive.OFF, "off")
    assert jvm_archive.options() is None and jvm_archive._wanted is False
    jvm_archive._wanted = True
    assert jvm_archive.start_builder() is False
    assert not cache.exists()


def test_an_archive_in_place_is_mapped(cache):
    cache.mkdir(parents=True)
    archive = cache / f"{jvm_archive.PREFIX}{jvm_archive.key()}.jsa"
    archive.write_bytes(b"x")
    assert jvm_archive.options() == f"-XX:SharedArchiveFile={archive} {jvm_archive.QUIET}"
    assert jvm_archive._wanted is False  # nothing to build


def test_pyspark_installed_again_is_another_key(tmp_path, monkeypatch):
    """The JVM refuses, silently, an archive written with other jar files: the same pyspark installed
    again at the same path (new file times) must get an archive of its own, not keep the refused one."""
    import pyspark

    jars = tmp_path / "pyspark" / "jars"
    jars.mkdir(parents=True)
    for name in ("a.jar", "b.jar"):
        (jars / name).write_bytes(b"jar")
    monkeypatch.setattr(pyspark, "__file__", str(tmp_path / "pyspark" / "__init__.py"))
    first = jvm_archive.key()
    assert first is not None and jvm_archive.key() == first
    os.utime(jars / "b.jar", ns=(1, 1))
    touched = jvm_archive.key()
    (jars / "b.jar").write_bytes(b"jar, longer")
    os.utime(jars / "b.jar", ns=(1, 1))
    assert len({first, touched, jvm_archive.key()}) == 3


def test_a_cache_folder_that_cannot_be_made_is_no_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.delenv(jvm_archive.OFF, raising=False)
    monkeypatch.setattr(jvm_archive, "_wanted", False)
    assert jvm_archive.options() is None
    assert jvm_archive.start_builder() is False  # (the run's report is written: no exception, no exit code)
    assert blocker.read_text() == "x"


def test_no_second_builder_while_one_works(cache):
    assert jvm_archive.options() is None and jvm_archive._wanted is True
    cache.mkdir(parents=True)
    (cache / f"{jvm_archive.PREFIX}{jvm_archive.key()}.lock").write_text(str(os.getpid()))  # alive
    assert jvm_archive.start_builder() is False
    assert jvm_archive._wanted is False and sorted(p.name for p in cache.iterdir())[0].endswith(".lock")


def test_only_what_dead_builders_left_is_deleted(cache):
    cache.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, alive = int(done.stdout), os.getpid()
    gone = [cache / f"{jvm_archive.PREFIX}abc.{dead}.part", cache / f"{jvm_archive.PREFIX}abc.lock",
            cache / f"build-{dead}-x1"]
    kept = [cache / f"{jvm_archive.PREFIX}abc.{alive}.part", cache / f"{jvm_archive.PREFIX}def.lock",
            cache / f"build-{alive}-x2", cache / f"{jvm_archive.PREFIX}abc.jsa", cache / "notes.part",
            cache / f"{jvm_archive.PREFIX}x.y.part", cache / "build-notes"]
    gone[1].write_text(str(dead))
    kept[1].write_text(str(alive))
    gone[2].mkdir()
    kept[2].mkdir()
    for f in gone[:1] + kept[:1] + kept[3:]:
        f.write_bytes(b"x")
    jvm_archive._forget_dead(cache)
    assert not any(f.exists() for f in gone) and all(f.exists() for f in kept)


def test_the_archive_comes_from_made_up_records_and_maps(request, monkeypatch):
    """A run of the command line on records with values found nowhere else (``archive_run.PLANTED``)
    finds no archive, starts the builder and returns; the builder's JVM writes an archive that holds
    none of the planted values (an archive written by the run's own JVM held region names of its
    data), cleans up after itself, and a JVM of this installation starts from the archive
    (``-Xshare:on``: it would refuse to start without it). The run starts with the suite
    (``conftest.pytest_configure``), so that the builder works while other modules run."""
    run = getattr(request.config, "_am_archive", None)
    if run is None:
        run = archive_run.start()
        request.addfinalizer(lambda: archive_run.stop(run))
    rc, stderr = run.result()
    assert rc == 0, stderr[-3000:]
    assert "class archive of Spark's driver is being built in the background" in stderr
    cache = run.cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent))
    monkeypatch.delenv(jvm_archive.OFF, raising=False)
    archive = cache / f"{jvm_archive.PREFIX}{jvm_archive.key()}.jsa"
    deadline = time.time() + 400
    while time.time() < deadline and (not archive.exists() or list(cache.glob("*.lock"))):
        time.sleep(0.5)
    log = (cache / "build.log").read_text()
    assert archive.is_file(), log[-3000:]
    assert sorted(p.name for p in cache.iterdir()) == ["build.log", archive.name]  # no lock, part, scratch
    assert archive.stat().st_size > 20 * 2**20
    blob = archive.read_bytes()
    for value in archive_run.PLANTED:
        assert value.encode() not in blob
        assert value not in log
    # the next run maps it; a JVM that must map it starts
    assert jvm_archive.options() == f"-XX:SharedArchiveFile={archive} {jvm_archive.QUIET}"
    check = ("from pyspark.sql import SparkSession; "
             f"s = SparkSession.builder.master('local[1]').config('spark.driver.extraJavaOptions', "
             f"'-Xshare:on -XX:SharedArchiveFile={archive} {jvm_archive.QUIET}').getOrCreate(); "
             "assert s.range(5).count() == 5; s.stop()")
    env = run.env()
    started = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-3000:]
    bad = subprocess.run([sys.executable, "-c", check.replace(str(archive), str(run.base / "none.jsa"))],
                         env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0  # (-Xshare:on does refuse a JVM without its archive)
