"""Safety, case by case, through the command line (issue: "Trust").

Each row of the table sets up files in a fresh folder, runs the command line
and checks: the exit code; the words of the message; that no record value
(SECRET) is printed; and, for a refusal, that not one file changed or
appeared anywhere in the folder (inputs, user files, outputs). Rows that must
succeed check what they were about instead.
"""

from __future__ import annotations

import decimal
import hashlib
import json
import os
import socket
import stat
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import reference as ref
from avatar_metrics.cli import main
from avatar_metrics.databricks import entry as databricks_entry
from conftest import ROOT

SECRET = "SECRET_PATIENT_42"  # a record value that must never be printed


def frame(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "pid": np.arange(n),
        "age": rng.integers(20, 70, n),
        "city": rng.choice(["Lyon", SECRET], n),
        "score": np.round(rng.normal(0, 1, n), 2),
    })


def put(path: Path, df: pd.DataFrame, fmt="parquet") -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)
    return {"path": str(path), "format": fmt}


def config(t: Path, **over) -> str:
    cfg = {
        "originals": put(t / "data" / "o.parquet", frame()),
        "avatars": put(t / "data" / "a.parquet", frame(seed=1)),
        "exclude": ["pid"],
        "known_variables": ["age", "city"],
        "output": str(t / "out"),
        **over,
    }
    p = t / "job.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


def _meta(path: str) -> tuple:
    st = os.lstat(path)
    try:
        xattrs = tuple(sorted((n, os.getxattr(path, n, follow_symlinks=False))
                              for n in os.listxattr(path, follow_symlinks=False)))
    except (OSError, AttributeError):
        xattrs = ()
    return (oct(st.st_mode), st.st_uid, st.st_gid, xattrs)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root: bytes (files), mode, owner, group and extended attributes (ACLs)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            out[os.path.relpath(p, root) + "/"] = ("dir", *_meta(p))
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = (hashlib.sha256(open(p, "rb").read()).hexdigest(), *_meta(p))
    return out


def leaked(root: Path, secrets) -> list[str]:
    """The tool's outputs under root (report.json, report.html, records/) that hold a secret."""
    found = []
    for p in root.rglob("*"):
        if p.name in ("report.json", "report.html") and p.is_file():
            text = p.read_text(encoding="utf-8")
            found += [f"{p}: {s}" for s in secrets if s in text]
        elif p.name == "records" and p.is_dir() and any(p.glob("*.parquet")):
            cells = pd.concat([pd.read_parquet(f) for f in sorted(p.glob("*.parquet"))]).astype(str)
            text = " ".join(cells.columns) + " " + " ".join(cells.to_numpy().ravel())
            found += [f"{p}: {s}" for s in secrets if s in text]
    return found


@dataclass
class Case:
    argv: list[str]
    code: int = 2
    words: tuple[str, ...] = ()
    check: Callable[[Path], None] | None = None  # extra checks after the run
    # cli | databricks | subprocess | api (evaluate on DataFrames, then Report.write) | canned (a report
    # computed once for the module, written by Report.write where the configuration's output says: for the
    # cases about files, not metrics)
    runner: str = "cli"
    env: dict = field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # more values that must appear in no message nor output
    writes: tuple[str, ...] = ("out",)  # where a run that succeeds may write (user files elsewhere stay)
    keeps_files: bool = True  # a refusal changes nothing at all (else its check says what moved)
    teardown: Callable[[Path], None] | None = None


def run_split(t, src, working, holdout, *extra):
    return ["split", "--input", str(src), "--working", str(working), "--holdout", str(holdout), "--force", *extra]


# ------------------------------------------------------------------ files


def case_split_working_is_the_input(t):
    src = t / "data" / "o.parquet"
    put(src, frame())
    return Case(run_split(t, src, src, t / "h", "--overwrite"), words=("--working", "is the originals input"))


def case_split_holdout_above_the_input(t):
    src = t / "data" / "o.parquet"
    put(src, frame())
    (t / "data" / "notes.txt").write_text("mine")
    return Case(run_split(t, src, t / "w", t / "data", "--overwrite"), words=("--holdout", "contains the originals input"))


def case_split_destination_inside_the_input(t):
    src = t / "data" / "o"
    src.mkdir(parents=True)
    put(src / "part-0.parquet", frame())
    return Case(run_split(t, src, src / "w", t / "h", "--overwrite"), words=("--working", "lies inside"))


def case_split_overwrite_refuses_a_user_folder(t):
    src = t / "data" / "o.parquet"
    put(src, frame())
    (t / "w").mkdir()
    (t / "w" / "thesis.docx").write_text("mine")
    return Case(run_split(t, src, t / "w", t / "h", "--overwrite"), words=("--working", "thesis.docx", "did not write"))


def case_split_overwrite_replaces_its_own_outputs(t):
    src = t / "data" / "o.parquet"
    put(src, frame())
    assert main(run_split(t, src, t / "w", t / "h")) == 0

    def check(t):
        assert len(pd.read_parquet(t / "w")) + len(pd.read_parquet(t / "h")) == 40
        assert pd.read_parquet(src).equals(frame())

    return Case(run_split(t, src, t / "w", t / "h", "--overwrite", "--seed", "3"), code=0, check=check,
                writes=("w", "h"))


def case_split_null_row_keys(t):
    src = t / "data" / "o.parquet"
    put(src, frame().assign(pid=[None] + list(range(39))))
    return Case(run_split(t, src, t / "w", t / "h", "--row-key", "pid"), words=("pid", "null"))


