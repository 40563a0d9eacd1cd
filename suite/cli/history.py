"""`trainbench history`: change points in the nightly results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from suite.cli.common import EXIT_OK, emit_json, fail_input, say


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


def register(app: typer.Typer) -> None:
    app.command()(history)
