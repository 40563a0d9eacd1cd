"""`trainbench ab` (two commits, one runner, alternating blocks), `trainbench bisect` (the first slower commit of a
range, by repeated A/Bs), `trainbench calibrate` (an A/A noise floor) and `trainbench history` (change points in the
nightly results)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from suite import registry
from suite.cli.common import EXIT_FAIL, EXIT_OK, emit_json, err, fail_input, say
from suite.compare import model as compare_model

BACKEND_CHOICES = " | ".join(registry.BACKENDS)  # the registry's names: `run --help` never drifts


def ab(
    base: Annotated[str, typer.Option(help="the base commit (a ref or sha in --repo)")],
    head: Annotated[str, typer.Option(help="the head commit; the same as --base for an A/A run (calibration)")],
    workloads: Annotated[list[str], typer.Option("--workloads", "-w", help="workloads to measure (repeat)")],
    repo: Annotated[Path, typer.Option(help="the git repository holding both commits")] = Path("."),
    out: Annotated[Path, typer.Option(help="working folder: worktrees, venvs, base/ and head/ results")] = Path("ab"),
    rounds: Annotated[int, typer.Option(min=1, help="blocks per side (one run per workload each)")] = 10,
    order: Annotated[str, typer.Option(help="alternate (AB BA AB ...) | random (a seeded coin per round)")] = "alternate",
    seed: Annotated[int, typer.Option(help="seed of the random order")] = 0,
    backend: Annotated[str, typer.Option(help=BACKEND_CHOICES)] = "torch",
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads per process (set it: neighbours)")] = None,
    nproc: Annotated[int, typer.Option(min=1, help="processes per run (torchrun)")] = 1,
    set_: Annotated[list[str] | None, typer.Option("--set", help="spec override for both sides, e.g. "
                                                   "throughput.measure_steps=300")] = None,
    deps: Annotated[str, typer.Option(help="install: pip install each commit into its own venv (shared pip cache) | "
                                      "shared: each venv sees this interpreter's packages, its own code")] = "install",
    extras: Annotated[str, typer.Option(help="extras to install with --deps install, e.g. deepspeed")] = "",
    offline: Annotated[bool, typer.Option(help="--deps install without a package index: each venv sees this "
                                          "interpreter's packages underneath its own; pip --no-index")] = False,
    find_links: Annotated[list[str] | None, typer.Option(help="--deps install: a folder of wheels pip may install "
                                                         "from (repeat; pip --find-links)")] = None,
    lockstep: Annotated[bool, typer.Option(help="run both sides at once, alternating step by step (--no-lockstep: "
                                           "one side after the other in blocks)")] = True,
    runs_per_block: Annotated[int, typer.Option(min=1, help="runs (seeds) per process; >1 amortises start-up, "
                                                "but runs of one process share its state")] = 1,
) -> None:
    """Run two commits alternately on this machine in throughput mode; each side's results in its own folder."""
    from suite.compare import ab as ab_mod

    plan = ab_mod.ABPlan(repo=repo.resolve(), out=out, workloads=list(workloads), rounds=rounds, order=order,
                         seed=seed, backend=backend, threads=threads, sets=list(set_ or []), nproc=nproc, deps=deps,
                         extras=extras, offline=offline, find_links=list(find_links or []), lockstep=lockstep,
                         runs_per_block=runs_per_block)
    try:
        manifest = ab_mod.run_ab(plan, base, head, log=lambda line: err.print(line, markup=False, highlight=False))
    except ab_mod.ABError as e:
        raise fail_input(str(e)) from None
    bad = [b for b in manifest["blocks"] if b["exit_code"] != 0]
    say(f"A/B written under {out}/: base {manifest['sides']['base']['sha'][:12]} -> {out}/base, head "
        f"{manifest['sides']['head']['sha'][:12]} -> {out}/head; next: trainbench compare --baseline {out}/base "
        f"--candidate {out}/head")
    if bad:
        err.print(f"{len(bad)} block(s) did not exit 0 (see the result files' status)", markup=False)
    raise typer.Exit(EXIT_FAIL if bad else EXIT_OK)


