"""`trainbench site build` through the real CLI in a subprocess: output, exit codes, named bad files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.site_factory import write_standard

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", "site", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "300"})


def test_build_prints_where_to_open_and_names_skipped_files(tmp_path: Path) -> None:
    write_standard(tmp_path / "results")
    (tmp_path / "results" / "broken.json").write_text('{"schema_version": 1,')
    out = tmp_path / "out"
    proc = _cli("build", "--results", str(tmp_path / "results"), "--out", str(out),
                "--baselines", str(tmp_path / "no-baselines"))
    assert proc.returncode == 0, proc.stderr
    assert f"open {(out / 'index.html').resolve().as_uri()}" in proc.stdout
    assert "from 29 results (2 workloads)" in proc.stdout
    assert "skipped" in proc.stderr and "broken.json" in proc.stderr
    strict = _cli("build", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "strict"), "--strict")
    assert strict.returncode == 1 and "broken.json" in strict.stderr
    assert not (tmp_path / "strict" / "index.html").exists()


def test_bad_folders_exit_2_with_a_message(tmp_path: Path) -> None:
    missing = _cli("build", "--results", str(tmp_path / "nope"), "--out", str(tmp_path / "out"))
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    write_standard(tmp_path / "results")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    busy = _cli("build", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "mine"))
    assert busy.returncode == 2 and "not built by" in busy.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    no_site = _cli("serve", "--out", str(tmp_path / "empty"), "--port", "0")
    assert no_site.returncode == 2 and "no index.html" in no_site.stderr