def case_split_nan_row_key(t):
    src = t / "data" / "o.parquet"
    src.parent.mkdir(parents=True)
    keys = pa.array([float("nan")] + [float(i) for i in range(39)], pa.float64())  # a real NaN, not a null
    pq.write_table(pa.Table.from_pandas(frame(), preserve_index=False).append_column("key", keys), src)
    return Case(run_split(t, src, t / "w", t / "h", "--row-key", "key"), words=("key", "NaN"))


def keyed_as(t, name):
    o, a = frame().rename(columns={"pid": name}), frame(seed=1).rename(columns={"pid": name})
    return config(t, originals=put(t / "data" / "o2.parquet", o), avatars=put(t / "data" / "a2.parquet", a),
                  exclude=[], row_key=name)


def case_run_row_key_named_like_a_records_column_in_another_case(t):
    return Case(["run", "--config", keyed_as(t, "Hidden_Hit")], words=("row_key", "Hidden_Hit", "records/"))


def case_run_row_key_named_sampled_in_capitals(t):
    return Case(["run", "--config", keyed_as(t, "Sampled")], words=("row_key", "Sampled", "records/"))


def case_yaml_key_given_twice(t):
    p = Path(config(t))
    p.write_text(p.read_text() + "seed: 1\nseed: 2\n")
    return Case(["run", "--config", str(p)], words=("seed", "twice"))


def case_yaml_nested_too_deep(t):
    p = Path(config(t))
    p.write_text(p.read_text() + "exclude: " + "[" * 3000 + "]" * 3000 + "\n")
    return Case(["run", "--config", str(p)], words=("nests more than",))


def parquet_folder(t, *frames_):
    folder = t / "data" / "o_parts"
    folder.mkdir(parents=True)
    for i, df in enumerate(frames_):
        df.to_parquet(folder / f"part-{i}.parquet", index=False)
    return folder


def case_run_parquet_files_disagree_on_a_type(t):
    o = frame()
    folder = parquet_folder(t, o.iloc[:20], o.iloc[20:].assign(age=o["age"].iloc[20:].astype(str)))
    cfg = config(t, originals={"path": str(folder), "format": "parquet"})
    return Case(["run", "--config", cfg], words=("originals", "disagree on column age", "part-1.parquet"))


def case_run_parquet_folder_with_another_file(t):
    folder = parquet_folder(t, frame())
    (folder / "notes.txt").write_text(SECRET)
    cfg = config(t, originals={"path": str(folder), "format": "parquet"})
    return Case(["run", "--config", cfg], words=("originals", "notes.txt", "not a Parquet file"))


def case_run_keeps_a_user_records_folder(t):
    (t / "out" / "records").mkdir(parents=True)
    (t / "out" / "records" / "my.csv").write_text("mine")
    return Case(["run", "--config", config(t)], words=("output", "records", "did not write"))


def case_run_records_false_keeps_a_user_records_folder(t):
    (t / "out" / "records").mkdir(parents=True)
    (t / "out" / "records" / "my.csv").write_text("mine")
    return Case(["run", "--config", config(t, records=False)], words=("output", "records", "did not write"))


def case_run_inputs_stored_in_the_output(t):
    cfg = config(t, output=str(t / "data"))
    return Case(["run", "--config", cfg], words=("output", "contains the originals input"))


def case_run_output_is_the_input_folder(t):
    o = t / "data" / "o"
    put(o / "part-0.parquet", frame())
    cfg = config(t, originals={"path": str(o), "format": "parquet"}, output=str(o))
    return Case(["run", "--config", cfg], words=("output", "is the originals input"))


def case_run_output_inside_an_input_folder(t):
    o = t / "data" / "o"
    put(o / "part-0.parquet", frame())
    cfg = config(t, originals={"path": str(o), "format": "parquet"}, output=str(o / "report"))
    return Case(["run", "--config", cfg], words=("output", "lies inside the originals input"))


def case_run_refused_configuration_keeps_user_reports(t):
    (t / "out").mkdir()
    (t / "out" / "report.json").write_text('{"mine": true}')
    (t / "out" / "report.html").write_text("<p>mine</p>")
    return Case(["run", "--config", config(t), "--set", "quantile=500"], words=("quantile",))


def case_run_user_report_in_the_output(t):
    (t / "out").mkdir()
    (t / "out" / "report.json").write_text('{"mine": true}')
    return Case(["run", "--config", config(t)], words=("report.json", "did not write"))


def case_run_records_is_a_file(t):
    (t / "out").mkdir()
    (t / "out" / "records").write_text("mine")
    return Case(["run", "--config", config(t)], words=("records", "did not write"))


def case_run_output_is_a_file(t):
    (t / "out.txt").write_text("mine")
    return Case(["run", "--config", config(t, output=str(t / "out.txt"))], words=("output", "is a file"))


def case_run_output_tilde_is_expanded(t):
    def check(t):
        assert (t / "home" / "reports" / "report.json").is_file()
        assert not any(p.name == "~" for p in t.rglob("*"))

    (t / "home").mkdir()
    return Case([config(t, output="~/reports")], code=0, check=check, env={"HOME": str(t / "home")}, runner="canned")


def case_run_files_follow_the_umask(t):
    def check(t):
        mask = os.umask(0)
        os.umask(mask)
        for name in ("report.json", "report.html", ".avatar-metrics"):
            assert (t / "out" / name).stat().st_mode & 0o777 == 0o666 & ~mask, name
        assert (t / "out").stat().st_mode & 0o777 == 0o777 & ~mask

    return Case([config(t)], code=0, check=check, runner="canned")


def case_run_second_run_at_once_is_refused(t):
    (t / ".out.avatar-metrics.lock").write_text(f"{socket.gethostname()} {os.getpid()}\n")  # a live run
    return Case(["run", "--config", config(t)], words=("another avatar-metrics run", "lock"))


