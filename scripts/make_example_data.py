"""Write the bundled example data: data/example/{originals,avatars,holdout}.parquet.

    python scripts/make_example_data.py [--n 3000] [--k 10] [--seed 0] [--out data/example]

Deterministic: the same arguments give the same files.
"""

import argparse
from pathlib import Path

from avatar_metrics.synth import make_example


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3000, help="originals (and holdout) records")
    p.add_argument("--k", type=int, default=10, help="neighbours blended into each avatar")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="data/example")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    originals, avatars, holdout = make_example(a.n, a.n, a.k, a.seed)
    for name, df in (("originals", originals), ("avatars", avatars), ("holdout", holdout)):
        df.to_parquet(out / f"{name}.parquet", index=False)
        print(f"{out / name}.parquet: {len(df)} records")


if __name__ == "__main__":
    main()
