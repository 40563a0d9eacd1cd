"""`trainbench site build` onto a disk that fills (issue 50 item 14): one line naming the folder, exit 2, and the site
that was there left as it was. A small tmpfs stands in for the full disk (as in tests/results/test_results_write.py:
root can mount one; CI runs as root on the same kind of machine)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from benchmarks.sim.results import noisy_runs, write_all

ROOT = Path(__file__).resolve().parents[2]


def _build(results: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suite.cli", "site", "build", "--results", str(results), "--out",
                           str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})


def test_a_full_disk_is_one_line_naming_the_folder_exit_2_and_the_old_site_stays(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    # room for the first build (6 runs: 20 files, 32 pages of 4 KiB since the hardware page) and nothing like the second
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(disk)], check=True)
    try:
        results = tmp_path / "results"
        write_all(results, noisy_runs(random.Random(1), 6))
        first = _build(results, disk / "site")
        assert first.returncode == 0, first.stderr
        index = (disk / "site" / "index.html").read_bytes()
        write_all(results, noisy_runs(random.Random(2), 60, first_seed=100))  # more pages than the disk holds
        full = _build(results, disk / "site")
        assert full.returncode == 2, full.stderr[-3000:]
        lines = full.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in full.stderr, full.stderr[-3000:]
        assert f"--out {disk / 'site'}: cannot write the site there: No space left on device" in lines[0]
        assert (disk / "site" / "index.html").read_bytes() == index
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
