"""A real Spark standalone cluster on 127.0.0.1 for the tests: a master and two workers.

Started from the installed pyspark distribution (``spark-class``), stopped at
the end. The executors run a Python that has every dependency but *not* the
avatar_metrics package (a venv whose only path is this environment's
site-packages, without its .pth files), so a job can only work with the
package shipped by ``spark-submit --py-files``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

ROOT = Path(__file__).resolve().parents[1]
SPARK_HOME = Path(pyspark.__file__).parent


# Compiles (or loads) every compiled kernel a job runs into numba's cache: the index's entry
# points both ways, and the blocks' lower bounds of the home job
WARM_KERNELS = """
import numpy as np
from avatar_metrics.kernels.gower import Space
from avatar_metrics.kernels.index import _warm_up
from avatar_metrics.kernels.terms import Summary, lower_bounds
_warm_up()
space = Space(is_cat=np.array([True, False]), ranges=np.array([0.0, 1.0]))
lower_bounds(np.zeros((1, 2)), Summary(np.array([False, True]), np.array([np.nan, 0.0]), np.array([np.nan, 1.0])), space)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    url: str
    ui: str
    workdir: Path
    executor_python: str
    package_zip: Path
    procs: list = field(default_factory=list)

    def env(self) -> dict:
        e = dict(os.environ)
        e.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_DRIVER_PYTHON=sys.executable)
        e["PYSPARK_PYTHON"] = self.executor_python
        return e

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as r:
            state = json.load(r)
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def submit(self, script: Path, *args: str, background: bool = False, log: Path | None = None,
               conf: dict | None = None):
        cmd = [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--master", self.url,
            "--conf", f"spark.pyspark.python={self.executor_python}",
            "--conf", f"spark.pyspark.driver.python={sys.executable}",
            "--conf", "spark.executor.cores=1",
            "--conf", "spark.executor.memory=1g",
            "--conf", "spark.cores.max=2",
            "--conf", "spark.task.maxFailures=8",
            "--conf", "spark.ui.enabled=false",
            *[x for k, v in (conf or {}).items() for x in ("--conf", f"{k}={v}")],
            "--py-files", str(self.package_zip),
            str(script), *args,
        ]
        if background:
            fh = open(log, "w")
            return subprocess.Popen(cmd, env=self.env(), stdout=fh, stderr=subprocess.STDOUT, cwd=self.workdir)
        return subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=900, cwd=self.workdir)

    def executor_pid(self, executor_id: str) -> int | None:
        """The process of the executor with this Spark id, from its command line (--executor-id)."""
        out = subprocess.run(["pgrep", "-af", "CoarseGrainedExecutorBackend"], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            args = line.split()
            if "--executor-id" in args and args[args.index("--executor-id") + 1] == executor_id:
                return int(args[0])
        return None

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def executor_env(base: Path) -> str:
    """A venv that sees this environment's packages but not avatar_metrics."""
    venv = base / "executor-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    here = sysconfig.get_paths()["purelib"]
    Path(site, "shared_env.pth").write_text(here + "\n")
    # run where no source tree is in the current directory, as on an executor
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    check = subprocess.run([str(py), "-c", "import pandas, numba, pyarrow, pyspark; import avatar_metrics"],
                           capture_output=True, text=True, cwd=base, env=env)
    if "No module named 'avatar_metrics'" not in check.stderr:
        raise RuntimeError("the executor environment must lack avatar_metrics and have its dependencies: "
                           + check.stderr[-500:])
    return str(py)


def package_zip(base: Path) -> Path:
    """The README's way: build the wheel, ship a copy named .zip."""
    dist = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)], check=True)
    wheel = next(dist.glob("avatar_metrics-*.whl"))
    target = dist / "avatar_metrics.zip"
    shutil.copy(wheel, target)
    return target


