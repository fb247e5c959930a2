"""Inputs: positional alignment from files, and every input error."""

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

import reference as ref
from avatar_metrics import evaluate, metrics
from avatar_metrics.config import TableSpec
from avatar_metrics.configure import as_config
from avatar_metrics.errors import ConfigError, InputError
from avatar_metrics import positions
from avatar_metrics.io import ID, read_table
from avatar_metrics.positions import with_position
from avatar_metrics.schema import prepare_inputs, release

SECRET = "SECRET-VALUE-4242"


def frame(n=30, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(20, 60, n),
        "city": rng.choice(["Lyon", "Nantes", SECRET], n),
        "score": np.round(rng.normal(0, 1, n), 2),
    })


def write_parts(df, folder, parts, fmt="parquet"):
    folder.mkdir(parents=True, exist_ok=True)
    for i, chunk in enumerate(np.array_split(np.arange(len(df)), parts)):
        part = df.iloc[chunk]
        if fmt == "parquet":
            part.to_parquet(folder / f"part-{i:03d}.parquet", index=False)
        else:
            part.to_csv(folder / f"part-{i:03d}.csv", index=False)
    return str(folder)


@pytest.mark.parametrize("fmt,local_rows", [("parquet", 2000), ("csv", 2000), ("parquet", 0)])
def test_position_is_input_order_whatever_the_split(spark, tmp_path, fmt, local_rows, monkeypatch):
    # local_rows 0: the split offsets go through createDataFrame, as for a table of thousands of splits
    monkeypatch.setattr(positions, "LOCAL_ROWS", local_rows)
    df = frame(3000).assign(seq=np.arange(3000))
    path = write_parts(df, tmp_path / fmt, 4, fmt)
    key = "spark.sql.files.maxPartitionBytes"
    old = spark.conf.get(key)
    seen = []
    try:
        for size in ("4000", "128MB"):
            spark.conf.set(key, size)
            t = with_position(read_table(spark, TableSpec(path=path, format=fmt), "originals"))
            pdf = t.select(ID, "seq").toPandas().sort_values(ID)
            seen.append(pdf["seq"].tolist())
    finally:
        spark.conf.set(key, old)
    assert seen[0] == list(range(3000)) and seen[1] == seen[0]


def test_positions_of_several_tables_in_one_action(spark, tmp_path):
    # the inputs' positions come from one action over the tables: each keeps its own input order,
    # whatever the other tables' files and splits (a parquet of 4 files, a CSV, a local frame)
    sizes = (1200, 700, 300)
    pq = read_table(spark, TableSpec(path=write_parts(frame(sizes[0]).assign(seq=np.arange(sizes[0])),
                                                       tmp_path / "p", 4), format="parquet"), "originals")
    cs = read_table(spark, TableSpec(path=write_parts(frame(sizes[1]).assign(seq=np.arange(sizes[1])),
                                                       tmp_path / "c", 2, "csv"), format="csv"), "avatars")
    local = spark.createDataFrame(frame(sizes[2]).assign(seq=np.arange(sizes[2]))).repartition(1)
    key = "spark.sql.files.maxPartitionBytes"
    old = spark.conf.get(key)
    try:
        spark.conf.set(key, "4000")  # many splits per file
        tables = positions.with_positions([pq, cs, local])
        for t, n in zip(tables, sizes):
            pdf = t.select(ID, "seq").toPandas().sort_values(ID)
            assert pdf[ID].tolist() == list(range(n)) and pdf["seq"].tolist() == list(range(n))
    finally:
        spark.conf.set(key, old)


def one_file_tables(spark, tmp_path):
    """Tables whose positions come from the caching pass, each in several Spark partitions (with
    ``maxPartitionBytes`` small): a parquet file of row groups of 400, a CSV file, a range."""
    n = 1200
    out = []
    for i, fmt in enumerate(("parquet", "csv")):
        pdf, path = frame(n, i).assign(seq=np.arange(n)), tmp_path / f"t{i}.{fmt}"
        pdf.to_parquet(path, index=False, row_group_size=400) if fmt == "parquet" else pdf.to_csv(path, index=False)
        out.append(read_table(spark, TableSpec(path=str(path), format=fmt), "originals"))
    seq = F.col("id")
    out.append(spark.range(0, n, 1, 3).select((seq % 40 + 20).alias("age"), F.lit("Lyon").alias("city"),
                                              (seq / 7).alias("score"), seq.alias("seq")))
    return out, n


