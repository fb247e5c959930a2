"""records_table: records/ saved in the session's catalog, replaced only when this tool wrote it."""

import json
import os
import subprocess
import sys

import pytest

from avatar_metrics.configure import build_config
from avatar_metrics.errors import ConfigError
from avatar_metrics.records_table import COMMENT, MARKER
from conftest import ROOT, write_example_config


def test_against_a_hive_metastore(tmp_path):
    """In a process of its own (a Hive metastore is a session-wide setting): the command line saves
    records/ as the table, marked and commented; a second run replaces it (not appended to); a table
    and a view of the same name that this tool did not write are refused with exit 2 before any
    output is written, and left as they were."""
    cfg = write_example_config(tmp_path)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "catalog_run.py"), str(cfg)], env=env,
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("CATALOG "))[len("CATALOG "):])
    assert out["first"] == 0 and out["second"] == 0
    for which in ("first", "second"):
        t = out[f"table_{which}"]
        assert t["rows"] == out[f"records_{which}"] and len(t["rows"]) == 3000  # replaced, not appended
        assert t["properties"][MARKER] and t["comment"] == COMMENT
        assert t["columns"] == list(out[f"records_{which}"][0])
    assert out["theirs"] == 2 and out["seen"] == 2
    assert "records_table: am.theirs is a table that avatar-metrics did not write" in proc.stderr
    assert "records_table: am.seen is a view" in proc.stderr
    assert out["theirs_after"] == 7 and out["seen_after"] == 1
    assert out["outputs"] == ["out1", "out2"]  # the refused runs wrote nothing
    assert out["tables"] == ["records", "seen", "theirs"]


@pytest.mark.parametrize("name", ["records", "a.b.c.d", "a..b", " a.b", "a.`b`", 7, ["a", "b"]])
def test_the_name_is_checked(name):
    with pytest.raises(ConfigError, match="records_table"):
        build_config({"records_table": name}, require_inputs=False)


def test_needs_records():
    assert build_config({"records_table": "db.t"}, require_inputs=False).records_table == "db.t"
    with pytest.raises(ConfigError, match="records is false"):
        build_config({"records_table": "db.t", "records": False}, require_inputs=False)