def calibrate(
    a: Annotated[Path, typer.Option("--a", help="results of the first side of an A/A run (same commit)")],
    b: Annotated[Path, typer.Option("--b", help="results of the second side")],
    to: Annotated[Path, typer.Option(help="baselines folder the floor is stored in")] = Path("baselines"),
    alpha: Annotated[float, typer.Option(help="level of the interval")] = 0.05,
    min_steps: Annotated[int, typer.Option(min=1, help="fewest measured steps per run")] = 20,
    min_runs: Annotated[int, typer.Option(min=2, help="fewest runs per side")] = 4,
    json_: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Measure each workload's noise floor on this runner from an A/A comparison and store it with the baselines."""
    from suite.compare import ab_verdict as compare_ab
    from suite.results.baselines import checkout_sha, load_paths
    from suite.results.noise_floor import AAMeasurement, NoiseFloor, floor_from_aa, write_floor

    if not 0 < alpha < 1:
        raise fail_input(f"--alpha {alpha}: must be between 0 and 1")
    try:
        la, lb = load_paths([a], strict=True), load_paths([b], strict=True)
        if not compare_ab.check_modes(la, lb):
            raise compare_ab.CompareInputError(f"{a}, {b}: no throughput results (run `trainbench ab --base X --head X`)")
        ga, gb = compare_ab.groups(la, "first", min_steps), compare_ab.groups(lb, "second", min_steps)
    except ValueError as e:
        raise fail_input(str(e)) from None
    if set(ga) != set(gb):
        raise fail_input(f"the two sides measured different workloads/hardware: {sorted(map(str, set(ga) ^ set(gb)))}")
    rows = []
    for key in sorted(ga, key=lambda k: (k.workload, k.backend)):
        x, y = ga[key], gb[key]
        if min(len(x.steps), len(y.steps)) < min_runs:
            raise fail_input(f"{key.workload}: {len(x.steps)} and {len(y.steps)} runs; at least {min_runs} a side")
        if x.spec_hashes != y.spec_hashes:
            raise fail_input(f"{key.workload}: the sides ran different specs: an A/A run uses one commit twice")
        iv = compare_ab.ratio_interval(x.steps, y.steps, alpha, paired=compare_ab.paired(x, y))
        floor = NoiseFloor(
            hardware=key.hardware, workload=key.workload, backend=key.backend,
            comparison_key=x.records[0].comparison, noise_floor=floor_from_aa(iv.ratio, iv.ci_low, iv.ci_high),
            aa=AAMeasurement(ratio=iv.ratio, ci_low=iv.ci_low, ci_high=iv.ci_high, runs_per_side=len(x.steps),
                             steps_per_run=min(map(len, x.steps + y.steps))),
            measured_at=datetime.now(UTC).isoformat(timespec="seconds"), git_sha=checkout_sha())
        path = write_floor(to, floor)
        rows.append({"workload": key.workload, "hardware": key.hardware, "backend": key.backend,
                     "noise_floor": floor.noise_floor, "aa_ratio": iv.ratio, "ci": [iv.ci_low, iv.ci_high],
                     "path": str(path)})
    if json_:
        emit_json(rows)
    else:
        for r in rows:
            say(f"{r['workload']} on {r['hardware']} ({r['backend']}): A/A x{r['aa_ratio']:.4f} "
                f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}] -> noise floor {r['noise_floor']:.1%}, written to {r['path']}")
    raise typer.Exit(EXIT_OK)


def history(
    results: Annotated[Path, typer.Option(help="results folder (e.g. a checkout of the results branch)")] = Path("results"),
    json_: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    summary: Annotated[Path | None, typer.Option(help="also append a Markdown table here (e.g. $GITHUB_STEP_SUMMARY)")] = None,
    alpha: Annotated[float, typer.Option(help="significance level of each change point (permutation test)")] = 0.001,
    min_points: Annotated[int, typer.Option(help="shortest series that is searched (at least 10: 5 points "
                                            "on each side of a change)")] = 10,
) -> None:
    """Change points in every series (workload x hardware x backend x precision x metric), by run date."""
    from suite.compare import history as hist

    if not results.exists():
        raise fail_input(f"--results {results}: no such folder")
    if not 0 < alpha < 1:
        raise fail_input(f"--alpha {alpha}: must be between 0 and 1")
    if min_points < 2 * hist.MIN_SEGMENT:
        raise fail_input(f"--min-points {min_points}: at least {2 * hist.MIN_SEGMENT} (a change point needs "
                         f"{hist.MIN_SEGMENT} points on each side)")
    report = hist.history(results, alpha=alpha, min_points=min_points)
    if json_:
        emit_json(report)
    else:
        say(hist.to_markdown(report))
    if summary is not None:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(hist.to_markdown(report) + "\n")
    raise typer.Exit(EXIT_OK)


