"""Where the compiled kernels are kept when the package comes from a zip (``spark-submit --py-files``):
one folder per user and version of the kernels, shared by every executor whatever the zip's path,
and never a folder somebody else could write to. Each case runs a fresh Python, as an executor does."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from avatar_metrics.kernels import keyed
value = int(keyed.mix_jit(np.uint64(5)))
stats = keyed.mix_jit.stats
print(json.dumps({"file": keyed.__file__, "cache": keyed.JIT_CACHE, "path": stats.cache_path,
                  "hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                  "value": value}))
"""


def package_zip(path: Path, extra_comment: str = "") -> Path:
    """The package zipped as --py-files ships it; ``extra_comment`` is appended to gower.py."""
    with zipfile.ZipFile(path, "w") as z:
        for f in sorted((ROOT / "avatar_metrics").rglob("*.py")):
            text = f.read_text()
            if f.name == "gower.py" and f.parent.name == "kernels":
                text += extra_comment
            z.writestr(str(f.relative_to(ROOT)), text)
    return path


def probe(zip_path: Path, cache_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["NUMBA_CACHE_DIR"] = str(cache_dir)
    out = subprocess.run([sys.executable, "-c", PROBE, str(zip_path)], capture_output=True, text=True,
                         cwd=zip_path.parent, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_executors_share_the_compiled_kernels_whatever_the_zips_path(tmp_path):
    cache = tmp_path / "cache"
    first = probe(package_zip(tmp_path / "executor-0.zip"), cache)
    again = probe(package_zip(tmp_path / "executor-1.zip"), cache)
    assert ".zip" in first["file"] and ".zip" in again["file"]
    assert first["cache"] and first["misses"] == 1 and first["hits"] == 0
    assert again["path"] == first["path"] and again["hits"] == 1 and again["misses"] == 0
    assert again["value"] == first["value"]
    top = cache / f"avatar-metrics-numba-{os.getuid()}"
    assert Path(first["path"]).parent == top
    assert (top.stat().st_mode & 0o777) == 0o700 and (Path(first["path"]).stat().st_mode & 0o777) == 0o700

    # another version of any kernel module (here gower.py, not the module compiled) gets its own folder
    changed = probe(package_zip(tmp_path / "executor-2.zip", "\n# changed\n"), cache)
    assert changed["path"] != first["path"] and changed["misses"] == 1 and changed["hits"] == 0


def test_a_cache_folder_others_can_write_to_is_not_used(tmp_path):
    cache = tmp_path / "cache"
    top = cache / f"avatar-metrics-numba-{os.getuid()}"
    top.mkdir(parents=True)
    top.chmod(0o777)
    got = probe(package_zip(tmp_path / "p.zip"), cache)
    assert got["cache"] is False and got["path"] is None
    assert got["value"] == probe(package_zip(tmp_path / "q.zip"), tmp_path / "other")["value"]
    assert not any(top.iterdir())


def source_tree(tmp_path: Path, name: str, comment: str = "") -> Path:
    """The package as real files (an editable install), ``comment`` appended to gower.py."""
    with zipfile.ZipFile(package_zip(tmp_path / f"{name}.zip", comment)) as z:
        z.extractall(tmp_path / name)
    return tmp_path / name


def probe_tree(root: Path) -> dict:
    """The probe on a source tree, numba's cache where the package puts it (no NUMBA_CACHE_DIR)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR")}
    out = subprocess.run([sys.executable, "-c", PROBE, str(root)], capture_output=True, text=True,
                         cwd=root, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_beside_the_sources_the_cache_follows_every_kernel_module(tmp_path):
    """An editable install: the cache is under kernels/__pycache__, in a folder named after all the
    kernels' sources, so an edit of one module (gower.py here) recompiles what inlines it elsewhere."""
    root = source_tree(tmp_path, "a")
    first, again = probe_tree(root), probe_tree(root)
    assert Path(first["path"]).parent == root / "avatar_metrics" / "kernels" / "__pycache__"
    assert Path(first["path"]).name.startswith("numba-") and first["misses"] == 1 and again["hits"] == 1
    changed = probe_tree(source_tree(tmp_path, "b", "\n# changed\n"))
    assert Path(changed["path"]).name != Path(first["path"]).name and changed["misses"] == 1


def test_the_compiled_files_are_the_same_beside_the_sources_and_in_the_shared_folder(tmp_path):
    """What an editable install compiled, copied into the shared folder, is what an executor
    importing the same sources from a zip loads (the suite's cluster gets its kernels so)."""
    beside = Path(probe_tree(source_tree(tmp_path, "tree"))["path"])
    cache = tmp_path / "cache"
    shared = cache / f"avatar-metrics-numba-{os.getuid()}" / beside.name[len("numba-"):]
    shared.mkdir(parents=True, mode=0o700)
    shared.parent.chmod(0o700)
    for f in beside.iterdir():
        (shared / f.name).write_bytes(f.read_bytes())
    got = probe(package_zip(tmp_path / "executor.zip"), cache)
    assert Path(got["path"]) == shared and got["hits"] == 1 and got["misses"] == 0
