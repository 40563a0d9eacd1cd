"""`trainbench bisect`: the first slower commit of a range, by repeated A/Bs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from suite.cli.common import EXIT_OK, err, fail_input, say
from suite.cli.options import BACKEND_CHOICES


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

    from suite.compare import ab_plan
    from suite.compare import bisect as bis
    from suite.compare import model as compare_model
    from suite.compare.bisect_ab import ab_comparator

    if metric not in bis.METRICS:
        raise fail_input(f"--metric {metric!r}: expected step_time or time_to_target")
    try:
        commits = bis.commit_range(repo.resolve(), good, bad)
        settings = compare_model.Settings(throughput_noise_floor=throughput_noise_floor)
    except ValueError as e:
        raise fail_input(str(e)) from None
    plan = ab_plan.ABPlan(repo=repo.resolve(), out=out.resolve(), workloads=[workload], rounds=rounds, backend=backend,
                         threads=threads, sets=list(set_ or []), deps=deps, offline=offline)
    log = lambda line: err.print(line, markup=False, highlight=False)  # noqa: E731
    err.print(f"bisecting {len(commits) - 1} commit(s) of {workload} ({metric})", markup=False)
    try:
        result = bis.bisect(workload, metric, commits, ab_comparator(plan, workload, metric, settings,
                                                                     list(floors or []), log),
                            rounds=rounds, repeats=repeats, budget=budget)
    except (ab_plan.ABError, ValueError) as e:
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
    app.command()(bisect)
