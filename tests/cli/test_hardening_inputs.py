"""Issue 35, items 5-12: exit codes, inputs checked where they enter, pauses inside a time to target, README's flow.

Each test failed on the code before its fix (docs/reliability.md, "Hardening, round three")."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from support.backend_util import ROOT, env

from benchmarks.sim.results import noisy_runs, write_all
from suite.compare import model as compare_model
from suite.compare import output as compare_output


def cli(*args: str | Path, timeout: float = 300, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suite.cli", *map(str, args)], capture_output=True, text=True,
                          env=env(COLUMNS="200"), cwd=ROOT, timeout=timeout, **kw)


@pytest.fixture
def sides(tmp_path: Path) -> Path:
    rng = random.Random(3)
    write_all(tmp_path / "base", noisy_runs(rng, 5))
    write_all(tmp_path / "slow", noisy_runs(rng, 5, time_per_step_s=0.013, cv_steps=0.01))
    return tmp_path


# ---- item 5: compare exits 1 for a regression and for nothing else ---------------------------------------


def test_compare_into_a_closed_pipe_exits_2_not_1(sides: Path) -> None:
    """`compare ... | head -1`: the reader is gone before the report is written. Was a BrokenPipeError traceback
    and exit 1 (a "regression" to CI) even where the comparison found none."""
    args = ["compare", "-b", sides / "base", "-c", sides / "base" / ".." / "slow", "--format", "json"]
    # `| head -1` leaves after the first line; a pipe whose reader is already closed is the same, deterministically
    r, w = os.pipe()
    os.close(r)
    with os.fdopen(w, "w") as closed:
        p = subprocess.run([sys.executable, "-m", "suite.cli", *map(str, args)], stdout=closed,
                           stderr=subprocess.PIPE, text=True, env=env(), cwd=ROOT, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "stdout was closed" in p.stderr


def test_an_unexpected_exception_in_compare_exits_2(sides: Path) -> None:
    """--out naming a folder: IsADirectoryError escaped with a traceback and exit 1."""
    (sides / "folder").mkdir()
    p = cli("compare", "-b", sides / "base", "-c", sides / "slow", "--out", sides / "folder")
    assert p.returncode == 2, p.stderr
    assert "IsADirectoryError" in p.stderr and "never 1" in p.stderr
    regression = cli("compare", "-b", sides / "base", "-c", sides / "slow")
    assert regression.returncode == 1, regression.stderr  # the one meaning of 1 is kept


# ---- item 6: a target metric the task never reports -------------------------------------------------------


def test_a_target_metric_the_task_never_reports_is_refused_before_start(tmp_path: Path) -> None:
    """Was accepted: the run trained its whole budget, ended `budget`, exit 0, no warning."""
    p = cli("run", "cv/digits_cnn", "--set", "target.metric=bogus", "--results", tmp_path, "--quiet")
    assert p.returncode == 2, p.stderr
    assert "target.metric: 'bogus' is not a metric task 'image_classification' reports" in p.stderr
    assert "accuracy, loss" in p.stderr and "Traceback" not in p.stderr
    assert not list(tmp_path.rglob("*.json"))


def test_every_shipped_workload_targets_a_metric_its_task_reports() -> None:
    from suite import registry
    from suite.specload import load_spec

    for name, path in registry.workload_files().items():
        spec = load_spec(path)
        reported = registry.task_class(spec.task).reported_metrics
        assert reported and spec.target.metric in reported, name


def test_a_task_that_declares_no_metrics_stops_at_its_first_evaluation() -> None:
    """A user's task without `reported_metrics` cannot be checked before start: the first evaluation is."""
    from support.backend_util import CHAR_GPT

    from suite import harness
    from suite.specload import load_spec

    spec = load_spec(CHAR_GPT, {"target.metric": "bogus", "eval.every_steps": 2, "budget.max_steps": 400})
    result, _ = harness.run(harness.RunRequest(spec=spec, results_dir=None, threads=1, measure_peak=False))
    assert result.status == "error" and result.steps == 2, result.error
    assert "target.metric 'bogus' is not among the metrics" in result.error and "val_loss" in result.error


# ---- item 8: bounds and types checked where the value enters ----------------------------------------------


