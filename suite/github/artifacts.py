"""Workflow artifacts: list, download (the pre-signed blob URL never gets the token) and extract safely."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any

import requests

from suite.github import deadline
from suite.github.pagination import paginate
from suite.github.transport import REDIRECTS, GitHubError, Transport, check_repo, redact

# what Python's zipfile can decompress; anything else would raise NotImplementedError mid-extraction
SUPPORTED_COMPRESSION = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
# a blob download gets the API's deadline plus its size at this rate: slower than that is a stalled server
MIN_DOWNLOAD_BYTES_PER_S = 256 * 1024


def list_artifacts(gh: Transport, repo: str, run_id: int) -> list[dict[str, Any]]:
    check_repo(repo)
    return list(paginate(gh, f"/repos/{repo}/actions/runs/{int(run_id)}/artifacts", key="artifacts"))


def download_artifact(gh: Transport, repo: str, artifact: dict[str, Any], dest: Path,
                      max_bytes: int = 512 * 1024 * 1024) -> list[Path]:
    """Download one artifact's zip and extract it under dest/, treating every entry as untrusted."""
    check_repo(repo)
    if artifact.get("expired"):
        raise GitHubError(f"artifact {artifact.get('name')!r} has expired; re-run the benchmark workflow")
    if int(artifact.get("size_in_bytes") or 0) > max_bytes:
        raise GitHubError(f"artifact {artifact.get('name')!r} is {artifact['size_in_bytes']} bytes, over the "
                          f"limit of {max_bytes}")
    resp = gh.request("GET", f"/repos/{repo}/actions/artifacts/{int(artifact['id'])}/zip", allow_redirect=True)
    if resp.is_redirect or resp.status_code in REDIRECTS:
        # the blob store URL is pre-signed: it must not receive our token
        location = resp.headers.get("Location", "")
        failure = None
        allowed_s = gh.deadline_s + int(artifact.get("size_in_bytes") or 0) / MIN_DOWNLOAD_BYTES_PER_S
        with deadline.limit(allowed_s) as limit, deadline.session() as plain:  # a session without the token
            try:
                blob = plain.get(location, timeout=gh.timeout_s, stream=True, allow_redirects=True)
                blob.raise_for_status()
                content = _read_capped(blob, max_bytes)
            except requests.RequestException as e:
                failure = f"{type(e).__name__}: {redact(str(e))}"
        if limit.expired:
            failure = (f"not complete within {allowed_s:.0f} s (the server sends slower than "
                       f"{MIN_DOWNLOAD_BYTES_PER_S // 1024} KiB/s)")
        if failure is not None:
            raise GitHubError(f"artifact {artifact.get('name')!r}: download failed: {failure}")
    else:
        content = resp.content
    return safe_extract(content, dest, max_bytes)


def _read_capped(resp: requests.Response, max_bytes: int) -> bytes:
    buf = io.BytesIO()
    for chunk in resp.iter_content(1 << 16):
        buf.write(chunk)
        if buf.tell() > max_bytes:
            raise GitHubError(f"artifact download is over the limit of {max_bytes} bytes; refusing")
    return buf.getvalue()


def _check_entries(infos: list[zipfile.ZipInfo]) -> None:
    """Refuse up front what cannot be extracted whole: encrypted entries, unknown compression methods."""
    for info in infos:
        if info.flag_bits & 0x1:
            raise GitHubError(f"the artifact entry {info.filename!r} is encrypted; refusing (artifacts are "
                              "never encrypted: was it tampered with?)")
        if info.compress_type not in SUPPORTED_COMPRESSION:
            raise GitHubError(f"the artifact entry {info.filename!r} uses compression method "
                              f"{info.compress_type}, which cannot be unpacked here; refusing")


def safe_extract(content: bytes, dest: Path, max_bytes: int = 512 * 1024 * 1024,
                 max_files: int = 10_000) -> list[Path]:
    """Extract a zip from an untrusted source: no absolute paths, no `..`, no links, bounded size and count.

    Every entry is read whole (its CRC checked) and written into a temporary folder beside `dest`; only when
    all of them are there does the tree move into place. A bad artifact (a damaged entry, a name that is both a
    file and a folder, a full disk) leaves nothing behind in `dest`.
    """
    try:
        zf = zipfile.ZipFile(io.BytesIO(content))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError):
        raise GitHubError("the artifact is not a valid zip file") from None
    infos = zf.infolist()
    if len(infos) > max_files:
        raise GitHubError(f"the artifact has {len(infos)} entries, over the limit of {max_files}")
    if sum(i.file_size for i in infos) > max_bytes:
        raise GitHubError(f"the artifact unpacks to more than {max_bytes} bytes; refusing (zip bomb?)")
    _check_entries(infos)
    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    holder = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))  # same file system
    try:
        staging = holder / "tree"
        staging.mkdir()  # with the user's umask (mkdtemp's folder is 0700), as `dest` gets it by the rename
        names = _extract_all(zf, infos, staging)
        return _move_into_place(staging, names, dest)
    finally:
        shutil.rmtree(holder, ignore_errors=True)


def _extract_all(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo], staging: Path) -> list[PurePosixPath]:
    """Write every file entry under `staging`; raise GitHubError naming the first entry that cannot be."""
    names: list[PurePosixPath] = []
    for info in infos:
        name = PurePosixPath(info.filename.replace("\\", "/"))
        mode = (info.external_attr >> 16) & 0o170000
        if name.is_absolute() or ".." in name.parts or mode == 0o120000:
            raise GitHubError(f"the artifact entry {info.filename!r} is a link or escapes the folder; refusing")
        if info.is_dir():
            continue
        target = (staging / Path(*name.parts)).resolve()
        if staging.resolve() not in target.parents:
            raise GitHubError(f"the artifact entry {info.filename!r} escapes the folder; refusing")
        failure = None
        try:
            with zf.open(info) as src:
                data = src.read(info.file_size + 1)[: info.file_size]
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError) as e:
            failure = f"{type(e).__name__}: {e}"
        if failure is not None:
            raise GitHubError(f"the artifact entry {info.filename!r} is damaged ({failure}); nothing extracted")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError as e:
            failure = e.strerror or str(e)
        if failure is not None:
            raise GitHubError(f"the artifact entry {info.filename!r} cannot be written ({failure}: a name that is "
                              "both a file and a folder?); nothing extracted")
        names.append(PurePosixPath(*name.parts))
    return list(dict.fromkeys(names))  # a name given twice: the later entry wins, as before


def _move_into_place(staging: Path, names: list[PurePosixPath], dest: Path) -> list[Path]:
    """The whole staged tree becomes `dest` (one rename) or, into an existing `dest`, file by file once every
    file is known to fit (no file where a folder goes, no folder where a file goes)."""
    if not dest.exists() or (dest.is_dir() and not any(dest.iterdir())):
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)
        return [dest / n for n in names]
    if not dest.is_dir():
        raise GitHubError(f"{dest} exists and is not a folder; nothing extracted")
    for n in names:
        target = dest / n
        for parent in [*reversed(n.parents)][1:]:
            if (dest / parent).exists() and not (dest / parent).is_dir():
                raise GitHubError(f"the artifact entry {str(n)!r} needs the folder {dest / parent}, which is a file "
                                  "there; nothing extracted")
        if target.is_dir():
            raise GitHubError(f"the artifact entry {str(n)!r} is a file, but {target} is a folder; nothing extracted")
    for n in names:
        (dest / n).parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / n, dest / n)
    return [dest / n for n in names]
