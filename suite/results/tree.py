"""The results tree on disk: the ONE walk every command uses over a results folder, and how files are made in it.

The rule (every command that walks results/: archive, index, site, compare, history, validate, promote): a walk
never follows a symlink out of the tree it was given, and takes only regular files inside it. A symlink whose
target lies inside the tree is passed over quietly (the target is read where it is); one that leads out of it
(or nowhere), and a name that is not UTF-8, are skipped and named once in a `SkippedPath` warning, the name
rendered with backslash escapes. Nothing that is not a regular file inside the tree is ever moved, deleted or
published (`regular_inside`). Files are created as `open()` creates them: the user's umask sets their mode.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

INDEX_DIR = ".index"  # the results index's folder (suite/results/index/store.py): never results, and may be a link


class TrainbenchWarning(UserWarning):
    """What a command tells its user and goes on (the CLI prints it as `warning: ...`, each message once)."""


class SkippedPath(TrainbenchWarning):
    """A path under a results folder that a command left out; the message names it and says why."""


def shown(path: str | bytes | os.PathLike[str]) -> str:
    """A path as printable, storable text: bytes that are not UTF-8 (a name Linux allows) backslash-escaped."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def is_text(name: str) -> bool:
    """False for a name whose bytes are not UTF-8 (Python holds them as lone surrogates, which no page, database
    or terminal can take)."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def skipped(path: str | os.PathLike[str], why: str) -> None:
    """Say that `path` was left out (Python's warnings: each message once; the CLI prints it as `warning: ...`)."""
    warnings.warn(SkippedPath(f"skipped {shown(path)}: {why}"), stacklevel=2)


def _within(real_top: str, target: str) -> bool:
    return target == real_top or target.startswith(real_top.rstrip(os.sep) + os.sep)


def _link(path: str, real_top: str) -> None:
    target = os.path.realpath(path)
    if not os.path.exists(path):
        skipped(path, "a symlink to nothing; not followed")
    elif not _within(real_top, target):
        advice = " (move its files into the results folder)" if os.path.isdir(path) else ""
        skipped(path, f"a symlink out of the results folder (to {shown(target)}); not followed, never read, moved "
                      f"or published{advice}")


def walk_folders(root: Path, skip: tuple[str, ...] = ()) -> Iterator[tuple[str, list[str], os.stat_result]]:
    """(folder, names of its regular files, the folder's stat) of each real folder under root, parents first.

    The root itself may be a symlink (it is the tree given); below it no symlink is followed, so a link loop
    cannot hang a walk and nothing outside the tree is reached. `skip`: folder names left out at the top."""
    top = os.fspath(root)
    real_top = os.path.realpath(top)
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            st = os.stat(folder)
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:  # gone, or not listable: nothing to read there
            continue
        files: list[str] = []
        subdirs: list[str] = []
        for e in entries:
            if folder is top and e.name in skip:  # e.g. the index's own folder, which may be a link to a fast disk
                continue
            if not is_text(e.name):
                skipped(e.path, "its name is not UTF-8 (rename it, e.g. with convmv); left out")
                continue
            try:
                if e.is_symlink():
                    _link(e.path, real_top)
                elif e.is_dir(follow_symlinks=False):
                    subdirs.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    files.append(e.name)
            except OSError:
                continue
        yield folder, files, st
        stack.extend(sorted(subdirs, reverse=True))


def json_files(root: Path) -> list[Path]:
    """The *.json files under root, sorted, hidden (temporary) files left out: the ONE walk every results
    reader uses (validate, show, compare, promote, the site; the index walks the same `walk_folders`)."""
    if root.is_file():
        return [root]
    found = [os.path.join(folder, n) for folder, names, _ in walk_folders(root, skip=(INDEX_DIR,))
             for n in names if n.endswith(".json") and not n.startswith(".")]
    return [Path(p) for p in sorted(found)]


def regular_inside(root: Path, rel: str) -> bool:
    """True when root/rel is a regular file reached without leaving the tree (no symlink on the way, none at
    the end): the only kind of file a command may move, delete or publish."""
    real_root = os.path.realpath(root)
    path = os.path.join(root, rel)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    expected = os.path.normpath(os.path.join(real_root, rel))
    return stat.S_ISREG(st.st_mode) and _within(real_root, expected) and os.path.realpath(path) == expected


def leads_out(root: Path, folder: Path) -> str | None:
    """Why writing into `folder` (which need not exist yet) would leave the tree of `root` through a symlink, or
    None: the writer refuses what no reader would read."""
    real_root, real = os.path.realpath(root), os.path.realpath(folder)
    if _within(real_root, real):
        return None
    return (f"{shown(folder)} leads through a symlink out of the results folder (to {shown(real)}), which no "
            "reader follows; make it a plain folder, or link the whole results folder instead")


def create_temp(folder: Path) -> tuple[int, str]:
    """A new hidden temporary file in `folder` (fd, path), mode 0666 less the umask, as `open()` makes one:
    tempfile.mkstemp's 0600 would survive the link into place and make every result private."""
    while True:
        tmp = os.path.join(folder, f".tmp-{secrets.token_hex(8)}.part")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), tmp
        except FileExistsError:
            continue


def umask() -> int:
    """This process's umask (from /proc, which reads it without changing it; else by setting it back at once)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def flocked(fd: int, exclusive: bool = True) -> Iterator[None]:
    """An advisory `flock` on an open file or folder `fd` while the block runs (the index's lock file, the site's
    output folder). Not POSIX (no fcntl): no lock, and one writer at a time is then the caller's promise."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def clean_stale_temporaries(folder: Path, older_than_s: float = 3600.0) -> int:
    """Remove `.tmp-*.part` files a killed writer left in folder. Only old ones: a live writer's file is fresh
    (a write takes milliseconds; an hour covers any fsync on a stalled disk)."""
    removed = 0
    if not folder.is_dir():
        return 0
    now = time.time()
    for tmp in folder.glob(".tmp-*.part"):
        try:
            if now - tmp.stat().st_mtime > older_than_s:
                tmp.unlink()
                removed += 1
        except OSError:
            continue
    return removed