@pytest.mark.parametrize(("args", "says"), [
    (["--seed", "9223372036854775807"], "--seed 9223372036854775807: seeds run from 0 to 4294967295"),
    (["--seed", "-1"], "--seed -1: seeds run from 0"),
    (["--seed", "4294967295", "--seeds", "2"], "the first may be at most 4294967294"),
    (["--set", "budget.max_steps=true"], "budget.max_steps: expected a number, got the boolean true"),
    (["--set", "optimizer.lr=yes"], "optimizer.lr: expected a number, got the boolean true"),
    (["--set", "model.channels=[true, 8]"], "model.channels[0]: expected a number, got the boolean true (from --set"),
    (["--set", "data.batch_size=100000"], "data.batch_size 100000 is larger than the training set of digits (1437"),
])
def test_run_refuses_bad_values_with_exit_2_and_records_nothing(tmp_path: Path, args: list[str], says: str) -> None:
    """Before: an error result ("Overflow when unpacking long long"; a traceback at the first batch), or a run of
    one step for `max_steps=true`."""
    p = cli("run", "cv/digits_cnn", *args, "--results", tmp_path / "r", "--quiet", "--threads", "1",
            "--set", "budget.max_train_s=20")
    assert p.returncode == 2, (p.stdout[-1500:], p.stderr[-1500:])
    assert says in p.stderr and "Traceback" not in p.stderr
    assert not list(tmp_path.rglob("*.json"))


def test_booleans_are_not_numbers_in_any_spec_block() -> None:
    """pydantic's lax mode reads true as 1: the spec's own blocks and every component's Config refuse it."""
    from support.backend_util import DIGITS

    from suite.spec import SpecError
    from suite.specload import load_spec

    for key in ("budget.max_steps", "target.value", "eval.every_steps", "backends.torch.grad_clip",
                "data.batch_size", "schedule.warmup_steps"):
        with pytest.raises(SpecError, match=f"{key}: expected a number, got the boolean false"):
            load_spec(DIGITS, {key: False})
    assert load_spec(DIGITS, {"eval.at_start": True}).eval.at_start is True  # a boolean field still takes one


