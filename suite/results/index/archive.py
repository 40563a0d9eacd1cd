"""Monthly archives: old result files (and the MLLOG logs beside them) packed into `results/archive/YYYY-MM.zip`.

A results branch then holds twelve files a year instead of millions. A member keeps the path it had under the
results folder, so the index reads it as the same run and the site gives it the same page. Nothing is lost:
the new archive is written beside the old one, read back and compared byte for byte with every file it takes
in, and only then put in place; the loose files are deleted last. An interrupted archive leaves every result
readable (the index prefers a loose file over an archived copy of it).
"""

from __future__ import annotations

import os
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from suite.results import record as results_mod
from suite.results.tree import is_text, regular_inside, skipped

ARCHIVE_DIR = "archive"


class ArchiveError(RuntimeError):
    """An archive could not be written or verified; no loose file was deleted. The message names the file."""


def archives(root: Path) -> list[Path]:
    """The monthly archives: regular *.zip files in results/archive, itself a real folder (the results tree's
    rule, suite.results.tree: a symlink there is skipped and named, as the walk names it)."""
    folder = root / ARCHIVE_DIR
    if folder.is_symlink() or not folder.is_dir():
        return []  # a symlinked archive folder is named by the walk of the results folder
    found = []
    for p in folder.glob("*.zip"):
        if p.name.startswith(".") or not is_text(p.name):  # a name that is not UTF-8 is named by the walk
            continue
        if regular_inside(root, f"{ARCHIVE_DIR}/{p.name}"):
            found.append(p)
    return sorted(found)


def display(root: Path, source: str, rel: str) -> str:
    """How an archived file is named in messages: the archive, then the member."""
    return f"{root / source}:{rel}"


def member_names(arch: Path) -> list[str]:
    with zipfile.ZipFile(arch) as z:
        return [n for n in z.namelist() if n.endswith(".json") and not n.rsplit("/", 1)[-1].startswith(".")]


def read_members(arch: Path, root: Path) -> Iterator[tuple[str, results_mod.Result | None, str | None]]:
    """(member path, Result or None, error or None) for every result in the archive, checked as a loose file is."""
    src = arch.relative_to(root).as_posix()
    try:
        z = zipfile.ZipFile(arch)
    except (OSError, zipfile.BadZipFile) as e:
        raise ArchiveError(f"{arch}: not a readable zip archive ({e}); restore it from git") from None
    with z:
        for info in z.infolist():
            name = info.filename
            if not name.endswith(".json") or name.rsplit("/", 1)[-1].startswith("."):
                continue
            where = display(root, src, name)
            try:
                if info.file_size > results_mod.MAX_RESULT_BYTES:
                    raise results_mod.ResultError(
                        f"{where}: {info.file_size} bytes is larger than any real result ({results_mod.MAX_RESULT_BYTES})")
                try:
                    text = z.read(info).decode("utf-8")
                except (OSError, UnicodeDecodeError, zipfile.BadZipFile, ValueError) as e:
                    raise results_mod.ResultError(f"{where}: cannot read: {e}") from None
                yield name, results_mod.parse_result(text, where), None
            except results_mod.ResultError as e:
                yield name, None, str(e)


def read_bytes(root: Path, source: str, rel: str) -> bytes:
    """One member's bytes (a result, or the MLLOG log archived beside it)."""
    with zipfile.ZipFile(root / source) as z:
        return z.read(rel)


def has_member(root: Path, source: str, rel: str) -> bool:
    with zipfile.ZipFile(root / source) as z:
        try:
            z.getinfo(rel)
        except KeyError:
            return False
        return True


@dataclass
class ArchiveReport:
    before: datetime
    archives: dict[str, int] = field(default_factory=dict)  # archive (relative to results) -> files added
    results: int = 0  # result files moved into archives
    logs: int = 0  # MLLOG logs moved with them
    left_loose: list[str] = field(default_factory=list)  # bad result files: never archived, fixed in place


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_month(root: Path, month: str, rels: list[str]) -> Path:
    """Write archive/<month>.zip = its old members + `rels`, verified, atomically; return it."""
    folder = root / ARCHIVE_DIR
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ArchiveError(f"{folder}: a symlink or not a folder; archives are written only inside the results "
                           "folder (make it a plain folder)")
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{month}.zip"
    tmp = folder / f".tmp-{month}.zip.part"
    old: list[str] = []
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as out:
            if final.exists():
                with zipfile.ZipFile(final) as z:
                    for info in z.infolist():
                        if info.filename not in rels:  # a loose file wins over an older archived copy
                            out.writestr(info, z.read(info))
                            old.append(info.filename)
            for rel in rels:
                st = (root / rel).stat()
                info = zipfile.ZipInfo(rel, date_time=time.gmtime(max(st.st_mtime, 315532800))[:6])
                info.compress_type = zipfile.ZIP_DEFLATED
                out.writestr(info, (root / rel).read_bytes())
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        with zipfile.ZipFile(tmp) as z:  # read back before anything is deleted
            bad = z.testzip()
            if bad is not None:
                raise ArchiveError(f"{tmp}: member {bad} fails its CRC after writing")
            names = set(z.namelist())
            for rel in rels:
                if z.read(rel) != (root / rel).read_bytes():
                    raise ArchiveError(f"{tmp}: {rel} reads back different from the file")
            missing = [n for n in old if n not in names]
            if missing:
                raise ArchiveError(f"{tmp}: lost {missing[0]} of the old archive")
        os.replace(tmp, final)
        _fsync_dir(folder)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return final


def _log_beside(root: Path, rel: str, name: str | None) -> str | None:
    """The log a result names, when it is a regular file beside it inside the tree; a symlink (say to
    /proc/self/environ) is never packed, and is named."""
    if not name or name != Path(name).name or name.startswith(".") or "\\" in name:
        return None
    log = Path(rel).parent.joinpath(name).as_posix()
    if regular_inside(root, log):
        return log
    if os.path.lexists(root / log):
        skipped(root / log, "the MLLOG log named by a result is a symlink or not a regular file; not archived, left "
                            "in place")
    return None


def month_of(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m")
