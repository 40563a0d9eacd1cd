"""`trainbench results archive --before DATE`: move old loose results into monthly zips the index still reads.

Lives apart from `archive` (which only reads and writes zips) so that the store, which reads archives,
and the packer, which updates the store, do not import each other.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from suite.results.index import archive, store
from suite.results.tree import regular_inside, skipped


def pack(root: Path, before: datetime) -> archive.ArchiveReport:
    """Move every valid loose result started before `before` (UTC) into its month's archive, logs included."""
    store.update(root)
    report = archive.ArchiveReport(before)
    with store._flock(root, exclusive=True):
        import duckdb

        con = duckdb.connect(str(store.db_path(root)), read_only=True)
        try:
            rows = con.execute(
                "SELECT path, started_ts, json_extract_string(result, '$.mllog') "
                "FROM runs WHERE source = '' AND started_ts < ? ORDER BY path", [before.timestamp()]).fetchall()
            report.left_loose = [p for (p,) in con.execute(
                "SELECT path FROM files WHERE source = '' AND error IS NOT NULL ORDER BY path").fetchall()]
        finally:
            con.close()
        by_month: dict[str, list[str]] = {}
        for rel, started_ts, log in rows:
            if not regular_inside(root, rel):  # gone, or no longer a regular file in the tree: never moved
                if os.path.lexists(root / rel):
                    skipped(root / rel, "not a regular file inside the results folder; not archived, left in place")
                continue
            month = archive.month_of(started_ts)
            by_month.setdefault(month, []).append(rel)
            beside = archive._log_beside(root, rel, log)
            if beside is not None:
                by_month[month].append(beside)
                report.logs += 1
            report.results += 1
        for month, rels in sorted(by_month.items()):
            final = archive._write_month(root, month, rels)
            report.archives[final.relative_to(root).as_posix()] = len(rels)
            for rel in rels:  # only now, with the verified archive in place; never through a symlink
                if regular_inside(root, rel):
                    (root / rel).unlink(missing_ok=True)
            for folder in sorted({(root / rel).parent for rel in rels}, key=lambda p: -len(p.parts)):
                while folder != root and folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
                    folder = folder.parent
    store.update(root)
    return report
