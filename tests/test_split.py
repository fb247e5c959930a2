"""avatar-metrics split: a seeded, order-keeping half split, refusing small tables and overwrites."""

from pathlib import Path

import pandas as pd

import reference as ref
from avatar_metrics.cli import MIN_SPLIT, main
from avatar_metrics.holdout import MIN_RECORDS

ROOT = Path(__file__).resolve().parents[1]
ORIGINALS = ROOT / "data/example/originals.parquet"


def test_split_example(spark, tmp_path, capsys):
    w, h = tmp_path / "w", tmp_path / "h"
    args = ["split", "--input", str(ORIGINALS), "--working", str(w), "--holdout", str(h), "--seed", "4"]
    assert main(args) == 0
    O = pd.read_parquet(ORIGINALS)
    W, H = (pd.read_parquet(p).astype(O.dtypes.to_dict()) for p in (w, h))
    assert (len(W), len(H)) == (1500, 1500) and list(W.columns) == list(O.columns)
    # the working half is the approximate holdout's, in input order
    idx = ref.working_half(len(O), 4)
    rest = sorted(set(range(len(O))) - set(idx))
    pd.testing.assert_frame_equal(W, O.iloc[idx].reset_index(drop=True), check_dtype=False)
    pd.testing.assert_frame_equal(H, O.iloc[rest].reset_index(drop=True), check_dtype=False)
    # existing outputs are kept unless --overwrite
    assert main(args) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(args + ["--seed", "5", "--overwrite"]) == 0
    assert not pd.read_parquet(w).equals(W)


def test_small_tables_are_told_about_the_approximate_holdout(spark, tmp_path, capsys):
    small = tmp_path / "small.parquet"
    pd.read_parquet(ORIGINALS).iloc[:120].to_parquet(small)
    w, h = tmp_path / "w", tmp_path / "h"
    args = ["split", "--input", str(small), "--working", str(w), "--holdout", str(h)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "approximate holdout" in err and "500" in err and "--force" in err
    assert not w.exists() and not h.exists()
    assert main(args + ["--force"]) == 0
    assert len(pd.read_parquet(w)) == 60 and len(pd.read_parquet(h)) == 60


def test_split_missing_input(spark, tmp_path, capsys):
    args = ["split", "--input", str(tmp_path / "none.parquet"), "--working", str(tmp_path / "w"),
            "--holdout", str(tmp_path / "h")]
    assert main(args) == 2
    assert "none.parquet" in capsys.readouterr().err


def test_threshold_is_one_number():
    assert MIN_SPLIT == MIN_RECORDS == 500
