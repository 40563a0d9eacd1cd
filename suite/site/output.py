"""The site's output folder: kept apart from its inputs, written in place as one transaction (rolled back on
failure), and pruned only of files the previous build listed in its manifest (never a file the site did not write)."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from suite.results.tree import flocked

MARKER = ".trainbench-site"  # a folder holding this file is ours to replace; the file is the manifest


class SiteError(Exception):
    """The site cannot be built; the message says which input or folder and what to do."""


def check_out_apart(out: Path, inputs: dict[str, Path | None]) -> None:
    """Refuse an --out that is, holds or sits inside an input folder (after resolving symlinks).

    A site inside results/ is read back as results on the next build (2 -> 4 -> 6 runs); results inside the
    site's folder would be pruned as stale pages. Either way the user's data is at stake.
    """
    o = out.resolve()
    for flag, folder in inputs.items():
        if folder is None or not folder.exists():
            continue
        f = folder.resolve()
        if f.is_file() and o not in f.parents:
            continue  # one input file: only a site folder around it would be a problem
        if o == f or f in o.parents or o in f.parents:
            where = "is" if o == f else ("is inside" if f in o.parents else "holds")
            raise SiteError(f"--out {out} {where} {flag} {folder}: the site must be built in a folder of its "
                            f"own (e.g. --out site/_build), apart from its inputs")


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """One build at a time into `out`: an exclusive `flock` on the folder that holds it, from the checks of `out`
    to the manifest. Without it, a second build into a new --out found the first one's half-made folder and
    refused it as "not empty and not built by trainbench". The parent is locked, not a file in it: a lock file
    could not be removed safely, and a build leaves nothing beside the site (builds into sibling folders take
    turns too)."""
    final = out.resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(final.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        with flocked(fd):
            yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a build makes its many long-lived objects (rows, the manifest): each
    collection walks the whole heap, which made up 40% of a build with nothing new at 50,000 results."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_marker(out: Path) -> object:
    """The previous build's manifest as parsed JSON (None when there is none or it is unreadable): read once a
    build (it lists every file of the site, tens of MB at 250,000 results)."""
    try:
        with collector_paused():
            return json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


def previous_files(out: Path, data: object = ...) -> set[str]:
    """The files the previous build wrote, from its manifest (`data`: read_marker's, else read here); none when
    there is no manifest listing them."""
    if data is ...:
        data = read_marker(out)
    files = data.get("files") if isinstance(data, dict) else None
    return {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()


def prune(out: Path, written: set[str], previous: set[str]) -> None:
    """Delete what the previous build wrote (per its manifest) and this one did not: a result removed, a
    compare file dropped. A file the site did not write itself is never deleted."""
    root = out.resolve()
    for rel in sorted(previous - written - {MARKER}):
        path = (root / rel).resolve()
        if root in path.parents and path.is_file():
            if _TXN is not None:
                _TXN.remove(path)
            else:
                path.unlink()


# ---- a build as a transaction on the site folder ---------------------------------------------------------
# A build writes into --out in place, so a rebuild costs what changed, not what exists (seeding a staging copy
# of 250,000 pages with hard links, and deleting the old copy, took longer than rendering a night's pages).
# Before a file is created its name is appended to a journal; before one is replaced or pruned, the old file
# is hard-linked into a backup. A failed build (or, at the next build, one that was killed) is rolled back
# from those two: every page is then as it was. The new manifest is put in place last, after COMMITTED.

TXN_PREFIX = ".txn-"
_TXN: Txn | None = None  # the build's transaction, inherited by forked page renderers


class Txn:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.stage = out.parent / f".{out.name}{TXN_PREFIX}{os.getpid()}"
        self._fd: dict[int, int] = {}  # pid -> its journal (each forked renderer writes its own)
        self._seen: set[str] = set()

    def begin(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)
        (self.stage / "backup").mkdir(parents=True)
        if not self.out.exists():
            (self.stage / "created").write_text("", encoding="utf-8")  # a rollback removes the folder

    def _journal(self, rel: str) -> None:
        pid = os.getpid()
        fd = self._fd.get(pid)
        if fd is None:
            fd = self._fd[pid] = os.open(self.stage / f"new-{pid}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, (rel + "\n").encode("utf-8", "surrogateescape"))

    def before_write(self, path: Path) -> None:
        """Called before `path` (under out) is created or replaced: journal it, or keep the old file."""
        rel = path.relative_to(self.out).as_posix()
        if rel in self._seen:
            return
        self._seen.add(rel)
        if path.exists():
            backup = self.stage / "backup" / rel
            backup.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, backup)
        else:
            self._journal(rel)

    def remove(self, path: Path) -> None:
        """Prune a file: moved into the backup, so a rollback restores it."""
        backup = self.stage / "backup" / path.relative_to(self.out).as_posix()
        backup.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, backup)

    def commit(self, marker_text: str) -> None:
        for fd in self._fd.values():
            os.close(fd)
        self._fd.clear()
        (self.stage / "manifest").write_text(marker_text, encoding="utf-8")
        (self.stage / "COMMITTED").write_text("", encoding="utf-8")
        finish(self.out, self.stage)

    def rollback(self) -> None:
        for fd in self._fd.values():
            os.close(fd)
        self._fd.clear()
        undo(self.out, self.stage)


def finish(out: Path, stage: Path) -> None:
    """Complete a committed build: its manifest into place, the backups dropped."""
    with contextlib.suppress(FileNotFoundError):
        os.replace(stage / "manifest", out / MARKER)
    shutil.rmtree(stage, ignore_errors=True)


def undo(out: Path, stage: Path) -> None:
    """Roll an uncommitted build back: remove what it created, put back what it replaced or pruned."""
    if (stage / "created").exists():
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(stage, ignore_errors=True)
        return
    for journal in stage.glob("new-*"):
        for rel in journal.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                (out / rel).unlink()
    backup = stage / "backup"
    for folder, _, names in os.walk(backup):
        for name in names:
            src = Path(folder, name)
            dst = out / src.relative_to(backup)
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
    shutil.rmtree(stage, ignore_errors=True)


def before_write(path: Path) -> None:
    if _TXN is not None:
        _TXN.before_write(path)


@contextlib.contextmanager
def transaction(out: Path) -> Iterator[Txn]:
    """Build into `out` in place as one transaction: on any failure every file is as it was before."""
    global _TXN
    final = out.resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    _recover_stale(final)
    txn = Txn(final)
    txn.begin()
    _TXN = txn
    try:
        yield txn
    except BaseException:
        txn.rollback()
        raise
    finally:
        _TXN = None


def _recover_stale(final: Path) -> None:
    """Finish or roll back the transactions of builds that were killed (their process is gone), and remove the
    staging folders of the copy-and-swap builds before them."""
    for p in final.parent.glob(f".{final.name}.*-*"):
        kind, _, pid = p.name.rpartition("-")
        if not (kind.endswith((".staging", ".old", TXN_PREFIX[:-1])) and pid.isdigit()) or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue
        except ProcessLookupError:
            pass
        except OSError:
            continue
        if kind.endswith(TXN_PREFIX[:-1]):
            (finish if (p / "COMMITTED").exists() else undo)(final, p)
        else:
            shutil.rmtree(p, ignore_errors=True)