def case_run_stale_lock_of_a_dead_run_is_taken_over(t):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (t / ".out.avatar-metrics.lock").write_text(f"{socket.gethostname()} {int(dead.stdout)}\n")
    stage = ".out.avatar-metrics-stage-0123456789ab"
    (t / stage).mkdir()  # left by a killed run

    def check(t):
        assert (t / "out" / "report.json").is_file()
        assert sorted(p.name for p in t.iterdir() if p.name.startswith(".out")) == []

    return Case([config(t)], code=0, check=check, writes=("out", stage, ".out.avatar-metrics.lock"), runner="canned")


def case_run_replaces_its_own_earlier_outputs_whole(t):
    cfg = config(t)
    CANNED["report"].write(t / "out")  # an earlier run's outputs (seed 0)
    first = json.loads((t / "out" / "report.json").read_text())

    def check(t):
        assert len(pd.read_parquet(t / "out" / "records")) == 40
        second = json.loads((t / "out" / "report.json").read_text())
        assert second["seed"] == 5 and first["seed"] == 0
        assert sorted(os.listdir(t / "out")) == [".avatar-metrics", "records", "report.html", "report.json"]

    # (files, not metrics: one metric, whose run writes every output)
    return Case(["run", "--config", cfg, "--set", "seed=5", "--set", "metrics=[column_direct_match_protection]"],
                code=0, check=check)


def case_run_keeps_a_user_file_inside_an_earlier_records_folder(t):
    CANNED["report"].write(t / "out")
    (t / "out" / "records" / "my-notes.txt").write_text("the user's own file")
    return Case([config(t)], runner="canned", words=("records/my-notes.txt", "did not write"))


def case_run_output_at_a_split_half_is_refused(t):
    from avatar_metrics.outputs import destination, locked, publish

    def half(stage):
        (stage / "part-0.parquet").write_bytes(b"PAR1")
        return ["part-0.parquet"]

    dest = destination(str(t / "w"), "--working")  # a split's working half, as the split publishes it
    with locked(dest, "--working"):
        publish(dest, half, "--working")
    return Case([config(t, output=str(t / "w"))], runner="canned", words=("output", "another command", "split"))


def case_split_half_at_a_run_output_is_refused(t):
    CANNED["report"].write(t / "out")
    src = put(t / "data" / "all.parquet", pd.concat([frame(), frame(seed=3)], ignore_index=True))["path"]
    return Case(run_split(t, src, t / "out", t / "h", "--overwrite"), words=("--working", "another command", "report"))


def case_run_failed_leaves_no_folder_it_made(t):
    a = put(t / "data" / "a2.parquet", frame(seed=1).assign(score="text"))  # found by Spark, after the lock
    cfg = config(t, avatars=a, output=str(t / "new" / "deep" / "out"))
    return Case(["run", "--config", cfg], words=("score", "conflicting types"))


def case_run_output_name_too_long_for_its_staging_sibling(t):
    cfg = config(t, output=str(t / ("o" * 240)))
    return Case(["run", "--config", cfg], words=("output", "too long"))


def case_run_output_is_a_mount_point(t):
    (t / "out").mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "none", str(t / "out")], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    return Case(["run", "--config", config(t)], words=("output", "mount point"),
                teardown=lambda t: subprocess.run(["umount", str(t / "out")], check=True))


def case_run_output_is_append_only(t):
    (t / "out").mkdir()
    if subprocess.run(["chattr", "+a", str(t / "out")], capture_output=True).returncode != 0:
        pytest.skip("chattr +a is not available here")
    return Case(["run", "--config", config(t)], words=("output", "append-only"),
                teardown=lambda t: subprocess.run(["chattr", "-a", str(t / "out")], check=True))


def case_run_nul_in_the_output_path(t):
    return Case(["run", "--config", config(t, output=str(t / "o\x00ut"))], words=("output", "NUL"))


def case_run_nul_in_an_input_path(t):
    return Case(["run", "--config", config(t, avatars={"path": str(t / "a\x00.parquet")})], words=("avatars.path", "NUL"))


def case_split_nul_in_the_input_path(t):
    return Case(run_split(t, t / "o\x00.parquet", t / "w", t / "h"), words=("--input", "NUL"))


def case_run_nul_in_the_configuration_path(t):
    return Case(["run", "--config", str(t / "job\x00.yaml")], words=("configuration file", "NUL"))


@pytest.mark.parametrize("path", [None, 123, b"out", 1.5])
def test_report_write_refuses_what_is_not_a_path(canned, tmp_path, monkeypatch, path):
    from avatar_metrics.errors import InputError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="folder path"):
        canned.write(path)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ personal data


