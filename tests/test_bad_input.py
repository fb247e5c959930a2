"""Bad input, systematically, through the command line: a clear message, exit 2,
no report that looks complete, and no record value in anything printed."""

import numpy as np
import pandas as pd
import pytest
import yaml

from avatar_metrics.cli import main
from test_safety import snapshot

SECRET = "Zorglub-7731"  # a record value that must never be printed


def frame(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "pid": np.arange(n),
        "age": rng.integers(20, 70, n),
        "city": rng.choice(["Lyon", SECRET], n),
        "score": np.round(rng.normal(0, 1, n), 2),
    })


def put(tmp_path, name, df, fmt="parquet"):
    path = tmp_path / f"{name}.{fmt}"
    if fmt == "parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)
    return {"path": str(path), "format": fmt}


def case_wrong_path(t):
    return {"originals": {"path": str(t / "nope.parquet")}}, ["originals", "nope.parquet"]


def case_wrong_format(t):
    spec = put(t, "o_csv", frame(), "csv")
    return {"originals": {"path": spec["path"], "format": "parquet"}}, ["originals", "o_csv.csv"]


def case_empty_table(t):
    return {"avatars": put(t, "a_empty", frame().iloc[:0], "csv")}, ["avatars", "empty"]


def case_missing_column(t):
    return {"avatars": put(t, "a_missing", frame(seed=1).drop(columns=["score"]))}, ["avatars", "score"]


def case_extra_column(t):
    return {"avatars": put(t, "a_extra", frame(seed=1).assign(bonus=1))}, ["avatars", "bonus"]


def case_conflicting_types(t):
    return {"avatars": put(t, "a_types", frame(seed=1).assign(age=lambda d: d.age.astype(str) + "y"))}, ["age", "conflicting"]


def case_all_null_column(t):
    o = frame().assign(note=None)
    a = frame(seed=1).assign(note=None)
    # a CSV's column by its position: a name from a first row may be a value
    return {"originals": put(t, "o_null", o, "csv"), "avatars": put(t, "a_null", a, "csv")}, ["column number 5", "null"]


def case_duplicated_keys(t):
    o = frame().assign(pid=lambda d: d.pid // 2)
    return {"originals": put(t, "o_dup", o), "row_key": "pid"}, ["originals", "pid", "duplicated"]


def case_holdout_schema(t):
    return {"holdout": put(t, "h_schema", frame(seed=2).drop(columns=["city"]))}, ["holdout", "city"]


def case_non_numeric_strings_in_csv(t):
    o = frame()
    o["score"] = o["score"].astype(object)
    o.loc[7, "score"] = SECRET  # one stray string in a numeric-looking column
    return ({"originals": put(t, "o_str", o, "csv"), "avatars": put(t, "a_str", frame(seed=1), "csv")},
            ["column number 4", "conflicting"])


def case_unknown_known_variable(t):
    return {"known_variables": ["age", "ctiy"]}, ["known_variables", "ctiy"]


def case_unknown_key(t):
    return {"holdot": None}, ["holdot"]


CASES = [v for k, v in sorted(globals().items()) if k.startswith("case_")]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__[5:] for c in CASES])
def test_bad_input(spark, tmp_path, capfd, case):
    base = {
        "originals": put(tmp_path, "o", frame()),
        "avatars": put(tmp_path, "a", frame(seed=1)),
        "exclude": ["pid"],
        "output": str(tmp_path / "out"),
    }
    override, words = case(tmp_path)
    cfg = {**base, **override}
    if cfg.get("row_key"):
        cfg["exclude"] = []
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    before = snapshot(tmp_path)
    code = main(["run", "--config", str(path)])
    out, err = capfd.readouterr()
    assert code == 2, err[-2000:]
    msg = err.split("avatar-metrics: error:", 1)[1] if "avatar-metrics: error:" in err else err
    for w in words:
        assert w in msg, (w, msg)
    assert snapshot(tmp_path) == before  # no output, no file touched
    assert SECRET not in out and SECRET not in err
