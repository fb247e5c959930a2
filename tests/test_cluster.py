"""On a real standalone cluster: the shipped wheel, the same report, a lost executor, in one job."""

import json
import os
import re
import signal
import time

import pytest

from cluster import ROOT, busy_executors, event_log_tasks, failed_tasks, free_port, start
from conftest import SMALL_TABLES, comparable, write_example_config as write_config

pytestmark = pytest.mark.skipif(os.environ.get("AM_SKIP_CLUSTER") == "1", reason="AM_SKIP_CLUSTER=1")


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    # the kernels the suite compiles when it starts are copied to the executors: wait for them
    warm = getattr(request.config, "_am_warm", None)
    if warm is not None:
        warm.wait(timeout=600)
    c = start(tmp_path_factory.mktemp("cluster"))
    yield c
    c.stop()


# What the cluster's path needs: a search of several blocks (killed in its later passes: Local
# Cloaking's, one search where the Closest Rate makes two) and a missed target (the example's
# Local Cloaking, below 5). Every metric runs on the executors as this one does (the linear ones
# run no Python there at all); the others are checked against the references locally (a job on
# this cluster costs about half a second of scheduling per Spark job, whatever the data: the
# whole report took 3 minutes)
ON_THE_CLUSTER = ["local_cloaking"]


def test_lost_executor(cluster, tmp_path, local_report):
    """The spark-submit job on the cluster, its package shipped as the README says (the executors'
    Python lacks it: ``cluster.executor_env`` checks), an executor killed in the middle of a search: Spark's event
    log shows tasks that failed and were run again, and the report's metrics are the local run's (this also
    stands for the cluster-equals-local check without a kill); the metrics not asked for (configuration key
    ``metrics``) say so. With --fail-on-target the example's missed Local Cloaking target is exit 3 through
    spark-submit."""
    # (3 blocks, every search starting with the home job: the local report searched one
    # block, so the home job and the later jobs must give its states)
    cfg = write_config(tmp_path, search={"block_size": 1000}, metrics=ON_THE_CLUSTER,
                       spark={"master": "local[2]", "conf": SMALL_TABLES})
    log, events, ui = tmp_path / "job.log", tmp_path / "events", free_port()
    events.mkdir()
    job = cluster.submit(ROOT / "jobs" / "privacy_metrics.py", "--config", str(cfg), "--debug", "--fail-on-target",
                         background=True, log=log,
                         conf={"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
                               "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false",
                               "spark.ui.enabled": "true", "spark.ui.port": str(ui),
                               "spark.sql.maxPlanStringLength": "10000"})  # the searches' plans: 0.5 GB of log
    deadline = time.time() + 600
    driver = f"http://127.0.0.1:{ui}"
    kills, settle = [], 0.0
    while time.time() < deadline and job.poll() is None:
        # the home job is done: the kill lands in a task of a later pass. The driver's "busy" lags
        # its tasks: an executor can finish its task between the look and the kill, so kill again
        # (a few times at most) until the driver counts a task lost
        if (len(kills) < 4 and time.time() > settle and failed_tasks(driver) == 0
                and re.search(r"search hidden_rate: home blocks \(\d+\) done", log.read_text())):
            for executor in busy_executors(driver):
                pid = cluster.executor_pid(executor)
                if pid is not None and pid not in kills:
                    os.kill(pid, signal.SIGKILL)
                    kills.append(pid)
                    settle = time.time() + 3  # the driver hears of the loss in a second or two
                    break
        time.sleep(0.05)
    rc = job.wait(timeout=max(1, deadline - time.time()))
    text = log.read_text()
    assert kills, "the search ended before an executor could be killed"
    assert rc == 3, text[-3000:]
    report = comparable(json.loads((tmp_path / "out" / "report.json").read_text()))
    # (the inputs' reference is the Closest Rate's, not asked for here)
    assert report["inputs"].pop("reference") is None
    assert {k: v for k, v in report.items() if k != "metrics"} == {
        k: v if k != "inputs" else {i: x for i, x in v.items() if i != "reference"}
        for k, v in local_report.items() if k != "metrics"}
    for key, m in report["metrics"].items():
        if key in ON_THE_CLUSTER:
            assert m == local_report["metrics"][key], key
        else:
            assert m["computed"] is False and m["reason"].startswith("not asked for: the configuration key metrics")
    assert report["metrics"]["local_cloaking"]["passed"] is False
    # Spark's own account: tasks lost with the executor, and each of them run again and succeeding later
    ends = event_log_tasks(events)
    lost = [e for e in ends if e["reason"] not in ("Success", "TaskKilled")]
    assert lost, "no task failed: the kill did not land in a task"
    for f in lost:
        assert any(e["reason"] == "Success" and e["stage"] == f["stage"] and e["partition"] == f["partition"]
                   and e["finish"] >= f["finish"] for e in ends), f
    # and the tasks the driver killed itself were ones it no longer needed: a copy of a task whose other copy
    # succeeded (before or after it: a stage run again after the loss can finish first), or the rest of a stage
    # or job already done
    for k in (e for e in ends if e["reason"] == "TaskKilled"):
        if k["kill"] == "another attempt succeeded":
            assert any(e["reason"] == "Success" and e["stage"] == k["stage"] and e["partition"] == k["partition"]
                       for e in ends), k
        else:
            # ("Stage cancelled: Stage finished": the task scheduler prefixes the DAG scheduler's
            # reason when it kills the running copies of a stage that finished)
            kill = (k["kill"] or "").removeprefix("Stage cancelled: ")
            assert kill == "Stage finished" or "job has finished" in kill, k


def test_the_wheel_carries_the_definitions(cluster):
    """docs/metrics.md, the users' definitions, is in the wheel shipped above (avatar_metrics/definitions.md),
    so that whoever installs the wheel can read what a figure means."""
    import zipfile

    with zipfile.ZipFile(cluster.package_zip) as wheel:
        assert wheel.read("avatar_metrics/definitions.md") == (ROOT / "docs" / "metrics.md").read_bytes()