def malformed_csv(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = ["pid,age,city,score"] + [f"{i},{20 + i},Lyon,{i / 10}" for i in range(40)]
    rows[9] = f"8,42,Lyon,0.8,{SECRET}"  # an extra field
    rows[20] = f'19,33,"{SECRET},1.9'  # an unbalanced quote
    path.write_text("\n".join(rows) + "\n")
    return {"path": str(path), "format": "csv"}


def case_run_malformed_csv_default_logging(t):
    cfg = config(t, originals=malformed_csv(t / "data" / "o.csv"), spark={"master": "local[1]"})
    return Case(["run", "--config", cfg], words=("originals", "2 malformed CSV row", "o.csv"), runner="subprocess")


def case_split_malformed_csv(t):
    src = malformed_csv(t / "data" / "o.csv")["path"]
    return Case(run_split(t, src, t / "w", t / "h", "--format", "csv"), words=("malformed CSV", "o.csv"))


def case_run_csv_without_header(t):
    o = t / "data" / "o.csv"
    o.parent.mkdir()
    frame().assign(city="x", score=range(40)).to_csv(o, index=False, header=False)
    cfg = config(t, originals={"path": str(o), "format": "csv"}, exclude=[])
    return Case(["run", "--config", cfg], words=("header",))


def case_run_tables_share_no_column(t):
    a = put(t / "data" / "a2.parquet", frame().rename(columns=lambda c: c + "_x"))
    cfg = config(t, avatars=a, exclude=[])
    return Case(["run", "--config", cfg], words=("share no column name", "header row"))


# ------------------------------------------------------------------ extreme values


def with_values(t, column, o_values=None, a_values=None, **over):
    o, a = frame(), frame(seed=1)
    if o_values is not None:
        o[column] = o_values
    if a_values is not None:
        a[column] = a_values
    return config(t, originals=put(t / "data" / "o2.parquet", o), avatars=put(t / "data" / "a2.parquet", a), **over)


def case_infinite_known_value(t):
    vals = frame()["score"].to_numpy().copy()
    vals[3] = np.inf
    return Case(["run", "--config", with_values(t, "score", vals, known_variables=["score", "age"])],
                words=("originals", "score", "infinite"))


def case_infinite_other_value(t):
    vals = frame(seed=1)["score"].to_numpy().copy()
    vals[5] = -np.inf
    return Case(["run", "--config", with_values(t, "score", a_values=vals)], words=("avatars", "score", "infinite"))


def case_range_overflows(t):
    vals = frame()["score"].to_numpy().copy()
    vals[0], vals[1] = 1.7e308, -1.7e308
    return Case(["run", "--config", with_values(t, "score", vals)], words=("score", "range", "overflows"))


def knowledge_check(t, o_col, a_col):
    O, A = frame(), frame(seed=1)
    O["score"], A["score"] = o_col, a_col

    def check(t):
        rep = json.loads((t / "out" / "report.json").read_text())
        m = rep["metrics"]["knowledge_protection_rate"]
        kinds = {"age": "numeric", "city": "categorical", "score": "numeric"}
        value, n_u, n_s = ref.knowledge(O.drop(columns="pid"), A.drop(columns="pid"), ["age", "score"], kinds)
        assert (m["value"], m["details"]["unique_originals"], m["details"]["matched"]) == (value, n_u, n_s)

    return check


def case_knowledge_avatar_far_outside_the_bins(t):
    o = frame()["age"].astype(float).to_numpy()
    a = frame(seed=1)["age"].astype(float).to_numpy()
    a[2] = 1e21
    cfg = with_values(t, "score", o, a, known_variables=["age", "score"])
    return Case(["run", "--config", cfg], code=0, check=knowledge_check(t, o, a))


def case_knowledge_squares_overflow(t):
    rng = np.random.default_rng(3)
    o = rng.normal(0, 1e200, 40)
    a = o.copy()
    a[::3] = rng.normal(0, 1e200, len(a[::3]))
    cfg = with_values(t, "score", o, a, known_variables=["age", "score"])
    return Case(["run", "--config", cfg], code=0, check=knowledge_check(t, o, a))


def case_64_bit_codes_stay_distinct(t):
    base = 2**60
    o = frame().assign(code=base + np.arange(40))
    a = frame(seed=1).assign(code=base + (np.arange(40) + 1) % 40)
    # the avatars' codes as decimal(38,0), the originals' as 64-bit integers: compared by exact text
    a_file = a.assign(code=[decimal.Decimal(int(v)) for v in a.code])
    t.joinpath("data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(a_file, schema=pa.Schema.from_pandas(a.drop(columns="code")).append(
        pa.field("code", pa.decimal128(38, 0))), preserve_index=False), t / "data" / "a2.parquet")
    cfg = config(t, originals=put(t / "data" / "o2.parquet", o), avatars={"path": str(t / "data" / "a2.parquet"), "format": "parquet"},
                 categorical=["code"], known_variables=["code", "city"], linkability_halves=[["code"], ["city"]])

    def check(t):
        rep = json.loads((t / "out" / "report.json").read_text())
        kinds = {"age": "numeric", "city": "categorical", "score": "numeric", "code": "categorical"}
        O, A = o.drop(columns="pid"), a.drop(columns="pid")
        lpr, linked = ref.linkability(O, A, ["code"], ["city"], kinds, seed=0)
        m = rep["metrics"]["linkability_protection_rate"]
        assert (m["value"], m["details"]["linked"]) == (lpr, linked)
        assert rep["metrics"]["linkability_protection_rate"]["details"]["queries_with_ties"][0] == 0
        assert rep["metrics"]["column_direct_match_protection"]["details"]["counts"]["code"]["matches"] == 0

    return Case(["run", "--config", cfg], code=0, check=check)


def case_backtick_in_names(t):
    o = frame().rename(columns={"age": "a`ge", "pid": "p`id"})
    a = frame(seed=1).rename(columns={"age": "a`ge", "pid": "p`id"})
    cfg = config(t, originals=put(t / "data" / "o2.parquet", o), avatars=put(t / "data" / "a2.parquet", a),
                 exclude=[], row_key="p`id", known_variables=["a`ge", "city"])

    def check(t):
        rep = json.loads((t / "out" / "report.json").read_text())
        assert rep["metrics"]["knowledge_protection_rate"]["computed"]
        assert "p`id" in pd.read_parquet(t / "out" / "records").columns

    return Case(["run", "--config", cfg], code=0, check=check)


