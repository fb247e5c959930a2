"""spark-submit entry point: ``spark-submit jobs/privacy_metrics.py --config FILE [--set k=v ...]``."""

import sys

from avatar_metrics.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
