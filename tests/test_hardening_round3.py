"""Issue 35 items 17-20: output folders checked before the first run, archived results validated, concurrent
site builds into a new folder serialised, long series down-sampled for the run page."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from backend_util import env
from typer.testing import CliRunner
from unprivileged import unprivileged

from suite import index
from suite.cli import app
from suite.index import archive
from tests.site_factory import write_standard

ROOT = Path(__file__).resolve().parents[1]
HANG_GUARD_S = 600  # a Python + torch start on a loaded 2-core machine; the refusals below come before any run


def _cli_in(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(unprivileged([sys.executable, "-m", "suite.cli", *args]), capture_output=True, text=True,
                          env=env(), cwd=cwd, timeout=HANG_GUARD_S)


def _read_only_folder(tmp_path: Path) -> Path:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    probe = subprocess.run(unprivileged([sys.executable, "-c", "open('probe', 'w')"]), cwd=ro, capture_output=True)
    assert probe.returncode != 0, "the folder's mode does not apply to the child: the test would prove nothing"
    return ro


# ---- item 17: every output folder is checked before the first run ------------------------------------------


def test_study_with_its_default_out_in_a_read_only_folder_is_refused_before_running(tmp_path):
    ro = _read_only_folder(tmp_path)
    study = tmp_path / "study.yaml"
    study.write_text("name: ro\nworkloads: [cv/digits_cnn]\nalgorithms: [adamw]\nseeds: 1\n"
                     "set: {budget.max_steps: 5}\n")
    p = _cli_in(ro, "study", str(study), "--results", str(tmp_path / "res"), "--threads", "1")
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert "error: --out studies/_out/ro: cannot write the study's outputs there (Permission denied)" in p.stderr
    assert not list((tmp_path / "res").rglob("*.json"))  # refused before the first run, not after it


def test_run_profile_into_a_read_only_folder_is_refused_before_running(tmp_path):
    ro = _read_only_folder(tmp_path)
    p = _cli_in(ro, "run", "cv/digits_cnn", "--variant", "tiny", "--profile", "--results", str(tmp_path / "res"),
                "--threads", "1")
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "init ..." not in p.stderr
    assert "error: --profile-dir profiles: cannot write profiler traces there (Permission denied)" in p.stderr
    assert not list((tmp_path / "res").rglob("*.json"))


# ---- item 18: `results validate` checks the archived results too -------------------------------------------


def test_validate_counts_and_checks_archived_results(tmp_path):
    res = tmp_path / "results"
    write_standard(res)
    runner = CliRunner()
    assert index.pack(res, datetime(2100, 1, 1, tzinfo=UTC)).results == 29  # every result archived
    assert not list(res.rglob("*.json"))
    r = runner.invoke(app, ["results", "validate", str(res)])
    assert r.exit_code == 0, r.output
    zips = archive.archives(res)
    assert f"29 valid, 0 invalid result file(s) under {res}, 29 of them in {len(zips)} archive(s)" in r.stdout
    with zipfile.ZipFile(zips[0], "a") as z:  # a damaged member is named by archive and member
        z.writestr("h/cv/x/torch/broken.json", '{"schema_version": 1, "run_id": "x')
    r = runner.invoke(app, ["results", "validate", str(res)])
    assert r.exit_code == 1 and "29 valid, 1 invalid" in r.stdout
    assert f"{zips[0]}:h/cv/x/torch/broken.json" in r.stderr
    r = runner.invoke(app, ["results", "validate", str(zips[0])])  # one archive, named directly
    assert r.exit_code == 1 and "1 invalid result file(s)" in r.stdout and "1 archive(s)" in r.stdout