@pytest.mark.parametrize("most", [None, 1])
def test_positions_in_the_caching_pass(spark, tmp_path, monkeypatch, most):
    """A table of one file, or of none, gets its positions in the action that fills its cache:
    the counting pass reads none of them (most=None); a table of more partitions than the plan
    takes (most=1) goes through the counting pass after all, to the same positions."""
    counted = []
    count = positions.with_positions
    monkeypatch.setattr(positions, "with_positions", lambda dfs: counted.append(len(dfs)) or count(dfs))
    if most is not None:
        monkeypatch.setattr(positions, "MOST_PARTITIONS", most)
    key = "spark.sql.files.maxPartitionBytes"
    old = spark.conf.get(key)
    try:
        spark.conf.set(key, "8000")
        (o, a, h), n = one_file_tables(spark, tmp_path)
        inputs = prepare_inputs(o, a, h, as_config({"records": False}))
        try:
            for _, t in inputs.tables():
                pdf = t.select(ID, "seq").toPandas().sort_values(ID)
                assert pdf[ID].tolist() == list(range(n)) and pdf["seq"].tolist() == list(range(n))
            assert inputs.stats["originals"].rows == n and inputs.stats["holdout"]["seq"].max == n - 1
            assert len(inputs.cached) == 3
        finally:
            release(inputs)
    finally:
        spark.conf.set(key, old)
    assert counted == ([] if most is None else [1, 1, 1])


def test_place_orders_partitions_by_their_split(spark):
    """``place``: partitions in the order of their splits' offsets, not of their numbers; none
    where a partition holds two splits or its ids are not consecutive."""
    p1 = 1 << 33
    df = spark.createDataFrame([(0, 100), (1, 100), (p1, 0), (p1 + 1, 0), (p1 + 2, 0)], [ID, positions.SPLIT])
    row = lambda p, n, m0, b0, b1=None: {"__am_p": p, "n": n, "__am_m0": m0, "__am_m1": m0 + n - 1,  # noqa: E731
                                         "__am_b0": b0, "__am_b1": b0 if b1 is None else b1}
    parts = [row(0, 2, 0, 100), row(1, 3, p1, 0)]
    placed = positions.place(df, parts)
    assert placed.columns == [ID]
    assert [r[ID] for r in placed.collect()] == [3, 4, 0, 1, 2]
    assert positions.place(df, [row(0, 2, 0, 0, 100), row(1, 3, p1, 0)]) is None
    assert positions.place(df, [row(0, 3, 0, 100), row(1, 3, p1, 0)][:1] + [dict(row(1, 3, p1, 0), n=4)]) is None
    assert positions.place(df, parts, most=1) is None


def test_positional_alignment_across_files(spark, tmp_path):
    O, A = frame(40, 1), frame(40, 2)
    A.loc[::3] = O.loc[::3].to_numpy()
    po = write_parts(O, tmp_path / "o", 3)
    pa = write_parts(A, tmp_path / "a", 1, "csv")
    o = read_table(spark, TableSpec(path=po, format="parquet"), "originals")
    a = read_table(spark, TableSpec(path=pa, format="csv"), "avatars")
    rep = evaluate(spark, o, a, None, {"records": False}, only=["column_direct_match_protection"]).to_dict()
    value, cols = ref.column_direct_match(O, A, list(O.columns))
    assert rep["metrics"]["column_direct_match_protection"]["details"]["columns"] == cols


def test_row_key_alignment(spark):
    O = frame(30, 3).assign(pid=np.arange(30) * 7)
    A = O.sample(frac=1.0, random_state=1).reset_index(drop=True)  # same records, shuffled
    rep = evaluate(spark, spark.createDataFrame(O), spark.createDataFrame(A), None, {"row_key": "pid", "records": False},
                   only=["column_direct_match_protection"]).to_dict()
    cols = rep["metrics"]["column_direct_match_protection"]["details"]["columns"]
    assert set(cols) == {"age", "city", "score"}  # the key is no variable
    assert rep["metrics"]["column_direct_match_protection"]["details"]["counts"]["age"]["matches"] == 30


