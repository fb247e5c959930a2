"""Configuration: defaults, overrides and every error naming its key."""

import pytest

from avatar_metrics.config import apply_overrides, block_size_for
from avatar_metrics.configure import as_config, build_config, load_config
from avatar_metrics.errors import ConfigError

MINIMAL = {"originals": {"path": "o.parquet"}, "avatars": {"path": "a.parquet", "format": "parquet"}}


def test_defaults_follow_the_interface():
    cfg = build_config(MINIMAL)
    assert cfg.originals.path == "o.parquet" and cfg.originals.format == "parquet"
    assert cfg.holdout is None and cfg.row_key is None and cfg.seed == 0 and cfg.quantile == 5
    assert cfg.targets == {
        "linkability_protection_rate": 90,
        "closest_rate": 90,
        "knowledge_protection_rate": 90,
        "column_direct_match_protection": 50,
        "hidden_rate": 90,
        "local_cloaking": 5,
        "row_direct_match_protection": 90,
        "membership_inference_protection": 90,
        "attribute_inference_protection": 90,
        "dcr_share_protection": 90,
    }
    assert cfg.avatars_aligned is True and cfg.secret_variables is None
    assert cfg.spark_master == "local[*]" and cfg.output == "out/"


def test_yaml_file_and_dotted_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("originals: {path: o.csv, format: csv}\navatars: {table: db.avatars}\nseed: 1\n")
    cfg = load_config(f, ["seed=7", "targets.closest_rate=95", "known_variables=[age, sex]", "spark.conf.spark.x=1"])
    assert cfg.seed == 7 and cfg.targets["closest_rate"] == 95.0 and cfg.targets["knowledge_protection_rate"] == 90
    assert cfg.known_variables == ("age", "sex")
    assert cfg.avatars.table == "db.avatars" and cfg.originals.format == "csv"
    assert cfg.spark_conf == {"spark.x": "1"}


def test_block_size_null_is_one_block_up_to_a_million_then_blocks_of_250000():
    assert build_config(MINIMAL).block_size is None
    assert block_size_for(None, 3) == 3 and block_size_for(None, 0) == 1
    assert block_size_for(None, 1_000_000) == 1_000_000  # one block
    assert block_size_for(None, 1_000_001) == 250_000  # five blocks
    assert block_size_for(17, 1_000_000) == 17 and block_size_for(2_000_000, 5_000_000) == 2_000_000
    assert build_config({**MINIMAL, "search": {"block_size": 5000}}).block_size == 5000


def test_override_keeps_the_file_untouched():
    data = {"seed": 1}
    assert apply_overrides(data, ["seed=2"]) == {"seed": 2} and data == {"seed": 1}


@pytest.mark.parametrize(
    "data,key",
    [
        ({**MINIMAL, "sed": 1}, "sed"),
        ({**MINIMAL, "targets": {"closest": 3}}, "targets.closest"),
        ({**MINIMAL, "seed": "x"}, "seed"),
        ({**MINIMAL, "seed": True}, "seed"),
        ({**MINIMAL, "quantile": 150}, "quantile"),
        ({**MINIMAL, "targets": {"closest_rate": "high"}}, "targets.closest_rate"),
        ({**MINIMAL, "known_variables": [1, 2]}, "known_variables"),
        ({**MINIMAL, "exclude": ["a", "a"]}, "exclude"),
        ({**MINIMAL, "linkability_halves": [["a"]]}, "linkability_halves"),
        ({**MINIMAL, "linkability_halves": [["a"], ["a"]]}, "linkability_halves"),
        ({"avatars": MINIMAL["avatars"]}, "originals"),
        ({**MINIMAL, "originals": "o.parquet"}, "originals"),
        ({**MINIMAL, "originals": {"path": "o", "format": "xlsx"}}, "originals.format"),
        ({**MINIMAL, "originals": {"path": "o", "table": "t"}}, "originals"),
        ({**MINIMAL, "avatars": {"format": "csv"}}, "avatars.path"),
        ({**MINIMAL, "holdout": {"pth": "h"}}, "holdout.pth"),
        ({**MINIMAL, "spark": {"master": 3}}, "spark.master"),
        ({**MINIMAL, "search": {"block_size": 0}}, "search.block_size"),
        ({**MINIMAL, "row_key": 5}, "row_key"),
        *[({**MINIMAL, "local_cloaking_cap": bad}, "local_cloaking_cap") for bad in (0, -3, 2.5, "all", True)],
        *[({**MINIMAL, "query_sample": bad}, "query_sample") for bad in (0, -3, 2.5, "all", True, "", [5])],
        *[({**MINIMAL, "secret_variables": bad}, "secret_variables") for bad in (5, [""], ["a", "a"], {"a": 1})],
        ({**MINIMAL, "local_cloaking_cap": 9}, "at least twice the Local Cloaking target"),  # target 5
        ({**MINIMAL, "local_cloaking_cap": 7, "targets": {"local_cloaking": 4}}, "local_cloaking_cap (7)"),
    ],
)
def test_errors_name_the_key(data, key):
    with pytest.raises(ConfigError) as err:
        build_config(data)
    assert key in str(err.value)


@pytest.mark.parametrize("item", ["seed", "=3", "seed=[1", "seed.x=1"])
def test_bad_overrides(item):
    with pytest.raises(ConfigError):
        build_config(apply_overrides({"seed": 1, **MINIMAL}, [item]))


