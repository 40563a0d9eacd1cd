"""Download and unpack an archive where a network exists (the full-tier data sets no registry ships)."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path

from suite.data.base import DataMissing


def fetch_and_extract(url: str, dest: Path, timeout_s: float = 60.0) -> Path:
    """Stream `url` to a temp file, then unpack it (tar.* or zip) into `dest`, refusing paths that escape it."""
    import requests

    dest.mkdir(parents=True, exist_ok=True)
    try:
        with requests.get(url, stream=True, timeout=timeout_s) as r:
            r.raise_for_status()
            with tempfile.NamedTemporaryFile(dir=dest, suffix=Path(url).name, delete=False) as tmp:
                shutil.copyfileobj(r.raw, tmp)
                archive = Path(tmp.name)
    except requests.RequestException as e:
        raise DataMissing(f"cannot download {url}: {e}. With no network, get a copy elsewhere and run "
                          "`trainbench data prepare NAME --from PATH`") from None
    try:
        root = dest.resolve()
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                for name in z.namelist():
                    if not (root / name).resolve().is_relative_to(root):
                        raise DataMissing(f"{url}: archive member {name!r} escapes {dest}")
                z.extractall(dest)
        else:
            with tarfile.open(archive) as t:
                t.extractall(dest, filter="data")  # the "data" filter refuses absolute paths and links out
    finally:
        archive.unlink(missing_ok=True)
    return dest