def test_string_row_key(spark):
    O = frame(20, 3).assign(pid=[f"p{i}" for i in range(20)])
    A = O.iloc[::-1].reset_index(drop=True)
    rep = evaluate(spark, spark.createDataFrame(O), spark.createDataFrame(A), None, {"row_key": "pid", "records": False},
                   only=["column_direct_match_protection"]).to_dict()
    assert rep["metrics"]["column_direct_match_protection"]["details"]["counts"]["city"]["matches"] == 20


UNORDERED = {
    "repartition": lambda d: d.repartition(3),
    "join": lambda d: d.join(d.select("age").distinct(), "age"),
    "aggregate": lambda d: d.groupBy(*d.columns).count().drop("count"),
    "sort": lambda d: d.orderBy("age"),  # ties in age: their order changes with the shuffle
}


@pytest.fixture(scope="module")
def parts(spark, tmp_path_factory):
    O = frame(30, 3).assign(pid=np.arange(30))
    return O, spark.read.parquet(write_parts(O, tmp_path_factory.mktemp("order") / "o", 2))


@pytest.mark.parametrize("how", list(UNORDERED))
def test_input_order_is_refused_where_spark_does_not_reproduce_it(spark, parts, how):
    """Positional alignment of a shuffled table would pair records by fetch order: refused, naming
    the table and row_key."""
    _, o = parts
    with pytest.raises(InputError) as err:
        evaluate(spark, o, UNORDERED[how](o), None, {"records": False, "exclude": ["pid"]},
                 only=["column_direct_match_protection"])
    assert "avatars" in str(err.value) and "row_key" in str(err.value) and SECRET not in str(err.value)


def test_a_key_aligns_what_has_no_order_and_files_and_local_data_keep_theirs(spark, parts):
    O, o = parts
    only = {"only": ["column_direct_match_protection"]}
    rep = evaluate(spark, o, UNORDERED["join"](o), None, {"records": False, "row_key": "pid"}, **only).to_dict()
    assert rep["metrics"]["column_direct_match_protection"]["details"]["counts"]["age"]["matches"] == 30
    ordered = o.coalesce(1).select("*").filter("age > 0")
    rep = evaluate(spark, ordered, spark.createDataFrame(O), None, {"records": False, "exclude": ["pid"]}, **only)
    assert rep.to_dict()["metrics"]["column_direct_match_protection"]["details"]["counts"]["age"]["matches"] == 30


def errors():
    base = frame(20, 5)
    other = frame(20, 6)
    d = dt.date(2020, 1, 1)
    return {
        "missing column": (base, other.drop(columns=["score"]), None, {}, InputError, ["avatars", "score", "exclude"]),
        "extra column": (base, other.assign(extra=1), None, {}, InputError, ["avatars", "extra"]),
        "conflicting types": (base, other.assign(age=other["age"].astype(str)), None, {}, InputError, ["age", "conflicting"]),
        "unsupported type": (base.assign(day=d), other.assign(day=d), None, {}, InputError, ["day", "exclude"]),
        "row counts": (base, other.iloc[:15], None, {}, InputError, ["15", "20", "row_key"]),
        "empty": (base, other.iloc[:0], None, {}, InputError, ["avatars", "empty"]),
        "all null": (base.assign(x=None).astype({"x": "float64"}), other.assign(x=np.nan), None, {}, InputError, ["x", "null"]),
        "key missing": (base, other, None, {"row_key": "pid"}, InputError, ["pid", "missing"]),
        "key duplicated": (base.assign(pid=1), other.assign(pid=np.arange(20)), None, {"row_key": "pid"}, InputError, ["originals", "pid", "duplicated"]),
        "key sets differ": (base.assign(pid=np.arange(20)), other.assign(pid=np.arange(20) + 1), None, {"row_key": "pid"}, InputError, ["pid", "same key set"]),
        "key null": (base.assign(pid=[None] + list(range(19))), other.assign(pid=np.arange(20.0)), None, {"row_key": "pid"}, InputError, ["pid", "null"]),
        "holdout schema": (base, other, other.drop(columns=["city"]), {}, InputError, ["holdout", "city"]),
        "holdout types": (base, other, other.assign(score="x"), {}, InputError, ["score", "holdout string"]),
        "unknown known": (base, other, None, {"known_variables": ["agee"]}, ConfigError, ["known_variables", "agee"]),
        "unknown exclude": (base, other, None, {"exclude": ["nope"]}, ConfigError, ["exclude", "nope"]),
        "unknown categorical": (base, other, None, {"categorical": ["nope"]}, ConfigError, ["categorical", "nope"]),
        "halves not known": (base, other, None, {"known_variables": ["age", "city"], "linkability_halves": [["age"], ["score"]]}, ConfigError, ["score"]),
    }


