"""`trainbench ab` and the PR workflow's A/B script, end to end against a local git repository.

The slow tests run scripts/ci/bench_ab.sh exactly as bench-pr.yml does (only the sizes are small): a head that
sleeps in the CNN's forward is `regressed`; a head whose code is identical to base is `no change`. They use the
workflow's default `--deps install` (each side pip-installed into its own venv), offline (`--offline`: no index,
this interpreter's packages underneath), so nothing here reaches the network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.sim.git_repo import make_repo
from suite.compare import ab, ab_checkout, ab_plan

ROOT = Path(__file__).resolve().parents[2]


def test_rounds_alternate_who_goes_first() -> None:
    assert ab.order_of(3, "alternate", 0) == [(0, "base"), (0, "head"), (1, "head"), (1, "base"),
                                              (2, "base"), (2, "head")]
    rnd = ab.order_of(40, "random", 1)
    firsts = [rnd[i][1] for i in range(0, 80, 2)]
    assert {"base", "head"} == set(firsts) and sorted(rnd[i][1] for i in range(80)).count("base") == 40
    with pytest.raises(ab_plan.ABError, match="--order"):
        ab.order_of(2, "zigzag", 0)


def test_a_ref_that_does_not_resolve_is_bad_input(tmp_path: Path) -> None:
    repo, base, _ = make_repo(tmp_path, None)
    p = subprocess.run([sys.executable, "-m", "suite.cli", "ab", "--repo", str(repo), "--base", base, "--head",
                        "no-such-branch", "-w", "cv/digits_cnn", "--out", str(tmp_path / "ab"), "--deps", "shared"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2 and "--head 'no-such-branch'" in p.stderr and not (tmp_path / "ab" / "base").exists()


def _ab_cli(repo: Path, out: Path, *refs: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", "ab", "--repo", str(repo), "--base", refs[0],
                           "--head", refs[-1], "-w", "cv/digits_cnn", "--out", str(out), "--deps", "shared",
                           "--rounds", "1"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_an_out_folder_holding_an_earlier_ab_is_refused_and_kept(tmp_path: Path) -> None:
    """A second A/B into the same --out would pool its runs with the first one's (other commits, the same seeds):
    refused, exit 2, naming the folder, and the earlier results are left as they were."""
    repo, base, head = make_repo(tmp_path, None)
    earlier = tmp_path / "ab" / "head" / "cpu" / "nlp" / "r.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text('{"kept": true}')
    p = _ab_cli(repo, tmp_path / "ab", base, head)
    assert p.returncode == 2, p.stderr
    assert "already holds results of an earlier A/B" in p.stderr and str(tmp_path / "ab" / "head") in p.stderr
    assert earlier.read_text() == '{"kept": true}' and not (tmp_path / "ab" / "src").exists()


def test_an_out_folder_inside_the_repository_is_not_taken_for_a_worktree(tmp_path: Path) -> None:
    """--out inside the checkout whose src/base is one of the repository's own folders: `git rev-parse HEAD` there
    answers for the enclosing repository, which was read as "this worktree is prepared" and ran the working tree
    (uncommitted edits included) as base. Refused instead, naming the folder."""
    repo, base, head = make_repo(tmp_path, None)
    (repo / "src" / "base").mkdir(parents=True)
    (repo / "src" / "base" / "notes.txt").write_text("mine")
    p = _ab_cli(repo, repo, base, base)
    assert p.returncode == 2, p.stderr
    assert "is not a worktree that `trainbench ab` made" in p.stderr and "give --out a folder of its own" in p.stderr
    assert (repo / "src" / "base" / "notes.txt").read_text() == "mine" and not (repo / "base").exists()


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _wheel(tmp_path: Path, name: str) -> Path:
    """A folder holding one pure-Python wheel, `name` 1.0, built offline (what `pip wheel -w` leaves)."""
    proj = tmp_path / f"{name}-src"
    (proj / name).mkdir(parents=True)
    (proj / name / "__init__.py").write_text("VERSION = '1.0'\n")
    (proj / "pyproject.toml").write_text(f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                                          f'"setuptools.build_meta"\n[project]\nname = "{name}"\nversion = "1.0"\n')
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-index", "--no-build-isolation", "--no-deps",
                    "-w", str(wheels), str(proj)], check=True, capture_output=True, timeout=300)
    return wheels


def _imports(python: Path, src: Path, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(python), "-c", code], cwd=src.parent, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_offline_install_gives_each_side_its_own_project_and_dependencies(tmp_path: Path) -> None:
    """--deps install --offline: pip installs each side's own project into its own venv and resolves the side's
    declared dependencies without an index: what is installed here satisfies them, a --find-links wheel adds
    one that head declares, and without that wheel the install is refused (exit 2) naming the requirement."""
    repo, base, _ = make_repo(tmp_path, None)
    py = repo / "pyproject.toml"
    py.write_text(py.read_text().replace('dependencies = [\n', 'dependencies = [\n    "abdep_only_in_head>=1",\n', 1))
    _git(repo, "commit", "-q", "-am", "head needs a new dependency")
    head = _git(repo, "rev-parse", "HEAD")
    out = tmp_path / "ab"
    plan = ab_plan.ABPlan(repo=repo, out=out, workloads=["cv/digits_cnn"], deps="install", offline=True)
    with pytest.raises(ab_plan.ABError, match="abdep.only.in.head") as refused:
        ab_checkout.prepare(plan, base, head, log=lambda _: None)
    assert "--find-links" in str(refused.value)

    plan.find_links = [str(_wheel(tmp_path, "abdep_only_in_head"))]
    sides = {s.name: s for s in ab_checkout.prepare(plan, base, head, log=lambda _: None)}
    for name, side in sides.items():
        assert side.python == out.resolve() / "env" / name / "bin" / "python"
        where = _imports(side.python, side.src, "import suite, torch; print(suite.__file__)")
        assert where.returncode == 0, where.stderr
        assert Path(where.stdout.strip()) == side.src / "suite" / "__init__.py"  # its own worktree's code
        # pip recorded the side's project in the side's own venv (the editable install)
        listed = _imports(side.python, side.src, "import importlib.metadata as m; print(m.distribution("
                          "'trainbench-suite').read_text('direct_url.json'))")
        assert str(side.src) in listed.stdout, listed.stdout + listed.stderr
    assert _imports(sides["head"].python, sides["head"].src, "import abdep_only_in_head").returncode == 0
    assert _imports(sides["base"].python, sides["base"].src, "import abdep_only_in_head").returncode != 0


def test_offline_options_are_refused_where_they_mean_nothing(tmp_path: Path) -> None:
    repo, base, head = make_repo(tmp_path, None)
    for plan, flag in ((ab_plan.ABPlan(repo=repo, out=tmp_path / "a", workloads=["w"], deps="shared", offline=True),
                        "--offline"),
                       (ab_plan.ABPlan(repo=repo, out=tmp_path / "b", workloads=["w"], find_links=[str(tmp_path / "no")]),
                        "--find-links")):
        with pytest.raises(ab_plan.ABError, match=flag):
            ab_checkout.prepare(plan, base, head, log=lambda _: None)
        assert not (plan.out / "env").exists()


def _workflow_ab(tmp_path: Path, slow_s: float | None) -> tuple[int, dict]:
    """bench_ab.sh as the PR workflow runs it, the whole A/B pinned to one core (AB_CPUS: both sides take turns
    there, as docs/compare.md's figures were measured and as it tells a CPU runner to do; unpinned under a full
    CPU hog, base and head sat on unequally loaded cores and identical code read "suspicious")."""
    repo, base, head = make_repo(tmp_path, slow_s)
    work = tmp_path / "job"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINBENCH": f"{sys.executable} -m suite.cli",
           "REPO": str(repo), "BASE_SHA": base, "HEAD_SHA": head, "WORKLOADS": "cv/digits_cnn", "ROUNDS": "1",
           "RUNS_PER_BLOCK": "4", "THREADS": "1", "AB_DEPS": "install", "AB_OFFLINE": "1", "AB_OUT": str(tmp_path / "ab"),
           "AB_SETS": "throughput.measure_steps=40 throughput.warmup_steps=5",
           # this shared 2-core machine's floor (an A/A interval here spans about +-10% at 4 x 40 steps); a
           # runner's own is measured by `trainbench calibrate` and read from baselines/ (FLOORS)
           "NOISE_FLOOR": "0.10", "AB_CPUS": str(min(os.sched_getaffinity(0)))}
    p = subprocess.run(["bash", str(ROOT / "scripts/ci/bench_ab.sh")], cwd=work, env=env, capture_output=True,
                       text=True, timeout=1400)
    assert p.returncode == 0, p.stdout + p.stderr
    code = int((work / "compare-exit-code").read_text())
    manifest = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert manifest["sides"]["base"]["sha"] == base and manifest["sides"]["head"]["sha"] == head
    assert (work / "report.md").read_text().startswith("### TrainBench compare")
    for side in ("base", "head"):  # each side ran from its own pip-installed venv
        assert (tmp_path / "ab" / "env" / side / "bin" / "python").exists()
        assert any((tmp_path / "ab" / "env" / side / "lib").glob("python3*/site-packages/trainbench_suite-*.dist-info"))
    results = [json.loads(p.read_text()) for side in ("base", "head") for p in (tmp_path / "ab" / side).rglob("*.json")]
    assert len(results) == 8 and {r["hardware"]["cpu_cores"] for r in results} == {1}  # each run saw its one core
    return code, json.loads((work / "report.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(1500)  # two pip installs and 8 runs: 6 min at load 25, over 10 at load 58 (2 cores)
def test_the_pr_workflow_flags_a_slowed_head(tmp_path: Path) -> None:
    code, report = _workflow_ab(tmp_path, 0.08)  # +8 ms on a 15 ms step (quiet) to 100 ms (load 20)
    (pair,) = report["pairs"]
    assert (pair["verdict"], code) == ("regressed", 1), pair
    assert pair["candidate"]["runs"] == 4 and pair["metrics"][0]["ci_low"] > 1.10 and pair["noise_floor"] == 0.10


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_pr_workflow_passes_identical_code(tmp_path: Path) -> None:
    code, report = _workflow_ab(tmp_path, None)
    (pair,) = report["pairs"]
    assert (pair["verdict"], code) == ("no change", 0), pair