@pytest.mark.slow
def test_the_largest_seed_runs(tmp_path: Path) -> None:
    """The top of the seed range is a seed like any other (its derived data-order seeds fit 64 bits)."""
    p = cli("run", "cv/digits_cnn", "--seed", "4294967295", "--set", "budget.max_steps=3", "--threads", "1",
            "--results", tmp_path, "--quiet", timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    (path,) = tmp_path.rglob("*.json")
    from suite.results.record import read_result

    r = read_result(path)
    assert (r.seed, r.status, r.steps, r.error) == (4294967295, "budget", 3, None)


def test_compare_promote_and_gh_refuse_negative_counts(sides: Path) -> None:
    """`compare --min-seeds -5`, `baseline promote --min-seeds -5` and `gh download-artifact --max-mb -5` were
    accepted."""
    c = cli("compare", "-b", sides / "base", "-c", sides / "slow", "--min-seeds", "-5")
    assert c.returncode == 2 and "--min-seeds -5: must be at least 1" in c.stderr, c.stderr
    p = cli("baseline", "promote", sides / "base", "--to", sides / "bl", "--min-seeds", "-5")
    assert p.returncode == 2 and "--min-seeds" in p.stderr and not (sides / "bl").exists(), p.stderr
    g = cli("gh", "download-artifact", "--run-id", "7", "--dest", sides / "dl", "--repo", "o/r", "--name", "x",
            "--max-mb", "-5")
    assert g.returncode == 2 and "--max-mb" in g.stderr and not (sides / "dl").exists(), g.stderr
    a = cli("calibrate", "--a", sides / "base", "--b", sides / "slow", "--min-runs", "-5")
    assert a.returncode == 2 and "--min-runs" in a.stderr, a.stderr


# ---- items 9 and 11: throughput results beside time-to-target ones -----------------------------------------


def _throughput_runs(root: Path, n: int = 4, slowdown: float = 1.0) -> list[Path]:
    import numpy as np

    from benchmarks.sim.ab import throughput_result
    from suite.results.record import write_result

    rng = np.random.default_rng(5)
    return [write_result(root, throughput_result(100 + i, rng.lognormal(np.log(0.01 * slowdown), 0.02, 40)))
            for i in range(n)]


def test_promote_refuses_throughput_results_and_leaves_them_out_of_a_mixed_folder(sides: Path) -> None:
    """Was: a baseline of "0 reached, time to target inf", which compare then refused."""
    thr = sides / "thr"
    _throughput_runs(thr)
    only = cli("baseline", "promote", thr, "--to", sides / "bl")
    assert only.returncode == 2, only.stdout
    assert "only throughput results" in only.stderr and "trainbench ab" in only.stderr
    assert "compared folder to folder" in only.stderr or "compare --baseline ab/base" in only.stderr
    assert not (sides / "bl").exists()
    _throughput_runs(sides / "base")  # README's flow: `run --mode throughput` writes into the same results/
    mixed = cli("baseline", "promote", sides / "base", "--to", sides / "bl")
    assert mixed.returncode == 0, mixed.stderr
    assert "left out 4 throughput result(s)" in mixed.stderr and "5 seeds, 5 reached" in mixed.stdout
    from suite.results.baselines import build_baselines, load_paths

    with pytest.raises(ValueError, match="throughput results"):  # the library refuses them too
        build_baselines(load_paths([thr]).records)


def test_compare_leaves_out_and_names_results_of_a_mode_the_other_side_lacks(sides: Path) -> None:
    """`compare --candidate results/` after README's `run --mode throughput` exited 2 for the whole folder."""
    assert cli("baseline", "promote", sides / "base", "--to", sides / "bl").returncode == 0
    cand = sides / "cand"
    write_all(cand, noisy_runs(random.Random(9), 5, first_seed=20))
    thr_files = _throughput_runs(cand)
    p = cli("compare", "-b", sides / "bl", "-c", cand, "--format", "json")
    assert p.returncode == 0, p.stderr
    import json

    report = json.loads(p.stdout)
    assert [q["mode"] for q in report["pairs"]] == ["tta"] and report["summary"]["left_out"] == 4
    assert sorted(x.split(": ")[0] for x in report["left_out"]) == sorted(map(str, thr_files))
    assert all("a throughput result; the baseline side has none" in x for x in report["left_out"])
    assert p.stderr.count("left out ") == 4
    md = cli("compare", "-b", sides / "bl", "-c", cand)
    assert md.returncode == 0 and "4 result(s) of another mode left out" in md.stdout
    # both modes on both sides: each compared with its own kind, in one report
    base2 = sides / "base2"
    write_all(base2, noisy_runs(random.Random(4), 5, first_seed=40))
    _throughput_runs(base2, slowdown=1.0)
    both = cli("compare", "-b", base2, "-c", cand, "--format", "json")
    assert both.returncode in (0, 1), both.stderr
    assert sorted(q["mode"] for q in json.loads(both.stdout)["pairs"]) == ["throughput", "tta"]
    # nothing in common: still bad input, named
    _throughput_runs(sides / "thr_only")
    none = cli("compare", "-b", sides / "bl", "-c", sides / "thr_only")
    assert none.returncode == 2 and "throughput" in none.stderr


# ---- item 10: README's own flow ends in a verdict -----------------------------------------------------------

README_FAST = ["--variant", "tiny", "--threads", "1", "--set", "target.value=0.6", "--set", "budget.max_steps=400",
               "--set", "budget.max_train_s=300", "--set", "throughput.warmup_steps=2",
               "--set", "throughput.measure_steps=30"]


def _readme_commands() -> dict[str, list[str]]:
    """README's "Using it" commands, by what they do, exactly as written there (comments cut)."""
    import shlex

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [ln.split("#", 1)[0].strip() for ln in text.splitlines() if ln.startswith(".venv/bin/trainbench ")]
    found = {
        "seeds": next(ln for ln in lines if ln.startswith(".venv/bin/trainbench run ") and "--seeds" in ln),
        "promote": next(ln for ln in lines if " baseline promote " in ln),
        "compare": next(ln for ln in lines if " compare --baseline baselines/" in ln),
        "throughput": next(ln for ln in lines if " run " in ln and "--mode throughput" in ln),
    }
    return {k: shlex.split(v)[1:] for k, v in found.items()}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_readmes_flow_gives_a_verdict(tmp_path: Path) -> None:
    """`run --seeds N`, `baseline promote`, `compare` as README writes them (in a fresh folder, with a tiny digits
    model for speed) end in a verdict, also after README's `run --mode throughput` wrote into the same results/.
    Before: README ran 3 seeds, and compare said "nothing comparable" (3 + 3 seeds: the smallest p-value is 0.100),
    exit 2; and after the throughput run every compare of results/ exited 2."""
    cmds = _readme_commands()

    def step(name: str, *extra: str) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([sys.executable, "-m", "suite.cli", *cmds[name], *extra], capture_output=True, text=True,
                           env=env(COLUMNS="200"), cwd=tmp_path, timeout=900)
        return p

    seeds = step("seeds", *README_FAST)
    assert seeds.returncode == 0, seeds.stderr[-2000:]
    promoted = step("promote")
    assert promoted.returncode == 0, promoted.stderr
    first = step("compare")
    assert first.returncode == 0, (first.stdout[-2000:], first.stderr[-2000:])
    assert "no regression in 1 comparison(s): 0 improved · 1 no (significant) change · 0 not comparable" in first.stderr
    thr = step("throughput", *README_FAST)
    assert thr.returncode == 0, thr.stderr[-2000:]
    again = step("compare")
    assert again.returncode == 0, (again.stdout[-2000:], again.stderr[-2000:])
    assert "1 no (significant) change · 0 not comparable" in again.stderr
    assert "1 result(s) of another mode left out" in again.stdout and "left out " in again.stderr


def test_the_default_min_seeds_is_the_fewest_that_can_give_a_verdict() -> None:
    import inspect

    from suite.cli import results
    from suite.results import stats

    n = compare_model.DEFAULT_MIN_SEEDS
    assert stats.min_attainable_p(n, n) <= compare_model.DEFAULT_ALPHA < stats.min_attainable_p(n - 1, n - 1)
    for command in (results.compare, results.baseline_promote):
        assert inspect.signature(command).parameters["min_seeds"].default == n
    seeds = int(_readme_commands()["seeds"][_readme_commands()["seeds"].index("--seeds") + 1])
    assert seeds >= n  # README's example gives compare enough seeds


# ---- item 12: --quiet is quiet ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quiet_prints_nothing_on_stderr_for_deepspeed_under_torchrun(tmp_path: Path) -> None:
    """Before: torchrun's OMP_NUM_THREADS banner and DeepSpeed's "Setting accelerator to CPU" warning."""
    p = cli("run", "cv/digits_cnn", "--backend", "deepspeed", "--nproc", "2", "--quiet", "--set", "budget.max_steps=4",
            "--results", tmp_path, timeout=800)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr == "", p.stderr[-3000:]
    (path,) = tmp_path.rglob("*.json")
    from suite.results.record import read_result

    assert read_result(path).world_size == 2  # it did run under torchrun


def test_torchrun_gets_the_thread_count_it_would_set_itself() -> None:
    from suite.execution.processes import torchrun_env

    assert torchrun_env({"PATH": "/bin"}) == {"PATH": "/bin", "OMP_NUM_THREADS": "1"}
    assert torchrun_env({"OMP_NUM_THREADS": "4"})["OMP_NUM_THREADS"] == "4"  # the user's choice stands


# ---- item 7: a pause inside the timed run is never silent ---------------------------------------------------

PAUSED_RUN = """
import json, sys
from pathlib import Path
import torch
torch.set_num_threads(1)
from suite import harness
from suite.specload import load_spec
# support.faults:Slow: digits with a 20 ms sleep in each step (a run of several seconds, whatever the machine), which
# touches FAULT_READY at its third step: training is under way
spec = load_spec(Path(sys.argv[1]), {"budget.max_train_s": 300, "task": "support.faults:Slow"})
result, path = harness.run(harness.RunRequest(spec=spec, results_dir=Path(sys.argv[2]), threads=1,
                                              measure_peak=False))
print(json.dumps({"path": str(path)}))
"""


def _paused_run(tmp_path: Path, pause_s: float) -> Path:
    """A real digits run whose process is stopped (SIGSTOP) for pause_s once training is under way, then continued."""
    import signal
    import time

    from support.backend_util import DIGITS

    ready = tmp_path / "ready"
    p = subprocess.Popen([sys.executable, "-c", PAUSED_RUN, str(DIGITS), str(tmp_path / "res")], stdout=subprocess.PIPE,
                         text=True, env=env(FAULT_READY=str(ready), FAULT_SLEEP_S="0.02"), cwd=ROOT)
    try:
        deadline = time.monotonic() + 300
        while not ready.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the run never started training"
        os.kill(p.pid, signal.SIGSTOP)
        time.sleep(pause_s)
        os.kill(p.pid, signal.SIGCONT)
        out, _ = p.communicate(timeout=600)
    finally:
        p.kill()
    return Path(json.loads(out.strip().splitlines()[-1])["path"])


def test_a_paused_run_says_so_in_its_result_in_compare_and_on_the_site(tmp_path: Path, monkeypatch) -> None:
    """SIGSTOP for 4 s, then SIGCONT: was recorded `reached` with the pause inside its time to target, no word."""
    from suite.results.record import read_result

    path = _paused_run(tmp_path, 4.0)
    r = read_result(path)
    assert r.status == "reached", r.error
    (warning,) = [w for w in r.warnings if w.startswith("paused:")]
    took = float(warning.split("did not run for ")[1].split(" s")[0])
    assert 3.0 <= took <= 6.0 and r.time_to_target_s > took, warning
    assert "its time to target includes this" in warning
    # compare names it on the side it is on (the lean reader, the full schema and the index agree)
    from benchmarks.sim.results import simulated_result
    from suite.compare import tta as cmp
    from suite.results.record import write_result

    cand = [simulated_result(s, steps_to_target=1000, time_per_step_s=0.01) for s in range(5)]
    cand[2] = cand[2].model_copy(update={"warnings": [warning]})
    base = [simulated_result(s, steps_to_target=1000, time_per_step_s=0.01) for s in range(10, 15)]
    for side, rs in (("base", base), ("cand", cand)):
        for x in rs:
            write_result(tmp_path / side, x)
    for index_on, kw in (("1", {}), ("0", {}), ("0", {"validate": True})):  # index, lean reader, full schema
        monkeypatch.setenv("TRAINBENCH_INDEX", index_on)
        report = cmp.compare([tmp_path / "base"], [tmp_path / "cand"], **kw)
        (pair,) = report.pairs
        assert [w for w in pair.warnings if "paused" in w] == [
            f"candidate: 1 of 5 run(s) paused inside the timed run, seed 2: {warning.removeprefix('paused: ')}"]
        assert "did not run for" in compare_output.to_markdown(report)
    # the site's run page shows the result's warnings
    from suite.site.build import build_site

    build_site(tmp_path / "res", tmp_path / "site")
    pages = [p.read_text(encoding="utf-8") for p in (tmp_path / "site").rglob("*.html")]
    assert any("did not run for" in text for text in pages)


def test_an_unpaused_run_has_no_pause_warning_and_the_watch_sees_a_stopped_thread() -> None:
    """The detector itself: a process that keeps running is never reported; a gap without CPU time is."""
    import time

    from suite.measure import pauses

    watch = pauses.PauseWatch(poll_s=0.05, min_gap_s=0.5).start()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 1.5:  # busy: CPU time grows with the wall clock
        sum(range(1000))
    assert watch.stop() == []
    seen = pauses.warnings_for([pauses.Pause(start=t0 + 1, end=t0 + 31, cpu_s=0.01, step=7)], t0, t0 + 40, 0.01)
    assert len(seen) == 1 and seen[0].startswith("paused: the process did not run for 30.0 s from 1.0 s")
    assert "after step 7, 3,000 times the median step (10 ms)" in seen[0]
    assert pauses.warnings_for([pauses.Pause(start=t0 + 50, end=t0 + 60, cpu_s=0, step=9)], t0, t0 + 40, 0.01) == []