def sdf(spark, pdf):
    if len(pdf) == 0:  # pandas cannot tell Spark the types of an empty frame
        return spark.createDataFrame(pdf, schema=spark.createDataFrame(frame(1)).schema)
    return spark.createDataFrame(pdf)


@pytest.mark.parametrize("case", list(errors()))
def test_input_errors(spark, case):
    O, A, H, config, exc, words = errors()[case]
    h = sdf(spark, H) if H is not None else None
    with pytest.raises(exc) as err:
        evaluate(spark, sdf(spark, O), sdf(spark, A), h, config)
    msg = str(err.value)
    for w in words:
        assert w in msg, (case, msg)
    assert SECRET not in msg


def test_excluding_fixes_a_column(spark):
    d = dt.date(2020, 1, 1)
    O, A = frame(10, 1).assign(day=d), frame(10, 2).assign(day=d)
    rep = evaluate(spark, spark.createDataFrame(O), spark.createDataFrame(A), None, {"exclude": ["day"], "records": False},
                   only=["column_direct_match_protection"]).to_dict()
    assert "day" not in rep["inputs"]["variables"]


def test_unreadable_file_names_it(spark, tmp_path):
    with pytest.raises(InputError) as err:
        read_table(spark, TableSpec(path=str(tmp_path / "missing.parquet"), format="parquet"), "originals")
    assert "originals" in str(err.value) and "missing.parquet" in str(err.value)
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(InputError, match="avatars.*bad.parquet"):
        read_table(spark, TableSpec(path=str(bad), format="parquet"), "avatars")


def test_variables_and_kinds(spark):
    O = frame(10, 1).assign(code=np.arange(10), flag=True)
    inputs = prepare_inputs(spark.createDataFrame(O), spark.createDataFrame(O), None, as_config({"categorical": ["code"]}))
    try:
        assert inputs.variables == {"age": "numeric", "city": "categorical", "score": "numeric",
                                    "code": "categorical", "flag": "categorical"}
    finally:
        release(inputs)


# every bare name the engine and the metrics give a column of their own, as variables
INTERNAL = ["radius", "cid", "d1", "d2", "le", "lt", "key", "x", "var", "w", "s", "member", "k0", "n1", "a1", "h1",
            "ca", "cb", "na", "nb", "r_wa", "d_wa", "cell", "id", "h", "b", "r", "p", "t", "n"]


def test_variables_may_take_any_internal_name(spark):
    """A variable named like a column of the tool's own (the count's radius, a search's state): every
    metric with columns of its own is computed, and the count within a radius equals the brute force."""
    rng = np.random.default_rng(11)
    make = lambda: pd.DataFrame({c: (rng.integers(0, 4, 20).astype(float) if i % 2 else rng.choice(list("ab"), 20))
                                 for i, c in enumerate(INTERNAL)})
    O, A, H = make(), make(), make()
    config = {"known_variables": INTERNAL[:4], "records": False,
              "linkability_halves": [["radius", "cid"], ["d1", "d2"]]}
    # (Column and Row Direct Match keep the variables' own names, no column of their own beside them)
    only = [m.key for m in metrics.REGISTRY if "direct_match" not in m.key]
    got = evaluate(spark, *map(spark.createDataFrame, (O, A, H)), config, only=only).to_dict()["metrics"]
    assert all(got[key]["computed"] for key in only)
    kinds = {c: "numeric" if i % 2 else "categorical" for i, c in enumerate(INTERNAL)}
    assert got["local_cloaking"]["value"] == ref.local_cloaking(O, A, kinds)[0]
    assert got["hidden_rate"]["value"] == ref.hidden_rate(O, A, kinds, 0)[0]