def case_dotted_string_key_with_duplicates(t):
    o = frame().assign(**{"p.id": ["k"] * 2 + [f"k{i}" for i in range(38)]}).drop(columns="pid")
    a = frame(seed=1).assign(**{"p.id": [f"k{i}" for i in range(40)]}).drop(columns="pid")
    cfg = config(t, originals=put(t / "data" / "o2.parquet", o), avatars=put(t / "data" / "a2.parquet", a),
                 exclude=[], row_key="p.id")
    return Case(["run", "--config", cfg], words=("originals", "p.id", "duplicated"))


def case_internal_column_name(t):
    o = frame().assign(__am_id=1)
    a = frame(seed=1).assign(__am_id=1)
    cfg = config(t, originals=put(t / "data" / "o2.parquet", o), avatars=put(t / "data" / "a2.parquet", a))
    return Case(["run", "--config", cfg], words=("__am_id", "rename"))


def case_column_named_like_a_count(t):
    o = frame().assign(__n=np.arange(40) % 3)
    a = frame(seed=1).assign(__n=np.arange(40) % 4)

    def check(t):
        rep = json.loads((t / "out" / "report.json").read_text())
        assert rep["inputs"]["originals_rows"] == 40 and rep["inputs"]["variables"]["__n"] == "numeric"

    cfg = config(t, originals=put(t / "data" / "o2.parquet", o), avatars=put(t / "data" / "a2.parquet", a))
    return Case(["run", "--config", cfg], code=0, check=check)


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def case_yaml_alias_bomb_in_spark_conf(t):
    p = t / "bomb.yaml"
    p.write_text(BOMB + f"spark:\n  conf: {{x: *i}}\noutput: {t / 'out'}\n")
    return Case(["run", "--config", str(p)], words=("alias",))


def case_yaml_alias_bomb_in_format(t):
    p = t / "bomb.yaml"
    p.write_text(BOMB + f"originals: {{path: o.parquet, format: *i}}\noutput: {t / 'out'}\n")
    return Case(["run", "--config", str(p)], words=("alias",))


def case_databricks_boolean_typo(t):
    return Case([f"--config={config(t)}", "--fail_on_target=ture"], runner="databricks", words=("fail_on_target", "true or false"))


def case_databricks_positional_argument(t):
    return Case([f"--config={config(t)}", "run"], runner="databricks", words=("--key=value",))


def case_databricks_config_is_a_folder(t):
    (t / "conf").mkdir()
    return Case([f"--config={t / 'conf'}"], runner="databricks", words=("is a folder",))


# ------------------------------------------------------------------ issue "Trust, second round"


