"""The index database: an embedded DuckDB file beside the results, kept up to date incrementally under a lock.

`results/.index/results.duckdb` (git-ignored, rebuildable) holds one typed row per run (`runs`), one row per
evaluated metric per evaluation (`series`), the manifest of every file read (`files`: path + size + mtime, and
the error of a bad one) and the index's own schema version (`meta`). An update reads only files whose path,
size or mtime is not in the manifest, in one transaction, under an exclusive `flock`: readers hold a shared
lock, so no reader ever sees half an update and two writers never interleave. A database written by another
schema version, or one DuckDB cannot open, is deleted and rebuilt from the files, which stay the source of truth.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from suite.results import record as results_mod
from suite.results import tree as results_tree
from suite.results.index import archive as archive_mod
from suite.results.index.rows import RUN_COLUMNS, SERIES_COLUMNS, row_of

# bump on any change to the tables or to what a row holds; the results' own schema version is part of it,
# so a new migration re-reads every file
INDEX_SCHEMA = 8  # 2: the comparison key (suite/results/key.py) of each run; 3: the site's columns, series order;
# 4: `paused` (a pause inside the timed run); 5: RL post-training's phase times (rollout/training s per step);
# 6: `imported` (a published MLPerf result's provenance), `synthetic_data` (the run read `trainbench data prepare
# --synthetic` files), `variant` (`--variant tiny`), `goodput` (the wall-clock account's parts and goodput, JSON); 7: `goodput` also holds the recoveries and the
# spec's injected faults;
# 8: `figures` (stats.figures_of as JSON: a new per-seed figure reaches compare without a new column)
INDEX_DIR = results_tree.INDEX_DIR  # ".index"
DB_NAME = "results.duckdb"
LOCK_NAME = "lock"

DIR_COLUMNS: tuple[tuple[str, str], ...] = (("path", "VARCHAR"), ("mtime_ns", "BIGINT"))
FILE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("path", "VARCHAR"), ("source", "VARCHAR"), ("size", "BIGINT"), ("mtime_ns", "BIGINT"), ("error", "VARCHAR"),
)


class IndexStoreError(RuntimeError):
    """The index cannot be used (its folder is not writable, or DuckDB failed); the message says where.
    `where` (the index folder) and `why` (the cause) apart, for readers that fall back to the files."""

    def __init__(self, message: str, where: str = "", why: str = ""):
        super().__init__(message)
        self.where, self.why = where or message, why or message


@dataclass
class UpdateReport:
    """What one update did. `rebuilt` names why the database was started afresh ('' when it was not)."""

    db: Path
    read: int = 0  # files parsed this time (new or changed)
    removed: int = 0  # manifest entries whose file is gone (deleted, or moved into an archive)
    runs: int = 0  # runs in the index afterwards
    errors: int = 0  # bad files in the index afterwards
    rebuilt: str = ""
    rescan: bool = False  # stat every file, not only those in folders whose mtime changed
    seconds: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)


def index_dir(root: Path) -> Path:
    return root / INDEX_DIR


def db_path(root: Path) -> Path:
    return index_dir(root) / DB_NAME


@contextlib.contextmanager
def _flock(root: Path, exclusive: bool) -> Iterator[None]:
    """An advisory lock on results/.index/lock: exclusive for an update, shared for a read."""
    folder = index_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with results_tree.flocked(fd, exclusive):
            yield
    finally:
        os.close(fd)


def _schema_id() -> str:
    return f"{INDEX_SCHEMA}.{results_mod.SCHEMA_VERSION}"


def _create(con: duckdb.DuckDBPyConnection) -> None:
    for name, cols in (("runs", RUN_COLUMNS), ("series", SERIES_COLUMNS), ("files", FILE_COLUMNS),
                       ("dirs", DIR_COLUMNS)):
        con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in cols)})")
    con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema', ?)", [_schema_id()])


def _drop_db(db: Path) -> None:
    for p in (db, db.with_name(db.name + ".wal")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _open_checked(db: Path) -> tuple[duckdb.DuckDBPyConnection, str]:
    """A connection to a database of this schema, and why it was created afresh ('' if it was not)."""
    why = ""
    if db.exists() and not os.access(db, os.W_OK):  # another user's index: fall back, never delete it to rebuild
        raise PermissionError(errno.EACCES, "the index database is not writable by this user", str(db))
    if db.exists():
        try:
            con = duckdb.connect(str(db))
        except duckdb.Error as e:
            why = f"{db}: unreadable index ({type(e).__name__}: {str(e).splitlines()[0][:200]}); rebuilt from the files"
        else:
            try:
                row = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                for name in ("runs", "series", "files", "dirs"):
                    con.execute(f"SELECT count(*) FROM {name}").fetchone()
            except duckdb.Error:
                row = None
                why = f"{db}: index tables missing or damaged; rebuilt from the files"
            if row is not None and row[0] == _schema_id():
                return con, ""
            if row is not None:
                why = f"{db}: index schema {row[0]} is not this trainbench's {_schema_id()}; rebuilt from the files"
            con.close()
        _drop_db(db)
    else:
        why = "new"
    db.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(db))
    _create(con)
    return con, why


# ---- reading the files --------------------------------------------------------------------------------


@dataclass
class _Batch:
    runs: list[list[Any]] = field(default_factory=list)
    series: list[list[Any]] = field(default_factory=list)
    files: list[list[Any]] = field(default_factory=list)

    def add(self, rel: str, source: str, size: int, mtime_ns: int, result: results_mod.Result | None,
            error: str | None, display: str) -> None:
        if result is not None:
            run, series = row_of(rel, source, result)
            self.runs.append(run)
            self.series.extend(series)
        if error is not None:
            # stored without the folder the reader named, which is put back when it is reported
            error = error.removeprefix(display + ": ")
        self.files.append([rel, source, size, mtime_ns, error])


def _insert(con: duckdb.DuckDBPyConnection, table: str, cols: tuple[tuple[str, str], ...], rows: list[list[Any]]) -> None:
    """Column lists unnested into one INSERT: ~100x faster than executemany."""
    if not rows:
        return
    columns = list(zip(*rows, strict=True))
    select = ", ".join(f"unnest(${i + 1})::{t} AS {c}" for i, (c, t) in enumerate(cols))
    con.execute(f"INSERT INTO {table} SELECT {select}", [list(c) for c in columns])


# a folder whose mtime is this close to the scan may still gain a file within the same timestamp tick
RACY_NS = 2_000_000_000


def _loose_files(root: Path, known: dict[str, tuple[int, int]], dir_mtimes: dict[str, int], rescan: bool
                 ) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """rel path -> (size, mtime_ns) of every result file results.result_files would list, and each folder's
    mtime. Results arrive by os.link and leave by unlink, both of which change their folder's mtime: in a
    folder whose mtime is as recorded (and not racily recent) the recorded size and mtime of its files are
    reused instead of a stat per file. `known` holds good results only: a bad file is statted every time, so
    fixing it in place is seen. `rescan` stats every file (for a result edited in place, which nothing does)."""
    found: dict[str, tuple[int, int]] = {}
    mtimes: dict[str, int] = {}
    base = len(str(root)) + 1
    now_ns = time.time_ns()
    for folder, names, st_dir in results_tree.walk_folders(root, skip=(INDEX_DIR,)):  # the readers' one walk
        rel_dir = folder[base:].replace(os.sep, "/")
        dir_mtime = st_dir.st_mtime_ns
        mtimes[rel_dir] = dir_mtime
        trusted = not rescan and dir_mtimes.get(rel_dir) == dir_mtime and dir_mtime < now_ns - RACY_NS
        prefix = rel_dir + "/" if rel_dir else ""
        for name in names:
            if name.endswith(".json") and not name.startswith("."):
                rel = prefix + name
                if trusted and rel in known:
                    found[rel] = known[rel]
                    continue
                full = os.path.join(folder, name)
                try:
                    st = os.stat(full)
                except OSError:
                    continue
                if not stat.S_ISDIR(st.st_mode):  # os.path.isdir's answer, without a second stat a file
                    found[rel] = (st.st_size, st.st_mtime_ns)
    return found, mtimes


def _delete(con: duckdb.DuckDBPyConnection, paths: list[str]) -> None:
    if not paths:
        return
    con.execute("CREATE OR REPLACE TEMP TABLE gone AS SELECT unnest($1::VARCHAR[]) AS path", [paths])
    for table in ("runs", "series", "files"):
        con.execute(f"DELETE FROM {table} WHERE path IN (SELECT path FROM gone)")


def _save_dirs(con: duckdb.DuckDBPyConnection, mtimes: dict[str, int]) -> None:
    con.execute("DELETE FROM dirs")
    _insert(con, "dirs", DIR_COLUMNS, [[k, v] for k, v in mtimes.items()])


CHUNK = 5_000  # files read between two inserts: memory stays bounded however many files are new


def _unchanged(con: duckdb.DuckDBPyConnection, root: Path, dir_mtimes: dict[str, int]) -> bool:
    """True when no file can have arrived, left or changed since the last update: every folder has its recorded
    mtime (and not racily recent), the archives their recorded size and mtime, and every bad file its recorded
    size and mtime. Then the manifest of every file (~15 µs a file to load) is not read at all."""
    base = len(str(root)) + 1
    now_ns = time.time_ns()
    seen = 0
    for folder, _, st_dir in results_tree.walk_folders(root, skip=(INDEX_DIR,)):
        mtime = st_dir.st_mtime_ns
        if dir_mtimes.get(folder[base:].replace(os.sep, "/")) != mtime or mtime >= now_ns - RACY_NS:
            return False
        seen += 1
    if seen != len(dir_mtimes):
        return False
    known = set(con.execute("SELECT DISTINCT source, size, mtime_ns FROM files WHERE source <> ''").fetchall())
    current = set()
    for arch in archive_mod.archives(root):
        st = arch.stat()
        current.add((arch.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns))
    if current != known:
        return False
    for rel, size, mtime in con.execute("SELECT path, size, mtime_ns FROM files WHERE error IS NOT NULL AND source = ''"
                                        ).fetchall():  # a bad file fixed in place is read again
        try:
            st = os.stat(root / rel)
        except OSError:
            return False
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            return False
    return True


def _update(con: duckdb.DuckDBPyConnection, root: Path, report: UpdateReport) -> None:
    t0 = time.perf_counter()
    dir_mtimes = dict(con.execute("SELECT path, mtime_ns FROM dirs").fetchall())
    if dir_mtimes and not report.rescan and _unchanged(con, root, dir_mtimes):
        report.phases_s["scan"] = round(time.perf_counter() - t0, 3)
        return
    known = {p: (s, src, size, mt) for p, src, size, mt, s in
             con.execute("SELECT path, source, size, mtime_ns, error IS NULL FROM files").fetchall()}
    loose, mtimes = _loose_files(root, {p: (k[2], k[3]) for p, k in known.items() if k[0] and not k[1]}, dir_mtimes,
                                 report.rescan)
    # loose files: new, or changed in size or mtime (results are append-only, so that means replaced)
    todo = [(rel, size, mtime) for rel, (size, mtime) in loose.items()
            if (old := known.get(rel)) is None or old[1] != "" or old[2] != size or old[3] != mtime]
    stale = [rel for rel, _, _ in todo if rel in known]
    # archives: a changed archive file (size, mtime) is read again whole; its members replace loose copies
    archive_sig = {src: (size, mt) for _, src, size, mt in known.values() if src}
    seen_members: set[str] = set()
    todo_archives = []
    broken: list[list[Any]] = []  # an archive that cannot be opened: named like a bad file, never fatal
    for arch in archive_mod.archives(root):
        src = arch.relative_to(root).as_posix()
        st = arch.stat()
        try:
            members = archive_mod.member_names(arch)
        except (OSError, zipfile.BadZipFile) as e:
            broken.append([src, "", st.st_size, st.st_mtime_ns, f"not a readable zip archive ({e}); restore it from git"])
            seen_members.add(src)
            if src in known:
                stale.append(src)
            continue
        seen_members.update(members)
        if archive_sig.get(src) == (st.st_size, st.st_mtime_ns) and all(known.get(m, (0, ""))[1] == src for m in members):
            continue
        stale.extend(m for m in members if m in known and m not in loose)
        todo_archives.append((arch, src, st))
    gone = [p for p in known if p not in loose and p not in seen_members]
    report.removed = len(gone)
    report.phases_s["scan"] = round(time.perf_counter() - t0, 3)
    if not (todo or todo_archives or gone or stale or broken):
        if mtimes != dir_mtimes:
            _save_dirs(con, mtimes)
        return
    t1 = time.perf_counter()
    write_s = 0.0
    batch = _Batch()

    def flush(final: bool = False) -> None:
        nonlocal batch, write_s
        if len(batch.files) < CHUNK and not final:
            return
        t = time.perf_counter()
        _insert(con, "runs", RUN_COLUMNS, batch.runs)
        _insert(con, "series", SERIES_COLUMNS, batch.series)
        _insert(con, "files", FILE_COLUMNS, batch.files)
        report.read += len(batch.files)
        batch = _Batch()
        write_s += time.perf_counter() - t

    con.execute("BEGIN TRANSACTION")  # one transaction: a reader sees all of this update or none of it
    try:
        _delete(con, sorted(set(stale) | set(gone)))
        for rel, size, mtime in todo:
            display = str(root / rel)
            try:  # the very reader every command used before the index: the same checks, the same messages
                batch.add(rel, "", size, mtime, results_mod.read_result(root / rel), None, display)
            except results_mod.ResultError as e:
                batch.add(rel, "", size, mtime, None, str(e), display)
            flush()
        for arch, src, st in todo_archives:
            for rel, result, error in archive_mod.read_members(arch, root):
                if rel in loose:  # the loose copy is read above; an archive never doubles a run
                    continue
                batch.add(rel, src, st.st_size, st.st_mtime_ns, result, error, archive_mod.display(root, src, rel))
                flush()
        flush(final=True)
        _insert(con, "files", FILE_COLUMNS, broken)
        _save_dirs(con, mtimes)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    t = time.perf_counter()
    con.execute("CHECKPOINT")  # fold the write-ahead log into the file: readers then open one file
    write_s += time.perf_counter() - t
    report.phases_s["read"] = round(time.perf_counter() - t1 - write_s, 3)
    report.phases_s["write"] = round(write_s, 3)


def update(root: Path, rescan: bool = False) -> UpdateReport:
    """Bring the index of the results folder `root` up to date with its files; returns what was done."""
    t0 = time.perf_counter()
    db = db_path(root)
    report = UpdateReport(db, rescan=rescan)
    try:
        with _flock(root, exclusive=True):
            con, report.rebuilt = _open_checked(db)
            try:
                _update(con, root, report)
                report.runs, report.errors = con.execute(
                    "SELECT count(*) FILTER (WHERE error IS NULL), count(*) FILTER (WHERE error IS NOT NULL) FROM files"
                ).fetchone() or (0, 0)
            finally:
                con.close()
    except (OSError, duckdb.Error) as e:
        why = f"{type(e).__name__}: {e}"
        raise IndexStoreError(f"{index_dir(root)}: cannot update the results index ({why}); make the results folder "
                          "writable, or set TRAINBENCH_INDEX=0 to read the files", str(index_dir(root)), why) from None
    report.seconds = time.perf_counter() - t0
    return report


@contextlib.contextmanager
def reading(root: Path, refresh: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to an up-to-date index (updated first unless refresh=False), under a shared lock."""
    if refresh or not db_path(root).exists():
        update(root)
    with _flock(root, exclusive=False):
        con = duckdb.connect(str(db_path(root)), read_only=True)
        try:
            yield con
        finally:
            con.close()
