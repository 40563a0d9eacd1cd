"""Every log of a walk read (suite/mlperf/logs.py), spread over processes, each verdict cached by the log's hash.

The cache (`<results>/.mlperf-cache.json`, a hidden file no results reader walks) maps a log's sha256 to what
was read from it, under the mlperf_logging version and ruleset that read it; a stat key (path, size, mtime)
spares re-hashing a file that did not change. A log already read is never parsed or checked again. As git's index
does, a stat key is not kept for a file modified within RACY_NS of being read: a rewrite of the same size in the
same timestamp tick would look unchanged, so such a file is read again next time.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from suite.mlperf.logs import MAX_LOG_BYTES, LogInfo, hash_file, read_log

CACHE_NAME = ".mlperf-cache.json"
RACY_NS = 2_000_000_000  # coarser than any file system's mtime tick


def checker_version() -> str:
    from importlib.metadata import version

    return f"mlperf-logging {version('mlperf-logging')}"


class Cache:
    def __init__(self, path: Path | None, ruleset: str):
        self.path, self.ruleset = path, ruleset
        self.tag = f"{checker_version()} ruleset {ruleset}"
        self.stat: dict[str, list[Any]] = {}
        self.logs: dict[str, dict[str, Any]] = {}
        self.imported: dict[str, str] = {}  # log sha256 -> its result file, relative to the results folder
        self.dirty = False
        if path is not None and path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                if data.get("tag") == self.tag:
                    self.stat, self.logs = dict(data["stat"]), dict(data["logs"])
                    self.imported = dict(data.get("imported", {}))
            except (OSError, ValueError, KeyError, TypeError):
                pass  # a damaged cache is rebuilt, never trusted

    def sha_of(self, path: str) -> str | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        known = self.stat.get(path)
        if known and known[0] == st.st_size and known[1] == st.st_mtime_ns:
            return known[2]
        if self.logs and st.st_size <= MAX_LOG_BYTES:  # a new stat (a touched, copied or changed log): hashed,
            try:                                       # its hash may be one already read
                sha, hashed_bytes = hash_file(path)
            except OSError:
                return None
            if sha in self.logs:
                self._remember(path, sha, hashed_bytes)
                return sha
        return None

    def get(self, path: str) -> LogInfo | None:
        sha = self.sha_of(path)
        if sha is None or sha not in self.logs:
            return None
        info = LogInfo.from_json(self.logs[sha])
        info.path = path
        return info

    def put(self, info: LogInfo) -> None:
        if not info.sha256:
            return
        self.logs[info.sha256] = {**info.to_json(), "path": ""}
        self.dirty = True
        self._remember(info.path, info.sha256, info.size)

    def _remember(self, path: str, sha: str, size: int) -> None:
        """The stat key of a file just hashed (its size must be the one hashed), unless it is too fresh to trust."""
        try:
            st = os.stat(path)
        except OSError:
            return
        if st.st_size != size or st.st_mtime_ns > time.time_ns() - RACY_NS:
            if self.stat.pop(path, None) is not None:  # changed while read, or may still change unseen: hashed
                self.dirty = True                        # next time
            return
        key = [st.st_size, st.st_mtime_ns, sha]
        if self.stat.get(path) != key:
            self.stat[path] = key
            self.dirty = True

    def note_imported(self, sha: str, rel: str) -> None:
        if self.imported.get(sha) != rel:
            self.imported[sha] = rel
            self.dirty = True

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.part")
        tmp.write_text(json.dumps({"tag": self.tag, "stat": self.stat, "logs": self.logs,
                                   "imported": self.imported}), encoding="utf-8")
        os.replace(tmp, self.path)  # a cache, not a record: replaced whole, atomically
        self.dirty = False


def _read_many(paths: list[str], ruleset: str) -> list[LogInfo]:
    return [read_log(p, ruleset) for p in paths]


def read_all(paths: list[str], ruleset: str, cache: Cache, workers: int | None = None,
             progress: Callable[[int], None] | None = None) -> dict[str, LogInfo]:
    """LogInfo of every path: from the cache where the file is unchanged, else read (in worker processes)."""
    out: dict[str, LogInfo] = {}
    todo = []
    for p in paths:
        got = cache.get(p)
        if got is not None:
            out[p] = got
        else:
            todo.append(p)
    if progress and len(out):
        progress(len(out))
    workers = workers or min(os.cpu_count() or 1, 8)
    if len(todo) < 4 or workers <= 1:
        for p in todo:
            out[p] = info = read_log(p, ruleset)
            cache.put(info)
            if progress:
                progress(1)
        return out
    # small batches, largest files first, so that both workers stay busy to the end
    todo.sort(key=lambda p: -_size(p))
    batches = [todo[i:i + 4] for i in range(0, len(todo), 4)]
    _warm()  # the parent imports mlperf_logging once; forked workers inherit it
    import multiprocessing

    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        for batch in pool.map(_read_many, batches, [ruleset] * len(batches)):
            for info in batch:
                out[info.path] = info
                cache.put(info)
            if progress:
                progress(len(batch))
    return out


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _warm() -> None:
    from suite.mlperf.logs import _cached_rules

    _cached_rules()
    import mlperf_logging.compliance_checker.mlp_parser  # noqa: F401


__all__ = ["Cache", "CACHE_NAME", "read_all"]