def wide_row_csv(path: Path):
    """A CSV with one row past Spark's parser limit (20,480 fields), all of them a secret."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = ["pid,age,city,score"] + [f"{i},{20 + i},Lyon,{i / 10}" for i in range(40)]
    rows[7] = ",".join([SECRET] * 20_500)
    path.write_text("\n".join(rows) + "\n")
    return {"path": str(path), "format": "csv"}


def case_run_csv_row_past_the_column_limit(t):
    cfg = config(t, originals=wide_row_csv(t / "data" / "o.csv"), spark={"master": "local[1]"})
    return Case(["run", "--config", cfg], words=("originals", "o.csv", "cannot be parsed", "20,480"),
                runner="subprocess")


def case_split_csv_row_past_the_column_limit(t):
    src = wide_row_csv(t / "data" / "o.csv")["path"]
    return Case(run_split(t, src, t / "w", t / "h", "--format", "csv"), words=("o.csv", "cannot be parsed"))


def headerless(path: Path, df: pd.DataFrame):
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False, header=False)
    return {"path": str(path), "format": "csv"}


def case_run_csv_without_header_first_row_mostly_text(t):
    # the first record: a unique name (the secret), then values that recur in their columns
    o = pd.DataFrame({"name": [SECRET] + [f"p{i}" for i in range(39)],
                      "city": ["Lyon", "Paris"] * 20, "sex": ["F", "M", "M", "F"] * 10, "age": range(40)})
    cfg = config(t, originals=headerless(t / "data" / "o.csv", o), exclude=[], known_variables=[])
    return Case(["run", "--config", cfg], words=("originals", "o.csv", "does not look like a header"))


def case_run_csv_without_header_first_row_half_numbers(t):
    # the second round's case: ID, "Name Surname", region, number; two of four fields are numbers
    o = pd.DataFrame({"id": range(7, 47), "name": ["Jeanne Secretperson"] + [f"N{i} S{i}" for i in range(39)],
                      "region": ["Bretagne", "Alsace"] * 20, "number": range(100, 140)})
    cfg = config(t, originals=headerless(t / "data" / "o.csv", o), exclude=[], known_variables=[])
    return Case(["run", "--config", cfg], words=("originals", "o.csv", "does not look like a header"),
                secrets=("Jeanne Secretperson", "Bretagne"))


def case_run_csv_without_header_first_row_with_a_date_of_birth(t):
    o = pd.DataFrame({"name": ["Jeanne Secretperson"] + [f"N{i} S{i}" for i in range(39)],
                      "born": ["1984-03-02"] + [f"19{50 + i}-01-01" for i in range(39)], "city": ["Lyon", "Paris"] * 20})
    cfg = config(t, originals=headerless(t / "data" / "o.csv", o), exclude=[], known_variables=[])
    return Case(["run", "--config", cfg], words=("originals", "o.csv", "does not look like a header"),
                secrets=("Jeanne Secretperson", "1984-03-02"))


def case_internal_column_name_in_capitals(t):
    o = put(t / "data" / "o2.parquet", frame().rename(columns={"score": "__AM_ID"}))
    a = put(t / "data" / "a2.parquet", frame(seed=1).rename(columns={"score": "__AM_ID"}))
    return Case(["run", "--config", config(t, originals=o, avatars=a)], words=("originals", "__am_", "rename it"))


def case_run_csv_header_name_only_in_one_table_is_not_quoted(t):
    # a name only the avatars' CSV header has may be a record's value: it is given by position
    a = frame(seed=1).assign(extra=1).rename(columns={"extra": SECRET})
    cfg = config(t, avatars=put(t / "data" / "a.csv", a, "csv"))
    return Case(["run", "--config", cfg], words=("avatars", "column number 5", "not in the originals"))


def case_run_parquet_column_missing_is_named(t):
    a = put(t / "data" / "a2.parquet", frame(seed=1).drop(columns="score"))
    return Case(["run", "--config", config(t, avatars=a)], words=("avatars", "column score", "missing"))


def two_unique_originals():
    """40 originals of which two alone have a unique profile on the known variables (age, city)."""
    o = frame()
    o["age"] = 40.0
    o.loc[0, "age"], o.loc[1, "age"] = 23.456, 71.123
    return o


def case_run_knowledge_bins_do_not_give_unique_originals_back(t):
    o = two_unique_originals()
    kinds = {"age": "numeric", "city": "categorical", "score": "numeric"}
    _, bins, _ = ref.knowledge_bins(o.drop(columns="pid"), ["age", "city"], kinds)
    lo, step = bins["age"]
    # the bins' lo and step (min - sd/10, 0.05 |mean| over the two) would give 23.456 and 71.123 back
    secrets = tuple(str(x) for x in (23.456, 71.123, lo, step))

    def check(t):
        rep = json.loads((t / "out" / "report.json").read_text())
        d = rep["metrics"]["knowledge_protection_rate"]["details"]
        # two unique originals, under min_group: the bin count (which pins one age from the other) is left out
        assert d["unique_originals"] == 2 and "bins" not in d and "min_group" in d["bins_left_out"]

    cfg = config(t, originals=put(t / "data" / "o2.parquet", o))
    return Case(["run", "--config", cfg], code=0, check=check, secrets=secrets)


def case_run_one_record_tables_are_refused(t):
    cfg = config(t, originals=put(t / "data" / "o1.parquet", frame().head(1)),
                 avatars=put(t / "data" / "a1.parquet", frame(seed=1).head(1)))
    return Case(["run", "--config", cfg], words=("originals", "1 records", "min_group"))


def case_run_holdout_under_min_group_is_refused(t):
    cfg = config(t, holdout=put(t / "data" / "h.parquet", frame(seed=2).head(12)))
    return Case(["run", "--config", cfg, "--set", "min_group=20"], words=("holdout", "12 records", "min_group (20)"))


def case_run_query_sample_of_one_is_refused(t):
    return Case(["run", "--config", config(t), "--set", "query_sample=1"], words=("query_sample (1)", "min_group (10)"))


def case_run_min_group_under_five_is_refused(t):
    return Case(["run", "--config", config(t), "--set", "min_group=2"], words=("min_group", "at least 5"))


def distinctive(x) -> str | None:
    """How a float would show in text, when it is long enough to be found by chance nowhere else."""
    text = repr(float(x))
    return text[:10] if len(text) >= 10 and "e" not in text else None


def spark_records(folder: Path) -> str:
    """The text of every event log Spark wrote in ``folder`` (Spark 4 writes a folder per application)."""
    return "".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(folder.rglob("*")) if p.is_file())


def case_run_spark_records_hold_no_value_nor_statistic(t):
    """The plans in the event log (and so in the UI's SQL tab) carry no record value and no
    statistic of the originals: Knowledge's mean, bin start and step over two unique originals,
    the Closest Rate's thresholds, Attribute Inference's tolerance; the user's spark.log.level and
    plan-change log do not turn Spark's console logging back on without --debug; no UI."""
    o, a = two_unique_originals(), frame(seed=1)
    o.loc[0, "age"], o.loc[1, "age"] = 23.4567891, 71.1234567
    rng = np.random.default_rng(5)
    o["score"], a["score"] = rng.normal(0, 1, 40), rng.normal(0, 1, 40)
    h = frame(seed=2).assign(score=rng.normal(0, 1, 40))
    kinds = {"age": "numeric", "city": "categorical", "score": "numeric"}
    _, bins, _ = ref.knowledge_bins(o.drop(columns="pid"), ["age", "city"], kinds)
    lo, step = bins["age"]
    mean = step / 0.05
    values = [23.4567891, 71.1234567, *o["score"], lo, step, mean]
    scores = pd.concat([o["score"], a["score"], h["score"]])
    values.append(0.05 * (scores.max() - scores.min()))  # Attribute Inference's tolerance of score
    s_h = sorted(ref.membership(*(x.drop(columns="pid") for x in (o, a, h)), kinds)["scores"][1])
    threshold = distinctive(s_h[len(h) // 100])  # Membership's: the holdout score of rank |H| / 100
    events = t / "events"
    events.mkdir()
    cfg = config(t, originals=put(t / "data" / "o2.parquet", o), avatars=put(t / "data" / "a2.parquet", a),
                 holdout=put(t / "data" / "h.parquet", h), known_variables=["age", "city"],
                 spark={"master": "local[1]", "conf": {
                     "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
                     "spark.eventLog.compress": "false", "spark.log.level": "WARN",
                     "spark.sql.planChangeLog.level": "WARN"}})
    secrets = tuple(x for x in map(distinctive, values) if x)
    assert len(secrets) == len(values)

    def check(t):
        text = spark_records(events)
        assert "SparkListenerSQLExecutionStart" in text  # the plans are there to be read
        details = json.loads((t / "out" / "report.json").read_text())["metrics"]["closest_rate"]["details"]
        stats = (*map(distinctive, (details["tau_d"], details["tau_r"])), threshold)
        found = [x for x in (*secrets, *stats, SECRET) if x and x in text]
        assert found == []
        assert '"spark.ui.enabled":"false"' in text.replace(" ", "")

    # (the metrics whose plans took these values; the others' searches are the same code)
    only = "metrics=[knowledge_protection_rate,closest_rate,membership_inference_protection,attribute_inference_protection]"
    return Case(["run", "--config", cfg, "--set", only], code=0, check=check, secrets=secrets, runner="subprocess",
                writes=("out", "events"))


ACL_ENTRIES = [(1, 7, 0xFFFFFFFF), (2, 5, 4243), (4, 5, 0xFFFFFFFF), (0x10, 5, 0xFFFFFFFF), (0x20, 0, 0xFFFFFFFF)]


def posix_acl(entries) -> bytes:
    """The bytes of a POSIX ACL extended attribute (version 2; tag, permissions, id per entry)."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def case_run_fills_a_prepared_folder_keeping_its_permissions(t):
    out = t / "out"
    out.mkdir()
    if os.geteuid() == 0:
        os.chown(out, -1, 4242)
    os.chmod(out, 0o2750)
    acl = posix_acl(ACL_ENTRIES)
    try:  # user 4243 may read: an access ACL, and a default one that new entries inherit
        os.setxattr(out, "system.posix_acl_access", acl)
        os.setxattr(out, "system.posix_acl_default", acl)
    except OSError:
        pytest.skip("this file system has no POSIX ACLs")
    before = _meta(out)

    def check(t):
        assert _meta(out) == before  # mode 2750, owner, group and both ACLs
        assert stat.S_IMODE(out.stat().st_mode) == 0o2750
        records = out / "records"
        assert records.stat().st_gid == out.stat().st_gid  # the setgid folder's group, inherited
        assert os.getxattr(records, "system.posix_acl_default") == acl

    return Case([config(t)], code=0, check=check, runner="canned")


def case_run_output_under_a_folder_it_cannot_write(t):
    ro = t / "locked"
    ro.mkdir()
    if os.geteuid() == 0:  # root writes through permission bits: make the folder immutable
        if subprocess.run(["chattr", "+i", str(ro)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available here")

        def teardown(t):
            subprocess.run(["chattr", "-i", str(ro)], check=True)
    else:
        os.chmod(ro, 0o555)

        def teardown(t):
            os.chmod(ro, 0o755)

    cfg = config(t, output=str(ro / "reports" / "out"))
    return Case(["run", "--config", cfg], words=("output", str(ro), "cannot write in"), teardown=teardown)


def case_run_puts_back_outputs_a_killed_run_was_replacing(t):
    cfg = config(t)
    CANNED["report"].write(t / "out")
    old = t / ".out.avatar-metrics-old-0123456789ab"
    os.rename(t / "out", old)  # killed between its two renames: only this copy is left
    first = snapshot(old)

    def check(t):
        assert snapshot(t / "out") == first
        assert not old.exists()

    # a run refused once it holds the lock (its row key city is also a known variable) puts them back first
    return Case(["run", "--config", cfg, "--set", "row_key=city", "--set", "exclude=[]"],
                words=("known_variables", "city"), check=check, keeps_files=False)


def keyed(t, o_key, a_key):
    o, a = frame().assign(pid=o_key), frame(seed=1).assign(pid=a_key)
    return config(t, originals=put(t / "data" / "o2.parquet", o), avatars=put(t / "data" / "a2.parquet", a),
                  exclude=[], row_key="pid")


def case_run_nan_row_key(t):
    key = np.arange(40, dtype=float)
    key[4] = np.nan
    return Case(["run", "--config", keyed(t, key, np.arange(40, dtype=float))], words=("originals", "pid", "NaN"))


def case_run_minus_zero_row_key_is_zero(t):
    o_key, a_key = np.arange(40, dtype=float), np.arange(40, dtype=float)
    o_key[0], a_key[0] = -0.0, 0.0

    def check(t):
        assert json.loads((t / "out" / "report.json").read_text())["inputs"]["originals_rows"] == 40

    return Case(["run", "--config", keyed(t, o_key, a_key)], code=0, check=check)


def case_run_integer_key_against_double_key(t):
    cfg = keyed(t, np.arange(40), np.arange(40, dtype=float))
    return Case(["run", "--config", cfg], words=("pid", "different types", "integer in the originals",
                                                  "floating-point in the avatars"))


def case_run_spark_conf_empty_key(t):
    return Case(["run", "--config", config(t), "--set", "spark.conf.=x"], words=("spark.conf", "empty setting name"))


def case_run_spark_conf_mapping_value(t):
    return Case(["run", "--config", config(t), "--set", "spark.conf={a: {b: c}}"], words=("spark.conf.a", "mapping"))


def case_run_parquet_names_differing_in_case(t):
    import pyarrow as pa
    import pyarrow.parquet as pq

    o = t / "data" / "o2.parquet"
    o.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(frame().assign(Age=frame()["age"]), preserve_index=False), o)
    cfg = config(t, originals={"path": str(o), "format": "parquet"})
    return Case(["run", "--config", cfg], words=("originals", "differ only in case"))


def case_run_parquet_nanosecond_timestamps(t):
    import pyarrow as pa
    import pyarrow.parquet as pq

    o = t / "data" / "o2.parquet"
    o.parent.mkdir(parents=True)
    table = pa.Table.from_pandas(frame(), preserve_index=False)
    table = table.append_column("seen", pa.array(np.arange(40) * 10**9, pa.timestamp("ns")))
    pq.write_table(table, o, coerce_timestamps=None)
    cfg = config(t, originals={"path": str(o), "format": "parquet"})
    return Case(["run", "--config", cfg], words=("originals", "nanosecond"))


# ------------------------------------------------------------------ secrets through each input path


def with_secret_check(t, **over):
    def check(t):
        rep = json.loads((t / "out" / "report.json").read_text())
        assert rep["inputs"]["originals_rows"] == 40
        assert (t / "out" / "records").is_dir()

    return check


def case_run_csv_inputs(t):
    cfg = config(t, originals=put(t / "data" / "o.csv", frame(), "csv"), avatars=put(t / "data" / "a.csv", frame(seed=1), "csv"))
    return Case(["run", "--config", cfg], code=0, check=with_secret_check(t))


def case_run_metastore_tables(t):
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    spark.createDataFrame(frame()).createOrReplaceTempView("safety_originals")
    spark.createDataFrame(frame(seed=1)).createOrReplaceTempView("safety_avatars")
    cfg = config(t, originals={"table": "safety_originals"}, avatars={"table": "safety_avatars"})
    return Case(["run", "--config", cfg], code=0, check=with_secret_check(t))


def case_api_evaluate_dataframes(t):
    return Case([config(t)], code=0, check=with_secret_check(t), runner="api")


def case_api_evaluate_dataframes_refused(t):
    o = put(t / "data" / "o.csv", frame(), "csv")
    a = put(t / "data" / "a.csv", frame(seed=1).assign(extra=1).rename(columns={"extra": SECRET}), "csv")
    return Case([config(t, originals=o, avatars=a)], runner="api", words=("avatars", "column number 5"))


CASES = {k[5:]: v for k, v in sorted(globals().items()) if k.startswith("case_")}
CANNED: dict = {}  # "report": the report of config()'s tables, computed once (fixture canned)


@pytest.fixture(scope="module")
def canned(spark, tmp_path_factory):
    """The report of ``config()``'s tables, its records cached for the module."""
    from avatar_metrics import evaluate

    t = tmp_path_factory.mktemp("canned")
    cfg = yaml.safe_load(Path(config(t)).read_text())
    tables = [spark.read.parquet(cfg[r]["path"]) for r in ("originals", "avatars")]
    keys = {k: v for k, v in cfg.items() if k not in ("originals", "avatars", "output")}
    CANNED["report"] = evaluate(spark, *tables, None, keys)
    yield CANNED["report"]
    CANNED.pop("report").records.unpersist()


def canned_write(config_path: str) -> int:
    from avatar_metrics.errors import AvatarMetricsError

    output = yaml.safe_load(Path(config_path).read_text())["output"]
    try:
        CANNED["report"].write(output)
    except AvatarMetricsError as exc:
        print(f"avatar-metrics: error: {exc}", file=sys.stderr)
        return 2
    return 0


def api_run(config_path: str) -> int:
    """A notebook's run: the user reads the tables, calls evaluate, then Report.write."""
    from pyspark.sql import SparkSession

    from avatar_metrics import evaluate
    from avatar_metrics.errors import AvatarMetricsError

    spark = SparkSession.getActiveSession()
    cfg = yaml.safe_load(Path(config_path).read_text())
    tables = [spark.read.format(cfg[r]["format"]).option("header", True).option("inferSchema", True)
              .load(cfg[r]["path"]) if r in cfg else None for r in ("originals", "avatars", "holdout")]
    keys = {k: v for k, v in cfg.items() if k not in ("originals", "avatars", "holdout", "output")}
    try:
        report = evaluate(spark, *tables, keys)
        report.write(cfg["output"])
    except AvatarMetricsError as exc:
        print(f"avatar-metrics: error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    if report.records is not None:
        report.records.unpersist()
    return 0


def run_case(case: Case, t: Path, capfd, monkeypatch) -> tuple[int, str, str]:
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    if case.runner == "subprocess":
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, **case.env)
        proc = subprocess.run([sys.executable, "-m", "avatar_metrics", *case.argv], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
        return proc.returncode, proc.stdout, proc.stderr
    if case.runner in ("api", "canned"):
        code = (api_run if case.runner == "api" else canned_write)(case.argv[0])
        out, err = capfd.readouterr()
        return code, out, err
    if case.runner == "databricks":
        monkeypatch.setattr(sys, "argv", ["avatar-metrics-databricks", *case.argv])
        with pytest.raises(SystemExit) as stop:
            databricks_entry()
        code = stop.value.code
    else:
        code = main(case.argv)
    out, err = capfd.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", list(CASES))
def test_safety(spark, canned, tmp_path, capfd, monkeypatch, name):
    case = CASES[name](tmp_path)
    try:
        capfd.readouterr()
        before = snapshot(tmp_path)
        code, out, err = run_case(case, tmp_path, capfd, monkeypatch)
        after = snapshot(tmp_path)
    finally:
        if case.teardown:
            case.teardown(tmp_path)
    assert code == case.code, err[-3000:]
    secrets = (SECRET, *case.secrets)
    for secret in secrets:
        assert secret not in out and secret not in err, secret
    assert leaked(tmp_path, secrets) == []
    msg = err.split("avatar-metrics: error:", 1)[-1]
    for w in case.words:
        assert w in msg, (w, msg)
    if case.code == 2 and case.keeps_files:
        assert after == before  # nothing changed, nothing appeared
    if case.code == 0:
        mine = {p: v for p, v in before.items() if not any(p in (w, w + "/") or p.startswith(w + "/") for w in case.writes)}
        assert {p: after.get(p) for p in mine} == mine  # the user's files: same bytes, mode, owner
    if case.check:
        case.check(tmp_path)