def bisect(
    good: Annotated[str, typer.Option(help="a commit where the workload was fast (a ref or sha in --repo)")],
    bad: Annotated[str, typer.Option(help="a later commit where it is slower")],
    workload: Annotated[str, typer.Option("--workload", "-w", help="the workload whose metric moved")],
    metric: Annotated[str, typer.Option(help="step_time (throughput A/B, lockstep) | time_to_target (seeds to "
                                        "the target)")] = "step_time",
    repo: Annotated[Path, typer.Option(help="the git repository holding the range")] = Path("."),
    out: Annotated[Path, typer.Option(help="working folder: one worktree and venv per commit, one A/B per "
                                      "comparison, bisect.json and bisect.md")] = Path("bisect"),
    rounds: Annotated[int, typer.Option(min=4, help="rounds per comparison (the gate's: 10)")] = 10,
    repeats: Annotated[int, typer.Option(min=0, help="times a `suspicious` comparison is repeated, each with "
                                         "twice the rounds, before the search stops undecided")] = 1,
    budget: Annotated[int, typer.Option(min=1, help="most comparisons in all")] = 12,
    backend: Annotated[str, typer.Option(help=BACKEND_CHOICES)] = "torch",
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads per process")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="spec override for every side")] = None,
    deps: Annotated[str, typer.Option(help="install | shared (as `trainbench ab`)")] = "install",
    offline: Annotated[bool, typer.Option(help="--deps install without a package index")] = False,
    floors: Annotated[list[Path] | None, typer.Option("--floors", help="A/A-measured noise floors, e.g. "
                                                      "baselines/")] = None,
    throughput_noise_floor: Annotated[float, typer.Option(help="the floor where none was measured")] = 0.01,
    json_out: Annotated[Path | None, typer.Option(help="also write the JSON result here")] = None,
) -> None:
    """Find the first commit between --good and --bad that made WORKLOAD slower, each step decided by the A/B gate."""
    import json

    from suite.compare import ab as ab_mod
    from suite.compare import bisect as bis
    from suite.compare.bisect_ab import ab_comparator

    if metric not in bis.METRICS:
        raise fail_input(f"--metric {metric!r}: expected step_time or time_to_target")
    try:
        commits = bis.commit_range(repo.resolve(), good, bad)
        settings = compare_model.Settings(throughput_noise_floor=throughput_noise_floor)
    except ValueError as e:
        raise fail_input(str(e)) from None
    plan = ab_mod.ABPlan(repo=repo.resolve(), out=out.resolve(), workloads=[workload], rounds=rounds, backend=backend,
                         threads=threads, sets=list(set_ or []), deps=deps, offline=offline)
    log = lambda line: err.print(line, markup=False, highlight=False)  # noqa: E731
    err.print(f"bisecting {len(commits) - 1} commit(s) of {workload} ({metric})", markup=False)
    try:
        result = bis.bisect(workload, metric, commits, ab_comparator(plan, workload, metric, settings,
                                                                     list(floors or []), log),
                            rounds=rounds, repeats=repeats, budget=budget)
    except (ab_mod.ABError, ValueError) as e:
        raise fail_input(str(e)) from None
    md = bis.to_markdown(result)
    data = json.dumps(result.to_json(), indent=1) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bisect.json").write_text(data, encoding="utf-8")
    (out / "bisect.md").write_text(md, encoding="utf-8")
    if json_out is not None:
        json_out.write_text(data, encoding="utf-8")
    say(md)
    raise typer.Exit(EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command()(ab)
    app.command()(bisect)
    app.command()(calibrate)
    app.command()(history)

