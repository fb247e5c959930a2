"""The class archive's end-to-end run (``test_jvm_archive``), started when the suite starts.

The command line runs once on records carrying planted values, in a cache folder of its own;
it finds no archive and starts the builder, which works in the background (at low priority) for
about a minute while the first test modules run, instead of the test waiting for it. The test
then checks what the builder left. ``start`` in ``pytest_configure``, ``stop`` in
``pytest_unconfigure``: a builder still at work then is killed with its process group.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLANTED = ["Qzv-planted-region", "Wxk-planted-sex"]


@dataclass
class ArchiveRun:
    base: Path
    proc: subprocess.Popen

    @property
    def cache(self) -> Path:
        return self.base / "cache" / "avatar-metrics"

    def env(self) -> dict:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                   XDG_CACHE_HOME=str(self.base / "cache"))
        env.pop("AVATAR_METRICS_JVM_ARCHIVE", None)
        return env

    def result(self, timeout: float = 600) -> tuple[int, str]:
        """The command line's exit code and stderr."""
        self.proc.wait(timeout=timeout)
        return self.proc.returncode, (self.base / "run.log").read_text()


def start() -> ArchiveRun:
    import pandas as pd

    base = Path(tempfile.mkdtemp(prefix="am-archive-"))
    data = base / "data"
    data.mkdir()
    cmd = [sys.executable, "-m", "avatar_metrics", "run", "--config", str(ROOT / "conf" / "example.yaml"),
           "--set", f"output={base / 'out'}", "--set", "metrics=[row_direct_match_protection]"]
    for role in ("originals", "avatars", "holdout"):
        df = pd.read_parquet(ROOT / "data" / "example" / f"{role}.parquet").head(400)
        df["region"] = df["region"].astype(str) + "-" + PLANTED[0]
        df["sex"] = df["sex"].astype(str) + "-" + PLANTED[1]
        df.to_parquet(data / f"{role}.parquet")
        cmd += ["--set", f"{role}.path={data / role}.parquet"]
    run = ArchiveRun(base, None)
    with open(base / "run.log", "w") as log:
        run.proc = subprocess.Popen(cmd, cwd=base, env=run.env(), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=log)
    return run


def stop(run: ArchiveRun) -> None:
    if run.proc.poll() is None:
        run.proc.kill()
        run.proc.wait()
    for lock in run.cache.glob("*.lock"):
        try:
            os.killpg(int(lock.read_text()), signal.SIGKILL)  # the builder leads a session of its own
        except (OSError, ValueError):
            pass
    shutil.rmtree(run.base, ignore_errors=True)