def seed_executor_cache() -> None:
    """Copy the kernels compiled beside this tree's sources into the folder where the executors,
    importing the same sources from the zip, look for them; the files it has are kept."""
    from avatar_metrics.kernels import jit

    src, dst = jit.in_tree_cache_dir(), jit.shared_cache_dir()
    if src is None or dst is None:
        return
    for f in sorted(Path(src).iterdir(), key=lambda f: f.suffix):  # numba's data (.nbc) before its indexes (.nbi)
        if f.is_file() and not (Path(dst) / f.name).exists():
            shutil.copy2(f, Path(dst) / f.name)


def start(base: Path, workers: int = 2) -> Cluster:
    base.mkdir(parents=True, exist_ok=True)
    port, ui = free_port(), free_port()
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOG_DIR=str(base / "logs"), SPARK_WORKER_DIR=str(base / "work"))
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    cluster = Cluster(url=f"spark://127.0.0.1:{port}", ui=f"http://127.0.0.1:{ui}", workdir=base,
                      executor_python=executor_env(base), package_zip=package_zip(base))
    # the executors import the package from the zip, so numba keeps their compiled kernels in a
    # folder of its own (``kernels/jit.py``): fill it while the JVMs start, rather than have both
    # executors compile the same kernels at once in the job (a minute, with a cold cache). The
    # suite compiled these sources beside themselves (``conftest.pytest_configure``): their files
    # go to the executors' folder first, so that the warm-up only loads them
    seed_executor_cache()
    own = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    warm = subprocess.Popen([cluster.executor_python, "-c", f"import sys; sys.path.insert(0, {str(cluster.package_zip)!r})"
                             + WARM_KERNELS], cwd=base, env=own, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    logs = base / "logs"
    logs.mkdir(exist_ok=True)

    def launch(name, *args):
        fh = open(logs / f"{name}.log", "w")
        cluster.procs.append(subprocess.Popen([spark_class, *args], env=env, stdout=fh, stderr=subprocess.STDOUT))

    launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
           "--webui-port", str(ui))
    for i in range(workers):
        launch(f"worker{i}", "org.apache.spark.deploy.worker.Worker", cluster.url, "--host", "127.0.0.1",
               "--cores", "1", "--memory", "2g", "--webui-port", str(free_port()),
               "--work-dir", str(base / f"work{i}"))
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if cluster.alive_workers() == workers:
                warm.wait(timeout=600)
                return cluster
        except OSError:
            pass
        time.sleep(1)
    cluster.stop()
    raise RuntimeError(f"the standalone cluster did not start; see {logs}")


def event_log_tasks(folder: Path) -> list[dict]:
    """The ends of the tasks in the event logs under ``folder``: stage, partition, reason, the driver's reason
    for a kill (``None`` unless it killed the task), finish time."""
    ends = []
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        with open(f) as lines:
            for line in lines:
                if '"Event":"SparkListenerTaskEnd"' not in line:
                    continue  # the plans' events are most of the bytes
                event = json.loads(line)
                info = event["Task Info"]
                ends.append({"stage": event["Stage ID"], "partition": info["Partition ID"],
                             "reason": event["Task End Reason"]["Reason"],
                             "kill": event["Task End Reason"].get("Kill Reason"), "finish": info["Finish Time"]})
    return ends


def _rest(ui: str, path: str):
    """``path`` of the first application's REST API at the driver's ``ui``."""
    with urllib.request.urlopen(f"{ui}/api/v1/applications", timeout=2) as r:
        app = json.load(r)[0]["id"]
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/{path}", timeout=2) as r:
        return json.load(r)


def busy_executors(ui: str) -> list[str]:
    """The ids of the executors running a task now, from the driver's REST API (``ui``: its address)."""
    try:
        return [e["id"] for e in _rest(ui, "executors") if e["id"] != "driver" and e["activeTasks"] > 0]
    except (OSError, ValueError, IndexError, KeyError):
        return []


def failed_tasks(ui: str) -> int:
    """How many tasks have failed so far in the application, by the driver's account (0 when it cannot say)."""
    try:
        return sum(s.get("numFailedTasks", 0) for s in _rest(ui, "stages"))
    except (OSError, ValueError, IndexError, KeyError):
        return 0