def test_missing_or_invalid_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(listy)


def test_library_config_needs_no_inputs():
    cfg = as_config({"known_variables": ["a", "b"]})
    assert cfg.originals is None and cfg.known_variables == ("a", "b")
    assert as_config(cfg) is cfg and as_config(None).seed == 0


@pytest.mark.parametrize("master,cores", [("local", 1), ("local[3]", 3), ("local[4, 2]", 4), ("local[*]", "cpu"),
                                          ("spark://127.0.0.1:7077", None), ("yarn", None),
                                          ("local-cluster[2,1,1024]", None)])
def test_local_cores_of_a_master(master, cores):
    """An embedded local session gets 2 x its cores of shuffle partitions (not Spark's 200); a cluster none."""
    import os

    from avatar_metrics.cli import local_cores

    assert local_cores(master) == ((os.cpu_count() or 1) if cores == "cpu" else cores)


def test_local_input_bytes_sums_the_files_of_local_paths_only(tmp_path):
    """The quick JIT of a short run needs every input to be files here: their sizes add up;
    a metastore table, a URL or a path that matches nothing gives None (no guess)."""
    from avatar_metrics.cli import local_input_bytes
    from avatar_metrics.config import TableSpec

    folder = tmp_path / "t.parquet"
    folder.mkdir()
    (folder / "part-0").write_bytes(b"x" * 300)
    (folder / "part-1").write_bytes(b"x" * 200)
    one = tmp_path / "a.csv"
    one.write_bytes(b"y" * 70)
    assert local_input_bytes([TableSpec(path=str(folder)), TableSpec(path=str(one))]) == 570
    assert local_input_bytes([TableSpec(path="file://" + str(one))]) == 70
    assert local_input_bytes([TableSpec(path=str(tmp_path / "*.csv"))]) == 70
    assert local_input_bytes([TableSpec(path=str(one)), TableSpec(table="db.t")]) is None
    assert local_input_bytes([TableSpec(path="s3://bucket/t.parquet")]) is None
    assert local_input_bytes([TableSpec(path=str(tmp_path / "missing"))]) is None


def test_the_users_java_options_turn_the_quick_jit_off(tmp_path, monkeypatch):
    """The driver's Java options given in spark.conf, PYSPARK_SUBMIT_ARGS or spark-defaults.conf
    are the user's: the quick JIT of a short run would replace them, so it is not used."""
    from avatar_metrics.cli import _java_options_given
    from avatar_metrics.configure import as_config

    for var in ("PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR", "SPARK_HOME"):
        monkeypatch.delenv(var, raising=False)
    plain = as_config({})
    assert not _java_options_given(plain)
    assert _java_options_given(as_config({"spark": {"conf": {"spark.driver.extraJavaOptions": "-Xss4m"}}}))
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options -Xss4m pyspark-shell")
    assert _java_options_given(plain)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Xss4m\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert _java_options_given(plain)
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.memory 4g\n")
    assert not _java_options_given(plain)


def test_an_error_from_the_jvm_is_named_by_its_java_classes_not_its_message():
    """``Py4JJavaError`` alone says nothing; the classes of the Java exception and its causes do,
    and carry no record (the messages may)."""
    from avatar_metrics.errors import describe

    class Java:
        def __init__(self, name, cause=None):
            self.name, self.cause = name, cause

        def getClass(self):
            return self

        def getName(self):
            return self.name

        def getCause(self):
            return self.cause

        def toString(self):
            return f"{self.name}: the value 1234-secret"

    class Py4JJavaError(Exception):
        java_exception = Java("org.apache.spark.SparkException", Java("java.lang.OutOfMemoryError"))

    text = describe(Py4JJavaError("An error occurred: the value 1234-secret"))
    assert text == "Py4JJavaError (org.apache.spark.SparkException <- java.lang.OutOfMemoryError)"
    assert describe(ValueError("1234-secret")) == "ValueError"


@pytest.mark.parametrize("value", [0, 50000, "always"])
def test_home_from_is_accepted_deprecated_and_ignored(caplog, value):
    """search.home_from chose between two first jobs; one is left (the home job). A configuration
    that still sets it runs, with a warning naming the key; one without it warns of nothing."""
    with caplog.at_level("WARNING", logger="avatar_metrics"):
        cfg = build_config({**MINIMAL, "search": {"home_from": value}})
    assert "search.home_from is deprecated and ignored" in caplog.text
    assert cfg.search == build_config(MINIMAL).search
    caplog.clear()
    with caplog.at_level("WARNING", logger="avatar_metrics"):
        build_config(MINIMAL)
    assert "home_from" not in caplog.text


def test_metrics_names_the_metrics_to_compute():
    """metrics: null is every metric; a list of keys (a key twice counts once); an unknown key, an
    empty list or a number is exit 2 naming the key and listing the metrics."""
    assert build_config(MINIMAL).metrics is None
    cfg = build_config({**MINIMAL, "metrics": ["closest_rate", "hidden_rate", "closest_rate"]})
    assert cfg.metrics == ("closest_rate", "hidden_rate") and cfg.to_dict()["metrics"] == list(cfg.metrics)
    for bad in (["closest"], [], 3, [1]):
        with pytest.raises(ConfigError) as err:
            build_config({**MINIMAL, "metrics": bad})
        assert "configuration key metrics" in str(err.value) and "knowledge_protection_rate" in str(err.value)
