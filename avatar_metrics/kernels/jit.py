"""Where numba keeps the kernels' compiled code, so a Python worker loads it instead of compiling.

Compiling the kernels takes tens of seconds per process (35 to 60 s on a 2-core
machine). numba caches compiled code next to the source file when that folder
is writable: an editable install, a virtual environment, a Databricks library.
Two other ways of shipping the package have no such folder:

- ``spark-submit --py-files avatar_metrics.zip``: every executor imports the
  package from its own copy of the zip, at a path that changes with each
  application and each executor. numba's own zip locator keys its cache by
  that path, so every new executor would compile again;
- a read-only install (a system site-packages).

For those, ``_SharedLocator`` keeps the cache in a folder of the local
temporary directory (or under ``NUMBA_CACHE_DIR`` when set), named after the
user and a hash of the kernels' sources. Every executor of the same user on a
host, in this application or the next, with the same kernels, loads what the
first one compiled. Beside writable sources the cache goes to
``__pycache__/numba-<that hash>``. The files are the same in either folder
(their stamp is that hash, not the folder), so one folder's files can be copied
into the other. Keying on all of the kernels' sources
together (not on each file alone, as numba does) means a change to any kernel
module invalidates the compiled code of every other one that inlines it
(``terms.py``'s distance in ``trees.py``, ``keyed.py``'s mix everywhere).

numba's cache files are pickles, so the folder must be the user's own: it is
created with mode 0700, and an existing one is used only when it belongs to the
user and nobody else can write to it. When it cannot be used, or numba's
internals are not where this module expects them (``numba.core.caching`` is not
public API), the kernels compile in each process as before: slower, never
wrong.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from importlib import resources

_HERE = os.path.dirname(os.path.abspath(__file__))


def _in_tree_writable() -> bool:
    """numba's default: the cache beside the sources, when they are real files in a writable folder."""
    return os.path.isfile(__file__) and os.access(_HERE, os.W_OK)


def sources_hash() -> str:
    """A hash of every module of this package (``avatar_metrics.kernels``), read through the
    import system so that it works from a zip too."""
    h = hashlib.sha256()
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".py"):
            h.update(entry.name.encode() + b"\0" + entry.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def _private_dir(path: str) -> bool:
    """Create ``path`` with mode 0700, or accept it if it exists, is a real folder (not a link),
    belongs to this user and nobody else can write to it."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def shared_cache_dir() -> str | None:
    """The folder for the compiled kernels when they cannot be cached beside their sources, or
    None when no safe one exists."""
    base = os.environ.get("NUMBA_CACHE_DIR") or tempfile.gettempdir()
    try:
        os.makedirs(base, exist_ok=True)  # numba too creates NUMBA_CACHE_DIR when it is missing
        top = os.path.join(base, f"avatar-metrics-numba-{os.getuid()}")
        if not _private_dir(top):
            return None
        path = os.path.join(top, sources_hash())
        if not _private_dir(path):
            return None
        return path
    except OSError:
        return None


def in_tree_cache_dir() -> str | None:
    """Beside the sources: ``__pycache__/numba-<hash of the kernels' sources>``, or None."""
    path = os.path.join(_HERE, "__pycache__", f"numba-{sources_hash()}")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    return path


def _register() -> bool:
    """Put ``_SharedLocator`` first in numba's list of cache locators; True when the kernels can
    be cached (beside their sources or in the shared folder)."""
    path = in_tree_cache_dir() if _in_tree_writable() else shared_cache_dir()
    stamp = sources_hash()
    if path is None:
        return _in_tree_writable()  # numba's own cache beside the sources, per file
    try:
        from numba.core import caching
        base = caching._CacheLocator
        locators = caching.CacheImpl._locator_classes
    except (ImportError, AttributeError):
        return False

    class _SharedLocator(base):
        """Claims only this package's kernel modules; numba's own locators handle the rest."""

        def __init__(self, py_func):
            self._lineno = py_func.__code__.co_firstlineno

        def get_cache_path(self):
            return path

        def get_source_stamp(self):
            # the hash of the sources (the folder's name too), not the folder: the same kernels
            # write the same files beside the sources and in the shared folder
            return stamp

        def get_disambiguator(self):
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.dirname(os.path.abspath(py_file)) != _HERE:
                return None
            return cls(py_func)

    locators[:] = [c for c in locators if c.__name__ != "_SharedLocator"]
    locators.insert(0, _SharedLocator)
    return True


CACHE = _register()
