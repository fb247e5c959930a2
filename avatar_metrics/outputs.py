"""Writing outputs safely: only into folders this tool owns, whole or not at all.

The rules (README, "Safety"):

- A destination (the run's ``output``, a split's ``--working`` / ``--holdout``)
  must not be, contain or lie inside an input, and must not be a file.
- It must be absent, empty, or a folder this tool wrote for the same kind of
  output (a run's report, a split's half): such a folder holds a marker file,
  ``.avatar-metrics``, naming that kind and listing every file and folder the
  tool put there, at every depth. A folder with anything else in it, in a
  subfolder too, is refused, never cleared.
- What a rename needs is checked before the work too: the destination is no
  mount point, neither it nor its parent is append-only or immutable, and the
  hidden siblings' names fit the file system.
- Outputs are built in a hidden sibling folder and moved into place in one
  rename when complete, so a crash, a kill or a concurrent run never leaves a
  mixture; the earlier outputs are removed only after that rename. When the
  destination exists (a folder the user prepared, say), the sibling gets its
  owner, group, mode and ACL before anything is written into it, so the
  user's permissions hold for the new folder and, by inheritance, its files.
- A run killed between the two renames leaves the earlier outputs in a hidden
  ``old`` sibling with the destination missing: the next run puts them back
  first, and says so in the log.
- One run at a time per destination: a lock file beside it
  (``.<name>.avatar-metrics.lock``); a second run is refused (exit 2).
- Files are created with the user's umask.

Everything here is checked before the first file is touched.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import stat
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence
from urllib.parse import urlparse

from .errors import InputError

log = logging.getLogger(__name__)

MARKER = ".avatar-metrics"
TOOL = "avatar-metrics"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_GLOB = re.compile(r"[*?\[{]")


def expand(path: str) -> str:
    """``~`` and ``~user`` expanded; URIs (``s3a://``, ``dbfs:/``) left as they are."""
    return path if _SCHEME.match(path) else os.path.expanduser(path)


def local_pattern(uri: str) -> str | None:
    """The local path (or glob) a table location names, or None for a remote store.

    ``file:`` URIs are local; ``dbfs:/x`` is ``/dbfs/x`` (the Databricks FUSE
    mount); ``~`` is expanded.
    """
    if not _SCHEME.match(uri):
        return os.path.expanduser(uri)
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return parsed.path
    if parsed.scheme == "dbfs":
        return "/dbfs" + (parsed.path if parsed.path.startswith("/") else "/" + parsed.path)
    return None


def local_path(uri: str) -> Path | None:
    """The local path a table location names, or None for a remote store
    (``local_pattern``); a glob stands for the folder where its first wildcard starts.
    """
    path = local_pattern(uri)
    if path is None:
        return None
    m = _GLOB.search(path)
    if m:
        path = os.path.dirname(path[: m.start()]) or "."
    return Path(os.path.abspath(path)).resolve()


def relation(dest: Path, other: Path) -> str | None:
    """How ``dest`` sits against ``other``: "is", "contains", "lies inside" or None."""
    if dest == other:
        return "is"
    if dest in other.parents:
        return "contains"
    if other in dest.parents:
        return "lies inside"
    return None


def destination(path: str, what: str) -> Path:
    """The absolute, resolved destination folder named by the user."""
    if not isinstance(path, str) or not path.strip():
        raise InputError(f"{what}: give a folder path")
    if "\x00" in path:
        raise InputError(f"{what}: the path holds a NUL character, which no file system takes: check it")
    return Path(os.path.abspath(expand(path))).resolve()


# The kind of output a destination holds, by the name the user gave it: a run's output is not a
# split's half, and one never replaces the other.
KINDS = {"output": "report", "--working": "split", "--holdout": "split"}


def output_kind(what: str) -> str:
    return KINDS.get(what, what)


def tree(folder: Path) -> list[str]:
    """Every file and folder under ``folder``, as paths relative to it (``records/part-0.parquet``)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        rel = os.path.relpath(dirpath, folder)
        for name in dirnames + filenames:
            out.append(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
    return sorted(out)


def foreign_entries(folder: Path) -> list[str]:
    """The entries of ``folder`` (at any depth) its marker does not list (sorted); [] when empty or
    all ours. Without a marker that lists them all, every top-level entry is foreign."""
    entries = tree(folder)
    if not entries:
        return []
    data = _marked(folder)
    if data is None or "tree" not in data:
        return [e for e in entries if "/" not in e]  # nothing in it is known to be ours
    ours = set(data["tree"]) | {MARKER}
    return [e for e in entries if e not in ours]


def _marked(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("tool") != TOOL or not isinstance(data.get("files"), list):
        return None
    if "tree" in data and not isinstance(data["tree"], list):
        return None
    return data


def check_destination(dest: Path, inputs: Sequence[tuple[str, str]], what: str) -> None:
    """Refuse a destination that overlaps an input, is a file, or holds files not ours."""
    for role, location in inputs:
        other = local_path(location)
        if other is None:
            continue
        how = relation(dest, other)
        if how:
            raise InputError(
                f"{what} {dest} {how} the {role} input {location}: "
                "choose a folder that is neither an input, nor inside one, nor holding one"
            )
    if dest.is_symlink() and not dest.exists():
        raise InputError(f"{what} {dest} is a broken symbolic link: remove it or choose another folder")
    if not dest.exists():
        _check_parent(dest, what)
        return
    if not dest.is_dir():
        raise InputError(f"{what} {dest} is a file, not a folder: choose a folder for the outputs")
    data = _marked(dest)
    kind = output_kind(what)
    if data is not None and "tree" not in data:
        raise InputError(f"{what} {dest} was written by an earlier version of avatar-metrics, which did not list "
                         "the files inside its folders: remove it yourself (once you have checked that nothing of "
                         "yours is inside), or choose a new folder")
    if data is not None and data.get("kind") != kind:
        raise InputError(f"{what} {dest} holds the outputs of another command of avatar-metrics (a "
                         f"{data.get('kind')}, not a {kind}): choose another folder")
    foreign = foreign_entries(dest)
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise InputError(
            f"{what} {dest} holds {foreign[0]}{more}, which avatar-metrics did not write: "
            "it replaces only its own outputs, so choose a new or empty folder (or move those files away)"
        )
    _check_writable(dest.parent, dest, what)
    _check_writable(dest, dest, what)
    _check_keepable(dest, what)
    _check_movable(dest, what)


def _check_parent(dest: Path, what: str) -> None:
    """The nearest existing folder above ``dest`` must be a folder this user can write in."""
    for parent in dest.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{what} {dest}: {parent} is a file, not a folder")
            _check_writable(parent, dest, what)
            _check_names(dest, parent, what)
            return


SIBLING_SUFFIX = len(".avatar-metrics-stage-") + 12 + 1  # "." + name + this: the longest hidden sibling
FS_APPEND, FS_IMMUTABLE = 0x20, 0x10  # Linux inode flags (chattr +a, +i)


def _check_names(dest: Path, existing: Path, what: str) -> None:
    """The hidden siblings' names (``.<name>.avatar-metrics-stage-<12 hex>``) fit the file system."""
    try:
        longest = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        longest = 255
    if len(os.fsencode(dest.name)) + SIBLING_SUFFIX > longest:
        raise InputError(f"{what} {dest}: the name is too long for the folder built beside it "
                         f"(.{dest.name[:20]}...avatar-metrics-stage-..., over {longest} bytes): choose a shorter name")


def _inode_flags(path: Path) -> int:
    """The Linux inode flags of ``path`` (0 where the system or file system does not say)."""
    try:
        import array
        import fcntl

        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except (ImportError, OSError):
        return 0
    try:
        buf = array.array("l", [0])
        fcntl.ioctl(fd, 0x80086601, buf)  # FS_IOC_GETFLAGS
        return buf[0]
    except OSError:
        return 0
    finally:
        os.close(fd)


def _check_movable(dest: Path, what: str) -> None:
    """An existing destination is moved aside when the new outputs take its place: refuse before the
    work what would refuse that rename."""
    _check_names(dest, dest.parent, what)
    if os.path.ismount(dest):
        raise InputError(f"{what} {dest} is a mount point, which cannot be replaced: choose a folder inside it")
    for folder in (dest, dest.parent):
        if _inode_flags(folder) & (FS_APPEND | FS_IMMUTABLE):
            raise InputError(f"{what} {dest}: {folder} is append-only or immutable (chattr), so the outputs cannot "
                             "be moved into place: choose another folder, or clear that attribute")


def _check_writable(folder: Path, dest: Path, what: str) -> None:
    """The lock file, the staging folder and the final rename all write in ``folder``."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(
            f"{what} {dest}: this user cannot write in {folder} (permissions, or a read-only or immutable "
            "folder): choose another folder, or ask for write access to it"
        )


def _check_keepable(dest: Path, what: str) -> None:
    """The new outputs take the destination's owner and group (``_carry``): a user who may not
    give them is refused before any work, rather than leaving outputs others might read."""
    if not hasattr(os, "geteuid") or os.geteuid() == 0:
        return
    st = dest.stat()
    if st.st_uid != os.geteuid():
        raise InputError(f"{what} {dest} belongs to another user: its new outputs could not keep that owner; "
                         "choose a folder of your own")
    if st.st_gid not in (os.getegid(), *os.getgroups()):
        raise InputError(f"{what} {dest} has a group this user is not in: its new outputs could not keep that "
                         "group; choose another folder, or ask to join the group")


_HELD: set[Path] = set()  # locks this process holds (a run's lock covers its Report.write)


@contextmanager
def locked(dest: Path, what: str) -> Iterator[None]:
    """Hold the destination's lock file; refuse when another live run holds it."""
    if dest in _HELD:
        yield
        return
    # the folders made here for the lock, deepest first: taken away again if they end up empty
    made = [p for p in (dest.parent, *dest.parent.parents) if not p.exists()]
    dest.parent.mkdir(parents=True, exist_ok=True)
    lock = dest.parent / f".{dest.name}.avatar-metrics.lock"
    fd = None
    for attempt in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            break
        except FileExistsError:
            if attempt == 0 and _stale(lock):
                lock.unlink(missing_ok=True)
                continue
            raise InputError(
                f"another avatar-metrics run is writing {what} {dest} (lock file {lock}): wait for it to end, "
                "or remove the lock file if no run is going on"
            ) from None
    _HELD.add(dest)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{socket.gethostname()} {os.getpid()}\n")
        _remove_leftovers(dest)
        yield
    finally:
        _HELD.discard(dest)
        lock.unlink(missing_ok=True)
        for folder in made:  # a failed run leaves no trace; after a complete one, the output is inside
            try:
                folder.rmdir()
            except OSError:
                break


def _stale(lock: Path) -> bool:
    """A lock left by a dead process of this host."""
    try:
        host, pid = lock.read_text().split()
        pid = int(pid)
    except (OSError, ValueError):
        return False
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _sibling(dest: Path, kind: str) -> Path:
    return dest.parent / f".{dest.name}.avatar-metrics-{kind}-{uuid.uuid4().hex[:12]}"


def _leftovers(dest: Path) -> list[Path]:
    """Staging and old folders a killed run of ours left beside ``dest``."""
    prefix = f".{dest.name}.avatar-metrics-"
    return [entry for entry in dest.parent.iterdir()
            if entry.name.startswith(prefix) and entry.name[len(prefix):].split("-")[0] in ("stage", "old")]


def _remove_leftovers(dest: Path) -> None:
    """Clear what a killed run of ours left (only under the lock), after putting back the earlier
    outputs when that run was killed between its two renames (the destination missing)."""
    leftovers = _leftovers(dest)
    olds = [e for e in leftovers if ".avatar-metrics-old-" in e.name and e.is_dir()]
    if olds and not os.path.lexists(dest):
        newest = max(olds, key=lambda e: e.stat().st_mtime)
        os.rename(newest, dest)
        leftovers.remove(newest)
        log.warning("%s was missing and a run killed while replacing it had left its earlier outputs in %s: "
                    "put them back", dest, newest.name)
    for entry in leftovers:
        shutil.rmtree(entry, ignore_errors=True)


def _carry(src: Path, dst: Path) -> None:
    """Give the folder ``dst`` the owner, group, mode bits (setgid included) and extended
    attributes (POSIX ACLs among them) of ``src``. Called on the empty staging folder, so that
    what is written into it inherits as it would inside ``src`` (the group of a setgid folder,
    a default ACL)."""
    st, mine = src.stat(), dst.stat()
    if (st.st_uid, st.st_gid) != (mine.st_uid, mine.st_gid):
        os.chown(dst, st.st_uid if st.st_uid != mine.st_uid else -1, st.st_gid)
    os.chmod(dst, stat.S_IMODE(st.st_mode))
    if not hasattr(os, "listxattr"):
        return
    try:
        names = os.listxattr(src)
    except OSError:  # a file system without extended attributes
        return
    for name in names:
        try:
            os.setxattr(dst, name, os.getxattr(src, name))
        except OSError:
            if name.startswith("system.posix_acl"):
                raise  # an ACL that cannot be kept: fail rather than publish with looser access
            # other attributes (security labels, say) are the system's, not the user's permissions


def publish(dest: Path, build: Callable[[Path], Iterable[str]], what: str) -> None:
    """Build the outputs in a hidden sibling and move them into ``dest`` whole.

    ``build(stage)`` writes into the folder ``stage`` (empty when called, with
    the owner, group, mode and ACL of ``dest`` when that exists) and returns
    the names of the entries it wrote there. Call under ``locked``.
    """
    stage = _sibling(dest, "stage")
    old = None
    try:
        stage.mkdir()
        if dest.exists():
            _carry(dest, stage)
        names = list(build(stage))
        marker = {"tool": TOOL, "kind": output_kind(what), "files": sorted(names), "tree": tree(stage)}
        write_atomic(stage / MARKER, json.dumps(marker, indent=1) + "\n")
        if dest.exists():
            check_destination(dest, (), what)  # nothing foreign appeared meanwhile
            old = _sibling(dest, "old")
            os.rename(dest, old)
        os.rename(stage, dest)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        if old is not None and not dest.exists():
            os.rename(old, dest)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_atomic(path: Path, text: str) -> None:
    """Write a file so that a reader never sees half of it (mode from the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
