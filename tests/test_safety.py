"""Safety, case by case, through the command line (issue: "Trust").

Each row of the table sets up files in a fresh folder, runs the command line
and checks: the exit code; the words of the message; that no record value
(SECRET) is printed; and, for a refusal, that not one file changed or
appeared anywhere in the folder (inputs, user files, outputs). Rows that must
succeed check what they were about instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
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


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = "dir"
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


@dataclass
class Case:
    argv: list[str]
    code: int = 2
    words: tuple[str, ...] = ()
    check: Callable[[Path], None] | None = None  # extra checks after the run
    runner: str = "cli"  # cli | databricks | subprocess
    env: dict = field(default_factory=dict)


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

    return Case(run_split(t, src, t / "w", t / "h", "--overwrite", "--seed", "3"), code=0, check=check)


def case_split_null_row_keys(t):
    src = t / "data" / "o.parquet"
    put(src, frame().assign(pid=[None] + list(range(39))))
    return Case(run_split(t, src, t / "w", t / "h", "--row-key", "pid"), words=("pid", "null"))


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
    return Case(["run", "--config", config(t, output="~/reports")], code=0, check=check, env={"HOME": str(t / "home")})


def case_run_files_follow_the_umask(t):
    def check(t):
        mask = os.umask(0)
        os.umask(mask)
        for name in ("report.json", "report.html", ".avatar-metrics"):
            assert (t / "out" / name).stat().st_mode & 0o777 == 0o666 & ~mask, name
        assert (t / "out").stat().st_mode & 0o777 == 0o777 & ~mask

    return Case(["run", "--config", config(t)], code=0, check=check)


def case_run_second_run_at_once_is_refused(t):
    (t / ".out.avatar-metrics.lock").write_text(f"{socket.gethostname()} {os.getpid()}\n")  # a live run
    return Case(["run", "--config", config(t)], words=("another avatar-metrics run", "lock"))


def case_run_stale_lock_of_a_dead_run_is_taken_over(t):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (t / ".out.avatar-metrics.lock").write_text(f"{socket.gethostname()} {int(dead.stdout)}\n")
    (t / ".out.avatar-metrics-stage-0123456789ab").mkdir()  # left by a killed run

    def check(t):
        assert (t / "out" / "report.json").is_file()
        assert sorted(p.name for p in t.iterdir() if p.name.startswith(".out")) == []

    return Case(["run", "--config", config(t)], code=0, check=check)


def case_run_replaces_its_own_earlier_outputs_whole(t):
    cfg = config(t)
    assert main(["run", "--config", cfg]) == 0
    first = json.loads((t / "out" / "report.json").read_text())

    def check(t):
        assert len(pd.read_parquet(t / "out" / "records")) == 40
        second = json.loads((t / "out" / "report.json").read_text())
        assert second["seed"] == 5 and first["seed"] == 0
        assert sorted(os.listdir(t / "out")) == [".avatar-metrics", "records", "report.html", "report.json"]

    return Case(["run", "--config", cfg, "--set", "seed=5"], code=0, check=check)


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
    cfg = config(t, originals=put(t / "data" / "o2.parquet", o), avatars=put(t / "data" / "a2.parquet", a),
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


CASES = {k[5:]: v for k, v in sorted(globals().items()) if k.startswith("case_")}


def run_case(case: Case, t: Path, capfd, monkeypatch) -> tuple[int, str, str]:
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    if case.runner == "subprocess":
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, **case.env)
        proc = subprocess.run([sys.executable, "-m", "avatar_metrics", *case.argv], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
        return proc.returncode, proc.stdout, proc.stderr
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
def test_safety(spark, tmp_path, capfd, monkeypatch, name):
    case = CASES[name](tmp_path)
    capfd.readouterr()
    before = snapshot(tmp_path)
    code, out, err = run_case(case, tmp_path, capfd, monkeypatch)
    assert code == case.code, err[-3000:]
    assert SECRET not in out and SECRET not in err
    msg = err.split("avatar-metrics: error:", 1)[-1]
    for w in case.words:
        assert w in msg, (w, msg)
    if case.code == 2:
        assert snapshot(tmp_path) == before  # nothing changed, nothing appeared
    if case.check:
        case.check(tmp_path)
