"""Issue 35 items 17-20: output folders checked before the first run, archived results validated, concurrent
site builds into a new folder serialised, long series down-sampled for the run page."""

from __future__ import annotations

import json
import math
import multiprocessing
import multiprocessing.synchronize
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from support.backend_util import env
from support.site_factory import write_standard
from support.unprivileged import unprivileged
from typer.testing import CliRunner

from benchmarks.sim.results import site_result
from suite.cli import app
from suite.results.index import archive
from suite.results.index import pack as index_pack
from suite.results.record import EvalPoint, write_result
from suite.site import downsample
from suite.site.build import MARKER, build_site

ROOT = Path(__file__).resolve().parents[2]
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
    assert index_pack.pack(res, datetime(2100, 1, 1, tzinfo=UTC)).results == 29  # every result archived
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


# ---- item 19: concurrent `site build` into a new folder take turns -----------------------------------------


def _build(res: str, out: str, go: multiprocessing.synchronize.Event, q: multiprocessing.Queue) -> None:
    go.wait()
    try:
        report = build_site(Path(res), Path(out))
        q.put(("ok", report.results))
    except Exception as e:  # noqa: BLE001 - the parent asserts on what each build ended with
        q.put(("error", f"{type(e).__name__}: {e}"))


def test_three_concurrent_builds_into_a_new_folder_all_succeed(tmp_path):
    res, out = tmp_path / "results", tmp_path / "site"
    write_standard(res)
    ctx = multiprocessing.get_context("fork")
    go, q = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_build, args=(str(res), str(out), go, q)) for _ in range(3)]
    for p in procs:
        p.start()
    go.set()  # all three at once, into a folder none of them has made yet
    ended = [q.get(timeout=HANG_GUARD_S) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert ended == [("ok", 29)] * 3, ended
    assert (out / MARKER).is_file() and (out / "index.html").is_file()
    assert not [p.name for p in tmp_path.iterdir() if ".txn-" in p.name]  # no transaction left behind


# ---- item 20: a long series is down-sampled for the page, kept whole in the JSON ---------------------------

TARGET = 0.97


def _long_result(n: int, cross: int, dip: int):
    """`n` evaluations of accuracy rising to the target, first met at index `cross`, with one deep dip at `dip`
    (a stretch's minimum the page must keep)."""
    curve = []
    for i in range(n):
        acc = TARGET * (0.5 + 0.45 * i / cross) if i < cross else TARGET + 0.001 * ((i * 7919) % 5)
        if i == dip:
            acc = 0.05
        curve.append(EvalPoint(step=i + 1, samples=128 * (i + 1), elapsed_s=0.01 * (i + 1), train_s=0.009 * (i + 1),
                               metrics={"accuracy": acc, "loss": 1.0 / (i + 1)}))
    return site_result(evals=6, target=TARGET, eval_curve=curve, steps=n, final_metrics=dict(curve[-1].metrics))


def test_a_long_series_makes_a_bounded_run_page_with_its_shape_kept(tmp_path):
    n, cross, dip = 60_000, 41_234, 12_345
    res, out = tmp_path / "results", tmp_path / "site"
    write_result(res, _long_result(n, cross, dip))
    build_site(res, out)
    [page] = (out / "r").glob("*.html")
    html = page.read_text(encoding="utf-8")
    assert page.stat().st_size < 1_500_000, page.stat().st_size  # 60,000 rows and points made ~30 MB
    for step in (1, n, cross, cross + 1, dip + 1):  # first, last, either side of the target crossing, the dip
        assert f"step {step}, " in html, step
    table = html[html.index('id="evals"'):html.index("</table>", html.index('id="evals"'))]
    assert table.count("<tr>") - 1 <= downsample.MAX_TABLE_ROWS  # the header row aside
    assert f"Evaluations (60000; {table.count('<tr>') - 1} shown" in html
    [copy] = (out / "r").glob("*.json")
    assert len(json.loads(copy.read_text(encoding="utf-8"))["eval_curve"]) == n  # the JSON keeps every point
    workload_pages = [p for p in out.rglob("*.html") if p.parent.name == "w"]
    assert workload_pages and max(p.stat().st_size for p in workload_pages) < 1_500_000


def test_keep_indices_is_bounded_and_keeps_the_extremes():
    values = [math.sin(i / 500) for i in range(100_000)]
    values[777] = math.nan  # a diverged evaluation stays visible
    keep = downsample.keep_indices(values, 500, target=0.999, mode="max")
    assert len(keep) <= 500 and keep == sorted(set(keep)) and keep[0] == 0 and keep[-1] == len(values) - 1
    first = next(i for i, v in enumerate(values) if v >= 0.999)
    assert {first - 1, first, 777} <= set(keep)
    assert max(values[i] for i in keep if not math.isnan(values[i])) == max(v for v in values if not math.isnan(v))
    assert downsample.keep_indices([1.0, 2.0], 500) == [0, 1]
