"""On a real standalone cluster: the shipped wheel, the same report, a lost executor."""

import json
import os
import re
import signal
import time

import pytest

from cluster import ROOT, start
from conftest import comparable, write_example_config as write_config

pytestmark = pytest.mark.skipif(os.environ.get("AM_SKIP_CLUSTER") == "1", reason="AM_SKIP_CLUSTER=1")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start(tmp_path_factory.mktemp("cluster"))
    yield c
    c.stop()


def test_executors_run_the_shipped_package(cluster):
    proc = cluster.submit(ROOT / "tests" / "cluster_probe.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    paths = [line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("executor module:")]
    assert len(paths) == 4
    assert all("avatar_metrics.zip" in p for p in paths), paths
    assert not any(str(ROOT / "avatar_metrics") in p for p in paths)


def test_lost_executor(cluster, tmp_path, local_report):
    """The job on the cluster, an executor killed in the middle of a search: the retried tasks give
    the report of the local run (this also stands for the cluster-equals-local check without a kill)."""
    # (10 blocks, every search starting with the home job: the local report searched one
    # block, so the home job and the later jobs must give its states)
    cfg = write_config(tmp_path, search={"block_size": 300, "home_from": 0})
    log = tmp_path / "job.log"
    job = cluster.submit(ROOT / "jobs" / "privacy_metrics.py", "--config", str(cfg), "--debug", background=True, log=log)
    deadline = time.time() + 600
    killed = None
    while time.time() < deadline and job.poll() is None:
        # the home job is done: the kill lands in a later pass
        if killed is None and re.search(r"search closest/avatars: home blocks \(\d+\) done", log.read_text()):
            pids = cluster.executor_pids()
            assert pids, "no executor to kill"
            killed = pids[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.2)
    rc = job.wait(timeout=max(1, deadline - time.time()))
    text = log.read_text()
    assert killed is not None, "the search ended before an executor could be killed"
    assert rc == 0, text[-3000:]
    assert re.search(r"search closest/avatars: \d+ of \d+ query visits \(\d+%\): 10 blocks", text)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert comparable(report) == local_report
